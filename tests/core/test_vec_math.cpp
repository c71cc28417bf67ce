// The vectorised float row kernels behind masked_softmax, against std::exp and std::max.
#include "core/runtime/vec_math.hpp"
#include "helpers.hpp"

#include <cmath>
#include <limits>

using namespace xgrad;

TEST_CASE("vec::exp_shifted_sum is within a few ulp of std::exp and sums its row", "[vec_math]") {
    // 1001 points over [-100, 0] after the shift, a length that is not a multiple of 8
    std::vector<float> x(1001), y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = 3.0f - 0.1f * static_cast<float>(i);
    const float m = 3.0f;
    const float total = vec::exp_shifted_sum(x.data(), m, y.data(), x.size());
    double want_total = 0, worst = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double t = static_cast<double>(x[i]) - m;
        const double want = t < -87 ? 0.0 : std::exp(static_cast<double>(x[i] - m));
        if (t < -87) CHECK(y[i] == 0.0f);
        else worst = std::max(worst, std::fabs(y[i] - want) / want);
        want_total += y[i];
    }
    CHECK(worst < 3e-7);
    CHECK(total == Approx(want_total).epsilon(1e-6));
    CHECK(vec::exp_shifted_sum(x.data(), m, y.data(), 0) == 0.0f);
}

TEST_CASE("vec::max_of finds the maximum anywhere in the row", "[vec_math]") {
    for (std::size_t n : {1u, 7u, 8u, 9u, 33u})
        for (std::size_t at = 0; at < n; ++at) {
            std::vector<float> x(n, -5.0f);
            x[at] = 2.5f;
            CHECK(vec::max_of(x.data(), n) == 2.5f);
        }
}

TEST_CASE("exp_shifted_sum is defined for any x and m: NaN, inf, x above m", "[vec_math][nan]") {
    // x above m happens when a NaN keeps the row's maximum from being found (max skips NaN);
    // UBSan (tools/check --sanitize) checks that no exponent is built from NaN or inf.
    const float inf = std::numeric_limits<float>::infinity();
    const float x[6] = {NAN, 2.0f, inf, -inf, 1e30f, -1e30f};
    float y[6];
    for (float m : {-inf, 0.0f, inf, NAN, -1e30f}) {
        const float s = vec::exp_shifted_sum(x, m, y, 6);
        CHECK(std::isnan(y[0]));
        CHECK(std::isnan(s));
    }
}
