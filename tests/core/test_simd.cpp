// The SIMD levels (core/runtime/simd.hpp): each loop compiled for baseline x86-64, AVX2 and
// AVX-512 gives the same bits on every input, and XGRAD_SIMD picks the level.
#include "core/runtime/simd.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/runtime/bfloat16.hpp"
#include "core/runtime/kernel_loops.hpp"
#include "core/runtime/vec_math.hpp"
#include "helpers.hpp"
#include "simd_levels.hpp"

using namespace xgrad;
using xgrad::test::on_each_level;
using xgrad::test::slot;

namespace {

std::uint32_t bits(float f) { return __builtin_bit_cast(std::uint32_t, f); }
float from_bits(std::uint32_t u) { return __builtin_bit_cast(float, u); }

/// The first index where a and b differ in their bits, or -1.
template <class T> long first_difference(const std::vector<T>& a, const std::vector<T>& b) {
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i)
        if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return static_cast<long>(i);
    return -1;
}

/// Float bit patterns that stress a row kernel: NaNs, ±inf, ±0, denormals, huge and tiny.
float hostile(std::mt19937& gen) {
    static const float kinds[] = {NAN, -NAN, std::numeric_limits<float>::infinity(),
                                  -std::numeric_limits<float>::infinity(), 0.0f, -0.0f, 1e-45f, -1e-40f,
                                  3e38f, -3e38f, 88.5f, -87.5f};
    return kinds[gen() % (sizeof kinds / sizeof kinds[0])];
}

}  // namespace

TEST_CASE("set_simd_level refuses what the CPU cannot run, and the level names", "[simd]") {
    CHECK(std::string(simd_level_name(SimdLevel::Baseline)) == "baseline");
    CHECK(std::string(simd_level_name(SimdLevel::Avx512)) == "avx512");
    CHECK(std::string(simd_level_name(SimdLevel::Avx2)) == "avx2");
    CHECK(parse_simd_setting("baseline") == SimdLevel::Baseline);
    CHECK(parse_simd_setting("auto") == simd_level_supported());
    // Every name simd_level_name prints is a value XGRAD_SIMD takes, where the CPU runs it.
    for (SimdLevel level : {SimdLevel::Baseline, SimdLevel::Avx2, SimdLevel::Avx512}) {
        CHECK(parse_simd_setting(simd_level_name(level), "XGRAD_SIMD", SimdLevel::Avx512) == level);
        if (simd_level_runs(level)) CHECK(parse_simd_setting(simd_level_name(level)) == level);
    }
    // an AVX-512 CPU runs the AVX2 loops too; an AVX2 one not the AVX-512 ones
    CHECK(simd_level_runs(SimdLevel::Avx2, SimdLevel::Avx512));
    CHECK_FALSE(simd_level_runs(SimdLevel::Avx512, SimdLevel::Avx2));
    CHECK(parse_simd_setting("avx2", "XGRAD_SIMD", SimdLevel::Avx2) == SimdLevel::Avx2);
    CHECK_THROWS_WITH(parse_simd_setting("avx512", "XGRAD_SIMD", SimdLevel::Avx2),
                      "XGRAD_SIMD: 'avx512' asks for AVX-512, but this CPU (or its OS) has no AVX512F, BW, VL and DQ "
                      "(auto, baseline or avx2 run here)");
    CHECK_THROWS_WITH(parse_simd_setting("avx2", "XGRAD_SIMD", SimdLevel::Baseline),
                      "XGRAD_SIMD: 'avx2' asks for AVX2, but this CPU (or its OS) has no AVX2 (auto or baseline run here)");
    CHECK(parse_simd_setting("auto", "XGRAD_SIMD", SimdLevel::Baseline) == SimdLevel::Baseline);
    CHECK_THROWS_WITH(parse_simd_setting("avx512", "XGRAD_SIMD", SimdLevel::Baseline),
                      "XGRAD_SIMD: 'avx512' asks for AVX-512, but this CPU (or its OS) has no AVX512F, BW, VL and DQ "
                      "(auto or baseline run here)");
    for (const char* bad : {"", "AUTO", "AVX512", "avx", "AVX2", "baseline "})
        CHECK_THROWS_WITH(parse_simd_setting(bad),
                          "XGRAD_SIMD: expected auto, baseline, avx2 or avx512, got '" + std::string(bad) + "'");
    CHECK_THROWS_AS(set_simd_level(static_cast<SimdLevel>(7)), Error);
    if (simd_level_supported() == SimdLevel::Baseline) {
        CHECK_THROWS_WITH(set_simd_level(SimdLevel::Avx512), Catch::Contains("no AVX512F"));
        CHECK(simd_level() == SimdLevel::Baseline);
    }
}

TEST_CASE("bf16_to_float: every bfloat16 pattern gives the same float on both levels", "[simd][bfloat16]") {
    std::vector<std::uint16_t> in(65536);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::uint16_t>(i);
    std::vector<float> scalar(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) scalar[i] = bf16_to_float(in[i]);
    on_each_level([&](SimdLevel level) {
        std::vector<float> out(in.size());
        bf16_to_float(in.data(), out.data(), in.size());
        INFO(simd_level_name(level));
        CHECK(first_difference(scalar, out) == -1);
    });
}

TEST_CASE("bf16_from_float: every sign, exponent and kept mantissa, the rounding cases, random bits", "[simd][bfloat16]") {
    // Each of the 65536 upper halves with low halves that take every rounding path: exact, just
    // below and above the tie, the tie itself (to even: down for an even kept part, up for an
    // odd one), all ones. Upper halves 0x7f80 (inf) and above it are infinities and NaNs, so
    // NaNs with payload only in the low bits (which must stay NaN) are here, and 0x7f7f with
    // 0x8000 or more rounds up to infinity; 0x0000..0x007f are the denormals.
    std::vector<float> in;
    for (std::uint32_t hi = 0; hi < 65536; ++hi)
        for (std::uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu})
            in.push_back(from_bits(hi << 16 | lo));
    std::mt19937 gen(7);
    for (int i = 0; i < (1 << 20); ++i) in.push_back(from_bits(static_cast<std::uint32_t>(gen())));
    // every level gives the scalar rounding (round to nearest even, NaN quietened, sign kept)
    std::vector<std::uint16_t> scalar(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) scalar[i] = bf16_from_float(in[i]);
    on_each_level([&](SimdLevel level) {
        std::vector<std::uint16_t> out(in.size());
        bf16_from_float(in.data(), out.data(), in.size());
        INFO(simd_level_name(level));
        CHECK(first_difference(scalar, out) == -1);
    });
    CHECK(bf16_from_float(from_bits(0x7f800001u)) == 0x7fc0);   // NaN with one low payload bit
    CHECK(bf16_from_float(from_bits(0xff800001u)) == 0xffc0);
    CHECK(bf16_from_float(from_bits(0x7f7fffffu)) == 0x7f80);   // FLT_MAX rounds to inf
    CHECK(bf16_from_float(from_bits(0x00008000u)) == 0x0000);   // a tie at the smallest denormal: to even
    CHECK(bf16_from_float(from_bits(0x00018000u)) == 0x0002);
}

TEST_CASE("bf16 conversions: every length up to 70 at every alignment, same bits on both levels", "[simd][bfloat16]") {
    std::mt19937 gen(3);
    std::vector<float> f(80);
    std::vector<std::uint16_t> h(80);
    for (std::size_t i = 0; i < f.size(); ++i) {
        f[i] = i % 5 == 0 ? hostile(gen) : from_bits(static_cast<std::uint32_t>(gen()));
        h[i] = static_cast<std::uint16_t>(gen());
    }
    for (std::size_t offset = 0; offset < 4; ++offset)
        for (std::size_t n = 0; n <= 70; ++n) {
            std::vector<std::uint16_t> to_half[3];
            std::vector<float> to_float[3];
            const int levels = on_each_level([&](SimdLevel level) {
                const int l = slot(level);
                to_half[l].assign(n + 2, 0xabcd);  // the two past n must stay untouched
                to_float[l].assign(n + 2, 1.5f);
                bf16_from_float(f.data() + offset, to_half[l].data(), n);
                bf16_to_float(h.data() + offset, to_float[l].data(), n);
            });
            INFO("offset " << offset << ", n " << n);
            for (std::size_t i = 0; i < n; ++i) {
                CHECK(to_half[0][i] == bf16_from_float(f[offset + i]));
                CHECK(bits(to_float[0][i]) == bits(bf16_to_float(h[offset + i])));
            }
            CHECK((to_half[0][n] == 0xabcd && to_half[0][n + 1] == 0xabcd));
            CHECK((to_float[0][n] == 1.5f && to_float[0][n + 1] == 1.5f));
            for (int l = 1; l < levels; ++l) {
                CHECK(first_difference(to_half[0], to_half[l]) == -1);
                CHECK(first_difference(to_float[0], to_float[l]) == -1);
            }
        }
}

TEST_CASE("exp_shifted_sum: same y and sum on both levels for every length up to 70 and hostile rows", "[simd][vec_math]") {
    std::mt19937 gen(11);
    std::uniform_real_distribution<float> score(-40.0f, 5.0f);
    const float inf = std::numeric_limits<float>::infinity();
    // kinds of row: plain scores; scores with a NaN or ±inf among them; any bit pattern
    for (int kind = 0; kind < 3; ++kind)
        for (std::size_t n : [] {
                 std::vector<std::size_t> v;
                 for (std::size_t k = 0; k <= 70; ++k) v.push_back(k);
                 v.push_back(1000);
                 v.push_back(1037);
                 return v;
             }()) {
            std::vector<float> x(n);
            for (float& v : x) v = score(gen);
            if (kind == 1 && n > 0) x[gen() % n] = hostile(gen), x[gen() % n] = hostile(gen);
            if (kind == 2)
                for (float& v : x) v = from_bits(static_cast<std::uint32_t>(gen()));
            const float row_max = n > 0 ? vec::max_of(x.data(), n) : 0.0f;
            for (float m : {row_max, row_max + 3.0f, 0.0f, NAN, inf, -inf}) {
                std::vector<float> y[3], in_place[3];
                float sum[3], sum_in_place[3];
                const int levels = on_each_level([&](SimdLevel level) {
                    const int l = slot(level);
                    y[l].assign(n, -1.0f);
                    sum[l] = vec::exp_shifted_sum(x.data(), m, y[l].data(), n);
                    in_place[l] = x;  // softmax_prefix writes y over x
                    sum_in_place[l] = vec::exp_shifted_sum(in_place[l].data(), m, in_place[l].data(), n);
                });
                INFO("kind " << kind << ", n " << n << ", m " << m);
                CHECK(first_difference(y[0], in_place[0]) == -1);
                CHECK(bits(sum[0]) == bits(sum_in_place[0]));
                for (int l = 1; l < levels; ++l) {
                    CHECK(first_difference(y[0], y[l]) == -1);
                    CHECK(bits(sum[0]) == bits(sum[l]));
                    CHECK(first_difference(in_place[0], in_place[l]) == -1);
                    CHECK(bits(sum_in_place[0]) == bits(sum_in_place[l]));
                }
            }
        }
}

TEST_CASE("exp_shifted_rows: the bits of exp_shifted_sum row by row, on both levels, in place, nothing past a row's length written", "[simd][vec_math]") {
    std::mt19937 gen(12);
    std::uniform_real_distribution<float> score(-40.0f, 5.0f);
    const float sentinel = from_bits(0x7fc01234u);  // a NaN no kernel makes
    for (std::size_t stride : {1, 3, 8, 11, 15, 16, 17, 33, 40})
        for (std::size_t rows : {1, 2, 5, 9})
            for (int trial = 0; trial < 4; ++trial) {
                // hostile values anywhere, also past a row's length, where a short row reads them
                std::vector<float> x(rows * stride);
                for (float& v : x) v = gen() % 7 == 0 ? hostile(gen) : score(gen);
                std::vector<std::size_t> len(rows);
                std::vector<float> m(rows);
                for (std::size_t i = 0; i < rows; ++i) {
                    len[i] = trial == 0 ? stride : gen() % (stride + 1);
                    m[i] = len[i] > 0 && gen() % 4 ? vec::max_of(x.data() + i * stride, len[i]) : score(gen);
                }
                std::vector<float> want(x.size(), sentinel), want_sum(rows);
                for (std::size_t i = 0; i < rows; ++i)
                    want_sum[i] = vec::exp_shifted_sum(x.data() + i * stride, m[i], want.data() + i * stride, len[i]);
                std::vector<float> y[3], in_place[3], sum[3], sum_in_place[3];
                const int levels = on_each_level([&](SimdLevel level) {
                    const int l = slot(level);
                    y[l].assign(x.size(), sentinel);
                    sum[l].assign(rows, 0.0f);
                    vec::exp_shifted_rows(x.data(), stride, m.data(), len.data(), y[l].data(), sum[l].data(), rows);
                    in_place[l] = x;
                    sum_in_place[l].assign(rows, 0.0f);
                    vec::exp_shifted_rows(in_place[l].data(), stride, m.data(), len.data(), in_place[l].data(),
                                          sum_in_place[l].data(), rows);
                });
                INFO("stride " << stride << ", rows " << rows << ", trial " << trial);
                for (int l = 0; l < levels; ++l) {
                    CHECK(first_difference(y[l], want) == -1);
                    CHECK(first_difference(sum[l], want_sum) == -1);
                    CHECK(first_difference(sum_in_place[l], want_sum) == -1);
                    // in place: each row's first len values replaced, the rest of x untouched
                    std::vector<float> want_in_place = x;
                    for (std::size_t i = 0; i < rows; ++i)
                        std::copy_n(want.begin() + static_cast<long>(i * stride), len[i],
                                    want_in_place.begin() + static_cast<long>(i * stride));
                    CHECK(first_difference(in_place[l], want_in_place) == -1);
                }
            }
}

TEST_CASE("max_of: same bits on both levels, and std::max's in eight lanes, for NaN, ±inf and ±0 rows", "[simd][vec_math]") {
    std::mt19937 gen(5);
    std::uniform_real_distribution<float> score(-10.0f, 10.0f);
    // max_of's order: lane l = std::max over j ≡ l (mod 8), lanes combined pairwise, then the tail.
    auto eight_lanes = [](const std::vector<float>& x) {
        float s[8];
        for (float& v : s) v = x[0];
        std::size_t j = 0;
        for (; j + 8 <= x.size(); j += 8)
            for (std::size_t l = 0; l < 8; ++l) s[l] = std::max(s[l], x[j + l]);
        float m = std::max(std::max(std::max(s[0], s[1]), std::max(s[2], s[3])),
                           std::max(std::max(s[4], s[5]), std::max(s[6], s[7])));
        for (; j < x.size(); ++j) m = std::max(m, x[j]);
        return m;
    };
    for (int kind = 0; kind < 4; ++kind)
        for (std::size_t n = 1; n <= 70; ++n)
            for (int rep = 0; rep < 4; ++rep) {
                std::vector<float> x(n);
                for (float& v : x) v = score(gen);
                if (kind == 1) x[gen() % n] = hostile(gen), x[gen() % n] = hostile(gen);
                if (kind == 2)  // signed zeros only: which zero comes out depends on the order
                    for (float& v : x) v = gen() % 2 ? 0.0f : -0.0f;
                if (kind == 3)
                    for (float& v : x) v = from_bits(static_cast<std::uint32_t>(gen()));
                float m[3];
                const int levels = on_each_level([&](SimdLevel level) {
                    m[slot(level)] = vec::max_of(x.data(), n);
                });
                INFO("kind " << kind << ", n " << n);
                CHECK(bits(m[0]) == bits(eight_lanes(x)));
                for (int l = 1; l < levels; ++l) CHECK(bits(m[0]) == bits(m[l]));
            }
}

TEST_CASE("softmax_grad: same bits on both levels, lane_sum's order, every length up to 70 and prefix", "[simd][vec_math]") {
    std::mt19937 gen(9);
    std::uniform_real_distribution<float> value(-2.0f, 2.0f);
    for (int kind = 0; kind < 2; ++kind)
        for (std::size_t n = 0; n <= 70; ++n)
            for (std::size_t L : {std::size_t(0), n / 3, n}) {
                std::vector<float> y(n), g(n);
                for (std::size_t j = 0; j < n; ++j) y[j] = value(gen), g[j] = value(gen);
                if (kind == 1 && n > 0) y[gen() % n] = hostile(gen), g[gen() % n] = hostile(gen);
                std::vector<float> d[3];
                const int levels = on_each_level([&](SimdLevel level) {
                    auto& out = d[slot(level)];
                    out.assign(n, 7.0f);
                    vec::softmax_grad(y.data(), g.data(), out.data(), n, L);
                });
                const float dot = lane_sum<float>(n, [&](std::size_t j) { return g[j] * y[j]; });
                std::vector<float> want(n, 0.0f);
                for (std::size_t j = 0; j < L; ++j) {
                    want[j] = y[j] * (g[j] - dot);
                    if (std::isnan(want[j])) want[j] = std::numeric_limits<float>::quiet_NaN();
                }
                INFO("kind " << kind << ", n " << n << ", L " << L);
                CHECK(first_difference(want, d[0]) == -1);
                for (int l = 1; l < levels; ++l) CHECK(first_difference(d[0], d[l]) == -1);
            }
}

TEST_CASE("exp, erf, tanh, sigmoid, gelu, gelu_backward: same bits on every level, every length up to 70 and hostile values", "[simd][vec_math]") {
    std::mt19937 gen(13);
    std::uniform_real_distribution<float> value(-12.0f, 12.0f);
    using Unary = void (*)(const float*, float*, std::size_t);
    const Unary unary[] = {vec::exp, vec::erf, vec::tanh, vec::sigmoid, vec::gelu};
    for (int kind = 0; kind < 3; ++kind)
        for (std::size_t n = 0; n <= 70; ++n) {
            std::vector<float> x(n), g(n);
            for (std::size_t j = 0; j < n; ++j) x[j] = value(gen), g[j] = value(gen);
            if (kind == 1)
                for (std::size_t j = 0; j < n; j += 3) x[j] = hostile(gen), g[(j + 1) % n] = hostile(gen);
            if (kind == 2)
                for (float& v : x) v = from_bits(static_cast<std::uint32_t>(gen()));
            for (std::size_t k = 0; k <= std::size(unary); ++k) {
                std::vector<float> y[3];
                const int levels = on_each_level([&](SimdLevel level) {
                    auto& out = y[slot(level)];
                    out.assign(n + 1, 7.0f);  // the one past n must stay untouched
                    if (k < std::size(unary)) unary[k](x.data(), out.data(), n);
                    else vec::gelu_backward(g.data(), x.data(), out.data(), n);
                });
                INFO("kernel " << k << ", kind " << kind << ", n " << n);
                CHECK(y[0][n] == 7.0f);
                for (int l = 1; l < levels; ++l) CHECK(first_difference(y[0], y[l]) == -1);
            }
        }
}

// Run by the next test in a child process, with XGRAD_SIMD set: the level it made of it, and a
// softmax row's exp and bfloat16 conversion computed there. Hidden: meaningless in-process.
TEST_CASE("child: report the SIMD level and a row computed on it", "[.simd-env-child]") {
    try {
        std::printf("simd=%s\n", simd_level_name(simd_level()));
        std::vector<float> x(67), y(67);
        for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i)) * 20.0f;
        const float s = vec::exp_shifted_sum(x.data(), vec::max_of(x.data(), x.size()), y.data(), y.size());
        std::vector<std::uint16_t> h(y.size());
        bf16_from_float(y.data(), h.data(), y.size());
        std::uint64_t digest = bits(s);
        for (std::uint16_t v : h) digest = digest * 1000003u + v;
        std::printf("row=%016llx\n", static_cast<unsigned long long>(digest));
    } catch (const Error& e) {
        std::printf("error=%s\n", e.what());
    }
    std::fflush(stdout);
}

TEST_CASE("XGRAD_SIMD picks the level in a fresh process, and a bad value is an error naming it", "[simd]") {
    auto run = [](const std::string& value) { return test::run_this_binary("XGRAD_SIMD='" + value + "'", "[.simd-env-child]"); };
    const std::string baseline = run("baseline"), automatic = run("auto"), unset = run("");
    CHECK_THAT(baseline, Catch::Contains("simd=baseline\n"));
    CHECK_THAT(automatic, Catch::Contains(std::string("simd=") + simd_level_name(simd_level_supported()) + "\n"));
    CHECK_THAT(unset, Catch::Contains(std::string("simd=") + simd_level_name(simd_level_supported()) + "\n"));
    // the same row on either level
    const auto row = [](const std::string& out) { return out.substr(out.find("row=")); };
    REQUIRE(baseline.find("row=") != std::string::npos);
    REQUIRE(automatic.find("row=") != std::string::npos);
    CHECK(row(baseline) == row(automatic));
    CHECK_THAT(run("avx"), Catch::Contains("error=XGRAD_SIMD: expected auto, baseline, avx2 or avx512, got 'avx'"));
    // the level by the name it prints: taken where the CPU runs it, refused with the reason elsewhere
    const std::string avx2 = run("avx2");
    if (simd_level_runs(SimdLevel::Avx2)) {
        CHECK_THAT(avx2, Catch::Contains("simd=avx2\n"));
        REQUIRE(avx2.find("row=") != std::string::npos);
        CHECK(row(avx2) == row(baseline));
    } else {
        CHECK_THAT(avx2, Catch::Contains("error=XGRAD_SIMD: 'avx2' asks for AVX2, but this CPU"));
    }
    const std::string avx512 = run("avx512");
    if (simd_level_supported() == SimdLevel::Avx512) {
        CHECK_THAT(avx512, Catch::Contains("simd=avx512\n"));
        REQUIRE(avx512.find("row=") != std::string::npos);
        CHECK(row(avx512) == row(baseline));
    } else {
        CHECK_THAT(avx512, Catch::Contains("error=XGRAD_SIMD: 'avx512' asks for AVX-512, but this CPU"));
    }
}
