// Advanced indexing as torch: bool masks, int64 index tensors and lists in t.index and
// index_put_ (with accumulate), which writes where index() only copies; scatter and scatter_add. Values
// are torch 1.13's, pasted as constants.
#include <cmath>
#include <cstdint>
#include <limits>

#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::indexing;
using namespace xgrad::test;

namespace {

// 0..23 as (2, 3, 4): element (i, j, k) is 12i + 4j + k.
Tensor counting(Dtype d = kFloat64) { return arange(24, d).reshape({2, 3, 4}); }

Tensor ids(const std::vector<std::int64_t>& v, const Shape& shape) { return from_vector(v, shape); }
Tensor ids(const std::vector<std::int64_t>& v) { return from_vector(v, Shape{v.size()}); }

Tensor mask(const std::vector<bool>& v, const Shape& shape) {
    std::vector<double> d(v.begin(), v.end());
    return gt(from_vector(d, shape), 0.5);
}

// A float64 weighting so that every output element's gradient differs.
Tensor weights(const Shape& shape) {
    std::size_t n = 1;
    for (std::size_t d : shape) n *= d;
    return arange(1.0, static_cast<double>(n) + 1.0, 1.0, kFloat64).reshape(std::vector<long>(shape.begin(), shape.end())) /
           static_cast<double>(n);
}

}  // namespace

// --- reading ----------------------------------------------------------------------------------

TEST_CASE("a bool mask picks as torch: x[x > 10] is 1-D, a mask over leading axes picks rows", "[adv-indexing]") {
    const Tensor x = counting();
    const Tensor all = x.index({x > 10});
    CHECK(all.shape() == Shape{13});
    CHECK_THAT(vals(all), approx({11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}));
    // x[m2] with m2 of shape (2, 3): rows of 4.
    const Tensor m2 = mask({true, false, true, false, false, true}, {2, 3});
    Tensor r = x.index({m2});
    CHECK(r.shape() == Shape{3, 4});
    CHECK_THAT(vals(r), approx({0, 1, 2, 3, 8, 9, 10, 11, 20, 21, 22, 23}));
    // x[:, [True, False, True]]
    r = x.index({Slice(), mask({true, false, true}, {3})});
    CHECK(r.shape() == Shape{2, 2, 4});
    CHECK_THAT(vals(r), approx({0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 20, 21, 22, 23}));
    // x[1, m1]: the integer first, as torch.
    r = x.index({1, mask({true, false, true}, {3})});
    CHECK(r.shape() == Shape{2, 4});
    CHECK_THAT(vals(r), approx({12, 13, 14, 15, 20, 21, 22, 23}));
    // x[m2, 1:3] (numpy's result; torch 1.13 misplaces the slice and throws).
    r = x.index({m2, Slice(1, 3)});
    CHECK(r.shape() == Shape{3, 2});
    CHECK_THAT(vals(r), approx({1, 2, 9, 10, 21, 22}));
    // Empty and all-true masks, any dtype, and 0-d masks (a new axis of length 1 or 0).
    CHECK(x.index({x > 100}).shape() == Shape{0});
    CHECK_THAT(vals(x.index({x >= 0})), approx(vals(x.reshape({-1}))));
    CHECK(counting(kInt64).index({m2}).to_vector<std::int64_t>()[4] == 8);
    CHECK(x.index({tensor(1.0) > 0}).shape() == Shape{1, 2, 3, 4});
    CHECK(x.index({tensor(1.0) < 0}).shape() == Shape{0, 2, 3, 4});
    CHECK(tensor(5.0).index({tensor(5.0) > 1}).to_vector<float>() == std::vector<float>{5});
}

TEST_CASE("int64 tensors and lists pick as torch's advanced indexing", "[adv-indexing]") {
    const Tensor x = counting();
    // x[[[1, 0], [1, 1]]]: the index's shape replaces axis 0.
    Tensor r = x.index({ids({1, 0, 1, 1}, {2, 2})});
    CHECK(r.shape() == Shape{2, 2, 3, 4});
    CHECK_THAT(vals(r.index({Ellipsis, 0, 0})), approx({12, 0, 12, 12}));
    // x[:, [-1]] keeps the axis; x[:, -1] drops it.
    r = x.index({Slice(), {-1}});
    CHECK(r.shape() == Shape{2, 1, 4});
    CHECK_THAT(vals(r), approx({8, 9, 10, 11, 20, 21, 22, 23}));
    CHECK(x.index({Slice(), -1}).shape() == Shape{2, 4});
    // Two lists broadcast together, adjacent: x[[0, 1], [2, 0]].
    r = x.index({{0, 1}, {2, 0}});
    CHECK(r.shape() == Shape{2, 4});
    CHECK_THAT(vals(r), approx({8, 9, 10, 11, 12, 13, 14, 15}));
    // Separated by a slice: the advanced axes come first, x[[0, 1], :, [1, 2]].
    r = x.index({{0, 1}, Slice(), {1, 2}});
    CHECK(r.shape() == Shape{2, 3});
    CHECK_THAT(vals(r), approx({1, 5, 9, 14, 18, 22}));
    // An integer is applied first, as torch's (numpy would give (2, 3)): x[0, :, [1, 2]].
    r = x.index({0, Slice(), {1, 2}});
    CHECK(r.shape() == Shape{3, 2});
    CHECK_THAT(vals(r), approx({1, 2, 5, 6, 9, 10}));
    // ... and so is a 0-d int64 tensor.
    CHECK(x.index({ids({0}, Shape{}), Slice(), {1, 2}}).shape() == Shape{3, 2});
    // Broadcasting (2, 1) with (3,): x[[[0], [1]], :, [1, 2, 3]].
    r = x.index({ids({0, 1}, {2, 1}), Slice(), {1, 2, 3}});
    CHECK(r.shape() == Shape{2, 3, 3});
    CHECK_THAT(vals(r), approx({1, 5, 9, 2, 6, 10, 3, 7, 11, 13, 17, 21, 14, 18, 22, 15, 19, 23}));
    // With Ellipsis and None: x[..., [0, -1]], x[None, [1, 0]].
    r = x.index({Ellipsis, {0, -1}});
    CHECK(r.shape() == Shape{2, 3, 2});
    CHECK_THAT(vals(r), approx({0, 3, 4, 7, 8, 11, 12, 15, 16, 19, 20, 23}));
    r = x.index({None, {1, 0}});
    CHECK(r.shape() == Shape{1, 2, 3, 4});
    CHECK_THAT(vals(r.index({Ellipsis, 0, 0})), approx({12, 0}));
    // An empty index picks nothing; sizes from size() need no cast.
    CHECK(x.index({ids({})}).shape() == Shape{0, 3, 4});
    const std::size_t last = x.size(0) - 1;
    CHECK(x.index({{last}}).shape() == Shape{1, 3, 4});
}

// --- writing ----------------------------------------------------------------------------------

TEST_CASE("nanoGPT's top-k filter logits[logits < v] = -inf writes through index_put_, as torch", "[adv-indexing]") {
    const Tensor logits = tensor({{0.5, -1, 2, 0.1}, {3, 0, -2, 1}});
    const Tensor v = topk(logits, 2).values.index({Slice(), {-1}});
    CHECK(v.shape() == Shape{2, 1});
    const auto inf = std::numeric_limits<float>::infinity();
    Tensor a = logits.clone();
    // Advanced indexing copies (as torch's): assigning to the copy is refused, not lost.
    CHECK_THROWS_WITH(a.index({a < v}) = -inf, Catch::Contains("would write into a copy") && Catch::Contains("index_put_"));
    CHECK_THROWS_WITH(a.index({a < v}) += 1.0, Catch::Contains("index_put_"));
    CHECK(a.version() == 0);
    a.index_put_({a < v}, -inf);  // logits[logits < v] = -inf
    CHECK(a.to_vector<float>() == std::vector<float>{0.5f, -inf, 2, -inf, 3, -inf, -inf, 1});
    Tensor b = logits.clone();
    b.index_put_({b < v}, -inf);
    CHECK(b.to_vector<float>() == a.to_vector<float>());
    CHECK(b.version() == 1);
}

TEST_CASE("writes by mask and by indices land in the tensor through index_put_, as torch's setitem", "[adv-indexing]") {
    const Tensor m2 = mask({true, false, true, false, false, true}, {2, 3});
    Tensor y = counting();
    y.index_put_({m2}, tensor({10, 20, 30, 40}));  // y[m2] = row (broadcast over the picked rows)
    CHECK_THAT(vals(y), approx({10, 20, 30, 40, 4, 5, 6, 7, 10, 20, 30, 40,
                                12, 13, 14, 15, 16, 17, 18, 19, 10, 20, 30, 40}));
    y = counting();
    y.index_put_({Slice(), {-1}}, 0);  // y[:, [-1]] = 0
    CHECK_THAT(vals(y), approx({0, 1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 0, 12, 13, 14, 15, 16, 17, 18, 19, 0, 0, 0, 0}));
    y = counting();
    std::vector<bool> fifth(24);
    for (std::size_t k = 0; k < fifth.size(); ++k) fifth[k] = k % 5 == 0;
    y.index_put_({mask(fifth, {2, 3, 4})}, 100, true);  // y[x % 5 == 0] += 100
    CHECK_THAT(vals(y), approx({100, 1, 2, 3, 4, 105, 6, 7, 8, 9, 110, 11,
                                12, 13, 14, 115, 16, 17, 18, 19, 120, 21, 22, 23}));
    // Through a view: y[0][[0, 2]] = -1 writes into y.
    y = counting();
    y[0].index_put_({{0, 2}}, -1);
    CHECK_THAT(vals(y.index({0, Slice(), 0})), approx({-1, 4, -1}));
    // Repeated indices: the last write wins (deterministic; torch leaves it undefined), and with
    // accumulate every one adds.
    Tensor z = zeros({5});
    z.index_put_({ids({0, 2, 0, 4, 0})}, tensor({1, 2, 3, 4, 5}));
    CHECK(z.to_vector<float>() == std::vector<float>{5, 0, 2, 0, 4});
    z.zero_();
    z.index_put_({ids({0, 2, 0, 4, 0})}, tensor({1, 2, 3, 4, 5}), true);
    CHECK(z.to_vector<float>() == std::vector<float>{9, 0, 2, 0, 4});
    // accumulate with basic indices, a scalar, an int64 tensor and a bool one.
    Tensor w = ones({2, 3});
    w.index_put_({Slice(), 1}, 2.5, true);
    CHECK(w.to_vector<float>() == std::vector<float>{1, 3.5, 1, 1, 3.5, 1});
    Tensor n = zeros({3}, kInt64);
    n.index_put_({{1, 1, 2}}, 7, true);
    CHECK(n.to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 14, 7});
    Tensor f = zeros({3}) > 0;
    f.index_put_({{2, 2}}, tensor({1.0, 0.0}) > 0.5, true);
    CHECK(f.to_vector<bool>() == std::vector<bool>{false, false, true});
}

// --- scatter ----------------------------------------------------------------------------------

TEST_CASE("scatter and scatter_add match torch, in place and out of place", "[adv-indexing][scatter]") {
    const Tensor a = zeros({3, 4});
    const Tensor i = ids({3, 0, 3, 1, 1, 2}, {2, 3});
    const Tensor s = arange(1, 13, kFloat32).reshape({3, 4});
    // a.scatter(1, i, s): the index (2, 3) reads src's top-left (2, 3) corner.
    CHECK(scatter(a, 1, i, s).to_vector<float>() == std::vector<float>{2, 0, 0, 3, 0, 6, 7, 0, 0, 0, 0, 0});
    CHECK(scatter_add(a, 1, i, s).to_vector<float>() == std::vector<float>{2, 0, 0, 4, 0, 11, 7, 0, 0, 0, 0, 0});
    CHECK(scatter(a, 0, ids({2, 0, 1, 2}, {1, 4}), 7.0).to_vector<float>() ==
          std::vector<float>{0, 7, 0, 0, 0, 0, 7, 0, 7, 0, 0, 7});
    CHECK(scatter_add(ones({3, 4}), 0, ids({2, 0, 1, 2, 2, 2, 2, 2}, {2, 4}), s).to_vector<float>() ==
          std::vector<float>{1, 3, 1, 1, 1, 1, 4, 1, 7, 7, 8, 13});
    // In place: every alias sees it, version bumped; through t[i] it writes into t.
    Tensor b = a.clone();
    const Tensor alias = b;
    b.scatter_add_(1, i, s);
    CHECK(alias.to_vector<float>() == scatter_add(a, 1, i, s).to_vector<float>());
    CHECK(b.version() == 1);
    b.scatter_(1, i, 0.5);
    CHECK(b.to_vector<float>()[3] == 0.5f);
    Tensor c = zeros({2, 3});
    c[1].scatter_(0, ids({2}), tensor({9.0}));
    CHECK(c.to_vector<float>() == std::vector<float>{0, 0, 0, 0, 0, 9});
    // An empty index writes nothing.
    CHECK(scatter(a, 1, ids({}, {0, 0}), s).to_vector<float>() == a.to_vector<float>());
}

// --- gradients --------------------------------------------------------------------------------

TEST_CASE("reading by mask and by indices passes gradcheck and gradgradcheck", "[adv-indexing][gradcheck]") {
    const Tensor x = param({2, 3, 4});
    const Tensor m = mask({true, false, true, false, false, true}, {2, 3});
    const Tensor full_mask = gt(x.detach(), 0.0);
    const std::vector<std::pair<std::string, std::vector<TensorIndex>>> forms = {
        {"x[x > 0]", {full_mask}},
        {"x[m2]", {m}},
        {"x[:, [T, F, T]]", {Slice(), mask({true, false, true}, {3})}},
        {"x[[1, 0, 1]] (repeats)", {ids({1, 0, 1, 1}, {2, 2})}},
        {"x[:, [-1]]", {Slice(), {-1}}},
        {"x[[0, 1], :, [1, 1]]", {{0, 1}, Slice(), {1, 1}}},
        {"x[0, :, [3, 3, 0]]", {0, Slice(), {3, 3, 0}}},
        {"x[[[0], [1]], 1:, [1, 2, 3]]", {ids({0, 1}, {2, 1}), Slice(1, None), {1, 2, 3}}},
    };
    for (const auto& [name, idx] : forms) {
        const auto f = [idx = idx](auto& t) { return t[0].index(idx) * 1.0; };
        REQUIRE_GRADCHECK(f, {x}, name);
        REQUIRE_GRADGRADCHECK(f, {x}, name);
    }
    // Repeated picks sum, as torch's index backward (index_put_ with accumulate into zeros).
    const Tensor p = zeros({4}, TensorOptions(kFloat64).requires_grad(true));
    p.index({{1, 1, 3, 1}}).sum().backward();
    CHECK_THAT(vals(p.grad()), approx({0, 3, 0, 1}));
}

TEST_CASE("writing by mask and by indices passes gradcheck and gradgradcheck", "[adv-indexing][gradcheck]") {
    const Tensor x = param({3, 4});
    const Tensor m = mask({true, false, false, true, false, true, true, false, false, false, true, true}, {3, 4});
    struct Form {
        std::string name;
        std::vector<TensorIndex> idx;
        Tensor v;
        bool accumulate;
    };
    const std::vector<Form> forms = {
        {"y[m] = v", {m}, param({6}, -1, 1, 2), false},
        {"y[m] = v broadcast", {m}, param({1}, -1, 1, 3), false},
        {"y[rows] = v", {mask({true, false, true}, {3})}, param({4}, -1, 1, 4), false},
        {"y[:, [-1, 0]] = v", {Slice(), {-1, 0}}, param({3, 2}, -1, 1, 5), false},
        {"y[[2, 0, 2], [1, 1, 1]] = v (last wins)", {{2, 0, 2}, {1, 1, 1}}, param({3}, -1, 1, 6), false},
        {"index_put_ accumulate", {{2, 0, 2}, {1, 1, 1}}, param({3}, -1, 1, 7), true},
        {"index_put_ accumulate by mask", {m}, param({1}, -1, 1, 8), true},
    };
    for (const Form& form : forms) {
        const auto f = [&form](auto& t) {
            Tensor y = t[0] * 1.0;
            y.index_put_(form.idx, t[1], form.accumulate);
            return y;
        };
        REQUIRE_GRADCHECK(f, {x, form.v}, form.name);
        REQUIRE_GRADGRADCHECK(f, {x, form.v}, form.name);
    }
    // y[m] = v and y[m] *= v, as index_put_.
    const auto assign = [&m](auto& t) {
        Tensor y = t[0] * 1.0;
        y.index_put_({m}, t[1]);
        y.index_put_({m}, y.index({m}) * t[1]);
        return y;
    };
    REQUIRE_GRADCHECK(assign, {x, param({6}, -1, 1, 9)}, "y[m] = v; y[m] *= v");
    REQUIRE_GRADGRADCHECK(assign, {x, param({6}, -1, 1, 9)}, "y[m] = v; y[m] *= v");
}

TEST_CASE("index_put_ with repeated indices: only the winning value gets a gradient", "[adv-indexing][gradcheck]") {
    // torch 1.13 gives every repeated value the gradient (1.727..., 0.636..., 1.727... here),
    // which gradcheck refuses; xgrad's is the derivative of what it computes (last wins).
    const Tensor x = arange(12, TensorOptions(kFloat64).requires_grad(true)).reshape({3, 4});
    const Tensor v = tensor({1, 2, 3}, TensorOptions(kFloat64).requires_grad(true));
    Tensor y = x * 1.0;
    y.index_put_({{2, 0, 2}, {1, 1, 1}}, v);
    (y * weights({3, 4})).sum().backward();
    CHECK_THAT(vals(v.grad()), approx({0, 2.0 / 12, 10.0 / 12}));
    CHECK(y.to_vector<double>()[9] == 3);
}

TEST_CASE("scatter, scatter_add and gather pass gradcheck and gradgradcheck", "[adv-indexing][scatter][gradcheck]") {
    const Tensor a = param({3, 4});
    const Tensor src = param({2, 4}, -1, 1, 2);
    const Tensor i = ids({3, 0, 3, 1, 1, 2}, {2, 3});  // repeats within a row
    const auto sc = [&i](auto& t) { return scatter(t[0], 1, i, t[1]); };
    const auto sa = [&i](auto& t) { return scatter_add(t[0], 1, i, t[1]); };
    const auto ga = [&i](auto& t) { return gather(t[0], 1, i); };
    const auto sc_ = [&i](auto& t) {
        Tensor y = t[0] * 1.0;
        y.scatter_add_(0, ids({2, 0, 2, 2, 1, 1, 1, 0}, {2, 4}), t[1]);
        y.scatter_(1, i, t[1]);
        return y;
    };
    for (const auto& [f, name] : {std::pair<GradcheckFn, const char*>{sc, "scatter"}, {sa, "scatter_add"},
                                  {sc_, "scatter_add_ then scatter_"}}) {
        REQUIRE_GRADCHECK(f, {a, src}, name);
        REQUIRE_GRADGRADCHECK(f, {a, src}, name);
    }
    REQUIRE_GRADGRADCHECK(ga, {a}, "gather");
    // The value form: a's gradient is masked where it is written.
    const Tensor p = ones({2, 3}, TensorOptions(kFloat64).requires_grad(true));
    scatter(p, 1, ids({2, 2}, {2, 1}), 5.0).sum().backward();
    CHECK_THAT(vals(p.grad()), approx({1, 1, 0, 1, 1, 0}));
}

// --- hostile inputs ---------------------------------------------------------------------------

TEST_CASE("advanced indices torch refuses are refused, naming the op, the axis and the size", "[adv-indexing][errors]") {
    const Tensor x = counting();
    // A mask of the wrong shape, for every axis it covers.
    CHECK_THROWS_WITH(x.index({mask({true, false, true}, {3})}),
                      Catch::Contains("index: the shape of the mask (3,)") && Catch::Contains("(2, 3, 4)") &&
                          Catch::Contains("dimension 0"));
    CHECK_THROWS_WITH(x.index({Slice(), mask({true, false}, {1, 2})}),
                      Catch::Contains("mask (1, 2)") && Catch::Contains("dimension 1"));
    CHECK_THROWS_WITH(x.index({mask({true, true, true, true, true, true, true, true}, {2, 2, 2})}),
                      Catch::Contains("mask (2, 2, 2)") && Catch::Contains("dimension 1"));
    CHECK_THROWS_WITH(x.index_put_({mask({true}, {1})}, 0.0), Catch::Contains("index_put_: the shape of the mask"));
    // Index dtypes other than int64 and bool.
    CHECK_THROWS_WITH(x.index({tensor({0.0})}),
                      Catch::Contains("index: tensors used as indices must be int64 (long) or bool") &&
                          Catch::Contains("float32"));
    CHECK_THROWS_WITH(x.index({Slice(), cast(tensor({1.0}), kBFloat16)}), Catch::Contains("bfloat16"));
    CHECK_THROWS_WITH(x.index({Tensor()}), Catch::Contains("undefined"));
    // Out of range, naming the axis and the size, including int64's extremes.
    CHECK_THROWS_WITH(x.index({ids({5})}),
                      Catch::Contains("index: index 5 is out of bounds for dimension 0 with size 2"));
    CHECK_THROWS_WITH(x.index({Slice(), {0, -4}}), Catch::Contains("index -4 is out of bounds for dimension 1 with size 3"));
    const auto big = std::numeric_limits<std::int64_t>::max(), small = std::numeric_limits<std::int64_t>::min();
    CHECK_THROWS_WITH(x.index({Slice(), Slice(), ids({big})}),
                      Catch::Contains("index 9223372036854775807 is out of bounds for dimension 2 with size 4"));
    CHECK_THROWS_WITH(x.index({ids({small})}),
                      Catch::Contains("index -9223372036854775808 is out of bounds for dimension 0 with size 2"));
    CHECK_THROWS_WITH(x.index({ids({big}, Shape{})}), Catch::Contains("out of range for dimension 0 with size 2"));
    CHECK_THROWS_WITH(x.index_put_({{0, 2}}, 1.0, true), Catch::Contains("index_put_: index 2 is out of bounds"));
    // Indices that do not broadcast; too many axes.
    CHECK_THROWS_WITH(x.index({{0, 1}, {0, 1, 2}}),
                      Catch::Contains("shape mismatch: indexing tensors could not be broadcast together with shapes "
                                      "(2,), (3,)"));
    CHECK_THROWS_WITH(x.index({x > 0, 0}), Catch::Contains("too many indices"));
    // Broadcast indices that would pick 10^12 elements: refused before anything is allocated.
    const Tensor column = zeros({1000000, 1}, kInt64), row = zeros({1, 1000000}, kInt64);
    CHECK_THROWS_WITH(x.index({column, row}), Catch::Contains("index: out of memory") &&
                                                  Catch::Contains("(1000000, 1000000, 4)"));
    // A value that does not fit the picked shape.
    Tensor y = counting();
    CHECK_THROWS_WITH(y.index_put_({{0, 1}}, zeros({3})), Catch::Contains("index_put_: value of shape (3,)") &&
                                                              Catch::Contains("(2, 3, 4)"));
    CHECK_THROWS_WITH(y.index_put_({y > 3}, zeros({2})), Catch::Contains("value of shape (2,)"));
    // Nothing was written by a refused call.
    CHECK_THAT(vals(y), approx(vals(counting())));
    CHECK(y.version() == 0);
    // A leaf that requires grad, and accumulating into bfloat16.
    const Tensor leaf = param({3});
    CHECK_THROWS_WITH(leaf.index_put_({{0}}, 1.0), Catch::Contains("index_put_") && Catch::Contains("leaf"));
    CHECK_THROWS_WITH(leaf.index_put_({leaf > 0}, 1.0), Catch::Contains("leaf"));
    CHECK_THROWS_WITH(cast(zeros({3}), kBFloat16).index_put_({{0}}, 1.0, true), Catch::Contains("bfloat16"));
}

TEST_CASE("scatter refuses what torch refuses", "[adv-indexing][scatter][errors]") {
    const Tensor a = zeros({2, 3});
    const Tensor s = arange(1, 7, kFloat32).reshape({2, 3});
    CHECK_THROWS_WITH(scatter(a, 1, ids({-1}, {1, 1}), s), Catch::Contains("scatter: index -1") && Catch::Contains("negative"));
    CHECK_THROWS_WITH(scatter(a, 1, ids({3}, {1, 1}), s), Catch::Contains("scatter: index 3 is out of range [0, 3)"));
    CHECK_THROWS_WITH(scatter(a, 1, zeros({1, 1}), s), Catch::Contains("scatter: index must be an int64"));
    CHECK_THROWS_WITH(scatter(a, 1, ids({0}), s), Catch::Contains("scatter: index has rank 1"));
    CHECK_THROWS_WITH(scatter(a, 1, ids({0, 0, 0, 0}, {1, 4}), s),
                      Catch::Contains("scatter: index shape (1, 4) is larger than src's shape (2, 3) at axis 1"));
    CHECK_THROWS_WITH(scatter(a, 0, ids({0, 0, 0}, {3, 1}), s), Catch::Contains("scatter: index shape (3, 1)") &&
                                                                  Catch::Contains("axis 0"));
    CHECK_THROWS_WITH(scatter(a, 1, ids({0}, {1, 1}), cast(s, kFloat64)), Catch::Contains("scatter: dtypes differ"));
    CHECK_THROWS_WITH(scatter(a, 2, ids({0}, {1, 1}), s), Catch::Contains("scatter") && Catch::Contains("axis 2"));
    CHECK_THROWS_WITH(scatter_add(a, 1, ids({0}, {1, 1}), arange(3, kFloat32)), Catch::Contains("scatter_add: src has rank 1"));
    CHECK_THROWS_WITH(a.scatter_(1, ids({4}, {1, 1}), 1.0), Catch::Contains("scatter_: index 4"));
    CHECK_THROWS_WITH(scatter(a, 1, ids({std::numeric_limits<std::int64_t>::min()}, {1, 1}), s),
                      Catch::Contains("index -9223372036854775808"));
    CHECK(a.version() == 0);
    const Tensor leaf = param({2, 3});
    CHECK_THROWS_WITH(leaf.scatter_add_(1, ids({0}, {1, 1}), leaf), Catch::Contains("scatter_add_") && Catch::Contains("leaf"));
}

TEST_CASE("README's advanced indexing lines give torch's values", "[adv-indexing]") {
    Tensor X = arange(24, kFloat32).reshape({2, 3, 4}).requires_grad_();
    Tensor logits = tensor({{0.5, -1, 2, 0.1, 3, 0, -2, 1}, {1, 2, 3, 4, 5, 6, 7, 8}});
    Tensor kth = topk(logits, 3).values.index({Slice(), {-1}});
    CHECK(kth.shape() == Shape{2, 1});
    logits.index_put_({logits < kth}, -INFINITY);
    CHECK(logits.to_vector<float>() == std::vector<float>{-INFINITY, -INFINITY, 2, -INFINITY, 3, -INFINITY, -INFINITY,
                                                          1, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY,
                                                          6, 7, 8});
    Tensor positive = X.index({X > 0});
    CHECK(positive.shape() == Shape{23});
    Tensor picked = X.index({{1, 0}, Slice(), {-1, 0}});
    CHECK(picked.shape() == Shape{2, 3});
    CHECK(picked.to_vector<float>() == std::vector<float>{15, 19, 23, 0, 4, 8});
    (positive.sum() + picked.sum()).backward();
    CHECK(X.grad().to_vector<float>()[0] == 1);  // picked once, by the list
    CHECK(X.grad().to_vector<float>()[15] == 2);  // by the mask and the list
    Tensor counts = zeros({5}).index_put_({{1, 1, 4}}, 1.0, true);
    CHECK(counts.to_vector<float>() == std::vector<float>{0, 2, 0, 0, 1});
    Tensor spread = scatter_add(zeros({2, 4}), 1, from_vector(std::vector<std::int64_t>{0, 0, 3, 1}, {2, 2}),
                                ones({2, 2}));
    CHECK(spread.to_vector<float>() == std::vector<float>{2, 0, 0, 0, 0, 1, 0, 1});
}
