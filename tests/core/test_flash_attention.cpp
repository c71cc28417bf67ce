// flash_attention, the fused attention that never holds the (queries × keys) matrix: equal to
// the materialised head_attention_weights + head_attention_combine to rounding on every mask
// kind, in float32, float64 and autocast bfloat16, forward and backward, with and without its
// counter-based dropout; gradient checks of first and second order in double; the same bits on
// 1 and 3 threads; its errors.
#include <cmath>
#include <cstring>
#include <cstdio>
#include <functional>
#include <sstream>

#include "core/autocast.hpp"
#include "core/flash_attention.hpp"
#include "core/flash_attention_rows.hpp"
#include "core/runtime/simd.hpp"
#include "core/runtime/vec_math.hpp"
#include "helpers.hpp"
#include "simd_levels.hpp"

using namespace xgrad;
using namespace xgrad::test;

namespace {

struct MaskCase {
    std::string name;
    AttentionMask mask;
};

// Every mask kind for scores (B, Lq, Lk): none; lengths (B,) with a 0, one inside a later key
// block and one beyond Lk; lengths (B, Lq) with zeros; bool (B, Lq, Lk) with rows keeping
// nothing and a row keeping only keys of its last block; bool (Lq, Lk); causal.
std::vector<MaskCase> mask_cases(std::size_t B, std::size_t Lq, std::size_t Lk) {
    std::vector<MaskCase> cases;
    cases.push_back({"all", AttentionMask()});
    std::vector<std::int64_t> l1(B);
    for (std::size_t b = 0; b < B; ++b) l1[b] = b == 0 ? 0 : b == 1 ? static_cast<std::int64_t>(Lk + 5) : static_cast<std::int64_t>((b * 97) % Lk + 1);
    cases.push_back({"valid_lens (batch,)", AttentionMask::valid_lens(from_vector(l1, {B}))});
    std::vector<std::int64_t> l2(B * Lq);
    for (std::size_t r = 0; r < B * Lq; ++r) l2[r] = static_cast<std::int64_t>((r * 37 + 1) % (Lk + 2));
    cases.push_back({"valid_lens (batch, Lq)", AttentionMask::valid_lens(from_vector(l2, {B, Lq}))});
    cases.push_back({"attend_where (batch, Lq, Lk)", AttentionMask::attend_where(bool_tensor({B, Lq, Lk}, [&](std::size_t k) {
                         const std::size_t b = k / (Lq * Lk), i = k / Lk % Lq, j = k % Lk;
                         if (b == 0 && i % 5 == 0) return false;              // keeps nothing
                         if (b == 0 && i % 5 == 1) return j + 1 == Lk;        // only the last key
                         return (k * 7) % 5 < 3;
                     }))});
    cases.push_back({"attend_where (Lq, Lk)", AttentionMask::attend_where(bool_tensor({Lq, Lk}, [&](std::size_t k) {
                         return (k / Lk + 2 * (k % Lk)) % 3 != 0;
                     }))});
    if (Lk >= Lq) cases.push_back({"causal", AttentionMask::causal()});
    return cases;
}

// The materialised path: weights, the dropout's keep/(1 − p), combine.
Tensor materialised(const Tensor& q, const Tensor& k, const Tensor& v, std::size_t H, double scale,
                    const AttentionMask& mask, double p, std::uint64_t seed) {
    Tensor w = head_attention_weights(q, k, H, scale, mask);
    if (p > 0) w = w * flash_dropout_keep(w.size(0), w.size(1), w.size(2), p, seed, w.dtype());
    return head_attention_combine(w, v, H);
}

struct Sizes {
    std::size_t B, H, Lq, Lk, d, dv;
};

// Fused against materialised: outputs and the gradients of Σ out ⊙ g, within `tol`.
void compare(const Sizes& s, Dtype dtype, const MaskCase& mc, double p, double tol) {
    INFO("B " << s.B << " H " << s.H << " Lq " << s.Lq << " Lk " << s.Lk << " d " << s.d << " dv " << s.dv
              << ", mask " << mc.name << ", dropout " << p << ", " << dtype_name(dtype));
    auto leaf = [&](const Shape& shape, std::uint64_t seed) {
        return param(shape, -2, 2, seed).to(dtype).detach().requires_grad_(true);
    };
    const Tensor q = leaf({s.B, s.Lq, s.H * s.d}, 1), k = leaf({s.B, s.Lk, s.H * s.d}, 2),
                 v = leaf({s.B, s.Lk, s.H * s.dv}, 3);
    const Tensor rq = q.detach().requires_grad_(true), rk = k.detach().requires_grad_(true),
                 rv = v.detach().requires_grad_(true);
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
    const Tensor out = flash_attention(q, k, v, s.H, scale, mc.mask, p, 42);
    const Tensor want = materialised(rq, rk, rv, s.H, scale, mc.mask, p, 42);
    REQUIRE(out.shape() == want.shape());
    CHECK(max_abs_diff(out, want) <= tol);
    const Tensor g = param(out.shape(), -1, 1, 4).detach().to(dtype);
    (out * g).sum().backward();
    (want * g).sum().backward();
    CHECK(max_abs_diff(q.grad(), rq.grad()) <= tol);
    CHECK(max_abs_diff(k.grad(), rk.grad()) <= tol);
    CHECK(max_abs_diff(v.grad(), rv.grad()) <= tol);
}

// Several query and key blocks (128 and 256), ragged ends, more keys than queries and fewer.
const Sizes sizes[] = {{2, 2, 300, 520, 8, 4}, {3, 1, 5, 7, 3, 2}, {2, 3, 260, 200, 4, 5}};

}  // namespace

TEST_CASE("flash_attention equals the materialised ops on every mask kind in float64", "[flash]") {
    for (const Sizes& s : sizes)
        for (const MaskCase& mc : mask_cases(s.B, s.Lq, s.Lk)) compare(s, kFloat64, mc, 0.0, 1e-12);
}

TEST_CASE("flash_attention equals the materialised ops on every mask kind in float32", "[flash]") {
    for (const Sizes& s : sizes)
        for (const MaskCase& mc : mask_cases(s.B, s.Lq, s.Lk)) compare(s, kFloat32, mc, 0.0, 2e-5);
}

TEST_CASE("flash_attention equals the materialised ops at head widths of 16 and 32 in float32", "[flash]") {
    // The widths the modules use; ragged block ends in both directions, dropout too.
    const Sizes wide[] = {{2, 2, 300, 520, 16, 32}, {1, 3, 131, 270, 32, 16}, {2, 1, 7, 9, 16, 16}};
    for (const Sizes& s : wide)
        for (const MaskCase& mc : mask_cases(s.B, s.Lq, s.Lk)) {
            compare(s, kFloat32, mc, 0.0, 2e-5);
            compare(s, kFloat32, mc, 0.3, 5e-5);
        }
}

TEST_CASE("flash_attention's dropout is the materialised ops' with flash_dropout_keep", "[flash]") {
    for (const Sizes& s : sizes)
        for (const MaskCase& mc : mask_cases(s.B, s.Lq, s.Lk)) {
            compare(s, kFloat64, mc, 0.3, 1e-12);
            compare(s, kFloat32, mc, 0.3, 5e-5);
        }
}

TEST_CASE("flash_attention under autocast equals the materialised ops to bfloat16's rounding", "[flash]") {
    // Heads of 256×300×16 products: over autocast's floor, so both sides multiply bfloat16
    // roundings with float32 sums; they round the weights at different points (the fused path
    // its unnormalised block weights), so they agree to bfloat16's precision, not bit for bit.
    AutocastOptions allow;
    allow.allow_emulation = true;  // this machine may have no bfloat16 instructions
    const AutocastGuard guard(kBFloat16, allow);
    for (const Sizes& s : {Sizes{2, 2, 256, 300, 16, 8}, Sizes{2, 2, 256, 300, 16, 16}})
        for (const MaskCase& mc : mask_cases(s.B, s.Lq, s.Lk)) compare(s, kFloat32, mc, 0.0, 0.05);
}

TEST_CASE("flash_attention's dropout keeps about 1 - p of the weights, each scaled by 1/(1 - p)", "[flash]") {
    const Tensor keep = flash_dropout_keep(4, 64, 64, 0.25, 7, kFloat64);
    const auto v = keep.to_vector<double>();
    std::size_t kept = 0;
    for (double x : v) {
        REQUIRE((x == 0.0 || x == 1.0 / 0.75));
        kept += x != 0.0;
    }
    CHECK(std::abs(static_cast<double>(kept) / v.size() - 0.75) < 0.02);
    // another seed, another mask; the same seed, the same mask
    CHECK(flash_dropout_keep(4, 64, 64, 0.25, 8, kFloat64).to_vector<double>() != v);
    CHECK(flash_dropout_keep(4, 64, 64, 0.25, 7, kFloat64).to_vector<double>() == v);
    CHECK(flash_dropout_keep(2, 3, 4, 0.0, 7, kFloat64).to_vector<double>() == std::vector<double>(24, 1.0));
}

TEST_CASE("flash_attention passes gradcheck and gradgradcheck in double on every mask kind", "[flash]") {
    const std::size_t B = 2, H = 2, Lq = 3, Lk = 4, d = 2, dv = 3;
    for (const MaskCase& mc : mask_cases(B, Lq, Lk))
        for (double p : {0.0, 0.4}) {
            INFO("mask " << mc.name << ", dropout " << p);
            const Tensor q = param({B, Lq, H * d}, -1, 1, 1), k = param({B, Lk, H * d}, -1, 1, 2),
                         v = param({B, Lk, H * dv}, -1, 1, 3);
            auto f = [&](const std::vector<Tensor>& x) { return flash_attention(x[0], x[1], x[2], H, 0.7, mc.mask, p, 5); };
            REQUIRE_GRADCHECK(f, {q, k, v}, "flash_attention " + mc.name);
            REQUIRE_GRADGRADCHECK(f, {q, k, v}, "flash_attention " + mc.name);
        }
}

TEST_CASE("flash_attention without keys, queries or features", "[flash]") {
    const Tensor q = param({2, 3, 4}), k0 = param({2, 0, 4}), v0 = param({2, 0, 6});
    const Tensor out = flash_attention(q, k0, v0, 2, 0.5);
    CHECK(out.shape() == Shape{2, 3, 6});
    CHECK(max_abs_diff(out, zeros({2, 3, 6}, TensorOptions(kFloat64))) == 0.0);
    out.sum().backward();
    CHECK(max_abs_diff(q.grad(), zeros({2, 3, 4}, TensorOptions(kFloat64))) == 0.0);
    // no features: every score 0, uniform weights, as the materialised ops
    const Tensor qe = param({2, 3, 0}), ke = param({2, 5, 0}), v = param({2, 5, 4});
    CHECK(max_abs_diff(flash_attention(qe, ke, v, 2, 1.0), materialised(qe, ke, v, 2, 1.0, AttentionMask(), 0, 0)) < 1e-12);
}

TEST_CASE("flash_attention refuses bad arguments naming itself", "[flash]") {
    const Tensor q = param({2, 3, 4}), k = param({2, 5, 4}), v = param({2, 5, 6});
    CHECK_THROWS_WITH(flash_attention(q, k, v, 2, 1.0, AttentionMask(), 1.0),
                      Catch::Contains("flash_attention: dropout must be in [0, 1), got 1"));
    CHECK_THROWS_WITH(flash_attention(q, k, param({2, 4, 6}), 2, 1.0),
                      Catch::Contains("flash_attention: keys and values must have the same length"));
    CHECK_THROWS_WITH(flash_attention(q, k, v, 3, 1.0), Catch::Contains("flash_attention: queries' last axis (4) must be divisible by num_heads (3)"));
    CHECK_THROWS_WITH(flash_attention(q, k, v, 2, NAN), Catch::Contains("flash_attention: scale must be finite"));
    CHECK_THROWS_WITH(flash_attention(q, k.to(kFloat32), v, 2, 1.0), Catch::Contains("flash_attention"));
    CHECK_THROWS_WITH(flash_attention(param({2, 6, 4}), k, v, 2, 1.0, AttentionMask::causal()),
                      Catch::Contains("flash_attention: a causal mask needs at least as many keys as queries"));
}

// Distance in float steps between a and the correctly rounded float of b.
double ulps(float a, double b) {
    const float want = static_cast<float>(b);
    if (want == 0) return a == 0 ? 0 : 1e9;
    const float step = std::nextafter(std::abs(want), INFINITY) - std::abs(want);
    return std::abs(static_cast<double>(a) - static_cast<double>(want)) / step;
}

TEST_CASE("flash_attention's row exp is within 2 ulp of exp on every level", "[flash][simd]") {
    // x − m over [−87, 88] finely, plus the ends: below −87 it is 0, NaN stays NaN.
    std::vector<float> x;
    for (double t = -87.0; t <= 88.0; t += 0.000731) x.push_back(static_cast<float>(t));
    for (float t : {0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f, -87.0f, 0.6931472f, -0.6931472f}) x.push_back(t);
    on_each_level([&](SimdLevel level) {
        INFO("level " << simd_level_name(level));
        std::vector<float> y(x.size()), y_vec(x.size());
        flash_rows::exp_shifted_sum(x.data(), 0.0f, y.data(), x.size());
        double worst = 0;
        for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, ulps(y[i], std::exp(double(x[i]))));
        CHECK(worst <= 2.0);
        // one exp: the bits of vec_math's softmax row
        vec::exp_shifted_sum(x.data(), 0.0f, y_vec.data(), x.size());
        CHECK(std::memcmp(y.data(), y_vec.data(), y.size() * sizeof(float)) == 0);
        const float edge[] = {-87.5f, -1000.0f, -INFINITY, NAN, 3.0f};
        float out[5];
        flash_rows::exp_shifted_sum(edge, 2.0f, out, 5);
        CHECK(out[0] == 0.0f);  // −89.5 after the shift
        CHECK(out[1] == 0.0f);
        CHECK(out[2] == 0.0f);
        CHECK(std::isnan(out[3]));
        CHECK(ulps(out[4], std::exp(1.0)) <= 2.0);
    });
}

TEST_CASE("flash_attention's row loops give the same bits on every SIMD level", "[flash][simd]") {
    const std::size_t nq = 7, nk = 45;
    std::vector<float> S0(nq * nk), dP0(nq * nk);
    for (std::size_t i = 0; i < S0.size(); ++i) {
        S0[i] = static_cast<float>(std::sin(0.37 * double(i)) * 9.0);
        dP0[i] = static_cast<float>(std::cos(0.11 * double(i)));
    }
    const std::size_t kept[nq] = {45, 0, 17, 16, 1, 33, 44};
    const float lse[nq] = {9.5f, 0, 8.0f, 10.0f, 2.0f, 12.0f, 9.0f}, D[nq] = {0.1f, 0, -0.3f, 0.2f, 0.0f, 1.0f, -1.0f};
    const bool no_grad[nq] = {false, true, false, false, false, false, true};
    std::vector<float> results[3];
    const int levels = on_each_level([&](SimdLevel level) {
        std::vector<float> S = S0, dP = dP0, m(nq, -INFINITY), l(nq, 0.0f), rescale(nq);
        flash_rows::online_softmax(S.data(), nq, nk, kept, m.data(), l.data(), rescale.data());
        std::vector<float> T = S0, dT = dP0;
        flash_rows::weights_grad(T.data(), dT.data(), nq, nk, kept, lse, D, no_grad);
        std::vector<float>& r = results[slot(level)];
        for (const auto* v : {&S, &m, &l, &rescale, &T, &dT}) r.insert(r.end(), v->begin(), v->end());
    });
    for (int k = 1; k < levels; ++k) {
        INFO("level " << k << " against baseline");
        REQUIRE(results[0].size() == results[k].size());
        CHECK(std::memcmp(results[0].data(), results[k].data(), results[0].size() * sizeof(float)) == 0);
    }
}

// Prints the fused result and gradients in hexadecimal, for the thread-count comparison.
TEST_CASE("flash_attention thread child", "[.flash-threads-child]") {
    // Heads of 8 run on BLAS, float32 heads of 16 on packed operands where the CPU has them.
    for (Dtype dtype : {kFloat32, kFloat64})
        for (double p : {0.0, 0.2})
            for (const std::size_t d : {std::size_t(8), std::size_t(16)}) {
                const std::size_t B = 2, H = 3, Lq = 300, Lk = 530;
                auto leaf = [&](const Shape& shape, std::uint64_t seed) {
                    return param(shape, -2, 2, seed).to(dtype).detach().requires_grad_(true);
                };
                const Tensor q = leaf({B, Lq, H * d}, 1), k = leaf({B, Lk, H * d}, 2), v = leaf({B, Lk, H * d}, 3);
                const AttentionMask lens =
                    AttentionMask::valid_lens(from_vector(std::vector<std::int64_t>{500, 77}, {2}));
                const Tensor out = flash_attention(q, k, v, H, 0.3, lens, p, 9);
                (out * param(out.shape(), -1, 1, 4).detach().to(dtype)).sum().backward();
                std::ostringstream s;
                for (const Tensor& t : {out, q.grad(), k.grad(), v.grad()})
                    for (double x : t.to_vector<double>()) s << std::hexfloat << x << ' ';
                std::printf("%zu\n", std::hash<std::string>()(s.str()));
            }
    // One long causal head: the backward's key blocks run on several threads.
    const Tensor q = param({1, 900, 16}, -2, 2, 5).detach().requires_grad_(true);
    const Tensor k = param({1, 900, 16}, -2, 2, 6).detach().requires_grad_(true);
    const Tensor v = param({1, 900, 16}, -2, 2, 7).detach().requires_grad_(true);
    const Tensor out = flash_attention(q, k, v, 1, 0.25, AttentionMask::causal());
    (out * param(out.shape(), -1, 1, 8).detach()).sum().backward();
    std::ostringstream s;
    for (const Tensor& t : {out, q.grad(), k.grad(), v.grad()})
        for (double x : t.to_vector<double>()) s << std::hexfloat << x << ' ';
    std::printf("%zu\n", std::hash<std::string>()(s.str()));
}

TEST_CASE("flash_attention gives the same bits on 1 and 3 threads, dropout included", "[flash]") {
    const OnThreads runs = run_on_1_and_3_threads("[.flash-threads-child]");
    CHECK(runs.one.find("passed") != std::string::npos);
    CHECK(runs.one == runs.three);
}
