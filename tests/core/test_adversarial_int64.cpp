// int64 at its limits through every op that computes on integers. torch wraps around in two's
// complement (INT64_MAX + 1 is INT64_MIN, -INT64_MIN and abs(INT64_MIN) are INT64_MIN); xgrad
// must give the same values without the undefined behaviour of signed overflow. The references
// here are computed in uint64, where wrapping is defined. In a Release build a wrapped signed
// overflow usually gives the same bits, so these tests prove the absence of UB only under
// UndefinedBehaviorSanitizer: tools/check --sanitize runs them there.
// Sizes made from the arguments (one_hot's class count, split's sizes, chunk's count, a repeat
// count) are checked instead: an Error naming the op, or the right answer, never a wrapped size.
#include <climits>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using Catch::Matchers::Contains;

namespace {

// The extremes, pairwise: every op below sees each of them against each.
const std::vector<std::int64_t> kV = {INT64_MIN, INT64_MIN + 1, -1, 0, 1, INT64_MAX - 1, INT64_MAX};
const std::size_t kN = 7;

std::int64_t ref_add(std::int64_t a, std::int64_t b) {
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
}
std::int64_t ref_sub(std::int64_t a, std::int64_t b) {
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) - static_cast<std::uint64_t>(b));
}
std::int64_t ref_mul(std::int64_t a, std::int64_t b) {
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b));
}
std::int64_t ref_neg(std::int64_t a) { return ref_sub(0, a); }

// kV down a column (7, 1) and along a row (1, 7): a binary op of the two is the pairwise table.
Tensor col() { return from_vector(kV, {kN, 1}); }
Tensor row() { return from_vector(kV, {1, kN}); }
// The column broadcast to (7, 7), for in-place ops (which keep their tensor's shape).
Tensor square() { return expand(col(), {kN, kN}).clone(); }

using Ref = std::function<std::int64_t(std::int64_t, std::int64_t)>;

// got(i, j) == ref(kV[i], kV[j]) for a (7, 7) int64 table.
void check_table(const std::string& what, const Tensor& got, const Ref& ref) {
    INFO(what);
    REQUIRE(got.dtype() == kInt64);
    REQUIRE(got.shape() == Shape{kN, kN});
    const auto v = got.to_vector<std::int64_t>();
    for (std::size_t i = 0; i < kN; ++i)
        for (std::size_t j = 0; j < kN; ++j) {
            INFO(kV[i] << " with " << kV[j]);
            CHECK(v[i * kN + j] == ref(kV[i], kV[j]));
        }
}

// got(i) == ref(kV[i], s) for a (7, 1) int64 result of an op with the Scalar s.
void check_column(const std::string& what, const Tensor& got, std::int64_t s, const Ref& ref) {
    INFO(what << " with the scalar " << s);
    REQUIRE(got.dtype() == kInt64);
    const auto v = got.to_vector<std::int64_t>();
    REQUIRE(v.size() == kN);
    for (std::size_t i = 0; i < kN; ++i) {
        INFO(kV[i]);
        CHECK(v[i] == ref(kV[i], s));
    }
}

}  // namespace

TEST_CASE("int64 add, sub and mul of two tensors wrap as torch, in every spelling", "[int64]") {
    check_table("add", add(col(), row()), ref_add);
    check_table("sub", sub(col(), row()), ref_sub);
    check_table("mul", mul(col(), row()), ref_mul);
    check_table("operator+", col() + row(), ref_add);
    check_table("operator-", col() - row(), ref_sub);
    check_table("operator*", col() * row(), ref_mul);
    // Without broadcasting (the contiguous path) too.
    check_table("add, same shapes", add(square(), expand(row(), {kN, kN})), ref_add);
    check_table("mul, same shapes", mul(square(), expand(row(), {kN, kN})), ref_mul);
}

TEST_CASE("int64 arithmetic with an integer Scalar wraps on either side", "[int64]") {
    for (std::int64_t s : kV) {
        check_column("add", add(col(), s), s, ref_add);
        check_column("sub", sub(col(), s), s, ref_sub);
        check_column("mul", mul(col(), s), s, ref_mul);
        check_column("a + s", col() + s, s, ref_add);
        check_column("a - s", col() - s, s, ref_sub);
        check_column("a * s", col() * s, s, ref_mul);
        check_column("s + a", s + col(), s, ref_add);
        check_column("s * a", s * col(), s, ref_mul);
        check_column("rsub", rsub(s, col()), s, [](std::int64_t a, std::int64_t b) { return ref_sub(b, a); });
        check_column("s - a", s - col(), s, [](std::int64_t a, std::int64_t b) { return ref_sub(b, a); });
    }
}

TEST_CASE("int64 neg, abs and sign at the limits, as torch", "[int64]") {
    const auto n = neg(col()).to_vector<std::int64_t>();
    const auto m = (-col()).to_vector<std::int64_t>();
    const auto a = abs(col()).to_vector<std::int64_t>();
    const auto s = sign(col()).to_vector<std::int64_t>();
    for (std::size_t i = 0; i < kN; ++i) {
        INFO(kV[i]);
        CHECK(n[i] == ref_neg(kV[i]));
        CHECK(m[i] == ref_neg(kV[i]));
        CHECK(a[i] == (kV[i] < 0 ? ref_neg(kV[i]) : kV[i]));
        CHECK(s[i] == (kV[i] > 0) - (kV[i] < 0));
    }
    // torch 1.13: abs(INT64_MIN) and -INT64_MIN are INT64_MIN.
    CHECK(a[0] == INT64_MIN);
    CHECK(n[0] == INT64_MIN);
    CHECK(abs(col()).dtype() == kInt64);
    CHECK((~col()).to_vector<std::int64_t>()[0] == INT64_MAX);
}

TEST_CASE("int64 maximum, minimum and comparisons are exact at the limits", "[int64]") {
    check_table("maximum", maximum(col(), row()), [](std::int64_t a, std::int64_t b) { return a > b ? a : b; });
    check_table("minimum", minimum(col(), row()), [](std::int64_t a, std::int64_t b) { return a < b ? a : b; });
    // INT64_MAX - 1 and INT64_MAX are the same float: comparisons must stay in int64.
    const auto lt_ = lt(col(), row()).to_vector<bool>();
    const auto eq_ = eq(col(), row()).to_vector<bool>();
    for (std::size_t i = 0; i < kN; ++i)
        for (std::size_t j = 0; j < kN; ++j) {
            CHECK(lt_[i * kN + j] == (kV[i] < kV[j]));
            CHECK(eq_[i * kN + j] == (kV[i] == kV[j]));
        }
    for (std::int64_t s : kV) {
        const auto ge_ = ge(col(), s).to_vector<bool>();
        for (std::size_t i = 0; i < kN; ++i) CHECK(ge_[i] == (kV[i] >= s));
    }
}

TEST_CASE("int64 true division is float32 division, by zero included, as torch", "[int64]") {
    // torch: int64 / int64 → float32, both operands converted first; x/0 is ±inf, 0/0 NaN,
    // INT64_MIN / -1 is 2^63 (no integer division, so nothing to trap).
    const Tensor q = div(col(), row());
    REQUIRE(q.dtype() == kFloat32);
    const auto v = q.to_vector<float>();
    for (std::size_t i = 0; i < kN; ++i)
        for (std::size_t j = 0; j < kN; ++j) {
            const float want = static_cast<float>(kV[i]) / static_cast<float>(kV[j]);
            INFO(kV[i] << " / " << kV[j]);
            if (std::isnan(want)) CHECK(std::isnan(v[i * kN + j]));
            else CHECK(v[i * kN + j] == want);
        }
    // torch 1.13's first row: INT64_MIN / each.
    const std::vector<float> torch_row0 = {1.0f, 1.0f, 9.223372036854776e18f, -INFINITY, -9.223372036854776e18f, -1.0f, -1.0f};
    CHECK(std::vector<float>(v.begin(), v.begin() + kN) == torch_row0);
    CHECK(std::isinf(div(col(), 0).to_vector<float>()[0]));
    CHECK(rdiv(1, from_vector(std::vector<std::int64_t>{0}, {1})).item<float>() == INFINITY);
    // A floor or integer division would need a ZeroDivisionError; the in-place one is refused.
    CHECK_THROWS_AS(square().div_(row()), Error);
}

TEST_CASE("int64 in-place ops and compound operators wrap as the ops they stand for", "[int64]") {
    auto run = [](const std::string& what, auto op, const Ref& ref) {
        const Tensor t = square();
        op(t, row());
        check_table(what, t, ref);
    };
    run("add_", [](const Tensor& t, const Tensor& o) { t.add_(o); }, ref_add);
    run("sub_", [](const Tensor& t, const Tensor& o) { t.sub_(o); }, ref_sub);
    run("mul_", [](const Tensor& t, const Tensor& o) { t.mul_(o); }, ref_mul);
    run("+=", [](const Tensor& t, const Tensor& o) { t += o; }, ref_add);
    run("-=", [](const Tensor& t, const Tensor& o) { t -= o; }, ref_sub);
    run("*=", [](const Tensor& t, const Tensor& o) { t *= o; }, ref_mul);
    for (std::int64_t alpha : kV) {
        INFO("alpha " << alpha);
        run("add_ with alpha", [alpha](const Tensor& t, const Tensor& o) { t.add_(o, alpha); },
            [alpha](std::int64_t a, std::int64_t b) { return ref_add(a, ref_mul(b, alpha)); });
        run("sub_ with alpha", [alpha](const Tensor& t, const Tensor& o) { t.sub_(o, alpha); },
            [alpha](std::int64_t a, std::int64_t b) { return ref_sub(a, ref_mul(b, alpha)); });
    }
    for (std::int64_t s : kV) {
        const Tensor a = col().clone(), b = col().clone(), c = col().clone(), d = col().clone();
        a.add_(s);
        b -= s;
        c *= s;
        d[0] += s;  // through t[i], written back into d
        check_column("add_(s)", a, s, ref_add);
        check_column("-= s", b, s, ref_sub);
        check_column("*= s", c, s, ref_mul);
        CHECK(d.to_vector<std::int64_t>()[0] == ref_add(kV[0], s));
    }
}

TEST_CASE("int64 sum and cumsum wrap at the limits, over every axis", "[int64]") {
    for (std::int64_t a : kV)
        for (std::int64_t b : kV) {
            INFO(a << ", " << b);
            const Tensor t = from_vector(std::vector<std::int64_t>{a, b}, {2});
            CHECK(sum(t).item<std::int64_t>() == ref_add(a, b));
            CHECK(cumsum(t, 0).to_vector<std::int64_t>() == std::vector<std::int64_t>{a, ref_add(a, b)});
        }
    // A (7, 7) table whose rows and columns are rotations of kV: every running sum crosses the limits.
    std::vector<std::int64_t> x(kN * kN);
    for (std::size_t i = 0; i < kN; ++i)
        for (std::size_t j = 0; j < kN; ++j) x[i * kN + j] = kV[(i + j) % kN];
    const Tensor t = from_vector(x, {kN, kN});
    const auto c0 = cumsum(t, 0).to_vector<std::int64_t>(), c1 = cumsum(t, 1).to_vector<std::int64_t>();
    const auto s0 = sum(t, {0}).to_vector<std::int64_t>(), s1 = sum(t, {1}).to_vector<std::int64_t>();
    for (std::size_t j = 0; j < kN; ++j) {
        std::int64_t run0 = 0, run1 = 0;
        for (std::size_t i = 0; i < kN; ++i) {
            run0 = ref_add(run0, x[i * kN + j]);
            run1 = ref_add(run1, x[j * kN + i]);
            CHECK(c0[i * kN + j] == run0);
            CHECK(c1[j * kN + i] == run1);
        }
        CHECK(s0[j] == run0);
        CHECK(s1[j] == run1);
    }
    std::int64_t all = 0;
    for (std::int64_t v : x) all = ref_add(all, v);
    CHECK(sum(t).item<std::int64_t>() == all);
    // torch 1.13: cumsum([MAX, 1, MAX]) = [MAX, MIN, -1].
    CHECK(cumsum(from_vector(std::vector<std::int64_t>{INT64_MAX, 1, INT64_MAX}, {3}), 0).to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{INT64_MAX, INT64_MIN, -1});
}

TEST_CASE("int64 reductions and sorting order the limits exactly", "[int64]") {
    const Tensor t = from_vector(std::vector<std::int64_t>{INT64_MAX - 1, INT64_MIN, INT64_MAX, INT64_MIN + 1}, {4});
    CHECK(max(t).item<std::int64_t>() == INT64_MAX);
    CHECK(min(t).item<std::int64_t>() == INT64_MIN);
    CHECK(argmax(t, 0).item<std::int64_t>() == 2);
    CHECK(argmin(t, 0).item<std::int64_t>() == 1);
    CHECK(sort(t).values.to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{INT64_MIN, INT64_MIN + 1, INT64_MAX - 1, INT64_MAX});
    CHECK(topk(t, 2).values.to_vector<std::int64_t>() == std::vector<std::int64_t>{INT64_MAX, INT64_MAX - 1});
    CHECK(max(t, 0).values.item<std::int64_t>() == INT64_MAX);
}

TEST_CASE("int64 values written by fills, masked_fill_ and index_put_ keep all 64 bits", "[int64]") {
    for (std::int64_t s : kV) {
        INFO(s);
        const Tensor a = zeros({2}, kInt64), b = zeros({2}, kInt64), c = zeros({2}, kInt64);
        a.fill_(s);
        b.masked_fill_(gt(tensor({1.0, 0.0}), 0.0), s);  // exact: not through a double
        c.index_put_({1}, s);
        CHECK(a.to_vector<std::int64_t>() == std::vector<std::int64_t>{s, s});
        CHECK(b.to_vector<std::int64_t>() == std::vector<std::int64_t>{s, 0});
        CHECK(c.to_vector<std::int64_t>() == std::vector<std::int64_t>{0, s});
    }
}

TEST_CASE("sizes made from huge arguments are checked, naming the op", "[int64][sizes]") {
    const Tensor five = arange(5, kInt64);
    // one_hot: the largest class INT64_MAX would make num_classes INT64_MAX + 1.
    CHECK_THROWS_WITH(one_hot(from_vector(std::vector<std::int64_t>{INT64_MAX}, {1})),
                      Contains("one_hot") && Contains("num_classes"));
    CHECK_THROWS_WITH(one_hot(from_vector(std::vector<std::int64_t>{0, 1}, {2}), LONG_MAX),
                      Contains("one_hot") && Contains("more elements than fit"));
    CHECK_THROWS_WITH(one_hot(from_vector(std::vector<std::int64_t>{}, {0}), LONG_MAX),
                      Contains("one_hot"));
    // chunk: a huge count gives one piece per element (torch 1.13 overflows here and refuses).
    for (long chunks : {LONG_MAX, LONG_MAX - 1, 1L << 62}) {
        const auto pieces = chunk(five, chunks);
        REQUIRE(pieces.size() == 5);
        for (std::size_t i = 0; i < 5; ++i) CHECK(pieces[i].to_vector<std::int64_t>() == std::vector<std::int64_t>{static_cast<std::int64_t>(i)});
    }
    CHECK(chunk(zeros({0}), LONG_MAX).size() == 1);
    // split: a huge piece size is one piece; sizes whose sum overflows are refused (wrapped, they
    // could add up to the length: LONG_MAX + LONG_MAX + 2 is 0 in two's complement).
    CHECK(split(five, LONG_MAX).size() == 1);
    CHECK(split(five, LONG_MAX - 2).size() == 1);
    CHECK(split(five, 2).size() == 3);
    CHECK_THROWS_WITH(split(zeros({0}), std::vector<long>{LONG_MAX, LONG_MAX, 2}), Contains("split"));
    CHECK_THROWS_WITH(split(five, std::vector<long>{LONG_MAX, LONG_MAX, 7}), Contains("split"));
    // repeat_interleave: length × repeats.
    CHECK_THROWS_WITH(repeat_interleave(five, SIZE_MAX / 2, 0), Contains("repeat_interleave"));
    CHECK_THROWS_WITH(repeat_interleave(five, SIZE_MAX, 0), Contains("repeat_interleave"));
    // reshape, expand, slice and indexing with extreme sizes and bounds.
    CHECK_THROWS_WITH(reshape(zeros({0}), {-1, LONG_MAX, 2}), Contains("reshape"));
    CHECK_THROWS_WITH(reshape(five, {LONG_MAX, LONG_MAX}), Contains("reshape"));
    CHECK_THROWS_WITH(expand(ones({1}), {SIZE_MAX, 2}), Contains("expand"));
    CHECK(slice(five, 0, LONG_MIN, LONG_MAX, LONG_MAX).to_vector<std::int64_t>() == std::vector<std::int64_t>{0});
    CHECK(slice(five, 0, -LONG_MAX, LONG_MAX, 2).numel() == 3);
    CHECK(slice(five, 0, LONG_MAX, LONG_MIN).numel() == 0);
    using namespace indexing;
    CHECK(five.index({Slice(LONG_MIN, LONG_MAX, LONG_MAX)}).to_vector<std::int64_t>() == std::vector<std::int64_t>{0});
    CHECK_THROWS_WITH(five[LONG_MIN], Contains("index"));
    CHECK_THROWS_WITH(five[LONG_MAX], Contains("index"));
    CHECK_THROWS_WITH(topk(five, LONG_MAX), Contains("topk"));
    CHECK(tril(ones({2, 2}), LONG_MIN).sum().item<double>() == 0);
    CHECK(triu(ones({2, 2}), LONG_MIN).sum().item<double>() == 4);
    CHECK(tril(ones({2, 2}), LONG_MAX).sum().item<double>() == 4);
    CHECK_THROWS_WITH(unsqueeze(five, LONG_MIN), Contains("unsqueeze"));
    CHECK_THROWS_WITH(sum(five, {LONG_MIN}), Contains("sum"));
    CHECK_THROWS_WITH(arange(0, 1e300), Contains("arange"));
}
