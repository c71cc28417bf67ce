// Conversions between element types never hand back a value C++ leaves undefined: a float that
// is NaN, infinite or beyond int64's range is an error naming the value and where it is, through
// every path that converts (item, to_vector, cast / to).
#include <cmath>
#include <limits>

#include "helpers.hpp"

using namespace xgrad;

TEST_CASE("float to int64 conversions refuse values int64 cannot hold", "[convert]") {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    for (Dtype d : {kFloat32, kFloat64}) {
        INFO(dtype_name(d));
        for (double bad : {nan, inf, -inf, 9223372036854775808.0, 1e19, -1e19, 1e300}) {
            INFO(bad);
            if (d == kFloat32 && std::abs(bad) > 3e38 && std::isfinite(bad)) continue;  // not a float32
            const Tensor t = tensor({1.0, bad}, d);
            // to is cast inside: the message starts with the call made
            CHECK_THROWS_WITH(t.to(kInt64), Catch::StartsWith("to: cast: " + std::string(dtype_name(d)) + " value ") &&
                                                Catch::Contains("at flat index 1 cannot be converted to int64"));
            CHECK_THROWS_WITH(cast(t, kInt64), Catch::StartsWith("cast: " + std::string(dtype_name(d)) + " value "));
            CHECK_THROWS_WITH(t.to_vector<std::int64_t>(), Catch::StartsWith("to_vector: ") &&
                                                               Catch::Contains("at flat index 1"));
            CHECK_THROWS_WITH(t.sum().item<std::int64_t>(), Catch::StartsWith("item: "));
        }
        // The edges that do fit: -2^63 exactly, the largest double below 2^63, fractions truncate.
        const double below = d == kFloat32 ? 9223371487098961920.0 : 9223372036854774784.0;  // 2^63 - ulp
        const Tensor ok = tensor({-9223372036854775808.0, below, -2.7, 2.7}, kFloat64).to(d);
        const std::vector<std::int64_t> v = ok.to(kInt64).to_vector<std::int64_t>();
        CHECK(v[0] == std::numeric_limits<std::int64_t>::min());
        CHECK(v[1] == static_cast<std::int64_t>(below));
        CHECK(v[2] == -2);
        CHECK(v[3] == 2);
    }
}

TEST_CASE("conversions that are always defined stay silent", "[convert]") {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const Tensor t = tensor({nan, 0.0, 1e300}, kFloat64);
    CHECK(t.to(kBool).to_vector<bool>() == std::vector<bool>{true, false, true});  // as torch
    CHECK(std::isinf(t.to(kFloat32).to_vector<float>()[2]));                         // as torch: overflow is inf
    CHECK(tensor({3.0}, kInt64).to(kFloat32).item<float>() == 3.0f);
}

TEST_CASE("masked_fill into int64 refuses a value int64 cannot hold", "[convert]") {
    const Tensor t = zeros({2}, kInt64);
    const Tensor m = full({2}, 1, kBool);
    for (double bad : {std::nan(""), HUGE_VAL, -HUGE_VAL, 1e30, 9.3e18}) {
        INFO(bad);
        CHECK_THROWS_WITH(masked_fill(t, m, bad), Catch::StartsWith("masked_fill: value must be finite"));
    }
    CHECK(masked_fill(t, m, -7.9).to_vector<std::int64_t>() == std::vector<std::int64_t>{-7, -7});
}

TEST_CASE("an int64 sum that overflows wraps around as torch's, without undefined behaviour", "[convert]") {
    const std::int64_t max = std::numeric_limits<std::int64_t>::max();
    const Tensor t = from_vector(std::vector<std::int64_t>{max, 1}, {2});
    CHECK(sum(t).item<std::int64_t>() == std::numeric_limits<std::int64_t>::min());
    CHECK(t.reshape({1, 2}).sum({1}).to_vector<std::int64_t>() == std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min()});
    CHECK(sum(from_vector(std::vector<std::int64_t>{-3, 5}, {2})).item<std::int64_t>() == 2);
}
