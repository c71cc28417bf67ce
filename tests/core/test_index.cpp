// Selection and indexing: where, masked_fill, repeat_interleave, index_select, gather.
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

namespace {

Tensor ids(const std::vector<std::int64_t>& v, const Shape& shape) { return from_vector(v, shape); }

Tensor mask(const std::vector<bool>& v, const Shape& shape) {
    std::vector<double> d(v.begin(), v.end());
    return gt(from_vector(d, shape), 0.5);
}

}  // namespace

// --- where / masked_fill ------------------------------------------------------------------

TEST_CASE("where picks from a or b by a broadcast condition", "[select]") {
    Tensor c = mask({true, false, true}, {3});
    Tensor a = tensor({{1., 2., 3.}, {4., 5., 6.}});
    Tensor b = from_vector(std::vector<double>{-1.0, -2.0}, {2, 1});
    Tensor y = where(c, a, b);
    CHECK(y.shape() == Shape{2, 3});
    CHECK_THAT(vals(y), approx({1, -1, 3, 4, -2, 6}));
    CHECK_THAT(vals(where(mask({false, true}, {2, 1}), tensor(9.0), a)), approx({1, 2, 3, 9, 9, 9}));
    Tensor i = ids({1, 2, 3}, {3});
    CHECK(where(c, i, ids({7, 8, 9}, {3})).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 8, 3});
}

TEST_CASE("masked_fill writes a value where the mask is true", "[select]") {
    Tensor a = tensor({{1, 2, 3}, {4, 5, 6}});
    CHECK_THAT(vals(masked_fill(a, mask({true, false, false, false, true, true}, {2, 3}), -7)),
               approx({-7, 2, 3, 4, -7, -7}));
    // A (1, 3) mask broadcasts over the rows; d2l masks with -1e6 this way.
    Tensor y = masked_fill(a, mask({false, true, true}, {1, 3}), -1e6);
    CHECK(y.shape() == Shape{2, 3});
    CHECK_THAT(vals(y), approx({1, -1e6, -1e6, 4, -1e6, -1e6}));
    CHECK_THAT(vals(masked_fill(a, mask({true}, {}), 0)), approx({0, 0, 0, 0, 0, 0}));
}

TEST_CASE("where and masked_fill pass gradcheck", "[select][gradcheck]") {
    auto [sc, sa, sb] = GENERATE(table<Shape, Shape, Shape>({
        {{2, 3}, {2, 3}, {2, 3}},
        {{3}, {2, 3}, {2, 1}},
        {{2, 1}, {1, 3}, {}},
        {{1, 4}, {1, 4}, {4}},
    }));
    Generator gen(5);
    Tensor c = gt(rand(sc, kFloat64, gen), 0.5);
    Tensor a = param(sa, -1, 1, 1);
    Tensor b = param(sb, -1, 1, 2);
    REQUIRE_GRADCHECK([](auto& v) { return where(v[0], v[1], v[2]); }, (std::vector<Tensor>{c, a, b}), "where");
    REQUIRE_GRADCHECK([](auto& v) { return where(v[0], v[1], v[2] * 2.0); }, (std::vector<Tensor>{c, a, b.detach()}),
                      "where, b constant");
}

TEST_CASE("masked_fill passes gradcheck and stops the gradient at filled places", "[select][gradcheck]") {
    Tensor a = param({3, 4});
    Tensor m = mask({true, false, false, true}, {4});
    REQUIRE_GRADCHECK([](auto& v) { return masked_fill(v[0], v[1], -1e6); }, (std::vector<Tensor>{a, m}),
                      "masked_fill");
    Tensor m2 = mask({true, false, true, false, false, true}, {2, 1, 3});
    Tensor x = param({2, 4, 3}, -1, 1, 3);
    REQUIRE_GRADCHECK([](auto& v) { return masked_fill(v[0], v[1], 0.0); }, (std::vector<Tensor>{x, m2}),
                      "masked_fill broadcast mask");

    Tensor p = tensor({1.0, 2.0, 3.0}, kFloat64).requires_grad_();
    masked_fill(p, mask({false, true, false}, {3}), 5.0).sum().backward();
    CHECK_THAT(vals(p.grad()), approx({1, 0, 1}));
}

TEST_CASE("where and masked_fill reject bad arguments", "[select][errors]") {
    Tensor a = ones({2, 3});
    CHECK_THROWS_WITH(where(a, a, a), Catch::Contains("where") && Catch::Contains("cond") &&
                                          Catch::Contains("bool") && Catch::Contains("float32"));
    CHECK_THROWS_WITH(where(gt(a, 0.0), a, ones({2, 3}, kFloat64)), Catch::Contains("where") &&
                                                                      Catch::Contains("dtypes differ"));
    CHECK_THROWS_WITH(where(gt(a, 0.0), a, ones({4})), Catch::Contains("where") && Catch::Contains("(2, 3)") &&
                                                          Catch::Contains("(4,)"));
    CHECK_THROWS_WITH(where(gt(ones({4}), 0.0), a, a), Catch::Contains("where") && Catch::Contains("(4,)"));
    CHECK_THROWS_WITH(masked_fill(a, a, 0), Catch::Contains("masked_fill") && Catch::Contains("bool"));
    // The mask must broadcast to a, not a to the mask.
    CHECK_THROWS_WITH(masked_fill(ones({3}), gt(a, 0.0), 0), Catch::Contains("masked_fill") &&
                                                                 Catch::Contains("(2, 3)") && Catch::Contains("(3,)"));
    CHECK_THROWS_WITH(masked_fill(a, gt(ones({2}), 0.0), 0), Catch::Contains("masked_fill") &&
                                                                 Catch::Contains("(2,)"));
}

// --- repeat_interleave ----------------------------------------------------------------------

TEST_CASE("repeat_interleave repeats each element in place", "[index]") {
    CHECK_THAT(vals(repeat_interleave(tensor({3, 2}), 2, 0)), approx({3, 3, 2, 2}));
    Tensor a = tensor({{1, 2}, {3, 4}});
    Tensor r0 = repeat_interleave(a, 3, 0);
    CHECK(r0.shape() == Shape{6, 2});
    CHECK_THAT(vals(r0), approx({1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4}));
    Tensor r1 = repeat_interleave(a, 2, -1);
    CHECK(r1.shape() == Shape{2, 4});
    CHECK_THAT(vals(r1), approx({1, 1, 2, 2, 3, 3, 4, 4}));
    CHECK(repeat_interleave(a, 1, 0).shape() == Shape{2, 2});
    CHECK(repeat_interleave(a, 0, 1).shape() == Shape{2, 0});
    // valid_lens for multi-head attention: int64 (B,) → (B·heads,).
    CHECK(repeat_interleave(ids({3, 5}, {2}), 2, 0).to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{3, 3, 5, 5});
}

TEST_CASE("repeat_interleave passes gradcheck", "[index][gradcheck]") {
    auto [shape, repeats, axis] = GENERATE(table<Shape, std::size_t, long>({
        {{2}, 3, 0},
        {{2, 3}, 2, 0},
        {{2, 3}, 2, 1},
        {{1, 3, 2}, 4, -2},
        {{2, 1, 3}, 3, 1},
    }));
    Tensor x = param(shape);
    REQUIRE_GRADCHECK([repeats = repeats, axis = axis](auto& v) { return repeat_interleave(v[0], repeats, axis); },
                      {x}, "repeat_interleave");
}

// --- index_select -----------------------------------------------------------------------------

TEST_CASE("index_select replaces the axis by the index's shape", "[index]") {
    // An embedding table (V=4, D=3) looked up with ids (B=2, T=2).
    Tensor w = tensor({{0, 1, 2}, {10, 11, 12}, {20, 21, 22}, {30, 31, 32}});
    Tensor e = index_select(w, 0, ids({0, 3, 3, 1}, {2, 2}));
    CHECK(e.shape() == Shape{2, 2, 3});
    CHECK_THAT(vals(e), approx({0, 1, 2, 30, 31, 32, 30, 31, 32, 10, 11, 12}));
    // Along the last axis with a 1-D index, and with a 0-d index (the axis disappears).
    Tensor c = index_select(w, 1, ids({2, 0}, {2}));
    CHECK(c.shape() == Shape{4, 2});
    CHECK_THAT(vals(c), approx({2, 0, 12, 10, 22, 20, 32, 30}));
    Tensor s = index_select(w, -2, ids({2}, {}));
    CHECK(s.shape() == Shape{3});
    CHECK_THAT(vals(s), approx({20, 21, 22}));
    // (2, 3, 2) along the middle axis with a (2, 2) index → (2, 2, 2, 2).
    Tensor x = tensor({{{1, 2}, {3, 4}, {5, 6}}, {{7, 8}, {9, 10}, {11, 12}}});
    Tensor m = index_select(x, 1, ids({2, 0, 1, 1}, {2, 2}));
    CHECK(m.shape() == Shape{2, 2, 2, 2});
    CHECK_THAT(vals(m), approx({5, 6, 1, 2, 3, 4, 3, 4, 11, 12, 7, 8, 9, 10, 9, 10}));
    CHECK(index_select(ids({5, 6, 7}, {3}), 0, ids({2, 2}, {2})).to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{7, 7});
}

TEST_CASE("index_select backward sums repeated indices", "[index][gradcheck]") {
    Tensor w = zeros({4, 2}, TensorOptions(kFloat64).requires_grad(true));
    Tensor e = index_select(w, 0, ids({1, 3, 1, 1}, {2, 2}));
    e.backward(ones({2, 2, 2}, kFloat64));
    CHECK_THAT(vals(w.grad()), approx({0, 0, 3, 3, 0, 0, 1, 1}));

    Tensor v = param({5, 3});
    REQUIRE_GRADCHECK([](auto& t) { return index_select(t[0], 0, t[1]); },
                      (std::vector<Tensor>{v, ids({4, 0, 4, 2, 4, 0}, {2, 3})}), "index_select embedding");
    REQUIRE_GRADCHECK([](auto& t) { return index_select(t[0], -1, t[1]); },
                      (std::vector<Tensor>{v, ids({2, 2, 1}, {3})}), "index_select last axis");
    Tensor x = param({2, 4, 3}, -1, 1, 2);
    REQUIRE_GRADCHECK([](auto& t) { return index_select(t[0], 1, t[1]); },
                      (std::vector<Tensor>{x, ids({3, 3}, {1, 2})}), "index_select middle axis");
    Tensor b = param({1, 3}, -1, 1, 3);
    REQUIRE_GRADCHECK([](auto& t) { return index_select(t[0], 0, t[1]); },
                      (std::vector<Tensor>{b, ids({0, 0, 0}, {3})}), "index_select batch 1");
}

TEST_CASE("index_select rejects bad indices", "[index][errors]") {
    Tensor w = ones({4, 3});
    CHECK_THROWS_WITH(index_select(w, 0, ids({0, 4}, {2})), Catch::Contains("index_select") &&
                                                               Catch::Contains("index 4") &&
                                                               Catch::Contains("[0, 4)") && Catch::Contains("(4, 3)"));
    CHECK_THROWS_WITH(index_select(w, 1, ids({1, 3}, {2})), Catch::Contains("index_select") &&
                                                               Catch::Contains("index 3") && Catch::Contains("[0, 3)"));
    CHECK_THROWS_WITH(index_select(w, 0, ids({-1}, {1})), Catch::Contains("index_select") &&
                                                             Catch::Contains("index -1") &&
                                                             Catch::Contains("negative"));
    CHECK_THROWS_WITH(index_select(w, 0, tensor({1.0})), Catch::Contains("index_select") &&
                                                            Catch::Contains("int64") && Catch::Contains("float32"));
    CHECK_THROWS_WITH(index_select(w, 2, ids({0}, {1})), Catch::Contains("index_select") &&
                                                            Catch::Contains("(4, 3)"));
}

// --- gather -----------------------------------------------------------------------------------

TEST_CASE("gather picks along an axis as torch.gather", "[index]") {
    Tensor a = tensor({{1, 2, 3}, {4, 5, 6}});
    Tensor g1 = gather(a, 1, ids({2, 0, 1, 1}, {2, 2}));
    CHECK(g1.shape() == Shape{2, 2});
    CHECK_THAT(vals(g1), approx({3, 1, 5, 5}));
    Tensor g0 = gather(a, 0, ids({1, 0, 1}, {1, 3}));
    CHECK(g0.shape() == Shape{1, 3});
    CHECK_THAT(vals(g0), approx({4, 2, 6}));
    // Picking the target class of each row, as a loss does: (N, C) with (N, 1).
    CHECK_THAT(vals(gather(a, -1, ids({1, 2}, {2, 1}))), approx({2, 6}));
    // Index smaller than the input on a non-gathered axis: only the first rows/columns are used.
    Tensor x = tensor({{{1, 2}, {3, 4}, {5, 6}}, {{7, 8}, {9, 10}, {11, 12}}});  // (2, 3, 2)
    Tensor g = gather(x, 1, ids({2, 0, 1}, {1, 3, 1}));
    CHECK(g.shape() == Shape{1, 3, 1});
    CHECK_THAT(vals(g), approx({5, 1, 3}));
}

TEST_CASE("gather passes gradcheck and repeated picks sum", "[index][gradcheck]") {
    Tensor a = param({3, 4});
    REQUIRE_GRADCHECK([](auto& t) { return gather(t[0], 1, t[1]); },
                      (std::vector<Tensor>{a, ids({3, 3, 0, 1, 2, 1}, {3, 2})}), "gather axis 1");
    REQUIRE_GRADCHECK([](auto& t) { return gather(t[0], 0, t[1]); },
                      (std::vector<Tensor>{a, ids({2, 0, 0, 2, 1, 1}, {2, 3})}), "gather axis 0, smaller");
    Tensor x = param({2, 3, 4}, -1, 1, 2);
    REQUIRE_GRADCHECK([](auto& t) { return gather(t[0], -2, t[1]); },
                      (std::vector<Tensor>{x, ids({0, 2, 2, 1, 1, 1, 0, 0}, {2, 2, 2})}), "gather 3-d");
    Tensor b = param({1, 5}, -1, 1, 3);
    REQUIRE_GRADCHECK([](auto& t) { return gather(t[0], 1, t[1]); },
                      (std::vector<Tensor>{b, ids({4}, {1, 1})}), "gather batch 1");

    Tensor p = zeros({2, 3}, TensorOptions(kFloat64).requires_grad(true));
    gather(p, 1, ids({1, 1, 1, 0, 2, 0}, {2, 3})).sum().backward();
    CHECK_THAT(vals(p.grad()), approx({0, 3, 0, 2, 0, 1}));
}

TEST_CASE("gather rejects bad indices", "[index][errors]") {
    Tensor a = ones({2, 3});
    CHECK_THROWS_WITH(gather(a, 1, ids({0, 1, 2}, {3})), Catch::Contains("gather") && Catch::Contains("rank") &&
                                                            Catch::Contains("(3,)") && Catch::Contains("(2, 3)"));
    CHECK_THROWS_WITH(gather(a, 1, ids({0, 0, 0}, {3, 1})), Catch::Contains("gather") &&
                                                               Catch::Contains("(3, 1)") &&
                                                               Catch::Contains("axis 0"));
    CHECK_THROWS_WITH(gather(a, 1, ids({0, 3}, {2, 1})), Catch::Contains("gather") && Catch::Contains("index 3") &&
                                                            Catch::Contains("[0, 3)"));
    CHECK_THROWS_WITH(gather(a, 0, ids({-2}, {1, 1})), Catch::Contains("gather") && Catch::Contains("negative"));
    CHECK_THROWS_WITH(gather(a, 0, gt(a, 0.0)), Catch::Contains("gather") && Catch::Contains("int64") &&
                                                   Catch::Contains("bool"));
    CHECK_THROWS_WITH(gather(a, 2, ids({0}, {1, 1})), Catch::Contains("gather") && Catch::Contains("axis 2"));
}
