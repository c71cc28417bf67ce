// matmul and bmm: values by hand, every operand layout through gradcheck, clear shape errors.
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

TEST_CASE("matmul of 2-D matrices", "[matmul]") {
    Tensor a = tensor({{1., 2., 3.}, {4., 5., 6.}});
    Tensor b = tensor({{1., 0.}, {0., 1.}, {1., 1.}});
    Tensor c = matmul(a, b);
    CHECK(c.shape() == Shape{2, 2});
    CHECK_THAT(vals(c), approx({4, 5, 10, 11}));
    CHECK_THAT(vals(a.matmul(b)), approx({4, 5, 10, 11}));
}

TEST_CASE("matmul treats 1-D operands as numpy does", "[matmul]") {
    Tensor v = tensor({1., 2., 3.});
    Tensor m = tensor({{1., 0.}, {0., 1.}, {1., 1.}});
    CHECK(matmul(v, v).shape() == Shape{});
    CHECK(matmul(v, v).item<float>() == 14);
    CHECK(matmul(v, m).shape() == Shape{2});
    CHECK_THAT(vals(matmul(v, m)), approx({4, 5}));
    Tensor mt = tensor({{1., 0., 1.}, {0., 1., 1.}});
    CHECK(matmul(mt, v).shape() == Shape{2});
    CHECK_THAT(vals(matmul(mt, v)), approx({4, 5}));
}

TEST_CASE("matmul broadcasts batch axes", "[matmul]") {
    Tensor a = ones({2, 1, 3, 4});
    Tensor b = ones({5, 4, 2});
    CHECK(matmul(a, b).shape() == Shape{2, 5, 3, 2});
    CHECK(vals(matmul(a, b))[0] == 4);
    CHECK(matmul(ones({3, 4}), ones({6, 4, 2})).shape() == Shape{6, 3, 2});
}

TEST_CASE("the d2l bmm pooling example", "[matmul]") {
    // weights (2, 1, 10) of 0.1 times values arange(20) reshaped (2, 10, 1): 4.5 and 14.5.
    Tensor w = full({2, 1, 10}, 0.1);
    Tensor v = arange(20.0).reshape({2, 10, 1});
    Tensor r = bmm(w, v);
    CHECK(r.shape() == Shape{2, 1, 1});
    CHECK_THAT(vals(r), approx({4.5, 14.5}, 1e-5));
    CHECK(bmm(ones({2, 1, 4}), ones({2, 4, 6})).shape() == Shape{2, 1, 6});
}

TEST_CASE("matmul and bmm pass gradcheck", "[matmul][gradcheck]") {
    auto [sa, sb] = GENERATE(table<Shape, Shape>({
        {{2, 3}, {3, 4}},
        {{1, 5}, {5, 1}},
        {{3}, {3, 2}},
        {{2, 3}, {3}},
        {{4}, {4}},
        {{2, 2, 3}, {2, 3, 4}},
        {{2, 1, 2, 3}, {3, 3, 2}},   // both sides broadcast
        {{3, 2}, {4, 2, 5}},         // a broadcast over b's batch
    }));
    Tensor a = param(sa, -1, 1, 1);
    Tensor b = param(sb, -1, 1, 2);
    REQUIRE_GRADCHECK([](auto& x) { return matmul(x[0], x[1]); }, {a, b}, "matmul");
    if (sa.size() == 3 && sb.size() == 3 && sa[0] == sb[0])
        REQUIRE_GRADCHECK([](auto& x) { return bmm(x[0], x[1]); }, {a, b}, "bmm");
}

TEST_CASE("a product used twice accumulates", "[matmul][gradcheck]") {
    Tensor a = param({3, 3});
    REQUIRE_GRADCHECK([](auto& x) { return matmul(x[0], x[0]) + matmul(x[0], x[0].transpose(0, 1)); }, {a},
                      "a·a + a·aᵀ");
}

TEST_CASE("matmul and bmm reject mismatched shapes with the shapes in the message", "[matmul][errors]") {
    CHECK_THROWS_WITH(matmul(ones({2, 3}), ones({4, 5})),
                      Catch::Contains("matmul: shapes (2, 3) and (4, 5) cannot be multiplied"));
    CHECK_THROWS_WITH(matmul(ones({2, 2, 3}), ones({3, 3, 4})), Catch::Contains("broadcast"));
    CHECK_THROWS_WITH(matmul(tensor(1.0), ones({2})), Catch::Contains("at least one axis"));
    CHECK_THROWS_WITH(bmm(ones({2, 3}), ones({2, 3, 4})), Catch::Contains("bmm") && Catch::Contains("3-D"));
    CHECK_THROWS_WITH(bmm(ones({2, 3, 4}), ones({3, 4, 5})), Catch::Contains("batch sizes differ"));
    CHECK_THROWS_WITH(bmm(ones({2, 3, 4}), ones({2, 5, 5})), Catch::Contains("(2, 3, 4) and (2, 5, 5)"));
    CHECK_THROWS_WITH(matmul(ones({2, 2}), ones({2, 2}, kFloat64)), Catch::Contains("dtypes differ"));
}

TEST_CASE("empty products are zeros, not BLAS errors", "[matmul]") {
    CHECK(matmul(ones({2, 0}), ones({0, 3})).shape() == Shape{2, 3});
    CHECK_THAT(vals(matmul(ones({2, 0}), ones({0, 3}))), approx({0, 0, 0, 0, 0, 0}));
    CHECK(matmul(ones({0, 2}), ones({2, 3})).shape() == Shape{0, 3});
}

// --- matmul_t: transpose flags and a scale, no transposed copies ------------------------------

namespace {
// op(x): x with its last two axes swapped when `t`.
Tensor op_t(const Tensor& x, bool t) { return t ? x.transpose(-2, -1) : x; }
}  // namespace

TEST_CASE("matmul_t equals matmul of transposed operands, scaled", "[matmul]") {
    // (batch shapes a, b) → every flag combination, incl. a broadcast 2-D right operand (one
    // folded gemm), a broadcast left operand and batch 1.
    const std::vector<std::pair<Shape, Shape>> batches = {{{}, {}}, {{3}, {}}, {{2, 3}, {3}}, {{1}, {4}}, {{2, 1}, {1, 3}}};
    std::uint64_t seed = 1;
    for (const auto& [ba, bb] : batches)
        for (bool ta : {false, true})
            for (bool tb : {false, true}) {
                Shape sa = ba, sb = bb;
                const std::size_t m = 3, k = 4, n = 2;
                sa.push_back(ta ? k : m);
                sa.push_back(ta ? m : k);
                sb.push_back(tb ? n : k);
                sb.push_back(tb ? k : n);
                const Tensor a = param(sa, -1, 1, seed++), b = param(sb, -1, 1, seed++);
                CAPTURE(shape_str(sa), shape_str(sb), ta, tb);
                CHECK_THAT(vals(matmul_t(a, b, ta, tb, 0.5)), approx(vals(matmul(op_t(a, ta), op_t(b, tb)) * 0.5)));
                REQUIRE_GRADCHECK([&](auto& x) { return matmul_t(x[0], x[1], ta, tb, 0.5); }, {a, b}, "matmul_t");
            }
}

TEST_CASE("matmul_t in float32 and its errors", "[matmul]") {
    const Tensor a = tensor({{1., 2.}, {3., 4.}, {5., 6.}});  // (3, 2)
    CHECK_THAT(vals(matmul_t(a, a, true, false, 1.0)), approx({35, 44, 44, 56}));
    CHECK_THAT(vals(matmul_t(a, a, false, true, 2.0)), approx({10, 22, 34, 22, 50, 78, 34, 78, 122}));
    CHECK_THROWS_WITH(matmul_t(a, a, false, false, 1.0),
                      Catch::Contains("matmul_t") && Catch::Contains("(3, 2)") && Catch::Contains("2 != 3"));
    CHECK_THROWS_WITH(matmul_t(tensor({1, 2}), a, false, false, 1.0),
                      Catch::Contains("matmul_t: both operands need at least two axes") && Catch::Contains("(2,)"));
    CHECK_THROWS_WITH(matmul_t(ones({2, 3, 2}), ones({3, 2, 2}), false, false, 1.0),
                      Catch::Contains("matmul_t") && Catch::Contains("cannot be broadcast"));
}

TEST_CASE("empty products: no work per batch, zero gradients", "[matmul][sizes]") {
    // 2^40 batches of (0, 3)·(3, 4): an empty result, built without a table per batch.
    const Tensor huge = zeros({std::size_t{1} << 40, 0, 3}).requires_grad_();
    const Tensor w = ones({3, 4}).requires_grad_();
    Tensor y = matmul(huge, w);
    CHECK(y.shape() == Shape{std::size_t{1} << 40, 0, 4});
    y.sum().backward();
    CHECK(w.grad().to_vector<float>() == std::vector<float>(12, 0.0f));
    // (2, 3, 4)·(4, 0): empty result, A's gradient is zeros of A's shape.
    const Tensor a = ones({2, 3, 4}).requires_grad_();
    Tensor z = bmm(a, zeros({2, 4, 0}));
    z.sum().backward();
    CHECK(a.grad().to_vector<float>() == std::vector<float>(24, 0.0f));
    // (2, 3, 0)·(0, 5): an inner size of 0 gives zeros, not uninitialised memory.
    CHECK(matmul(ones({2, 3, 0}), ones({0, 5})).to_vector<float>() == std::vector<float>(30, 0.0f));
}
