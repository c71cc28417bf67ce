// masked_fill's value is a Scalar as torch's: integers keep every bit into int64, bools fill
// bools, a floating value into int64 truncates (torch 1.13's x.masked_fill(m, 1.5)).
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <vector>

#include "../helpers.hpp"
#include "core/creation.hpp"
#include "core/ops.hpp"

using namespace xgrad;
using namespace xgrad::test;
using Catch::Matchers::Contains;

TEST_CASE("torch's x.masked_fill(mask, 2**62 + 1) on int64 keeps every bit", "[masked-fill-scalar]") {
    const Tensor m = tensor({true, false, true});
    const std::int64_t big = (std::int64_t(1) << 62) + 1;  // no double holds it
    const Tensor x = tensor({1, 2, 3});
    CHECK(x.masked_fill(m, big).to_vector<std::int64_t>() == std::vector<std::int64_t>{big, 2, big});
    CHECK(masked_fill(x, m, big).to_vector<std::int64_t>() == std::vector<std::int64_t>{big, 2, big});
    const std::int64_t low = std::numeric_limits<std::int64_t>::min();
    CHECK(masked_fill(x, m, low).to_vector<std::int64_t>() == std::vector<std::int64_t>{low, 2, low});
}

TEST_CASE("torch's masked_fill of bool and int64 tensors with bools, integers and floats", "[masked-fill-scalar]") {
    const Tensor m = tensor({true, false, true});
    const Tensor flags = tensor({false, false, false});
    CHECK(flags.masked_fill(m, true).dtype() == kBool);
    CHECK(flags.masked_fill(m, true).to_vector<bool>() == std::vector<bool>{true, false, true});
    CHECK(flags.masked_fill(m, 1).to_vector<bool>() == std::vector<bool>{true, false, true});
    CHECK(flags.masked_fill(m, 0.5).to_vector<bool>() == std::vector<bool>{true, false, true});
    // torch 1.13: torch.zeros(3, dtype=torch.int64).masked_fill(m, 1.5) is [1, 0, 1] (truncated).
    const Tensor z = zeros({3}, kInt64);
    CHECK(z.masked_fill(m, 1.5).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0, 1});
    CHECK(z.masked_fill(m, 7).to_vector<std::int64_t>() == std::vector<std::int64_t>{7, 0, 7});
    // NaN, inf and values beyond int64 are refused, as torch's "cannot be converted to type int64_t".
    CHECK_THROWS_WITH(z.masked_fill(m, std::numeric_limits<double>::quiet_NaN()),
                      Contains("masked_fill") && Contains("int64"));
    CHECK_THROWS_WITH(z.masked_fill(m, 1e19), Contains("masked_fill") && Contains("int64"));
    // Floats as before: a bool or integer value fills with its number.
    CHECK(zeros({3}).masked_fill(m, true).to_vector<float>() == std::vector<float>{1, 0, 1});
    CHECK(zeros({3}).masked_fill(m, -INFINITY).to_vector<float>() == std::vector<float>{-INFINITY, 0, -INFINITY});
}

TEST_CASE("torch's masked_fill with a Scalar value keeps its gradient", "[masked-fill-scalar]") {
    const Tensor m = tensor({{true, false}, {false, true}});
    const auto f = [&](const std::vector<Tensor>& in) { return in[0].masked_fill(m, 3); };
    REQUIRE_GRADCHECK(f, {param({2, 2})}, "masked_fill(x, m, 3)");
    REQUIRE_GRADGRADCHECK(f, {param({2, 2})}, "masked_fill(x, m, 3)");
}
