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

namespace {

// Distance in ulp between two floats of the same sign (or zeros): their order in the integers.
long ulp_distance(float a, float b) {
    auto ord = [](float f) {
        const std::int32_t i = __builtin_bit_cast(std::int32_t, f);
        return i < 0 ? -static_cast<long>(i & 0x7fffffff) : static_cast<long>(i);
    };
    return std::labs(ord(a) - ord(b));
}

}  // namespace

TEST_CASE("vec::exp, erf, tanh and sigmoid are within 2 ulp of libm (sigmoid's formula 3) over all floats, edges included", "[vec_math]") {
    // every 4099th bit pattern (a million values, both signs, denormals to NaNs), then the edges
    std::vector<float> x;
    for (std::uint64_t b = 0; b < (1ull << 32); b += 4099) x.push_back(__builtin_bit_cast(float, static_cast<std::uint32_t>(b)));
    const float inf = std::numeric_limits<float>::infinity(), den = std::numeric_limits<float>::denorm_min();
    for (float v : {0.0f, -0.0f, den, -den, 1e-39f, -1e-39f, inf, -inf, NAN, -NAN, 88.7228317f, 88.7228394f,
                    -87.33654f, -103.972084f, -103.9721f, 1.0f, -1.0f, 0.625f, -0.625f, 3.92f, -3.92f, 1e30f, -1e30f})
        x.push_back(v);
    std::vector<float> y(x.size());
    struct Case {
        const char* name;
        void (*kernel)(const float*, float*, std::size_t);
        float (*ref)(float);
        long ulps;
    };
    const Case cases[] = {
        {"exp", vec::exp, [](float v) { return std::exp(v); }, 2},
        {"erf", vec::erf, [](float v) { return std::erf(v); }, 2},
        {"tanh", vec::tanh, [](float v) { return std::tanh(v); }, 2},
        // the same formula on libm's exp: an ulp of e^−x moves 1 + e^−x across a rounding step
        {"sigmoid", vec::sigmoid, [](float v) { return 1.0f / (1.0f + std::exp(-v)); }, 3},
    };
    for (const Case& c : cases) {
        c.kernel(x.data(), y.data(), x.size());
        long worst = 0;
        float worst_x = 0;
        for (std::size_t i = 0; i < x.size(); ++i) {
            const float want = c.ref(x[i]);
            if (std::isnan(want) || std::isnan(y[i])) {
                INFO(c.name << " at " << x[i]);
                CHECK(std::isnan(want) == std::isnan(y[i]));
                continue;
            }
            if (std::signbit(want) != std::signbit(y[i]) && !(want == 0 && y[i] == 0)) {
                INFO(c.name << " at " << x[i] << ": " << y[i] << " vs " << want);
                CHECK(false);
            }
            if (const long d = ulp_distance(want, y[i]); d > worst) worst = d, worst_x = x[i];
        }
        INFO(c.name << ": worst at x = " << worst_x);
        CHECK(worst <= c.ulps);
    }
    // signs of zeros and the limits, exactly
    const float in[] = {0.0f, -0.0f, inf, -inf};
    float out[4];
    vec::erf(in, out, 4);
    CHECK((std::signbit(out[1]) && out[1] == 0 && !std::signbit(out[0]) && out[2] == 1.0f && out[3] == -1.0f));
    vec::tanh(in, out, 4);
    CHECK((std::signbit(out[1]) && out[1] == 0 && out[2] == 1.0f && out[3] == -1.0f));
    vec::exp(in, out, 4);
    CHECK((out[0] == 1.0f && out[1] == 1.0f && out[2] == inf && out[3] == 0.0f));
}

TEST_CASE("vec::gelu and gelu_backward follow the double formulas to float rounding", "[vec_math]") {
    std::vector<float> x, g;
    for (int i = -4000; i <= 4000; ++i) x.push_back(static_cast<float>(i) * 0.0025f), g.push_back(0.5f + static_cast<float>(i % 7));
    std::vector<float> y(x.size()), d(x.size());
    vec::gelu(x.data(), y.data(), x.size());
    vec::gelu_backward(g.data(), x.data(), d.data(), x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double v = x[i];
        const double cdf = 0.5 * (1 + std::erf(v / std::sqrt(2.0))), pdf = std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
        INFO("x = " << v);
        CHECK(y[i] == Approx(v * cdf).epsilon(2e-6).margin(2e-7));
        CHECK(d[i] == Approx(g[i] * (cdf + v * pdf)).epsilon(2e-6).margin(2e-6));
    }
}
