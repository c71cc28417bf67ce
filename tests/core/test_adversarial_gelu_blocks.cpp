// vec::gelu and vec::gelu_backward run blocks of eight values and skip erf's far branch (and
// exp's special cases) in a block that needs neither. Probed with blocks that mix near, far,
// huge, NaN, ±inf, denormal and ±0 values in every lane position, at every length and start
// (tails), and with every float near the branches' edges: each value must be what the
// per-element formula gives (vec::erf and vec::exp per value, as gelu was computed before the
// blocks) bit for bit, on every SIMD level, and within a few ulp of float64's GELU.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/runtime/vec_math.hpp"
#include "helpers.hpp"
#include "simd_levels.hpp"

using namespace xgrad;
using xgrad::test::on_each_level;

namespace {

constexpr float kSqrtHalf = 0.707106781186547524f, kInvSqrt2Pi = 0.398942280401432678f;

float one_value(void (*f)(const float*, float*, std::size_t), float x) {
    float y;
    f(&x, &y, 1);
    return y;
}
float one_nan(float v) { return v == v ? v : std::numeric_limits<float>::quiet_NaN(); }

// gelu and its backward per element, from vec::erf and vec::exp one value at a time: the
// formula the blocks must reproduce.
float gelu_ref(float v) { return one_nan(0.5f * v * (1.0f + one_value(vec::erf, v * kSqrtHalf))); }
float gelu_backward_ref(float g, float v) {
    const float cdf = 0.5f * (1.0f + one_value(vec::erf, v * kSqrtHalf));
    const float pdf = one_value(vec::exp, -0.5f * v * v) * kInvSqrt2Pi;
    return one_nan(g * (cdf + v * pdf));
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }
float from_bits(std::uint32_t u) { return __builtin_bit_cast(float, u); }

// A value of one of the kinds a block can mix; the edges of erf's branch (|x|/√2 = 1) and of
// exp's plain form (x²/2 = 80) among them.
float value_of_kind(std::mt19937& gen, unsigned kind) {
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    const float sign = gen() % 2 ? -1.0f : 1.0f;
    switch (kind) {
        case 0: return sign * unit(gen) * 1.4f;                    // near
        case 1: return sign * (1.42f + unit(gen) * 11.2f);         // far, exp plain
        case 2: return sign * (12.7f + unit(gen) * 1e3f);          // far, exp's special cases
        case 3: return from_bits((gen() % 2 ? 0xFFC00000u : 0x7FC00000u) | (gen() & 0x3FFFFFu));  // NaNs
        case 4: return from_bits(0x7F800001u | (gen() & 0x3FFFFFu));                            // signalling
        case 5: return sign * std::numeric_limits<float>::infinity();
        case 6: return sign * from_bits(1u + gen() % 0x7FFFFFu);  // denormals
        case 7: return sign * 0.0f;
        case 8: return sign * std::nextafter(1.41421356f, gen() % 2 ? 0.0f : 2.0f);  // erf's edge
        case 9: return sign * from_bits(__builtin_bit_cast(std::uint32_t, 12.6491106f) - 8 + gen() % 17);  // exp's edge
        case 10: return sign * std::numeric_limits<float>::max();
        default: return sign * 1e-30f;
    }
}

// Checks vec::gelu and vec::gelu_backward on x (and g) against the references, on every level,
// from every start in [0, 8) so that each value sits in every lane.
void check_blocks(const std::vector<float>& x, const std::vector<float>& g) {
    const std::size_t n = x.size();
    std::vector<float> want(n), want_d(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = gelu_ref(x[i]), want_d[i] = gelu_backward_ref(g[i], x[i]);
    on_each_level([&](SimdLevel level) {
        for (std::size_t start = 0; start < 8 && start <= n; ++start) {
            const std::size_t m = n - start;
            std::vector<float> y(m + 1, 7.0f), d(m + 1, 7.0f);
            vec::gelu(x.data() + start, y.data(), m);
            vec::gelu_backward(g.data() + start, x.data() + start, d.data(), m);
            REQUIRE(y[m] == 7.0f);  // nothing past the end written
            REQUIRE(d[m] == 7.0f);
            for (std::size_t i = 0; i < m; ++i) {
                INFO(simd_level_name(level) << ", start " << start << ", length " << m << ", element " << i
                                            << ", x = " << x[start + i] << " (bits " << std::hex
                                            << __builtin_bit_cast(std::uint32_t, x[start + i]) << std::dec << ")");
                REQUIRE(same_bits(y[i], want[start + i]));
                REQUIRE(same_bits(d[i], want_d[start + i]));
            }
        }
    });
}

}  // namespace

TEST_CASE("gelu blocks: mixed kinds in every lane, every length and start, the per-element bits on every level",
          "[simd][vec_math][gelu][adversarial]") {
    std::mt19937 gen(2718);
    for (std::size_t n = 0; n <= 41; ++n)
        for (int round = 0; round < 6; ++round) {
            std::vector<float> x(n), g(n);
            // round 0: near values with one odd lane; the rest: kinds at random
            const unsigned odd_kind = 1 + gen() % 11;
            for (std::size_t i = 0; i < n; ++i) {
                const unsigned kind = round == 0 ? (i == n / 2 ? odd_kind : 0) : gen() % 12;
                x[i] = value_of_kind(gen, kind);
                g[i] = round == 1 ? value_of_kind(gen, gen() % 12) : std::uniform_real_distribution<float>(-2, 2)(gen);
            }
            check_blocks(x, g);
        }
    // one special value in each lane of an all-near block, and one near value in a far block
    for (unsigned kind = 1; kind < 12; ++kind)
        for (std::size_t lane = 0; lane < 8; ++lane) {
            std::vector<float> x(19, 0.3f), g(19, 1.0f);
            x[8 + lane] = value_of_kind(gen, kind);
            check_blocks(x, g);
            std::vector<float> far(19, 5.0f);
            far[8 + lane] = value_of_kind(gen, kind);
            check_blocks(far, g);
        }
}

TEST_CASE("gelu blocks: every float at the edges of erf's branch and exp's plain form, the per-element bits",
          "[simd][vec_math][gelu][adversarial]") {
    // A block is all near, all in the plain exp range, or crosses: the sweeps put 8 neighbouring
    // floats in each block, so most blocks are uniform and a few cross each edge.
    const std::pair<float, float> ranges[] = {{1.40f, 1.43f}, {12.55f, 14.2f}, {-14.2f, -12.55f}, {-1.43f, -1.40f}};
    for (const auto& [lo, hi] : ranges) {
        std::vector<float> x;
        for (float v = lo; v <= hi; v = std::nextafter(v, hi + 1.0f)) x.push_back(v);
        INFO("sweep from " << lo << " to " << hi << ", " << x.size() << " floats");
        std::vector<float> g(x.size(), 1.0f), y(x.size()), d(x.size());
        on_each_level([&](SimdLevel) {
            vec::gelu(x.data(), y.data(), x.size());
            vec::gelu_backward(g.data(), x.data(), d.data(), x.size());
            std::size_t bad = 0, first = x.size();
            for (std::size_t i = 0; i < x.size(); ++i)
                if (!same_bits(y[i], gelu_ref(x[i])) || !same_bits(d[i], gelu_backward_ref(1.0f, x[i])))
                    ++bad, first = std::min(first, i);
            INFO("first at x = " << (first < x.size() ? x[first] : 0.0f));
            CHECK(bad == 0);
        });
    }
}

TEST_CASE("gelu and its gradient in float32 through the ops: within a few ulp of float64's, the odd values exact",
          "[ops][gelu][adversarial]") {
    std::mt19937 gen(31);
    std::vector<double> xs;
    for (int i = 0; i < 4001; ++i) xs.push_back(static_cast<double>(value_of_kind(gen, gen() % 3 == 0 ? 1 : gen() % 2 ? 0 : 8)));
    xs.insert(xs.end(), {-0.0, 0.0, 1e-40, -1e-40, 20.0, -20.0, 1e30, -1e30, std::numeric_limits<double>::infinity(),
                         -std::numeric_limits<double>::infinity(), std::nan("")});  // 4012: a tail of 4
    const long n = static_cast<long>(xs.size());
    Tensor x = from_vector(xs, {n}, kFloat32).requires_grad_(true);
    const Tensor y = gelu(x);
    y.backward(ones_like(y));
    const std::vector<double> got = y.to_vector<double>(), dgot = x.grad().to_vector<double>();
    const std::vector<double> x32 = x.detach().to_vector<double>();
    for (long i = 0; i < n; ++i) {
        const double v = x32[static_cast<std::size_t>(i)];
        const double want = 0.5 * v * (1.0 + std::erf(v * M_SQRT1_2));
        const double dwant = 0.5 * (1.0 + std::erf(v * M_SQRT1_2)) + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
        const double yg = got[static_cast<std::size_t>(i)], dg = dgot[static_cast<std::size_t>(i)];
        INFO("x = " << v);
        if (std::isnan(v)) {
            CHECK(std::isnan(yg));
            CHECK(std::isnan(dg));
        } else if (std::isinf(v)) {
            // torch 1.13: gelu(inf) = inf, gelu(-inf) = -inf · 0 = NaN, and NaN gradients
            CHECK((v > 0 ? yg == v : std::isnan(yg)));
            CHECK(std::isnan(dg));
        } else {
            // a few float ulp of the terms: 1 + erf cancels for negative x, as in torch's float32 formula
            CHECK(std::fabs(yg - want) <= 8 * 0x1.0p-24 * (std::fabs(want) + 0.5 * std::fabs(v)) + 1e-37);
            CHECK(std::fabs(dg - dwant) <= 8 * 0x1.0p-24 * (1.0 + std::fabs(v * std::exp(-0.5 * v * v))) + 1e-37);
            if (v == 0) CHECK(std::signbit(yg) == std::signbit(v * 0.5));
        }
    }
}

TEST_CASE("gelu: gradcheck and gradgradcheck still pass, near and far values together", "[ops][gelu][adversarial]") {
    const Tensor x = from_vector({-4.0, -1.5, -0.2, 0.0, 0.3, 1.45, 2.0, 3.5, -0.9, 6.0, 0.01}, {11}, kFloat64)
                         .requires_grad_(true);
    REQUIRE_GRADCHECK([](const std::vector<Tensor>& in) { return gelu(in[0]); }, {x}, "gelu");
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& in) { return gelu(in[0]); }, {x}, "gelu");
}
