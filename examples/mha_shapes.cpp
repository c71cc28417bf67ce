// 3. The seeds' multi-head attention cell (d2l 10.5) in C++: build the layer, print its module
// tree, and check that 2 sequences of 4 queries attending over 6 key-value pairs give (2, 4, 100).
// Next: nadaraya_watson, attention pooling trained on a regression.
#include <xgrad/xgrad.hpp>

using namespace xgrad;

int main() {
    // num_hiddens = 100 split over 5 heads of 20; key, query and value sizes are num_hiddens too.
    const std::size_t num_hiddens = 100, num_heads = 5;
    auto attention = std::make_shared<nn::MultiHeadAttention>(num_hiddens, num_hiddens, num_hiddens,
                                                              num_hiddens, num_heads, 0.5);
    attention->eval();  // dropout off
    fmt::print("{}\n\n", attention);

    // X: (batch, queries, num_hiddens), Y: (batch, key-value pairs, num_hiddens). The first
    // sequence attends to its first 3 pairs, the second to its first 2.
    const std::size_t batch_size = 2, num_queries = 4, num_kvpairs = 6;
    const Tensor valid_lens = from_vector(std::vector<std::int64_t>{3, 2}, {2});
    const Tensor X = ones({batch_size, num_queries, num_hiddens});
    const Tensor Y = ones({batch_size, num_kvpairs, num_hiddens});
    const Tensor out = attention->forward(X, Y, Y, valid_lens);

    fmt::print("{}\n", shape_str(out.shape()));
    fmt::print("torch.Size([{}])\n", fmt::join(out.shape(), ", "));
}
