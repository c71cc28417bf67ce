// The masked softmax below d2l's fill value: masked keys get exactly 0 and a row with nothing
// kept is uniform whatever the kept scores are (−1e7, −1e30, −FLT_MAX, some −inf), on every
// path that runs softmax_row.hpp's MaskedRows (masked_softmax, head_attention_weights on every
// engine and under autocast) and for every mask form; the values d2l's fill already gave
// exactly stay the same bits (fixture hashes taken before the rule was made exact).
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "core/autocast.hpp"
#include "core/gradcheck.hpp"
#include "core/runtime/blas.hpp"
#include "core/runtime/dnnl.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using xgrad::indexing::Slice;

namespace {

// FNV-1a over a tensor's values, as stored (float32 or float64): equal hashes, equal bits.
std::uint64_t bits_hash(const Tensor& t) {
    std::uint64_t h = 1469598103934665603ull;
    const auto mix = [&](const void* p, std::size_t n) {
        const auto* b = static_cast<const unsigned char*>(p);
        for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
    };
    if (t.dtype() == kFloat32) {
        const auto v = t.to_vector<float>();
        mix(v.data(), v.size() * sizeof(float));
    } else {
        const auto v = t.to_vector<double>();
        mix(v.data(), v.size() * sizeof(double));
    }
    return h;
}

// Ordinary scores in [−5, 5), the same on every machine (no libm, no generator).
std::vector<double> ordinary(std::size_t n, std::uint64_t salt) {
    std::vector<double> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<double>(((i + salt) * 2654435761ull) % 2001) / 200.0 - 5.0;
    return v;
}

Tensor scores(const Shape& shape, Dtype d, std::uint64_t salt = 0, double offset = 0.0) {
    auto v = ordinary(checked_numel("test", shape), salt);
    for (double& x : v) x += offset;
    return from_vector(v, shape, d);
}

// A bool mask of `shape` from a pattern; rows named in `empty` (flat row index over all but
// the last axis) keep nothing.
Tensor bool_mask(const Shape& shape, std::vector<std::size_t> empty = {}) {
    const std::size_t n = shape.back(), total = checked_numel("test", shape);
    std::vector<double> v(total);
    for (std::size_t i = 0; i < total; ++i) v[i] = ((i * 7 + i / n) % 5) < 3 ? 1.0 : 0.0;
    for (std::size_t r : empty)
        for (std::size_t j = 0; j < n; ++j) v[r * n + j] = 0.0;
    return from_vector(v, shape, kFloat64).to(kBool);
}

struct MaskCase {
    const char* name;
    AttentionMask mask;
};

// The mask forms on scores (3, 5, 37): lengths of shape (batch,) and (batch, queries) with
// fully masked rows among them, causal, a bool mask per batch row and one shared.
std::vector<MaskCase> mask_forms() {
    return {
        {"lens 1-D", AttentionMask::valid_lens(from_vector(std::vector<std::int64_t>{0, 5, 37}, {3}))},
        {"lens 2-D", AttentionMask::valid_lens(from_vector(
                         std::vector<std::int64_t>{0, 1, 2, 3, 36, 37, 40, 0, 8, 9, 16, 17, 31, 33, 0}, {3, 5}))},
        {"causal", AttentionMask::causal()},
        {"bool 3-D", AttentionMask::attend_where(bool_mask({3, 5, 37}, {0, 7}))},
        {"bool 2-D", AttentionMask::attend_where(bool_mask({5, 37}, {2}))},
    };
}

// Whether a row of `mask` on scores (B, Q, K) keeps key j: the reference for the tests below.
std::vector<char> kept_table(const AttentionMask& mask, std::size_t B, std::size_t Q, std::size_t K) {
    const ResolvedMask r = mask.resolve("test", B, Q, K);
    std::vector<char> keep(B * Q * K, 1);
    if (r.by_mask()) {
        const auto w = r.where().to_vector<double>();
        for (std::size_t i = 0; i < keep.size(); ++i) keep[i] = w[r.shared() ? i % (Q * K) : i] != 0;
    } else {
        for (std::size_t row = 0; row < B * Q; ++row)
            for (std::size_t j = 0; j < K; ++j) keep[row * K + j] = j < r.prefix()[row];
    }
    return keep;
}

}  // namespace

TEST_CASE("masked softmax of ordinary scores: the same bits as before the rule was made exact",
          "[adversarial][masked_softmax]") {
    // hashes of forward and backward per (dtype, mask form), computed before the change
    struct Want {
        std::uint64_t fwd, bwd;
    };
    const std::vector<Want> want32 = {{0x498b2d8b1e205cabull, 0xe5733016136ff4e4ull}, {0xffe2ba8b670cc840ull, 0xe7dbbe8273d33097ull}, {0x5884f90f4eafc163ull, 0x493abd357357ceeeull}, {0x80cbc0291825f436ull, 0xdee7f9516615071eull}, {0xb6f596592891d23aull, 0x1c4138342be0ffe1ull}};
    const std::vector<Want> want64 = {{0xd9e7b575df35e499ull, 0x4561f0cf556d2064ull}, {0x6245f00880aee990ull, 0x67053d8bb13fa32full}, {0xeaf0038278f41048ull, 0xf5d670319bb05554ull}, {0x393868d833987b2bull, 0xa2dbec129d90e252ull}, {0x4833081b4a979cddull, 0x84417184380479baull}};
    const auto forms = mask_forms();
    for (Dtype d : {kFloat32, kFloat64}) {
        for (std::size_t c = 0; c < forms.size(); ++c) {
            CAPTURE(dtype_name(d), forms[c].name);
            Tensor X = scores({3, 5, 37}, d, c).requires_grad_();
            Tensor y = masked_softmax(X, forms[c].mask);
            (y * scores({3, 5, 37}, d, 100 + c)).sum().backward();
            const Want& w = (d == kFloat32 ? want32 : want64)[c];
            CHECK(bits_hash(y) == w.fwd);
            CHECK(bits_hash(X.grad()) == w.bwd);
        }
    }
    // rows of three keys, more rows than one group of the float kernel
    const Tensor lens = from_vector(std::vector<std::int64_t>{1, 2, 0, 3}, {4});
    const std::uint64_t short32 = 0x7ce7dd35906f671eull, short64 = 0xfcca65b85def42fbull;
    for (Dtype d : {kFloat32, kFloat64}) {
        CAPTURE(dtype_name(d));
        CHECK(bits_hash(masked_softmax(scores({4, 33, 3}, d, 7), lens)) == (d == kFloat32 ? short32 : short64));
    }
}

namespace {

// The promise, checked row by row against float64 arithmetic on the kept scores alone:
// masked keys exactly 0, a row that keeps nothing exactly 1/n, the kept keys softmax(kept)
// (a row whose kept scores are all −inf is NaN, as their softmax).
void check_promise(const Tensor& y, const Tensor& X, const std::vector<char>& keep, double rel) {
    const std::size_t n = X.size(-1), rows = X.numel() / n;
    const auto x = X.to_vector<double>(), w = y.to_vector<double>();
    for (std::size_t r = 0; r < rows; ++r) {
        CAPTURE(r);
        double m = -INFINITY;
        bool any = false;
        for (std::size_t j = 0; j < n; ++j)
            if (keep[r * n + j]) any = true, m = std::max(m, x[r * n + j]);
        double z = 0;
        for (std::size_t j = 0; j < n; ++j)
            if (keep[r * n + j]) z += std::exp(x[r * n + j] - m);
        for (std::size_t j = 0; j < n; ++j) {
            CAPTURE(j);
            const double got = w[r * n + j];
            if (any && m == -INFINITY) {
                CHECK(std::isnan(got));  // every kept score −inf: NaN, as softmax of them
            } else if (!any) {
                CHECK(got == static_cast<double>(y.dtype() == kFloat32 ? 1.0f / static_cast<float>(n) : 1.0 / n));
            } else if (!keep[r * n + j]) {
                CHECK(got == 0.0);
            } else {
                CHECK(got == Approx(std::exp(x[r * n + j] - m) / z).epsilon(rel).margin(1e-30));
            }
        }
    }
}

}  // namespace

TEST_CASE("masked softmax with every kept score below the fill: masked keys exactly 0, every mask form",
          "[adversarial][masked_softmax]") {
    const auto forms = mask_forms();
    for (Dtype d : {kFloat32, kFloat64}) {
        // −1e6 − 200: d2l's fill would take all the weight; −1e7, −1e30: far below it
        for (double offset : {-1e6 - 200.0, -1e7, -1e30}) {
            for (const MaskCase& c : forms) {
                CAPTURE(dtype_name(d), offset, c.name);
                const Tensor X = scores({3, 5, 37}, d, 3, offset);
                check_promise(masked_softmax(X, c.mask), X, kept_table(c.mask, 3, 5, 37), d == kFloat32 ? 1e-5 : 1e-12);
            }
        }
    }
}

TEST_CASE("masked softmax at the float limits: -FLT_MAX, -DBL_MAX and some -inf among the kept scores",
          "[adversarial][masked_softmax]") {
    const auto forms = mask_forms();
    for (Dtype d : {kFloat32, kFloat64}) {
        const double lowest = d == kFloat32 ? -static_cast<double>(FLT_MAX) : -DBL_MAX;
        for (const MaskCase& c : forms) {
            CAPTURE(dtype_name(d), c.name);
            // every score the lowest finite value: uniform over the kept keys
            const Tensor low = full({3, 5, 37}, lowest, d);
            check_promise(masked_softmax(low, c.mask), low, kept_table(c.mask, 3, 5, 37), 1e-6);
            // every third key −inf, the rest −1e7 and below: those −inf keys get 0 as well
            auto v = scores({3, 5, 37}, kFloat64, 5, -1e7).to_vector<double>();
            for (std::size_t i = 0; i < v.size(); i += 3) v[i] = -INFINITY;
            const Tensor X = from_vector(v, {3, 5, 37}, d);
            check_promise(masked_softmax(X, c.mask), X, kept_table(c.mask, 3, 5, 37), d == kFloat32 ? 1e-5 : 1e-12);
        }
    }
}

TEST_CASE("masked softmax: a row that keeps no key is uniform whatever its scores, 1/n exactly",
          "[adversarial][masked_softmax]") {
    const Tensor none1 = from_vector(std::vector<std::int64_t>{0, 0}, {2});
    const Tensor none2 = zeros({2, 3}, kInt64);
    const Tensor nowhere = zeros({2, 3, 7}, kBool);
    for (Dtype d : {kFloat32, kFloat64}) {
        for (double s : {0.0, -1e7, -1e30, 1e30, -HUGE_VAL, HUGE_VAL, std::nan("")}) {
            CAPTURE(dtype_name(d), s);
            const Tensor X = full({2, 3, 7}, s, d);
            for (const AttentionMask& m : {AttentionMask::valid_lens(none1), AttentionMask::valid_lens(none2),
                                           AttentionMask::attend_where(nowhere),
                                           AttentionMask::attend_where(zeros({3, 7}, kBool))}) {
                const auto w = masked_softmax(X, m).to_vector<double>();
                for (double v : w) CHECK(v == (d == kFloat32 ? static_cast<double>(1.0f / 7.0f) : 1.0 / 7.0));
            }
        }
    }
}

TEST_CASE("masked softmax below the fill: gradients are those of the softmax of the kept keys alone",
          "[adversarial][masked_softmax]") {
    // lengths 2 and 4 of 6 keys, scores near −1e6 − 200 (d2l's fill would dominate them)
    const Tensor lens = from_vector(std::vector<std::int64_t>{2, 4}, {2});
    Tensor X = (param({2, 3, 6}, -1, 1, 11) - (1e6 + 200)).detach().requires_grad_();
    const Tensor c = param({2, 3, 6}, -1, 1, 12).detach();
    (masked_softmax(X, lens) * c).sum().backward();
    for (std::size_t b = 0; b < 2; ++b) {
        const long L = b == 0 ? 2 : 4;
        Tensor Xk = X.detach().index({static_cast<long>(b), Slice(), Slice(0, L)}).clone().requires_grad_();
        (softmax(Xk, -1) * c.index({static_cast<long>(b), Slice(), Slice(0, L)})).sum().backward();
        CHECK_THAT(vals(X.grad().index({static_cast<long>(b), Slice(), Slice(0, L)})), approx(vals(Xk.grad()), 1e-12));
        for (double g : vals(X.grad().index({static_cast<long>(b), Slice(), Slice(L, 6)}))) CHECK(g == 0.0);
    }
    // finite differences at −1e6: steps of 1e-4 keep the rounding of X ± eps (ulp 1.2e-10) small
    GradcheckOptions o;
    o.eps = 1e-4;
    o.name = "masked_softmax below the fill";
    const Tensor lens2 = from_vector(std::vector<std::int64_t>{0, 1, 3, 6, 2, 5}, {2, 3});
    const Tensor where = bool_mask({3, 6}, {1});
    for (const AttentionMask& m : {AttentionMask::valid_lens(lens), AttentionMask::valid_lens(lens2),
                                   AttentionMask::causal(), AttentionMask::attend_where(where)}) {
        const Tensor P = (param({2, 3, 6}, -1, 1, 13) - (1e6 + 200)).detach().requires_grad_();
        const auto f = [&](const std::vector<Tensor>& in) { return masked_softmax(in[0], m); };
        auto r1 = gradcheck(f, {P}, o);
        INFO(r1.report);
        CHECK(r1.passed);
        auto r2 = gradgradcheck(f, {P}, o);
        INFO(r2.report);
        CHECK(r2.passed);
    }
}

namespace {

struct EngineGuard {
    explicit EngineGuard(GemmEngine e) : previous(gemm_engine()) { set_gemm_engine(e); }
    ~EngineGuard() { set_gemm_engine(previous); }
    GemmEngine previous;
};

// The head attention paths: each engine (BLAS in float32 and float64, oneDNN float32, and
// bfloat16 under autocast where this build and CPU have them), run on f().
template <class F> void on_every_attention_path(F&& f) {
    for (Dtype d : {kFloat32, kFloat64}) {
        EngineGuard blas(GemmEngine::OpenBlas);
        f("blas", d);
    }
    if (dnnl::available()) {
        EngineGuard onednn(GemmEngine::OneDnn);
        f("onednn float32", kFloat32);
    }
    AutocastOptions allow;
    allow.allow_emulation = true;
    if (autocast_refusal(AutocastCapabilities::current(), true).empty()) {
        AutocastGuard bf16(kBFloat16, allow);
        f("autocast bfloat16", kFloat32);
    }
}

// q (2, 32, 64) and k (2, 37, 64) of small whole numbers: 2 heads of 32 features, whose
// scores 0.125·q·kᵀ are exact on every engine (and in bfloat16), times `scale_q`.
std::pair<Tensor, Tensor> whole_qk(Dtype d, double scale_q, double k_lo) {
    auto q = ordinary(2 * 32 * 64, 1), k = ordinary(2 * 37 * 64, 2);
    for (double& v : q) v = std::floor(v / 2.5) * scale_q;      // whole numbers in [−2, 1] · scale_q
    for (double& v : k) v = k_lo + std::floor((v + 5) / 3.4);   // whole numbers in [k_lo, k_lo + 2]
    return {from_vector(q, {2, 32, 64}, d), from_vector(k, {2, 37, 64}, d)};
}

// The head weights' masks: lengths per batch row, causal, a shared bool mask, with the same
// mask for masked_softmax on (batch·heads, queries, keys).
struct HeadMask {
    const char* name;
    AttentionMask heads, flat;
};
std::vector<HeadMask> head_masks() {
    const Tensor lens = from_vector(std::vector<std::int64_t>{0, 9}, {2});
    const Tensor where = bool_mask({32, 37}, {4});
    return {{"lens", AttentionMask::valid_lens(lens), AttentionMask::valid_lens(repeat_interleave(lens, 2, 0))},
            {"causal", AttentionMask::causal(), AttentionMask::causal()},
            {"bool", AttentionMask::attend_where(where), AttentionMask::attend_where(where)}};
}

}  // namespace

TEST_CASE("head attention weights: ordinary scores give masked_softmax's bits on every engine",
          "[adversarial][masked_softmax]") {
    on_every_attention_path([](const char* engine, Dtype d) {
        const auto [q, k] = whole_qk(d, 1.0, -1.0);
        // the exact scores, (batch·heads, 32, 37), from float64
        const Tensor S = (matmul(q.to(kFloat64).reshape({2, 32, 2, 32}).permute({0, 2, 1, 3}),
                                 k.to(kFloat64).reshape({2, 37, 2, 32}).permute({0, 2, 3, 1})) *
                          0.125)
                             .reshape({4, 32, 37})
                             .to(d);
        for (const HeadMask& m : head_masks()) {
            CAPTURE(engine, dtype_name(d), m.name);
            CHECK(bits_hash(head_attention_weights(q, k, 2, 0.125, m.heads)) == bits_hash(masked_softmax(S, m.flat)));
        }
    });
}

TEST_CASE("head attention weights with every kept score below the fill: masked keys exactly 0 on every engine",
          "[adversarial][masked_softmax]") {
    on_every_attention_path([](const char* engine, Dtype d) {
        // scores −2^17·(whole numbers from 32 to 96): −4.2e6 and below, exact in bfloat16 too
        auto [q, k] = whole_qk(d, 0.0, 1.0);
        q = full(q.shape(), -std::ldexp(1.0, 20), d).requires_grad_();
        k = k.requires_grad_();
        const Tensor S = (matmul(q.detach().to(kFloat64).reshape({2, 32, 2, 32}).permute({0, 2, 1, 3}),
                                 k.detach().to(kFloat64).reshape({2, 37, 2, 32}).permute({0, 2, 3, 1})) *
                          0.125)
                             .reshape({4, 32, 37});
        for (const HeadMask& m : head_masks()) {
            CAPTURE(engine, dtype_name(d), m.name);
            const Tensor w = head_attention_weights(q, k, 2, 0.125, m.heads);
            check_promise(w, S, kept_table(m.flat, 4, 32, 37), 1e-5);
            // the backward reads the weights: no gradient reaches a masked key's score
            (w * S.to(d)).sum().backward();
            for (double g : vals(q.grad())) CHECK(std::isfinite(g));
            q.grad().zero_();
        }
    });
}
