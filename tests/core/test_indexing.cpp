// Basic indexing as torch: t[i], t.index({...}) with integers, Slice, None and Ellipsis, with
// gradients; index_put_ in place (test_inplace.cpp has it in the graph).
#include <cmath>

#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::indexing;
using namespace xgrad::test;

namespace {

// 0..23 as (2, 3, 4): element (i, j, k) is 12i + 4j + k.
Tensor counting(Dtype d = kFloat64) { return arange(24, d).reshape({2, 3, 4}); }

std::vector<double> range(double from, double to, double step = 1) {
    std::vector<double> v;
    for (double x = from; x < to; x += step) v.push_back(x);
    return v;
}

}  // namespace

TEST_CASE("t[i] picks along axis 0 with negative indices as torch", "[indexing]") {
    const Tensor t = counting();
    CHECK(t[1].shape() == Shape{3, 4});
    CHECK_THAT(vals(t[1]), approx(range(12, 24)));
    CHECK_THAT(vals(t[-2]), approx(range(0, 12)));
    CHECK_THAT(vals(t[1][2]), approx({20, 21, 22, 23}));
    CHECK(t[1][2][3].dim() == 0);
    CHECK(t[1][2][3].item<double>() == 23);
    CHECK(t[0].dtype() == kFloat64);
    CHECK(arange(5, kInt64)[-1].item<std::int64_t>() == 4);
    CHECK_THROWS_WITH(t[2], Catch::Contains("index: index 2 is out of range for dimension 0 with size 2"));
    CHECK_THROWS_WITH(t[-3], Catch::Contains("index -3 is out of range for dimension 0 with size 2"));
    CHECK_THROWS_WITH(t[0][0][4], Catch::Contains("index 4 is out of range for dimension 0 with size 4"));
    CHECK_THROWS_WITH(t[1][2][3][0], Catch::Contains("0-d"));
    CHECK_THROWS_WITH(Tensor()[0], Catch::Contains("undefined"));
}

TEST_CASE("index takes integers, Slice, None and Ellipsis as LibTorch", "[indexing]") {
    const Tensor t = counting();
    // t[0:2, 1]
    Tensor r = t.index({Slice(0, 2), 1});
    CHECK(r.shape() == Shape{2, 4});
    CHECK_THAT(vals(r), approx({4, 5, 6, 7, 16, 17, 18, 19}));
    // t[..., ::2]
    r = t.index({Ellipsis, Slice(None, None, 2)});
    CHECK(r.shape() == Shape{2, 3, 2});
    CHECK_THAT(vals(r), approx(range(0, 24, 2)));
    // t[None, 0, -2:]
    r = t.index({None, 0, Slice(-2, None)});
    CHECK(r.shape() == Shape{1, 2, 4});
    CHECK_THAT(vals(r), approx(range(4, 12)));
    // t[1, ..., None]
    CHECK(t.index({1, Ellipsis, None}).shape() == Shape{3, 4, 1});
    // t[:, 1:-1, 1::2], t[-1, :-1, 3]
    r = t.index({Slice(), Slice(1, -1), Slice(1, None, 2)});
    CHECK(r.shape() == Shape{2, 1, 2});
    CHECK_THAT(vals(r), approx({5, 7, 17, 19}));
    CHECK_THAT(vals(t.index({-1, Slice(None, -1), 3})), approx({15, 19}));
    // Out-of-range slice bounds clamp as Python's: t[5:10] is empty, t[-10:1] is t[0:1].
    CHECK(t.index({Slice(5, 10)}).shape() == Shape{0, 3, 4});
    CHECK(t.index({Slice(-10, 1)}).shape() == Shape{1, 3, 4});
    CHECK(t.index({Slice(2, 1)}).shape() == Shape{0, 3, 4});
    // All integers: a 0-d tensor. No indices, or Ellipsis alone: the whole tensor.
    CHECK(t.index({1, 2, 3}).item<double>() == 23);
    CHECK_THAT(vals(t.index({})), approx(range(0, 24)));
    CHECK(t.index({Ellipsis, 0, 0}).shape() == Shape{2});
    CHECK_THAT(vals(t.index({Ellipsis, 0, 0})), approx({0, 12}));
    // Any dtype.
    CHECK(counting(kInt64).index({0, Slice(1, 3), 0}).to_vector<std::int64_t>() == std::vector<std::int64_t>{4, 8});
    CHECK((counting() > 20).index({1, 2}).to_vector<bool>() == std::vector<bool>{false, true, true, true});
}

TEST_CASE("index rejects what torch rejects, naming the axis", "[indexing][errors]") {
    const Tensor t = counting();
    CHECK_THROWS_WITH(t.index({0, 0, 0, 0}), Catch::Contains("too many indices") && Catch::Contains("(2, 3, 4)"));
    CHECK_THROWS_WITH(t.index({Ellipsis, 0, Ellipsis}), Catch::Contains("only one Ellipsis"));
    CHECK_THROWS_WITH(t.index({Slice(), Slice(None, None, 0)}), Catch::Contains("step") && Catch::Contains("dimension 1"));
    CHECK_THROWS_WITH(t.index({Slice(None, None, -1)}), Catch::Contains("step must be at least 1"));
    CHECK_THROWS_WITH(t.index({Slice(), 3}), Catch::Contains("index 3 is out of range for dimension 1 with size 3"));
    CHECK_THROWS_WITH(t.index({Ellipsis, -5}), Catch::Contains("index -5 is out of range for dimension 2 with size 4"));
}

TEST_CASE("indexing passes gradcheck, including permuted inputs", "[indexing][gradcheck]") {
    const Tensor x = param({3, 4, 5});
    REQUIRE_GRADCHECK([](auto& v) { return v[0][1]; }, {x}, "t[1]");
    REQUIRE_GRADCHECK([](auto& v) { return v[0][-1][2]; }, {x}, "t[-1][2]");
    REQUIRE_GRADCHECK([](auto& v) { return v[0].index({Slice(0, 2), 1}); }, {x}, "t[0:2, 1]");
    REQUIRE_GRADCHECK([](auto& v) { return v[0].index({Ellipsis, Slice(None, None, 2), None}); }, {x}, "t[..., ::2, None]");
    REQUIRE_GRADCHECK([](auto& v) { return v[0].index({Slice(1, None), Slice(-3, -1), 4}); }, {x}, "t[1:, -3:-1, 4]");
    REQUIRE_GRADCHECK([](auto& v) { return v[0].index({2, 3, 4}); }, {x}, "t[2, 3, 4]");
    REQUIRE_GRADCHECK([](auto& v) { return v[0].permute({2, 0, 1}).index({Slice(1, 4, 2), Ellipsis, 0}); }, {x},
                      "permuted");
    // The same element picked through two paths: the gradients add.
    REQUIRE_GRADCHECK([](auto& v) { return v[0][0] * v[0].index({0, Slice(), Slice()}); }, {x}, "picked twice");
    const Tensor y = param({4, 5});
    REQUIRE_GRADCHECK([](auto& v) { return v[0].index({Slice(), None, 1}) + v[0].index({None, 1}); }, {y},
                      "broadcast of two picks");
}

TEST_CASE("index_put_ writes in place under no-grad", "[indexing][inplace]") {
    Tensor t = zeros({2, 3, 4}, kFloat64);
    const Tensor alias = t;
    const auto v0 = t.version();
    t.index_put_({0, Slice(1, 3)}, 7.0);
    CHECK(t.version() == v0 + 1);
    CHECK(alias.index({0, 1}).to_vector<double>() == std::vector<double>{7, 7, 7, 7});
    CHECK(alias.index({0, 0}).to_vector<double>() == std::vector<double>{0, 0, 0, 0});
    CHECK(sum(t).item<double>() == 56);
    // A tensor value broadcasts to the indexed part: t[:, 1] = [1, 2, 3, 4] for both rows.
    t.index_put_({Slice(), 1}, tensor({1.0, 2.0, 3.0, 4.0}));
    CHECK_THAT(vals(t.index({Slice(), 1})), approx({1, 2, 3, 4, 1, 2, 3, 4}));
    // t[..., ::3] = column values, with None and negative steps of Python's meaning.
    t.index_put_({Ellipsis, Slice(None, None, 3)}, tensor({{-1.0, -2.0}}));
    CHECK_THAT(vals(t[1][2]), approx({-1, 0, 0, -2}));
    t.index_put_({-1, -1, -1}, 9);
    CHECK(t.index({1, 2, 3}).item<double>() == 9);
    // An int64 tensor takes a double as torch's copy_ does (truncated); a NaN cannot go in.
    Tensor counts = zeros({3}, kInt64);
    counts.index_put_({1}, 2.5);
    CHECK(counts.to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 2, 0});
    CHECK_THROWS_WITH(counts.index_put_({Slice()}, tensor({1.0, NAN, 3.0})), Catch::Contains("nan"));
    CHECK(counts.to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 2, 0});  // nothing written
    // A mask.
    Tensor mask = zeros({2}, kBool);
    mask.index_put_({1}, true);
    CHECK(mask.to_vector<bool>() == std::vector<bool>{false, true});
    // Writing a tensor into itself reads the old values.
    Tensor row = arange(4, kFloat64);
    row.index_put_({Slice()}, row);
    CHECK_THAT(vals(row), approx({0, 1, 2, 3}));
}

TEST_CASE("index_put_ refuses what torch refuses", "[indexing][inplace][errors]") {
    Tensor t = zeros({2, 3});
    CHECK_THROWS_WITH(t.index_put_({Slice(), 0}, zeros({3})),
                      Catch::Contains("index_put_: value of shape (3,) cannot be broadcast to the indexed shape (2,)"));
    CHECK_THROWS_WITH(t.index_put_({2}, 1.0), Catch::Contains("index 2 is out of range for dimension 0 with size 2"));
    Tensor w = zeros({2, 3}).requires_grad_();
    CHECK_THROWS_WITH(w.index_put_({0}, 1.0), Catch::Contains("leaf") && Catch::Contains("NoGradGuard"));
    {
        NoGradGuard no_grad;
        w.index_put_({0}, 1.0);
    }
    CHECK_THAT(vals(w), approx({1, 1, 1, 0, 0, 0}));
    // The version check guards the graph: an op that saved t sees the write.
    Tensor u = ones({2, 3}).requires_grad_();
    Tensor y = u * t;
    t.index_put_({0, 0}, 5.0);
    CHECK_THROWS_WITH(y.sum().backward(), Catch::Contains("modified in place"));
}

TEST_CASE("an unsigned index that went below zero is refused, never the last element", "[indexing]") {
    const Tensor x = counting();
    std::size_t i = 0;
    const std::size_t n = 3;
    // t[i - 1], t.index({i - 1}), a Slice bound and index_put_: each an Error naming the op
    CHECK_THROWS_WITH(x[i - 1], Catch::Contains("index: index 18446744073709551615 is an unsigned value"));
    CHECK_THROWS_WITH(x.index({Slice(), i - 1}), Catch::Contains("index: index 18446744073709551615"));
    CHECK_THROWS_WITH(x.index({Slice(), Slice(0, i - n)}), Catch::Contains("Slice: index"));
    Tensor y = counting();
    CHECK_THROWS_WITH(y.index_put_({i - 1}, 0.0), Catch::Contains("unsigned"));
    CHECK(y.to_vector<double>() == counting().to_vector<double>());
    // the largest signed value passes the conversion and is then out of range, as any index
    CHECK_THROWS_WITH(x[std::size_t{1} << 62], Catch::Contains("out of range"));
    // unsigned indices that fit work as signed ones do
    CHECK(x[std::size_t{1}].to_vector<double>() == x[1].to_vector<double>());
    CHECK(x.index({std::uint32_t{1}, Slice(std::size_t{1}, std::size_t{3})}).to_vector<double>() ==
          x.index({1, Slice(1, 3)}).to_vector<double>());
}
