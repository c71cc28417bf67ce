// The tensor lines of nanoGPT's model.py and d2l's Transformer that a line-by-line port writes as
// torch does: Tensor's split, chunk, masked_fill and contiguous; repeat_interleave without a dim.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "../helpers.hpp"
#include "core/creation.hpp"
#include "core/ops.hpp"

using namespace xgrad;
using namespace xgrad::indexing;
using Catch::Matchers::Contains;

TEST_CASE("Tensor's split, chunk, masked_fill and contiguous port nanoGPT's attention lines", "[porting-methods]") {
    const Tensor x = arange(24.0, kFloat64).reshape({2, 3, 4});
    const long n_embd = 2;
    // q, k = self.c_attn(x).split(self.n_embd, dim=2)
    std::vector<Tensor> qk = x.split(n_embd, 2);
    REQUIRE(qk.size() == 2);
    REQUIRE(qk[1].to_vector<double>() == split(x, 2, 2)[1].to_vector<double>());
    REQUIRE(x.split(x.size(2) - 1, -1)[1].shape() == Shape{2, 3, 1});   // a size straight from size()
    REQUIRE(x.split({1, 3}, 2)[1].shape() == Shape{2, 3, 3});
    REQUIRE(x.chunk(2, -1)[0].to_vector<double>() == chunk(x, 2, -1)[0].to_vector<double>());
    // att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf')): a copy, x unchanged
    const Tensor bias = tril(ones({4, 4})).view(1, 1, 4, 4);
    const std::size_t T = 3;
    const Tensor att = arange(9.0).reshape({1, 1, T, T});
    const Tensor filled = att.masked_fill(bias.index({Slice(), Slice(), Slice(None, T), Slice(None, T)}) == 0, -INFINITY)
                              .index({0, 0});
    REQUIRE(filled.to_vector<float>() == std::vector<float>{0, -INFINITY, -INFINITY, 3, 4, -INFINITY, 6, 7, 8});
    REQUIRE(att.to_vector<float>()[1] == 1.0f);
    // y = y.transpose(1, 2).contiguous().view(B, T, C): contiguous() copies the transposed view
    // once, and is the tensor itself for a contiguous one
    const Tensor y = x.transpose(1, 2);
    REQUIRE_FALSE(y.is_contiguous());
    REQUIRE(y.contiguous().is_contiguous());
    REQUIRE_FALSE(y.contiguous().is_alias_of(x));
    REQUIRE(x.contiguous().is_same(x));
    REQUIRE(y.contiguous().view(x.size(0), x.size(2), x.size(1)).shape() == Shape{2, 4, 3});
    // The methods carry the ops' gradients.
    const Tensor leaf = randn({2, 6}, kFloat64).requires_grad_();
    const Tensor mask = randn({2, 6}) > 0;
    REQUIRE_GRADCHECK([](const std::vector<Tensor>& in) { return in[0].split(4, 1)[1] * 2.0; }, {leaf}, "split");
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& in) { return in[0].chunk(3, 1)[2].pow(2); }, {leaf}, "chunk");
    REQUIRE_GRADCHECK([&](const std::vector<Tensor>& in) { return in[0].masked_fill(mask, 0.5) * in[0]; }, {leaf},
                      "masked_fill");
    REQUIRE_THROWS_WITH(x.split(0, 2), Contains("split"));
}

TEST_CASE("repeat_interleave without an axis flattens, as torch's dim=None", "[porting-methods]") {
    // d2l's masked_softmax: valid_lens = torch.repeat_interleave(valid_lens, shape[1])
    const Tensor t = from_vector(std::vector<std::int64_t>{1, 2, 3, 4}, {2, 2});
    const Tensor r = repeat_interleave(t, 2);
    REQUIRE(r.shape() == Shape{8});
    REQUIRE(r.to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 1, 2, 2, 3, 3, 4, 4});
    REQUIRE(repeat_interleave(tensor(5.0), 3).to_vector<float>() == std::vector<float>{5, 5, 5});
    const Tensor x = randn({2, 3}, kFloat64).requires_grad_();
    REQUIRE_GRADCHECK([](const std::vector<Tensor>& in) { return repeat_interleave(in[0], 3); }, {x}, "repeat_interleave");
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& in) { return repeat_interleave(in[0], 2).pow(2); }, {x},
                          "repeat_interleave");
    REQUIRE_THROWS_WITH(repeat_interleave(Tensor(), 2), Contains("repeat_interleave"));
}
