// Shape ops: reshape, permute/transpose, (un)squeeze, concat, slice, expand.
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

namespace {

// 0, 1, 2, ... as float64 in the given shape.
Tensor iota(const Shape& shape) {
    std::size_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<double> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<double>(i);
    return from_vector(v, shape, kFloat64);
}

}  // namespace

TEST_CASE("reshape keeps row-major order and infers one -1", "[shape]") {
    Tensor a = tensor({{1, 2, 3}, {4, 5, 6}});
    Tensor r = reshape(a, {3, 2});
    CHECK(r.shape() == Shape{3, 2});
    CHECK_THAT(vals(r), approx({1, 2, 3, 4, 5, 6}));
    CHECK(reshape(a, {-1}).shape() == Shape{6});
    CHECK(reshape(a, {1, -1, 2}).shape() == Shape{1, 3, 2});
    CHECK(a.reshape({6, 1}).shape() == Shape{6, 1});
    CHECK(reshape(tensor({5.0}), {}).shape() == Shape{});
    CHECK(reshape(zeros({0, 3}), {3, 0}).shape() == Shape{3, 0});
    // Any dtype; integers stay integers and carry no gradient.
    Tensor i = from_vector(std::vector<std::int64_t>{1, 2, 3, 4}, {4});
    CHECK(reshape(i, {2, 2}).dtype() == kInt64);
    CHECK(reshape(i, {2, 2}).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 2, 3, 4});
}

TEST_CASE("permute and transpose make contiguous copies in the new order", "[shape]") {
    Tensor a = tensor({{1, 2, 3}, {4, 5, 6}});
    CHECK(transpose(a, 0, 1).shape() == Shape{3, 2});
    CHECK_THAT(vals(transpose(a, 0, 1)), approx({1, 4, 2, 5, 3, 6}));
    CHECK_THAT(vals(a.transpose(-1, -2)), approx({1, 4, 2, 5, 3, 6}));
    CHECK_THAT(vals(permute(a, {0, 1})), approx({1, 2, 3, 4, 5, 6}));

    // (2, 3, 4) holding 12i + 4j + k; permute (1, 2, 0) gives y[j][k][i] = 12i + 4j + k.
    Tensor x = iota({2, 3, 4});
    Tensor y = x.permute({1, 2, 0});
    REQUIRE(y.shape() == Shape{3, 4, 2});
    std::vector<double> expected;
    for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k)
            for (int i = 0; i < 2; ++i) expected.push_back(12 * i + 4 * j + k);
    CHECK_THAT(vals(y), approx(expected));

    // The attention move: (B, L, H, D) → (B, H, L, D); x[b][l][h][d] = 24b + 8l + 4h + d.
    Tensor q = iota({2, 3, 2, 4});
    Tensor t = permute(q, {0, -2, 1, 3});
    REQUIRE(t.shape() == Shape{2, 2, 3, 4});
    expected.clear();
    for (int b = 0; b < 2; ++b)
        for (int h = 0; h < 2; ++h)
            for (int l = 0; l < 3; ++l)
                for (int d = 0; d < 4; ++d) expected.push_back(24 * b + 8 * l + 4 * h + d);
    CHECK_THAT(vals(t), approx(expected));
    // And back.
    CHECK_THAT(vals(permute(t, {0, 2, 1, 3})), approx(vals(q)));

    Tensor m = gt(tensor({{1, 5}, {4, 2}}), 3.0);
    CHECK(transpose(m, 0, 1).to_vector<bool>() == std::vector<bool>{false, true, true, false});
}

TEST_CASE("unsqueeze and squeeze add and remove length-1 axes", "[shape]") {
    Tensor a = ones({2, 3});
    CHECK(unsqueeze(a, 0).shape() == Shape{1, 2, 3});
    CHECK(unsqueeze(a, 1).shape() == Shape{2, 1, 3});
    CHECK(unsqueeze(a, 2).shape() == Shape{2, 3, 1});
    CHECK(unsqueeze(a, -1).shape() == Shape{2, 3, 1});
    CHECK(unsqueeze(a, -3).shape() == Shape{1, 2, 3});
    CHECK(unsqueeze(tensor(2.0), 0).shape() == Shape{1});
    Tensor b = ones({2, 1, 3, 1});
    CHECK(squeeze(b, 1).shape() == Shape{2, 3, 1});
    CHECK(squeeze(b, -1).shape() == Shape{2, 1, 3});
    CHECK(b.squeeze(3).unsqueeze(0).shape() == Shape{1, 2, 1, 3});
}

TEST_CASE("concat joins along an axis", "[shape]") {
    Tensor a = tensor({{1, 2}, {3, 4}});
    Tensor b = from_vector(std::vector<double>{5.0, 6.0}, {2, 1});
    Tensor c = concat({a, b}, 1);
    CHECK(c.shape() == Shape{2, 3});
    CHECK_THAT(vals(c), approx({1, 2, 5, 3, 4, 6}));
    Tensor d = concat({a, tensor({{7, 8}}), a}, -2);
    CHECK(d.shape() == Shape{5, 2});
    CHECK_THAT(vals(d), approx({1, 2, 3, 4, 7, 8, 1, 2, 3, 4}));
    CHECK_THAT(vals(concat({a}, 0)), approx({1, 2, 3, 4}));
    Tensor i = from_vector(std::vector<std::int64_t>{1, 2}, {2});
    CHECK(concat({i, i}, 0).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 2, 1, 2});
}

TEST_CASE("slice follows numpy's a(start:end:step) slicing", "[shape]") {
    Tensor a = arange(10, kFloat64);
    CHECK_THAT(vals(slice(a, 0, 2, 8, 3)), approx({2, 5}));
    CHECK_THAT(vals(slice(a, 0, 2, 9, 3)), approx({2, 5, 8}));
    CHECK_THAT(vals(slice(a, 0, -3, 100)), approx({7, 8, 9}));
    CHECK_THAT(vals(slice(a, 0, -100, 2)), approx({0, 1}));
    CHECK_THAT(vals(slice(a, 0, 1, -7)), approx({1, 2}));
    CHECK(slice(a, 0, 5, 2).shape() == Shape{0});
    CHECK(slice(a, 0, 12, 20).shape() == Shape{0});
    Tensor m = tensor({{1, 2, 3, 4}, {5, 6, 7, 8}});
    CHECK(slice(m, 1, 1, 4, 2).shape() == Shape{2, 2});
    CHECK_THAT(vals(slice(m, 1, 1, 4, 2)), approx({2, 4, 6, 8}));
    CHECK_THAT(vals(slice(m, -2, 1, 2)), approx({5, 6, 7, 8}));
}

TEST_CASE("expand broadcasts to a shape", "[shape]") {
    Tensor a = tensor({1, 2, 3});
    CHECK(expand(a, {2, 3}).shape() == Shape{2, 3});
    CHECK_THAT(vals(expand(a, {2, 3})), approx({1, 2, 3, 1, 2, 3}));
    CHECK_THAT(vals(expand(from_vector(std::vector<double>{1.0, 2.0}, {2, 1}), {2, 3})), approx({1, 1, 1, 2, 2, 2}));
    CHECK_THAT(vals(expand(tensor(4.0), {2})), approx({4, 4}));
    CHECK(expand(ones({1, 3}), {4, 2, 3}).shape() == Shape{4, 2, 3});
}

TEST_CASE("shape ops pass gradcheck", "[shape][gradcheck]") {
    Tensor x = param({2, 3, 4});
    REQUIRE_GRADCHECK([](auto& v) { return reshape(v[0], {4, -1}); }, {x}, "reshape");
    REQUIRE_GRADCHECK([](auto& v) { return reshape(v[0], {24}); }, {x}, "reshape flat");
    REQUIRE_GRADCHECK([](auto& v) { return permute(v[0], {2, 0, 1}); }, {x}, "permute");
    REQUIRE_GRADCHECK([](auto& v) { return permute(v[0], {-1, 1, 0}); }, {x}, "permute negative");
    REQUIRE_GRADCHECK([](auto& v) { return transpose(v[0], 0, -1); }, {x}, "transpose");
    REQUIRE_GRADCHECK([](auto& v) { return unsqueeze(v[0], 1); }, {x}, "unsqueeze");
    REQUIRE_GRADCHECK([](auto& v) { return slice(v[0], 2, 1, 4, 2); }, {x}, "slice");
    REQUIRE_GRADCHECK([](auto& v) { return slice(v[0], -3, -1, 5); }, {x}, "slice negative");
    REQUIRE_GRADCHECK([](auto& v) { return expand(v[0], {3, 2, 3, 4}); }, {x}, "expand new axis");

    Tensor b = param({1, 4, 1}, -1, 1, 2);  // batch 1, stretched axes
    REQUIRE_GRADCHECK([](auto& v) { return squeeze(v[0], 0); }, {b}, "squeeze");
    REQUIRE_GRADCHECK([](auto& v) { return squeeze(v[0], -1); }, {b}, "squeeze last");
    REQUIRE_GRADCHECK([](auto& v) { return expand(v[0], {3, 4, 5}); }, {b}, "expand stretched");
    REQUIRE_GRADCHECK([](auto& v) { return permute(v[0], {1, 2, 0}); }, {b}, "permute batch 1");

    Tensor q = param({1, 3, 2, 5}, -1, 1, 3);  // (B, L, H, D) with B = 1
    REQUIRE_GRADCHECK([](auto& v) { return permute(v[0], {0, 2, 1, 3}); }, {q}, "permute bhld");

    Tensor s = param({3, 5}, -1, 1, 4);
    REQUIRE_GRADCHECK([](auto& v) { return transpose(v[0], 1, 0); }, {s}, "transpose non-square");
    REQUIRE_GRADCHECK([](auto& v) { return slice(v[0], 0, 0, 3, 2); }, {s}, "slice rows");
}

TEST_CASE("concat passes gradcheck for every input", "[shape][gradcheck]") {
    Tensor a = param({2, 3}, -1, 1, 1);
    Tensor b = param({2, 1}, -1, 1, 2);
    Tensor c = param({2, 4}, -1, 1, 3);
    REQUIRE_GRADCHECK([](auto& v) { return concat({v[0], v[1], v[2]}, 1); }, (std::vector<Tensor>{a, b, c}),
                      "concat axis 1");
    Tensor d = param({1, 3}, -1, 1, 4);
    REQUIRE_GRADCHECK([](auto& v) { return concat({v[0], v[1], v[0]}, -2); }, (std::vector<Tensor>{a, d}),
                      "concat axis 0, an input used twice");
    // Only one input requires grad: the other is passed through.
    Tensor e = ones({2, 2}, kFloat64);
    REQUIRE_GRADCHECK([](auto& v) { return concat({v[1], v[0]}, 1); }, (std::vector<Tensor>{a, e}),
                      "concat with a constant");
}

TEST_CASE("shape ops reject bad arguments", "[shape][errors]") {
    Tensor a = ones({2, 3});
    CHECK_THROWS_WITH(reshape(a, {4, 2}), "reshape: cannot reshape (2, 3) (6 elements) into (4, 2) (8 elements)");
    CHECK_THROWS_WITH(reshape(a, {4, -1}), Catch::Contains("reshape") && Catch::Contains("(2, 3)") &&
                                               Catch::Contains("(4, -1)"));
    CHECK_THROWS_WITH(reshape(a, {-1, -1}), Catch::Contains("reshape") && Catch::Contains("-1"));
    CHECK_THROWS_WITH(reshape(a, {-2, -3}), Catch::Contains("reshape") && Catch::Contains("-2"));

    Tensor x = ones({2, 3, 4});
    CHECK_THROWS_WITH(permute(x, {0, 0, 1}), Catch::Contains("permute") && Catch::Contains("not a permutation") &&
                                                 Catch::Contains("(2, 3, 4)"));
    CHECK_THROWS_WITH(permute(x, {2, 0, -3}), Catch::Contains("permute") && Catch::Contains("not a permutation"));
    CHECK_THROWS_WITH(permute(x, {1, 0}), Catch::Contains("permute") && Catch::Contains("rank 3"));
    CHECK_THROWS_WITH(permute(x, {0, 1, 3}), Catch::Contains("permute") && Catch::Contains("axis 3"));
    CHECK_THROWS_WITH(transpose(a, 0, 2), Catch::Contains("transpose") && Catch::Contains("(2, 3)"));

    CHECK_THROWS_WITH(unsqueeze(a, 3), Catch::Contains("unsqueeze") && Catch::Contains("[-3, 2]") &&
                                           Catch::Contains("(2, 3)"));
    CHECK_THROWS_WITH(unsqueeze(a, -4), Catch::Contains("unsqueeze") && Catch::Contains("axis -4"));
    CHECK_THROWS_WITH(squeeze(a, 1), Catch::Contains("squeeze") && Catch::Contains("length 3") &&
                                         Catch::Contains("(2, 3)"));
    CHECK_THROWS_WITH(squeeze(a, 2), Catch::Contains("squeeze") && Catch::Contains("axis 2"));

    CHECK_THROWS_WITH(concat({}, 0), Catch::Contains("concat") && Catch::Contains("at least one"));
    // mixed dtypes promote as torch.cat's do (tests/core/test_new_ops.cpp)
    CHECK(concat({a, ones({2, 3}, kFloat64)}, 0).dtype() == kFloat64);
    CHECK_THROWS_WITH(concat({a, ones({2, 3, 1})}, 0), Catch::Contains("concat") && Catch::Contains("(2, 3, 1)"));
    CHECK_THROWS_WITH(concat({a, ones({3, 4})}, 1), Catch::Contains("concat") && Catch::Contains("tensor 1") &&
                                                        Catch::Contains("(3, 4)") && Catch::Contains("(2, 3)"));
    CHECK_THROWS_WITH(concat({a, a}, 2), Catch::Contains("concat") && Catch::Contains("axis 2"));

    CHECK_THROWS_WITH(slice(a, 1, 0, 2, 0), Catch::Contains("slice") && Catch::Contains("step"));
    CHECK_THROWS_WITH(slice(a, 1, 0, 2, -1), Catch::Contains("slice") && Catch::Contains("-1"));
    CHECK_THROWS_WITH(slice(a, 2, 0, 1), Catch::Contains("slice") && Catch::Contains("(2, 3)"));

    CHECK_THROWS_WITH(expand(a, {4, 3}), Catch::Contains("expand") && Catch::Contains("(2, 3)") &&
                                             Catch::Contains("(4, 3)"));
    CHECK_THROWS_WITH(expand(a, {3}), Catch::Contains("expand") && Catch::Contains("(3,)"));
    CHECK_THROWS_WITH(expand(ones({3}), {3, 1}), Catch::Contains("expand") && Catch::Contains("(3, 1)"));
}

TEST_CASE("shape ops on int64 and bool carry no gradient", "[shape]") {
    Tensor i = from_vector(std::vector<std::int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor t = permute(i, {1, 0});
    CHECK(t.dtype() == kInt64);
    CHECK(!t.requires_grad());
    CHECK(t.to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 4, 2, 5, 3, 6});
    CHECK(slice(i, 1, 1, 3).to_vector<std::int64_t>() == std::vector<std::int64_t>{2, 3, 5, 6});
    CHECK(expand(unsqueeze(i, 0), {2, 2, 3}).numel() == 12);
}

// (4, 2^62 + 1) has 2^64 + 4 elements, which wrapped to 4: reshape, zeros and from_vector
// accepted it and made a tensor whose shape claims far more than its 4-element buffer.
TEST_CASE("shapes whose element count overflows are rejected", "[shape][errors]") {
    const long huge = (1L << 62) + 1;
    const Shape wrapped{4, static_cast<std::size_t>(huge)};
    CHECK_THROWS_WITH(reshape(arange(4.0), {4, huge}), Catch::Contains("reshape") && Catch::Contains("4611686018427387905"));
    CHECK_THROWS_WITH(reshape(arange(4.0), {-1, huge, 4}), Catch::Contains("reshape"));
    CHECK_THROWS_WITH(zeros(wrapped), Catch::Contains("4611686018427387905"));
    CHECK_THROWS_WITH(from_vector(std::vector<double>{1, 2, 3, 4}, wrapped), Catch::Contains("from_vector"));
    CHECK_THROWS_WITH(from_vector(std::vector<std::int64_t>{1, 2, 3, 4}, wrapped), Catch::Contains("from_vector"));
    CHECK_THROWS_WITH(expand(ones({1, 1}), wrapped), Catch::Contains("expand"));
    CHECK_THROWS_WITH(repeat_interleave(ones({4, 1}), static_cast<std::size_t>(huge), 1),
                      Catch::Contains("repeat_interleave"));
    CHECK_THROWS_WITH(repeat_interleave(ones({4}), static_cast<std::size_t>(-1), 0), Catch::Contains("repeat_interleave"));
}

TEST_CASE("repeat tiles as torch's Tensor.repeat, with leading axes for extra repeats", "[shape]") {
    Tensor a = tensor({{1, 2, 3}, {4, 5, 6}});
    CHECK(a.repeat(2, 1).shape() == Shape{4, 3});
    CHECK_THAT(vals(a.repeat(2, 1)), approx({1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6}));
    // torch: a.repeat(2, 1, 2).flatten()[:12]
    const std::vector<double> tiled = vals(a.repeat(2, 1, 2));
    CHECK(a.repeat(2, 1, 2).shape() == Shape{2, 2, 6});
    CHECK_THAT(std::vector<double>(tiled.begin(), tiled.begin() + 12), approx({1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6}));
    CHECK(a.repeat(0, 2).shape() == Shape{0, 6});
    // d2l's decoder valid lengths: torch.arange(1, num_steps + 1).repeat(batch_size, 1)
    const std::size_t num_steps = 3, batch_size = 2;
    Tensor dec_valid_lens = arange(1, num_steps + 1, 1, kInt64).repeat(batch_size, 1);
    CHECK(dec_valid_lens.to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 2, 3, 1, 2, 3});
    CHECK(repeat(tensor(2.0), {3}).shape() == Shape{3});
    CHECK(cat({a, a}, 0).shape() == Shape{4, 3});
    CHECK_THROWS_WITH(a.repeat(2),
                      "repeat: expected at least as many repeats as the tensor has axes (2), got (2,) for shape (2, 3)");
    CHECK_THROWS_WITH(a.repeat(-1, 1), Catch::Contains("repeat") && Catch::Contains("non-negative"));
    CHECK_THROWS_WITH(a.repeat(std::size_t{1} << 62, 4), Catch::Contains("repeat") && Catch::Contains("fit in memory"));
    CHECK_THROWS_WITH(ones({2, 5}).repeat(1, std::size_t{1} << 62), Catch::Contains("repeat") && Catch::Contains("overflows"));
    CHECK_THROWS_WITH(repeat(Tensor(), {1}), Catch::Contains("repeat"));
}

TEST_CASE("repeat passes gradcheck and gradgradcheck: the tiles' gradients add", "[shape][gradcheck]") {
    Tensor x = param({2, 3});
    REQUIRE_GRADCHECK([](auto& v) { return v[0].repeat(2, 3); }, {x}, "repeat");
    REQUIRE_GRADCHECK([](auto& v) { return v[0].repeat(2, 1, 2); }, {x}, "repeat with a new axis");
    REQUIRE_GRADGRADCHECK([](auto& v) { return v[0].repeat(3, 2) * v[0].repeat(3, 2); }, {x}, "repeat twice");
    Tensor y = x.detach().requires_grad_();
    y.repeat(3, 1).sum().backward();
    CHECK_THAT(vals(y.grad()), approx({3, 3, 3, 3, 3, 3}));
}

TEST_CASE("split's pieces come from one node, whose backward is one concat", "[shape][gradcheck]") {
    // nanoGPT's q, k, v = self.c_attn(x).split(n_embd, dim=2)
    Tensor qkv = param({2, 3, 12});
    const auto pieces = split(qkv, 4, 2);
    REQUIRE(pieces.size() == 3);
    for (const Tensor& p : pieces) CHECK(p.op_name() == "split");
    CHECK(vals(pieces[1]) == vals(slice(qkv, 2, 4, 8)));
    // A gradient reaching one piece only: zeros for the others' columns.
    Tensor x = qkv.detach().requires_grad_();
    (split(x, 4, 2)[1] * 2.0).sum().backward();
    const std::vector<double> g = vals(x.grad());
    for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == ((i % 12) / 4 == 1 ? 2.0 : 0.0));
    REQUIRE_GRADCHECK([](auto& v) {
        const auto p = split(v[0], {5, 0, 7}, -1);
        return p[0].sum({2}) * p[2].sum({2}) + p[1].sum();
    }, {qkv}, "split with an empty piece");
    REQUIRE_GRADCHECK([](auto& v) { return chunk(v[0], 2, 1)[1]; }, {qkv}, "chunk, the last piece only");
    // Integer and bool tensors split without a graph.
    const auto ints = split(arange(6, kInt64).reshape({2, 3}), {1, 2}, 1);
    CHECK(ints[1].to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 2, 4, 5});
}
