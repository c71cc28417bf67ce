// 4b. Seed 004 (a note on multi-head attention) ported line by line: a d_model/num_heads
// MultiHeadAttention whose heads live on a 4th axis, fed by three external Linear layers.
#include "mha_d_model.hpp"

using namespace xgrad;
using namespace xgrad::examples::seed004;

int main() {
    // Input embedding tensor of shape (batch_size, seq_len, d_model)
    const std::size_t batch_size = 2, seq_len = 5, d_model = 16, num_heads = 4;
    const Tensor x = randn({batch_size, seq_len, d_model});

    // External linear layers for the Q, K, V projections
    nn::Linear w_q(d_model, d_model), w_k(d_model, d_model), w_v(d_model, d_model);
    const Tensor q = w_q(x), k = w_k(x), v = w_v(x);

    MultiHeadAttention mha(d_model, num_heads);
    const Tensor output = mha.forward(q, k, v);
    fmt::print("Output shape: torch.Size([{}])\n", fmt::join(output.shape(), ", "));
}
