// Autocast (core/autocast.hpp): the guard's state, its refusal, and every product under it
// against the product of the bfloat16-rounded inputs computed in float64.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <functional>
#include <optional>
#include <thread>
#include <tuple>

#include "../autocast_helpers.hpp"
#include "core/error.hpp"
#include "core/random.hpp"
#include "core/runtime/dnnl.hpp"
#include "core/tensor.hpp"

using namespace xgrad;
using autocast_test::allow;
using autocast_test::rounded64;
using autocast_test::WidenedBf16;
using autocast_test::worst_ratio;

namespace {

bool same(const Tensor& a, const Tensor& b) { return a.shape() == b.shape() && a.to_vector<double>() == b.to_vector<double>(); }

// A product f(a, b) under autocast against f on the rounded inputs in float64, forward and both
// gradients (upstream gradient R, itself rounded to bfloat16 by the backward).
// grad_a or grad_b false: that input needs no gradient, and its backward product is not run.
void check_product(const std::function<Tensor(const Tensor&, const Tensor&)>& f, const Shape& sa, const Shape& sb,
                   std::size_t terms, bool grad_a = true, bool grad_b = true) {
    Generator gen(7);
    const Tensor a = randn(sa, {}, gen).requires_grad_(grad_a), b = randn(sb, {}, gen).requires_grad_(grad_b);
    Tensor y;
    {
        AutocastGuard guard(kBFloat16, allow());
        y = f(a, b);
    }
    REQUIRE(y.dtype() == kFloat32);
    const Tensor R = randn(y.shape(), {}, gen);
    (y * R).sum().backward();
    // The reference: float64 on the rounded values, and the bound's scale on their magnitudes.
    const Tensor a64 = rounded64(a).requires_grad_(), b64 = rounded64(b).requires_grad_();
    const Tensor y64 = f(a64, b64);
    (y64 * rounded64(R)).sum().backward();
    const Tensor aa = abs(rounded64(a)).requires_grad_(), ab = abs(rounded64(b)).requires_grad_();
    const Tensor scale = f(aa, ab);
    (scale * abs(rounded64(R))).sum().backward();
    CHECK(worst_ratio(y, y64, scale, terms) <= 1.0);
    for (const auto& [x, x64, scale_x] : {std::tuple{a, a64, aa}, std::tuple{b, b64, ab}}) {
        REQUIRE(x.has_grad() == x.requires_grad());
        if (!x.requires_grad()) continue;
        REQUIRE(x.grad().dtype() == kFloat32);
        CHECK(worst_ratio(x.grad(), x64.grad(), scale_x.grad(), terms) <= 1.0);
    }
    // Float32 without the guard rounds nothing: far outside the bound, so the check can fail.
    CHECK(worst_ratio(f(a, b), y64, scale, terms) > 4.0);
}

// head_attention_weights of q and k under autocast, its gradients from the upstream R, and
// the same on the bfloat16-rounded inputs in float64 (q64 and k64 hold those gradients).
struct WeightsRun {
    Tensor w, w64, q64, k64;
};
WeightsRun weights_under_autocast(const Tensor& q, const Tensor& k, std::size_t H, const AttentionMask& mask,
                                  Generator& gen) {
    WeightsRun run;
    {
        AutocastGuard guard(kBFloat16, allow());
        run.w = head_attention_weights(q, k, H, 0.125, mask);
    }
    const Tensor R = randn(run.w.shape(), {}, gen);
    (run.w * R).sum().backward();
    run.q64 = rounded64(q).requires_grad_(q.requires_grad());
    run.k64 = rounded64(k).requires_grad_(k.requires_grad());
    run.w64 = head_attention_weights(run.q64, run.k64, H, 0.125, mask);
    (run.w64 * R.to(kFloat64)).sum().backward();
    return run;
}

}  // namespace

TEST_CASE("autocast: the guard nests and composes with NoGradGuard and is per thread", "[autocast]") {
    if (!dnnl::available()) return;
    CHECK_FALSE(is_autocast_enabled());
    {
        AutocastGuard on(kBFloat16, allow());
        CHECK(is_autocast_enabled());
        {
            AutocastOptions off = allow();
            off.enabled = false;
            AutocastGuard inner(kBFloat16, off);
            CHECK_FALSE(is_autocast_enabled());
            {
                NoGradGuard no_grad;
                AutocastGuard again(kBFloat16, allow());
                CHECK(is_autocast_enabled());
                CHECK_FALSE(grad_enabled());
            }
            CHECK_FALSE(is_autocast_enabled());
            CHECK(grad_enabled());
        }
        CHECK(is_autocast_enabled());
        bool other = true;
        std::thread([&] { other = is_autocast_enabled(); }).join();
        CHECK_FALSE(other);
    }
    CHECK_FALSE(is_autocast_enabled());
}

TEST_CASE("autocast: refused without oneDNN or without bfloat16 instructions and says why", "[autocast]") {
    AutocastCapabilities emulating{true, false, "avx512_core_vnni", "oneDNN 2.6.3", true};
    const std::string why = autocast_refusal(emulating, false);
    CHECK_THAT(why, Catch::Contains("avx512_core_vnni") && Catch::Contains("emulated") &&
                        Catch::Contains("slower than float32") && Catch::Contains("XGRAD_AUTOCAST_ALLOW_EMULATION"));
    CHECK(autocast_refusal(emulating, true).empty());
    // An AVX2 CPU, where oneDNN 2.6 has no bfloat16 matmul and xgrad widens the operands.
    AutocastCapabilities widening{true, false, "avx2", "oneDNN 2.6.3", false};
    CHECK_THAT(autocast_refusal(widening, false),
               Catch::Contains("instruction set avx2") && Catch::Contains("oneDNN 2.6.3 has no bfloat16 matmul") &&
                   Catch::Contains("widened to float32") && Catch::Contains("slower than float32") &&
                   Catch::Contains("XGRAD_AUTOCAST_ALLOW_EMULATION"));
    CHECK(autocast_refusal(widening, true).empty());
    CHECK(autocast_refusal({true, true, "avx512_core_bf16", "oneDNN 2.6.3", true}, false).empty());
    CHECK(autocast_refusal({true, true, "avx512_core_amx", "oneDNN 2.6.3", true}, false).empty());
    // This machine's capabilities say which path its products take.
    if (dnnl::available())
        CHECK(AutocastCapabilities::current().dnnl_bf16_matmul == (dnnl::bf16_path() == dnnl::Bf16Path::onednn));
    for (bool allowed : {false, true})
        CHECK_THAT(autocast_refusal({false, false, "", ""}, allowed), Catch::Contains("no oneDNN") || Catch::Contains("has none"));
    // Only bfloat16 is a lower precision here, as in torch's CPU autocast; the state is left alone.
    for (Dtype d : {kFloat32, kFloat64, kInt64, kBool})
        CHECK_THROWS_WITH(AutocastGuard(d, allow()), Catch::Contains("autocast: dtype must be bfloat16") &&
                                                          Catch::Contains(std::string("got ") + std::string(dtype_name(d))));
    CHECK_FALSE(is_autocast_enabled());
    // This machine: the guard refuses exactly when the decision says so, and leaves the state.
    const std::string here = autocast_refusal(AutocastCapabilities::current(), false);
    ::unsetenv("XGRAD_AUTOCAST_ALLOW_EMULATION");
    if (here.empty()) {
        AutocastGuard g(kBFloat16);
        CHECK(is_autocast_enabled());
    } else {
        CHECK_THROWS_WITH(AutocastGuard(kBFloat16), here);
        CHECK_FALSE(is_autocast_enabled());
    }
    if (!dnnl::available()) {
        CHECK_THROWS_WITH(AutocastGuard(kBFloat16, allow()), Catch::Contains("oneDNN"));
        return;
    }
    // The environment's knob: 1 allows, anything but 0 or 1 is an error naming it.
    ::setenv("XGRAD_AUTOCAST_ALLOW_EMULATION", "1", 1);
    { AutocastGuard g(kBFloat16); CHECK(is_autocast_enabled()); }
    if (!dnnl::native_bf16()) {
        ::setenv("XGRAD_AUTOCAST_ALLOW_EMULATION", "yes", 1);
        CHECK_THROWS_WITH(AutocastGuard(kBFloat16), Catch::Contains("XGRAD_AUTOCAST_ALLOW_EMULATION") && Catch::Contains("'yes'"));
        ::setenv("XGRAD_AUTOCAST_ALLOW_EMULATION", "0", 1);
        CHECK_THROWS_WITH(AutocastGuard(kBFloat16), here);
    }
    ::unsetenv("XGRAD_AUTOCAST_ALLOW_EMULATION");
}

TEST_CASE("autocast: matmul bmm and matmul_t multiply bfloat16-rounded inputs in float32", "[autocast]") {
    if (!dnnl::available()) return;
    // Here and below, each product also widened to float32 (on any CPU), as where oneDNN has no
    // bfloat16 matmul: the same bounds hold.
    const bool widened = GENERATE(false, true);
    CAPTURE(widened);
    const WidenedBf16 force(widened);
    SECTION("matmul 2-D") { check_product([](const Tensor& a, const Tensor& b) { return matmul(a, b); }, {64, 48}, {48, 40}, 48); }
    SECTION("bmm") { check_product([](const Tensor& a, const Tensor& b) { return bmm(a, b); }, {3, 32, 40}, {3, 40, 36}, 40); }
    SECTION("matmul with a shared right operand (one stacked product)") {
        check_product([](const Tensor& a, const Tensor& b) { return matmul(a, b); }, {2, 3, 32, 40}, {40, 36}, 2 * 3 * 32);
    }
    SECTION("matmul broadcasting both batch shapes (one product per batch, summed gradients)") {
        check_product([](const Tensor& a, const Tensor& b) { return matmul(a, b); }, {2, 1, 32, 40}, {3, 40, 32}, 3 * 40);
    }
    for (bool ta : {false, true})
        for (bool tb : {false, true})
            SECTION("matmul_t " + std::to_string(ta) + std::to_string(tb)) {
                const Shape sa = ta ? Shape{2, 40, 32} : Shape{2, 32, 40};
                const Shape sb = tb ? Shape{2, 36, 40} : Shape{2, 40, 36};
                check_product([ta, tb](const Tensor& a, const Tensor& b) { return matmul_t(a, b, ta, tb, 0.375); }, sa, sb, 40);
            }
}

TEST_CASE("autocast: the attention products multiply bfloat16-rounded inputs", "[autocast]") {
    if (!dnnl::available()) return;
    // Their bfloat16 copies are head-packed (autocast::to_bf16_heads): one head, and several
    // (where a copy that mixed up heads, rows or batches would give other products), queries
    // and keys of different lengths, and each input alone needing a gradient.
    const std::size_t H = GENERATE(1, 3);
    const auto [grad_a, grad_b] = GENERATE(std::pair{true, true}, std::pair{true, false}, std::pair{false, true});
    const bool widened = GENERATE(false, true);
    CAPTURE(H, grad_a, grad_b, widened);
    const WidenedBf16 force(widened);
    // combine: out_bh = W_bh·V_bh, 32 values of 40 keys, heads of 32: 32·32·40 multiply-adds each
    SECTION("head_attention_combine") {
        check_product([H](const Tensor& w, const Tensor& v) { return head_attention_combine(w, v, H); }, {2 * H, 32, 40},
                      {2, 40, 32 * H}, 40, grad_a, grad_b);
    }
    SECTION("head_attention_weights") {
        // The scores are rounded products; the softmax of them is float32. Weights within 1e-5 of
        // the float64 weights of the rounded inputs (score errors are about 1e-6 here); the
        // gradients pass through the softmax's gradient rounded to bfloat16: within 2^-7 of the
        // largest. Heads of 32, 40 queries and 48 keys; or 200 and 256, whose scores run in
        // blocks of 5 heads (ops_attention.cpp's pair_block), so that with 3 batches of 3 heads
        // a block may end in a batch, cover whole ones or start one; and one batch, where one
        // head (fewer pairs than threads) runs its block's products and rows over the pool.
        const auto [batch, Lq, Lk] = GENERATE(std::tuple<std::size_t, std::size_t, std::size_t>{2, 40, 48},
                                              std::tuple<std::size_t, std::size_t, std::size_t>{3, 200, 256},
                                              std::tuple<std::size_t, std::size_t, std::size_t>{1, 200, 256});
        CAPTURE(batch, Lq, Lk);
        Generator gen(3);
        const Tensor q = randn({batch, Lq, 32 * H}, {}, gen).requires_grad_(grad_a);
        const Tensor k = randn({batch, Lk, 32 * H}, {}, gen).requires_grad_(grad_b);
        const Tensor per_query = randint(0, static_cast<std::int64_t>(Lk) + 1, {batch, Lq}, gen);
        const Tensor attend = rand({batch, Lq, Lk}, {}, gen) < 0.7;
        std::vector<std::int64_t> lens(batch, static_cast<std::int64_t>(Lk));
        lens[batch - 1] = 20;
        const auto [name, mask] = GENERATE_COPY(
            std::pair{"every key", AttentionMask()},
            std::pair{"valid_lens (batch,)", AttentionMask::valid_lens(from_vector(lens, {batch}))},
            std::pair{"valid_lens (batch, queries)", AttentionMask::valid_lens(per_query)},
            std::pair{"bool mask", AttentionMask::attend_where(attend)},
            std::pair{"shared bool mask", AttentionMask::attend_where(attend[batch - 1])},
            std::pair{"causal", AttentionMask::causal()});
        CAPTURE(name);
        const auto [w, w64, q64, k64] = weights_under_autocast(q, k, H, mask, gen);
        CHECK(max(abs(w.to(kFloat64) - w64)).item<double>() < 1e-5);
        CHECK(max(abs(head_attention_weights(q, k, H, 0.125, mask).to(kFloat64) - w64)).item<double>() > 1e-4);
        for (const auto& [x, x64] : {std::pair{q, q64}, std::pair{k, k64}}) {
            REQUIRE(x.has_grad() == x.requires_grad());
            if (!x.requires_grad()) continue;
            const Tensor got = x.grad(), want = x64.grad();
            REQUIRE(got.dtype() == kFloat32);
            CHECK(max(abs(got.to(kFloat64) - want)).item<double>() <= std::ldexp(1.0, -7) * max(abs(want)).item<double>());
        }
    }
}

TEST_CASE("autocast: one query over many keys (pooling) gets each key's gradient in its own row", "[autocast]") {
    if (!dnnl::available()) return;
    // With one query the dQ products are evenly strided across batches and the dK ones are not:
    // dK planned as dQ's one call wrote batch 1's heads over batch 0's key rows and left its
    // own unwritten. 1·512·64 multiply-adds per head: the bfloat16 path.
    const std::size_t H = GENERATE(1, 4);
    const auto [grad_q, grad_k] = GENERATE(std::pair{true, true}, std::pair{false, true}, std::pair{true, false});
    const bool by_lens = GENERATE(false, true);
    const bool widened = GENERATE(false, true);
    CAPTURE(H, grad_q, grad_k, by_lens, widened);
    const WidenedBf16 force(widened);
    Generator gen(11);
    const std::size_t batch = 3, Lk = 512, D = 64 * H;
    const Tensor q = randn({batch, 1, D}, {}, gen).requires_grad_(grad_q);
    const Tensor k = randn({batch, Lk, D}, {}, gen).requires_grad_(grad_k);
    const AttentionMask mask = by_lens ? AttentionMask::valid_lens(from_vector(std::vector<std::int64_t>{512, 300, 77}, {batch}))
                                       : AttentionMask();
    const auto [w, w64, q64, k64] = weights_under_autocast(q, k, H, mask, gen);
    CHECK(max(abs(w.to(kFloat64) - w64)).item<double>() < 1e-5);
    for (const auto& [x, x64] : {std::pair{q, q64}, std::pair{k, k64}}) {
        REQUIRE(x.has_grad() == x.requires_grad());
        if (!x.requires_grad()) continue;
        const Tensor got = x.grad(), want = x64.grad();
        // Row by row, so that a row written into another batch's place shows where it went.
        for (std::size_t b = 0; b < batch; ++b) {
            CAPTURE(b);
            const double scale = max(abs(want[b])).item<double>();
            CHECK(max(abs(got[b].to(kFloat64) - want[b])).item<double>() <= std::ldexp(1.0, -7) * scale);
        }
    }
}

TEST_CASE("autocast: the backward keeps its forward's precision and reads no input again", "[autocast]") {
    if (!dnnl::available()) return;
    const bool widened = GENERATE(false, true);
    CAPTURE(widened);
    const WidenedBf16 force(widened);
    Generator gen(5);
    Tensor a = randn({64, 48}, {}, gen).requires_grad_(), b = randn({48, 40}, {}, gen).requires_grad_();
    const Tensor R = randn({64, 40}, {}, gen);
    auto grads = [&](bool backward_inside) {
        a.zero_grad();
        b.zero_grad();
        std::optional<AutocastGuard> guard(std::in_place, kBFloat16, allow());
        const Tensor loss = (matmul(a, b) * R).sum();
        if (!backward_inside) guard.reset();
        loss.backward();
        return std::pair{a.grad().clone(), b.grad().clone()};
    };
    const auto inside = grads(true), after = grads(false);
    CHECK(same(inside.first, after.first));
    CHECK(same(inside.second, after.second));
    // Float32 throughout differs: the ended guard did not make the backward float32.
    a.zero_grad();
    (matmul(a, b) * R).sum().backward();
    CHECK_FALSE(same(a.grad(), after.first));
    // An in-place write to an input after the forward: the backward reads its bfloat16 copy,
    // so it runs and gives the gradient of the values the forward saw.
    a.zero_grad();
    b.zero_grad();
    Tensor loss;
    {
        AutocastGuard guard(kBFloat16, allow());
        loss = (matmul(a, b) * R).sum();
    }
    const Tensor a_before = a.detach().clone();
    {
        NoGradGuard no_grad;
        a += 1.0;
    }
    loss.backward();
    CHECK(same(b.grad(), after.second));
    {
        NoGradGuard no_grad;
        a -= 1.0;
    }
}

TEST_CASE("autocast: float64 and tiny products and other threads stay exact", "[autocast]") {
    if (!dnnl::available()) return;
    Generator gen(9);
    const Tensor a64 = randn({64, 48}, kFloat64, gen), b64 = randn({48, 40}, kFloat64, gen);
    const Tensor tiny_a = randn({4, 5}, {}, gen), tiny_b = randn({5, 6}, {}, gen);
    const Tensor a = randn({64, 48}, {}, gen), b = randn({48, 40}, {}, gen);
    const Tensor b64_t = b64.transpose(0, 1);
    // Each against the same op outside the guard: a transposed operand may take another BLAS
    // kernel (BLIS's does), so matmul_t and matmul need not agree bit for bit.
    const Tensor plain64 = matmul(a64, b64), plain64_t = matmul_t(a64, b64_t, false, true);
    const Tensor plain_tiny = matmul(tiny_a, tiny_b), plain = matmul(a, b);
    AutocastGuard guard(kBFloat16, allow());
    CHECK(same(matmul(a64, b64), plain64));
    CHECK(same(matmul_t(a64, b64_t, false, true), plain64_t));
    CHECK(same(matmul(tiny_a, tiny_b), plain_tiny));  // below the size autocast leaves in float32
    CHECK_FALSE(same(matmul(a, b), plain));
    Tensor from_thread;
    std::thread([&] { from_thread = matmul(a, b); }).join();  // no guard on that thread
    CHECK(same(from_thread, plain));
}

TEST_CASE("autocast: an operand's bfloat16 copy is reused only while its tensor is unchanged", "[autocast]") {
    if (!dnnl::available()) return;
    Generator gen(12);
    // A copy of t: the same values in another tensor, whose rounding no product has made yet.
    auto fresh = [](const Tensor& t) { return t.detach(); };
    Tensor x = randn({64, 64}, {}, gen).requires_grad_(true);
    const Tensor w1 = randn({64, 64}, {}, gen), w2 = randn({64, 64}, {}, gen);
    AutocastGuard guard(kBFloat16, allow());
    SECTION("one input to three products, as self-attention's projections: same values and gradient") {
        const Tensor y1 = matmul_t(x, w1, false, true), y2 = matmul_t(x, w2, false, true), y3 = matmul(x, w1);
        const Tensor xa = fresh(x).requires_grad_(true), xb = fresh(x).requires_grad_(true), xc = fresh(x).requires_grad_(true);
        const Tensor z1 = matmul_t(xa, w1, false, true), z2 = matmul_t(xb, w2, false, true), z3 = matmul(xc, w1);
        CHECK(same(y1, z1));
        CHECK(same(y2, z2));
        CHECK(same(y3, z3));
        (y1.sum() + y2.sum() + y3.sum()).backward();
        (z1.sum() + z2.sum() + z3.sum()).backward();
        // the same three gradients, summed in an order the graph picks
        const auto g = x.grad().to_vector<double>(), want = (xa.grad() + xb.grad() + xc.grad()).to_vector<double>();
        REQUIRE(g.size() == want.size());
        for (std::size_t i = 0; i < g.size(); ++i) CHECK(std::abs(g[i] - want[i]) <= 1e-6 * (1 + std::abs(want[i])));
    }
    SECTION("written in place between two products: the second rounds the new values") {
        // The product under test runs right after the one that rounded its operand, before
        // the product it is compared with.
        Tensor v = randn({64, 64}, {}, gen);
        (void)matmul(v, w1);
        v.mutable_data_ptr<float>()[5] = 1000.0f;  // bumps v's version
        const Tensor from_v = matmul(v, w2);
        CHECK(same(from_v, matmul(fresh(v), w2)));
    }
    SECTION("freed, and a new tensor in the same memory: the new values are rounded") {
        // 256 KiB: a block the caching allocator keeps and hands back to the next request of its
        // size (smaller ones come from malloc, which need not).
        const Tensor wide = randn({64, 64}, {}, gen);
        const float* old_data = nullptr;
        {
            const Tensor t = randn({1024, 64}, {}, gen);
            old_data = t.const_data_ptr<float>();
            (void)matmul(t, wide);
        }
        const Tensor u = randn({1024, 64}, {}, gen);
        if (u.const_data_ptr<float>() != old_data) {
            WARN("the allocator did not reuse the freed block (a sanitizer build holds freed memory back): "
                 "the stale-copy case is not reached here");
        }
        const Tensor from_u = matmul(u, wide);
        CHECK(same(from_u, matmul(fresh(u), wide)));
    }
}

TEST_CASE("autocast: an input given requires_grad_() after a product's forward gets its gradient", "[autocast]") {
    if (!dnnl::available()) return;
    Generator gen(13);
    // The backward asks the inputs whether they need a gradient when it runs, as the float32 one
    // does; the bfloat16 copy that gradient multiplies must still be there.
    const Tensor a = randn({2, 64, 64}, {}, gen), b = randn({2, 64, 64}, {}, gen);
    using Product = std::function<Tensor(const Tensor&, const Tensor&)>;
    const std::vector<std::pair<const char*, Product>> products{
        {"matmul", [](const Tensor& x, const Tensor& y) { return matmul(x, y); }},
        {"head_attention_weights", [](const Tensor& x, const Tensor& y) { return head_attention_weights(x, y, 2, 0.125); }},
        {"head_attention_combine", [](const Tensor& x, const Tensor& y) { return head_attention_combine(x, y, 1); }}};
    for (const auto& [name, f] : products)
        for (int late : {0, 1}) {
            INFO(name << ", input " << late << " turned on after the forward");
            Tensor early_x = a.detach().requires_grad_(), early_y = b.detach().requires_grad_();
            Tensor x = a.detach(), y = b.detach();
            (late == 0 ? y : x).requires_grad_();
            Tensor out, want;
            {
                AutocastGuard guard(kBFloat16, allow());
                out = f(x, y);
                want = f(early_x, early_y);
            }
            (late == 0 ? x : y).requires_grad_();
            out.sum().backward();
            want.sum().backward();
            CHECK(same(x.grad(), early_x.grad()));
            CHECK(same(y.grad(), early_y.grad()));
        }
}
