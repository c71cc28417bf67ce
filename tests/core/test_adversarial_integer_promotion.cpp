// clamp and pow with numbers written as a port from torch writes them, at the edges: int64's
// extremes, bounds that do not fit int64, bool, empty and 0-d tensors, a number as pow's base
// over an integer exponent, and the float paths' gradients with integer-written numbers.
// Expected values are torch 1.13's, pasted (x = tensor([-2**63, -5, 0, 7, 2**63 - 1])).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "core/creation.hpp"
#include "core/ops.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using namespace xgrad::indexing;
using Catch::Contains;

namespace {

using I = std::vector<std::int64_t>;
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

Tensor extremes() { return tensor({kMin, std::int64_t{-5}, std::int64_t{0}, std::int64_t{7}, kMax}); }
Tensor ints(std::initializer_list<std::int64_t> v) { return tensor(v); }
I int_vals(const Tensor& t) {
    REQUIRE(t.dtype() == kInt64);
    return t.to_vector<std::int64_t>();
}
std::vector<double> float32_vals(const Tensor& t) {
    REQUIRE(t.dtype() == kFloat32);
    return t.to_vector<double>();
}

// float(±2**63) and float(±1e19) as torch prints them from a float32 tensor.
constexpr double kF32Of2To63 = 9.223372036854776e+18;
constexpr double kF32Of1e19 = 9.999999980506448e+18;

}  // namespace

TEST_CASE("clamp of int64's extremes with integer bounds stays int64 as torch", "[adversarial-integer-promotion]") {
    CHECK(int_vals(clamp(extremes(), -3, 3)) == I{-3, -3, 0, 3, 3});
    CHECK(int_vals(clamp(extremes(), kMin, kMax)) == int_vals(extremes()));
    CHECK(int_vals(clamp(extremes(), kMin)) == int_vals(extremes()));
    CHECK(int_vals(clamp(extremes(), std::nullopt, kMin)) == I{kMin, kMin, kMin, kMin, kMin});
    CHECK(int_vals(clamp(extremes(), kMax)) == I{kMax, kMax, kMax, kMax, kMax});
    // min > max: every element is max, as torch's clamp(x, 2**63 - 1, -2**63).
    CHECK(int_vals(clamp(extremes(), kMax, kMin)) == I{kMin, kMin, kMin, kMin, kMin});
    // The bound written as a size, as a port writes clamp(ids, 0, V - 1).
    const Tensor ids = extremes();
    CHECK(int_vals(clamp(ids, 0, ids.size(0) - 1)) == I{0, 0, 0, 4, 4});
    // One floating bound makes the result float32: torch.clamp(x, 0, 2.5).
    CHECK(float32_vals(clamp(extremes(), 0, 2.5)) == std::vector<double>{0, 0, 0, 2.5, 2.5});
}

TEST_CASE("clamp of int64 with bounds beyond int64 computes in float32 as torch", "[adversarial-integer-promotion]") {
    CHECK(float32_vals(clamp(extremes(), 1e19)) ==
          std::vector<double>{kF32Of1e19, kF32Of1e19, kF32Of1e19, kF32Of1e19, kF32Of1e19});
    CHECK(float32_vals(clamp(extremes(), -1e19)) == std::vector<double>{-kF32Of2To63, -5, 0, 7, kF32Of2To63});
    CHECK(float32_vals(clamp(extremes(), std::nullopt, -1e19)) ==
          std::vector<double>{-kF32Of1e19, -kF32Of1e19, -kF32Of1e19, -kF32Of1e19, -kF32Of1e19});
    CHECK(float32_vals(clamp(extremes(), -1e19, 1e19)) == std::vector<double>{-kF32Of2To63, -5, 0, 7, kF32Of2To63});
    CHECK(float32_vals(clamp(extremes(), -kInf, kInf)) == std::vector<double>{-kF32Of2To63, -5, 0, 7, kF32Of2To63});
    CHECK(float32_vals(clamp(extremes(), kInf)) == std::vector<double>{kInf, kInf, kInf, kInf, kInf});
    // 2**63 is no int64 ("Overflow when unpacking long" in torch).
    CHECK_THROWS_WITH(clamp(extremes(), std::uint64_t{1} << 63), Contains("does not fit int64"));
    // In place the float32 result cannot go back into int64 (torch: "result type Float can't be
    // cast to the desired output type long int"), nor an int64 one into bool.
    CHECK_THROWS_WITH(extremes().clamp_(1e19), Contains("clamp_"));
    CHECK_THROWS_WITH(tensor({true, false}).clamp_(0, 1), Contains("clamp_"));
}

TEST_CASE("clamp and pow of int64 with floating numbers beyond float32 as torch", "[adversarial-integer-promotion]") {
    // torch.clamp(t, 1e300): "value cannot be converted to type float without overflow".
    CHECK_THROWS_WITH(clamp(ints({-5, 0, 7}), 1e300), Contains("clamp") && Contains("min"));
    CHECK_THROWS_WITH(clamp(ints({-5, 0, 7}), std::nullopt, 1e39), Contains("clamp") && Contains("max"));
    // t ** 1e300 is float32 with float(1e300) = inf; t ** -0.5 too.
    CHECK(float32_vals(pow(ints({-5, 0, 7}), 1e300)) == std::vector<double>{kInf, 0, kInf});
    check_close_or_both_nan(float32_vals(pow(ints({-5, 0, 7}), -0.5)), {kNaN, kInf, 0.37796449661254883},
                            Tolerance{0, 0});
}

TEST_CASE("clamp and pow of int64 leave their input alone, and clamp_ writes through an index",
          "[adversarial-integer-promotion]") {
    const Tensor x = extremes();
    (void)clamp(x, -3, 3);
    (void)pow(x, 2);
    (void)pow(2, ints({1, 2}));
    CHECK(int_vals(x) == I{kMin, -5, 0, 7, kMax});
    // ids[0].clamp_(0, V - 1) and ids.index({Slice(3, None)}).clamp_(...) change ids, int64 kept.
    const Tensor ids = extremes();
    const auto V = ids.size(0);
    ids[0].clamp_(0, V - 1);
    ids.index({Slice(3, None)}).clamp_(std::nullopt, V - 1);
    CHECK(int_vals(ids) == I{0, -5, 0, 4, 4});
}

TEST_CASE("clamp of an integer tensor with a NaN bound is refused naming the bound", "[adversarial-integer-promotion]") {
    // torch 1.13 ignores a lone NaN bound (clamp(x, nan) is x as float32) but fills NaN when
    // both are given (clamp(x, 0, nan)); xgrad refuses every NaN bound, for floats as for ints.
    CHECK_THROWS_WITH(clamp(extremes(), kNaN), Contains("clamp") && Contains("min is NaN"));
    CHECK_THROWS_WITH(clamp(extremes(), 0, kNaN), Contains("clamp") && Contains("max is NaN"));
    CHECK_THROWS_WITH(clamp(tensor({1.0, 2.0}), kNaN), Contains("min is NaN"));
}

TEST_CASE("clamp of bool, empty and 0-d tensors as torch", "[adversarial-integer-promotion]") {
    CHECK(int_vals(clamp(tensor({true, false}), 0, 1)) == I{1, 0});
    // A bool bound beside an int64 tensor is the integer 0 or 1: torch.clamp(t, True) is [1, 1, 2].
    CHECK(int_vals(clamp(ints({-1, 0, 2}), true)) == I{1, 1, 2});
    CHECK(int_vals(clamp(ints({-1, 0, 2}), false, true)) == I{0, 0, 1});
    CHECK(float32_vals(clamp(tensor({-1.0, 0.0, 2.0}), true)) == std::vector<double>{1, 1, 2});
    const Tensor empty = zeros({0}, kInt64);
    const Tensor ce = clamp(empty, 0, 1);
    CHECK(ce.dtype() == kInt64);
    CHECK(ce.shape() == Shape{0});
    const Tensor cf = clamp(empty, 0.5);
    CHECK(cf.dtype() == kFloat32);
    CHECK(cf.shape() == Shape{0});
    const Tensor scalar = tensor(std::int64_t{5});
    const Tensor c0 = clamp(scalar, 0, 1);
    CHECK(c0.dim() == 0);
    CHECK(int_vals(c0) == I{1});
    const Tensor f0 = clamp(scalar, 0.5);
    CHECK(f0.dim() == 0);
    CHECK(float32_vals(f0) == std::vector<double>{5});
}

TEST_CASE("pow of int64 by integers wraps at int64's limits as torch", "[adversarial-integer-promotion]") {
    CHECK(int_vals(pow(ints({3}), 40)) == I{-6289078614652622815});
    CHECK(int_vals(pow(ints({-2}), 63)) == I{kMin});
    CHECK(int_vals(pow(ints({2}), 63)) == I{kMin});
    CHECK(int_vals(pow(ints({2}), 64)) == I{0});
    CHECK(int_vals(pow(ints({kMin}), 2)) == I{0});
    CHECK(int_vals(pow(ints({kMax}), 2)) == I{1});
    CHECK(int_vals(pow(ints({kMin}), 1)) == I{kMin});
    CHECK(int_vals(pow(ints({kMin}), 3)) == I{0});
    CHECK(int_vals(pow(ints({kMin}), 0)) == I{1});
    CHECK(int_vals(pow(ints({-1, 0, 1, 2}), kMax)) == I{-1, 0, 1, 0});
    CHECK(int_vals(ints({-1, 0, 1, 2, 3}).pow(std::int64_t{1} << 62)) == I{1, 0, 1, 0, 1});
    CHECK(int_vals(ints({-1, 0, 1, 2, 3}).pow((std::int64_t{1} << 62) + 1)) == I{-1, 0, 1, 0, 3});
    // A floating exponent computes in float32: float(-2**63) ** 2.0.
    CHECK(float32_vals(pow(extremes(), 2.0)) == std::vector<double>{8.507059173023462e+37, 25, 0, 49, 8.507059173023462e+37});
}

TEST_CASE("pow of int64, bool, empty and 0-d tensors by bool and integer numbers as torch",
          "[adversarial-integer-promotion]") {
    // t ** True is t (int64); a float tensor ** True is itself; only bool ** bool is refused.
    CHECK(int_vals(pow(ints({2, 3}), true)) == I{2, 3});
    CHECK(int_vals(pow(ints({2, 3}), false)) == I{1, 1});
    CHECK(float32_vals(pow(tensor({2.0, 3.0}), true)) == std::vector<double>{2, 3});
    CHECK_THROWS_WITH(pow(tensor({true, false}), true), Contains("pow") && Contains("bool"));
    CHECK(int_vals(pow(tensor({true, false}), 0)) == I{1, 1});
    const Tensor e2 = pow(zeros({0}, kInt64), 2);
    CHECK(e2.dtype() == kInt64);
    CHECK(e2.shape() == Shape{0});
    // Refused even when empty, as torch.
    CHECK_THROWS_WITH(pow(zeros({0}, kInt64), -1), Contains("negative integer powers"));
    const Tensor p0 = pow(tensor(std::int64_t{5}), 2);
    CHECK(p0.dim() == 0);
    CHECK(int_vals(p0) == I{25});
}

TEST_CASE("pow of a number to an integer tensor gives torch's result_type", "[adversarial-integer-promotion]") {
    // torch.pow(2.0, arange(3)) is float32, torch.pow(2, arange(3)) int64.
    CHECK(float32_vals(pow(2.0, arange(3))) == std::vector<double>{1, 2, 4});
    CHECK(int_vals(pow(2, arange(3))) == I{1, 2, 4});
    CHECK(int_vals(pow(2, arange(70)).index({Slice(60, None)})) ==
          I{1152921504606846976, 2305843009213693952, 4611686018427387904, kMin, 0, 0, 0, 0, 0, 0});
    CHECK(int_vals(pow(3, ints({40, 63, kMax}))) == I{-6289078614652622815, -3237885987332494933, -6148914691236517205});
    CHECK(int_vals(pow(kMax, ints({2, 3}))) == I{1, kMax});
    // Negative integer exponents of a number are not refused (torch's integer 1 / b**|e|).
    CHECK(int_vals(pow(2, ints({-1, 0}))) == I{0, 1});
    CHECK(int_vals(pow(-1, ints({kMin, -3}))) == I{1, -1});
    CHECK(int_vals(pow(0, ints({0, 1}))) == I{1, 0});
    CHECK(float32_vals(pow(0.0, ints({0, 1, -1}))) == std::vector<double>{1, 0, kInf});
    check_close_or_both_nan(float32_vals(pow(2.5, ints({2, -1}))), {6.25, 0.4000000059604645}, Tolerance{0, 0});
    CHECK(int_vals(pow(true, arange(3))) == I{1, 1, 1});
    CHECK(int_vals(pow(false, arange(3))) == I{1, 0, 0});
    CHECK(int_vals(pow(2, tensor({true, false}))) == I{2, 1});
    CHECK(float32_vals(pow(2.5, tensor({true, false}))) == std::vector<double>{2.5, 1});
    CHECK_THROWS_WITH(pow(true, tensor({true, false})), Contains("pow") && Contains("bool"));
    CHECK(float32_vals(pow(1e300, arange(3))) == std::vector<double>{1, kInf, kInf});
    const Tensor p0 = pow(2, tensor(std::int64_t{3}));
    CHECK(p0.dim() == 0);
    CHECK(int_vals(p0) == I{8});
    CHECK(pow(2, zeros({0}, kInt64)).shape() == Shape{0});
    CHECK(pow(2, zeros({0}, kInt64)).dtype() == kInt64);
    // The integer exponent is a constant: the result requires no gradient.
    CHECK_FALSE(pow(2.0, arange(3)).requires_grad());
}

TEST_CASE("pow of a number to a floating tensor is unchanged however the number is written",
          "[adversarial-integer-promotion]") {
    // d2l's PositionalEncoding: torch.pow(10000, x) and torch.pow(10000.0, x) keep x's dtype.
    const Tensor x32 = tensor({0.5, 1.0, -0.25});
    const Tensor x64 = tensor({0.5, 1.0, -0.25}, kFloat64);
    for (const Tensor& x : {x32, x64}) {
        const Tensor a = pow(10000, x), b = pow(10000.0, x), c = pow(std::size_t{10000}, x);
        CHECK(a.dtype() == x.dtype());
        CHECK(vals(a) == vals(b));
        CHECK(vals(a) == vals(c));
    }
    CHECK(float32_vals(pow(10000, x32)) == std::vector<double>{100, 10000, 0.10000000149011612});
    // torch.pow(True, x) is 1 ** x.
    CHECK(float32_vals(pow(true, x32)) == std::vector<double>{1, 1, 1});
}

TEST_CASE("gradients of clamp and pow with integer-written numbers pass gradcheck in double",
          "[adversarial-integer-promotion]") {
    const Tensor x = param({2, 3}, -2.0, 2.0, 7);
    const Tensor pos = param({2, 3}, 0.5, 2.0, 8);
    REQUIRE_GRADCHECK([](auto& in) { return clamp(in[0], -1, 1); }, {x}, "clamp(x, -1, 1)");
    REQUIRE_GRADCHECK([](auto& in) { return clamp(in[0], std::nullopt, 1L); }, {x}, "clamp(x, max=1L)");
    REQUIRE_GRADCHECK([](auto& in) { return in[0].pow(3); }, {x}, "x.pow(3)");
    REQUIRE_GRADCHECK([](auto& in) { return pow(in[0], 2.5); }, {pos}, "pow(x, 2.5)");
    REQUIRE_GRADCHECK([](auto& in) { return pow(2, in[0]); }, {x}, "pow(2, x)");
    REQUIRE_GRADCHECK([](auto& in) { return pow(0, in[0]); }, {pos}, "pow(0, x)");
    REQUIRE_GRADGRADCHECK([](auto& in) { return clamp(in[0], -1, 1) * in[0]; }, {x}, "clamp(x, -1, 1) * x");
    REQUIRE_GRADGRADCHECK([](auto& in) { return in[0].pow(3); }, {x}, "x.pow(3)");
    REQUIRE_GRADGRADCHECK([](auto& in) { return pow(2, in[0]); }, {x}, "pow(2, x)");
    // The values and the graph do not depend on how the number is written.
    CHECK(vals(clamp(x, -1, 1)) == vals(clamp(x, -1.0, 1.0)));
    CHECK(clamp(x, -1, 1).dtype() == kFloat64);
    CHECK(clamp(x, -1, 1).requires_grad());
    CHECK(vals(pow(x, 3)) == vals(pow(x, 3.0)));
    CHECK(vals(pow(2, x)) == vals(pow(2.0, x)));
    CHECK(pow(2, x).requires_grad());
}
