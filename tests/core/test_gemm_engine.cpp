// The float32 engine (core/runtime/blas.hpp, GemmEngine): the setting and its errors, Auto's
// rule for any CPU, and every float32 product form on each engine against float64, forward
// and gradients, whatever the rule picks on this machine.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <functional>

#include "../autocast_helpers.hpp"
#include "core/attention_mask.hpp"
#include "core/error.hpp"
#include "core/random.hpp"
#include "core/runtime/blas.hpp"
#include "core/runtime/dnnl.hpp"
#include "core/tensor.hpp"

using namespace xgrad;
using autocast_test::worst_ratio;

namespace {

// Forces the engine while alive; the setting it found comes back after.
struct EngineGuard {
    explicit EngineGuard(GemmEngine e) : previous(gemm_engine()) { set_gemm_engine(e); }
    ~EngineGuard() { set_gemm_engine(previous); }
    GemmEngine previous;
};

Tensor to64(const Tensor& t) { return t.detach().to(kFloat64).requires_grad_(); }

// f on float32 inputs with `engine` forced, against f on the same values in float64 (dgemm,
// which no engine setting touches): forward and both gradients within the float32
// accumulation bound (terms + 2)·2^-24·Σ|a||b| (autocast_helpers.hpp).
void check_engine(GemmEngine engine, const std::function<Tensor(const Tensor&, const Tensor&)>& f, const Shape& sa,
                  const Shape& sb, std::size_t terms) {
    Generator gen(11);
    const Tensor a = randn(sa, {}, gen).requires_grad_(), b = randn(sb, {}, gen).requires_grad_();
    Tensor y;
    {
        EngineGuard force(engine);
        y = f(a, b);
    }
    REQUIRE(y.dtype() == kFloat32);
    const Tensor R = randn(y.shape(), {}, gen);
    (y * R).sum().backward();  // outside the guard: the backward follows its forward's engine
    const Tensor a64 = to64(a), b64 = to64(b);
    (f(a64, b64) * R.to(kFloat64)).sum().backward();
    const Tensor aa = abs(a.detach().to(kFloat64)).requires_grad_(), ab = abs(b.detach().to(kFloat64)).requires_grad_();
    const Tensor scale = f(aa, ab);
    (scale * abs(R.to(kFloat64))).sum().backward();
    CHECK(worst_ratio(y, f(a64, b64), scale, terms) <= 1.0);
    CHECK(worst_ratio(a.grad(), a64.grad(), aa.grad(), terms) <= 1.0);
    CHECK(worst_ratio(b.grad(), b64.grad(), ab.grad(), terms) <= 1.0);
}

void check_both(const std::function<Tensor(const Tensor&, const Tensor&)>& f, const Shape& sa, const Shape& sb,
                std::size_t terms) {
    check_engine(GemmEngine::OpenBlas, f, sa, sb, terms);
    if (dnnl::available()) check_engine(GemmEngine::OneDnn, f, sa, sb, terms);
}

}  // namespace

TEST_CASE("gemm engine: names parse and anything else is refused naming the setting", "[gemm_engine]") {
    CHECK(parse_gemm_engine("auto") == GemmEngine::Auto);
    CHECK(parse_gemm_engine("openblas") == GemmEngine::OpenBlas);
    CHECK(parse_gemm_engine("onednn") == GemmEngine::OneDnn);
    for (GemmEngine e : {GemmEngine::Auto, GemmEngine::OpenBlas, GemmEngine::OneDnn})
        CHECK(parse_gemm_engine(gemm_engine_name(e)) == e);
    for (const char* bad : {"", "OneDNN", "Auto", "mkl", " auto", "openblas ", "onednn\n", "1"}) {
        CHECK_THROWS_AS(parse_gemm_engine(bad), Error);
        CHECK_THROWS_WITH(parse_gemm_engine(bad), Catch::Contains("XGRAD_GEMM") && Catch::Contains("auto, openblas or onednn"));
    }
    CHECK_THROWS_WITH(parse_gemm_engine("blis", "--gemm"), Catch::Contains("--gemm") && Catch::Contains("'blis'"));
    CHECK_THROWS_AS(set_gemm_engine(static_cast<GemmEngine>(7)), Error);
}

TEST_CASE("gemm engine: forcing is honoured and OneDnn without oneDNN is refused", "[gemm_engine]") {
    const GemmEngine before = gemm_engine();
    {
        EngineGuard force(GemmEngine::OpenBlas);
        CHECK(gemm_engine() == GemmEngine::OpenBlas);
        CHECK_FALSE(gemm_uses_onednn(64, 512, 512, 512));
    }
    CHECK(gemm_engine() == before);
    if (dnnl::available()) {
        EngineGuard force(GemmEngine::OneDnn);
        CHECK(gemm_uses_onednn(1, 1, 1, 1));
    } else {
        CHECK_THROWS_WITH(set_gemm_engine(GemmEngine::OneDnn), Catch::Contains("no oneDNN"));
        CHECK(gemm_engine() == before);
    }
}

TEST_CASE("gemm engine: Auto picks oneDNN for big calls where oneDNN runs AVX-512 beside OpenBLAS", "[gemm_engine]") {
    const std::string ob = "openblas-runtime";
    const std::size_t big = 1024;  // 1024³ multiply-adds
    // Any AVX-512 level of oneDNN, whatever kernels OpenBLAS picked (the core is not an input)
    for (const char* isa : {"avx512_core", "avx512_core_vnni", "avx512_core_bf16", "avx512_core_amx"})
        CHECK(gemm_rule_picks_onednn(ob, isa, 1, big, big, big));
    // oneDNN without AVX-512 or with an ISA name it might report in future: stay
    for (const char* isa : {"avx2", "avx", "sse41", "other", "", "avx512", "AVX512_CORE", " avx512_core"})
        CHECK_FALSE(gemm_rule_picks_onednn(ob, isa, 1, big, big, big));
    // Another BLAS (the cblas build: BLIS, MKL, reference) is the user's choice: stay
    for (const char* backend : {"cblas", "", "openblas", "mkl"})
        CHECK_FALSE(gemm_rule_picks_onednn(backend, "avx512_core", 1, big, big, big));
    // The size threshold counts the whole call, batch included, exactly at the boundary
    const std::size_t t = kGemmOneDnnMinMultiplyAdds;
    CHECK(gemm_rule_picks_onednn(ob, "avx512_core", 1, t, 1, 1));
    CHECK_FALSE(gemm_rule_picks_onednn(ob, "avx512_core", 1, t - 1, 1, 1));
    CHECK(gemm_rule_picks_onednn(ob, "avx512_core", t / 64, 4, 4, 4));
    CHECK_FALSE(gemm_rule_picks_onednn(ob, "avx512_core", t / 64 - 1, 4, 4, 4));
    // A count past 2^64 must not wrap around to a small one
    const std::size_t huge = std::size_t(1) << 32;
    CHECK(gemm_rule_picks_onednn(ob, "avx512_core", huge, huge, 1, 1));
    CHECK(gemm_rule_picks_onednn(ob, "avx512_core", 1, huge, huge, std::size_t(1) << 20));
    CHECK_FALSE(gemm_rule_picks_onednn(ob, "avx512_core", 0, big, big, big));
}

TEST_CASE("gemm engine: matmul bmm and matmul_t agree with float64 on both engines", "[gemm_engine]") {
    auto mm = [](const Tensor& a, const Tensor& b) { return matmul(a, b); };
    SECTION("matmul 2-D") { check_both(mm, {64, 48}, {48, 40}, 64); }  // dB sums 64 rows
    SECTION("matmul 1-D operands") {
        check_both(mm, {48}, {48, 40}, 48);
        check_both(mm, {3, 64, 48}, {48}, 3 * 64);
    }
    SECTION("bmm") { check_both([](const Tensor& a, const Tensor& b) { return bmm(a, b); }, {3, 32, 40}, {3, 40, 36}, 40); }
    SECTION("matmul with a shared weight (one stacked product)") { check_both(mm, {2, 3, 32, 40}, {40, 36}, 2 * 3 * 32); }
    SECTION("matmul broadcasting both batch shapes (summed gradients)") {
        check_both(mm, {2, 1, 32, 40}, {3, 40, 32}, 3 * 40);
    }
    SECTION("matmul large enough to be split over the pool: rows, then batches") {
        check_both(mm, {256, 128}, {128, 96}, 256);
        check_both([](const Tensor& a, const Tensor& b) { return bmm(a, b); }, {16, 64, 64}, {16, 64, 64}, 64);
    }
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            SECTION("matmul_t batched " + std::to_string(ta) + std::to_string(tb)) {
                const Shape sa = ta ? Shape{2, 40, 32} : Shape{2, 32, 40};
                const Shape sb = tb ? Shape{2, 36, 40} : Shape{2, 40, 36};
                check_both([ta, tb](const Tensor& a, const Tensor& b) { return matmul_t(a, b, ta, tb, 0.375); }, sa, sb, 40);
            }
            SECTION("matmul_t shared weight " + std::to_string(ta) + std::to_string(tb)) {
                // nn::Linear's form when tb: x (…, in) times weight (out, in)ᵀ
                const Shape sa = ta ? Shape{3, 40, 32} : Shape{3, 32, 40};
                const Shape sb = tb ? Shape{36, 40} : Shape{40, 36};
                check_both([ta, tb](const Tensor& a, const Tensor& b) { return matmul_t(a, b, ta, tb, -1.5); }, sa, sb,
                           3 * 40);
            }
        }
}

TEST_CASE("gemm engine: the attention products agree with float64 on both engines", "[gemm_engine]") {
    SECTION("head_attention_combine") {
        check_both([](const Tensor& w, const Tensor& v) { return head_attention_combine(w, v, 2); }, {2 * 2, 32, 40},
                   {2, 40, 64}, 40);
    }
    SECTION("head_attention_weights, masked and not") {
        // Scores are float32 sums (errors about 1e-6 here) and the softmax is float32: weights
        // within 1e-5 of float64's, gradients within 1e-4 of the largest. 2 batches of 2 heads,
        // 40 queries and 48 keys; or 3 batches of 3 heads, 200 queries and 256 keys, which
        // oneDNN runs in blocks of 5 heads, ending, covering and starting batches.
        for (auto [B, H, Lq, Lk] : {std::array<std::size_t, 4>{2, 2, 40, 48}, std::array<std::size_t, 4>{3, 3, 200, 256}})
        for (bool masked : {false, true}) {
            std::vector<GemmEngine> engines{GemmEngine::OpenBlas};
            if (dnnl::available()) engines.push_back(GemmEngine::OneDnn);
            for (GemmEngine engine : engines) {
                CAPTURE(B, H, Lq, Lk, masked);
                Generator gen(3);
                const Tensor q = randn({B, Lq, 32 * H}, {}, gen).requires_grad_();
                const Tensor k = randn({B, Lk, 32 * H}, {}, gen).requires_grad_();
                std::vector<std::int64_t> lens(B, static_cast<std::int64_t>(Lk));
                lens[1] = 20;
                const auto mask = masked ? AttentionMask::valid_lens(from_vector(lens, {B})) : AttentionMask();
                Tensor w;
                {
                    EngineGuard force(engine);
                    w = head_attention_weights(q, k, H, 0.125, mask);
                }
                const Tensor R = randn(w.shape(), {}, gen);
                (w * R).sum().backward();
                const Tensor q64 = to64(q), k64 = to64(k);
                const Tensor w64 = head_attention_weights(q64, k64, H, 0.125, mask);
                (w64 * R.to(kFloat64)).sum().backward();
                CHECK(max(abs(w.to(kFloat64) - w64)).item<double>() < 1e-5);
                for (const auto& [got, want] : {std::pair{q.grad(), q64.grad()}, std::pair{k.grad(), k64.grad()}})
                    CHECK(max(abs(got.to(kFloat64) - want)).item<double>() <= 1e-4 * max(abs(want)).item<double>());
            }
        }
    }
}

TEST_CASE("gemm engine: the backward follows its forward's engine and float64 ignores the setting", "[gemm_engine]") {
    if (!dnnl::available()) return;
    Generator gen(5);
    Tensor a = randn({64, 1000}, {}, gen).requires_grad_(), b = randn({1000, 48}, {}, gen).requires_grad_();
    auto run = [&](GemmEngine forward, GemmEngine backward) {
        a.zero_grad();
        b.zero_grad();
        Tensor y;
        {
            EngineGuard f(forward);
            y = matmul(a, b);
        }
        EngineGuard g(backward);
        y.sum().backward();
        return std::vector<Tensor>{y.detach(), a.grad().clone(), b.grad().clone()};
    };
    const auto dnn = run(GemmEngine::OneDnn, GemmEngine::OneDnn);
    const auto mixed = run(GemmEngine::OneDnn, GemmEngine::OpenBlas);
    const auto blas = run(GemmEngine::OpenBlas, GemmEngine::OpenBlas);
    for (std::size_t i = 0; i < 3; ++i)
        CHECK(mixed[i].to_vector<float>() == dnn[i].to_vector<float>());
    // The engines really differ: sums of 1000 terms in another order round differently somewhere.
    CHECK(dnn[0].to_vector<float>() != blas[0].to_vector<float>());
    const Tensor a64 = a.detach().to(kFloat64), b64 = b.detach().to(kFloat64);
    std::vector<double> on_blas, on_dnnl;
    {
        EngineGuard f(GemmEngine::OpenBlas);
        on_blas = matmul(a64, b64).to_vector<double>();
    }
    {
        EngineGuard f(GemmEngine::OneDnn);
        on_dnnl = matmul(a64, b64).to_vector<double>();
    }
    CHECK(on_blas == on_dnnl);
}
