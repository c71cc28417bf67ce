// 4. Seed 003 (a PyTorch notebook on scaled dot-product attention) ported line by line: the
// scores of Q·Kᵀ/√d_k, their softmax, the weighted values, then the same as a function with
// masks, one AttentionHead per head and a MultiHeadAttention of an nn::ModuleList of heads.
// It prints what the notebook prints (shapes as torch.Size) and the model's tree.
#include <cmath>

#include "scaled_dot_product_attention.hpp"

using namespace xgrad;
using namespace xgrad::examples::seed003;

namespace {
std::string torch_size(const Tensor& t) { return fmt::format("torch.Size([{}])", fmt::join(t.shape(), ", ")); }
}  // namespace

int main() {
    manual_seed(0);
    // Q = K = V = torch.rand(2, 4, 768); scores = torch.bmm(Q, K.transpose(1, 2)) / sqrt(dim_k)
    const Tensor Q = rand({2, 4, 768}), K = Q, V = Q;
    const double dim_k = static_cast<double>(K.size(-1));
    const Tensor scores = bmm(Q, K.transpose(1, 2)) / std::sqrt(dim_k);
    fmt::print("{}\n", torch_size(scores));

    // weights = F.softmax(scores, dim=-1); print(weights.sum(dim=-1))
    const Tensor weights = softmax(scores, -1);
    fmt::print("{}\n", weights.sum({-1}));

    // attn_outputs = torch.bmm(weights, V)
    const Tensor attn_outputs = bmm(weights, V);
    fmt::print("{}\n", torch_size(attn_outputs));

    // x = torch.rand(2, 4, 768); mha = MultiHeadAttention(embed_dim=768, num_heads=12, head_dim=64)
    const Tensor x = rand({2, 4, 768});
    MultiHeadAttention mha(768, 12, 64);
    fmt::print("{}\n", mha);
    const Tensor y = mha(x, x, x);
    fmt::print("{}\n", torch_size(y));

    // With masks: the second sequence has 2 real tokens of 4.
    const Tensor query_mask = tensor({{1., 1., 1., 1.}, {1., 1., 0., 0.}});
    const Tensor masked = mha(x, x, x, query_mask, query_mask);
    fmt::print("masked: {}, padded queries give NaN rows: {}\n", torch_size(masked),
               std::isnan(masked.to_vector<double>()[(4 + 2) * 768]));
}
