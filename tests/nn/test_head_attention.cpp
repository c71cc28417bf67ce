// head_attention_weights and head_attention_combine, the per-head attention ops that read the
// heads in place: against the split-heads composition d2l runs (transpose_qkv → matmul_t →
// softmax of the -1e6-filled scores → bmm → transpose_output), gradient checks in double for
// every mask kind, and bad input.
#include <cmath>
#include <functional>

#include "nn/nn.hpp"
#include "nn_helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using namespace xgrad::nn;

namespace {

// One mask and, for the reference, whether query i of batch row b keeps key j.
struct MaskCase {
    std::string name;
    AttentionMask mask;
    std::function<bool(std::size_t b, std::size_t i, std::size_t j)> keeps;
};

// Every mask kind for scores (batch, Lq, Lk): none, lengths (batch,) incl. 0 and beyond Lk,
// lengths (batch, Lq), bool (batch, Lq, Lk) with a row of nothing, bool (Lq, Lk), and causal
// when Lk ≥ Lq.
std::vector<MaskCase> mask_cases(std::size_t B, std::size_t Lq, std::size_t Lk) {
    std::vector<MaskCase> cases;
    cases.push_back({"all", AttentionMask(), [](std::size_t, std::size_t, std::size_t) { return true; }});
    std::vector<std::int64_t> l1(B);
    for (std::size_t b = 0; b < B; ++b) l1[b] = b == 0 ? 0 : static_cast<std::int64_t>((b * 3) % (Lk + 3));
    cases.push_back({"valid_lens (batch,)", AttentionMask::valid_lens(lens(l1)),
                     [l1](std::size_t b, std::size_t, std::size_t j) { return j < static_cast<std::size_t>(l1[b]); }});
    std::vector<std::int64_t> l2(B * Lq);
    for (std::size_t r = 0; r < B * Lq; ++r) l2[r] = static_cast<std::int64_t>((r * 2 + 1) % (Lk + 2));
    cases.push_back({"valid_lens (batch, Lq)", AttentionMask::valid_lens(from_vector(l2, {B, Lq})),
                     [l2, Lq](std::size_t b, std::size_t i, std::size_t j) {
                         return j < static_cast<std::size_t>(l2[b * Lq + i]);
                     }});
    // pseudo-random pattern, with query 0 of batch row 0 attending nothing
    const auto pattern = [Lq, Lk](std::size_t b, std::size_t i, std::size_t j) {
        if (b == 0 && i == 0) return false;
        return ((b * Lq + i) * Lk + j) * 7 % 5 < 3;
    };
    cases.push_back({"attend_where (batch, Lq, Lk)",
                     AttentionMask::attend_where(bool_tensor({B, Lq, Lk}, [&](std::size_t k) {
                         return pattern(k / (Lq * Lk), k / Lk % Lq, k % Lk);
                     })),
                     pattern});
    const auto shared = [](std::size_t, std::size_t i, std::size_t j) { return (i + 2 * j) % 3 != 0; };
    cases.push_back({"attend_where (Lq, Lk)",
                     AttentionMask::attend_where(
                         bool_tensor({Lq, Lk}, [&](std::size_t k) { return shared(0, k / Lk, k % Lk); })),
                     shared});
    if (Lk >= Lq)
        cases.push_back({"causal", AttentionMask::causal(),
                         [Lq, Lk](std::size_t, std::size_t i, std::size_t j) { return j <= i + Lk - Lq; }});
    return cases;
}

// The split-heads composition: weights (B·H, Lq, Lk) of heads split by transpose_qkv, masked
// by filling -1e6 where the (per batch row, repeated per head) keep mask is false.
Tensor reference_weights(const Tensor& q, const Tensor& k, std::size_t H, double scale, const MaskCase& mc) {
    const Tensor scores = matmul_t(transpose_qkv(q, H), transpose_qkv(k, H), false, true, scale);
    const std::size_t B = q.size(0), Lq = q.size(1), Lk = k.size(1);
    const Tensor keep = bool_tensor({B, Lq, Lk}, [&](std::size_t n) { return mc.keeps(n / (Lq * Lk), n / Lk % Lq, n % Lk); });
    return softmax(masked_fill(scores, logical_not(repeat_interleave(keep, H, 0)), -1e6), -1);
}

Tensor reference_combine(const Tensor& w, const Tensor& v, std::size_t H) {
    return transpose_output(bmm(w, transpose_qkv(v, H)), H);
}

// Equal to 1e-12, absolute and relative (approx() allows 1e-6 relative).
auto tight(std::vector<double> expected) {
    return Catch::Matchers::Approx(std::move(expected)).margin(1e-12).epsilon(1e-12);
}

struct Sizes {
    std::size_t B, Lq, Lk, d, dv;
};

const Sizes sizes[] = {{2, 3, 5, 2, 3}, {1, 4, 2, 3, 1}, {3, 1, 4, 1, 2}};

// Backward of Σ out⊙g and of Σ want⊙g (g random): the gradients reaching `inputs` through
// the fused ops equal those reaching `reference` (their detached twins) through the composition.
void check_same_gradients(const Tensor& out, const Tensor& want, const std::vector<Tensor>& inputs,
                          const std::vector<Tensor>& reference) {
    const Tensor g = param(out.shape(), -1, 1, 4).detach();
    (out * g).sum().backward();
    (want * g).sum().backward();
    for (std::size_t i = 0; i < inputs.size(); ++i) CHECK_THAT(vals(inputs[i].grad()), tight(vals(reference[i].grad())));
}

}  // namespace

TEST_CASE("head_attention_weights and head_attention_combine equal the split-heads composition", "[heads]") {
    for (std::size_t H : {1, 2, 3})
        for (const Sizes& s : sizes)
            for (const MaskCase& mc : mask_cases(s.B, s.Lq, s.Lk)) {
                INFO("H = " << H << ", B = " << s.B << ", Lq = " << s.Lq << ", Lk = " << s.Lk << ", mask " << mc.name);
                const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
                const Tensor q = param({s.B, s.Lq, H * s.d}, -2, 2, 1), k = param({s.B, s.Lk, H * s.d}, -2, 2, 2);
                const Tensor v = param({s.B, s.Lk, H * s.dv}, -1, 1, 3);
                const Tensor rq = q.detach().requires_grad_(true), rk = k.detach().requires_grad_(true),
                             rv = v.detach().requires_grad_(true);
                const Tensor w = head_attention_weights(q, k, H, scale, mc.mask);
                const Tensor want_w = reference_weights(rq, rk, H, scale, mc);
                REQUIRE(w.shape() == Shape{s.B * H, s.Lq, s.Lk});
                CHECK_THAT(vals(w), tight(vals(want_w)));
                const Tensor out = head_attention_combine(w, v, H), want = reference_combine(want_w, rv, H);
                REQUIRE(out.shape() == Shape{s.B, s.Lq, H * s.dv});
                CHECK_THAT(vals(out), tight(vals(want)));
                check_same_gradients(out, want, {q, k, v}, {rq, rk, rv});
            }
}

TEST_CASE("head attention ops with (b, h) pairs split over the pool equal the composition", "[heads]") {
    // 24 pairs of 64×64×32 products: several chunks of parallel_for when it has threads
    const std::size_t B = 4, H = 6, L = 64, d = 32;
    const Tensor q = param({B, L, H * d}, -1, 1, 1), k = param({B, L, H * d}, -1, 1, 2),
                 v = param({B, L, H * d}, -1, 1, 3);
    const Tensor rq = q.detach().requires_grad_(true), rk = k.detach().requires_grad_(true),
                 rv = v.detach().requires_grad_(true);
    const MaskCase causal{"causal", AttentionMask::causal(),
                          [](std::size_t, std::size_t i, std::size_t j) { return j <= i; }};
    const Tensor out = head_attention_combine(head_attention_weights(q, k, H, 0.2, causal.mask), v, H);
    const Tensor want = reference_combine(reference_weights(rq, rk, H, 0.2, causal), rv, H);
    CHECK_THAT(vals(out), tight(vals(want)));
    check_same_gradients(out, want, {q, k, v}, {rq, rk, rv});
}

TEST_CASE("head_attention_combine's weight gradient equals the composition's", "[heads]") {
    for (std::size_t H : {1, 2, 3}) {
        const Tensor w = param({2 * H, 3, 4}, 0, 1, 5), v = param({2, 4, H * 2}, -1, 1, 6);
        const Tensor rw = w.detach().requires_grad_(true);
        const Tensor g = param({2, 3, H * 2}, -1, 1, 7).detach();
        (head_attention_combine(w, v, H) * g).sum().backward();
        (reference_combine(rw, v.detach(), H) * g).sum().backward();
        CHECK_THAT(vals(w.grad()), tight(vals(rw.grad())));
    }
}

TEST_CASE("head_attention_weights: masked keys get weight e^-1e6 and no gradient, per batch row in every head",
          "[heads]") {
    // batch row 0 keeps 1 key, row 1 none (uniform); 2 heads of 2
    Tensor q = param({2, 2, 4}, -1, 1, 8), k = param({2, 3, 4}, -1, 1, 9);
    const Tensor w = head_attention_weights(q, k, 2, 0.5, AttentionMask::valid_lens(lens({1, 0})));
    const auto v = vals(w);
    for (std::size_t h = 0; h < 2; ++h)
        for (std::size_t i = 0; i < 2; ++i) {
            const std::size_t r0 = (0 * 2 + h) * 2 + i, r1 = (1 * 2 + h) * 2 + i;
            CHECK_THAT(std::vector<double>(v.begin() + r0 * 3, v.begin() + r0 * 3 + 3), approx({1, 0, 0}, 1e-15));
            CHECK_THAT(std::vector<double>(v.begin() + r1 * 3, v.begin() + r1 * 3 + 3),
                       approx({1.0 / 3, 1.0 / 3, 1.0 / 3}, 1e-15));
        }
    (w * param(w.shape(), -1, 1, 10).detach()).sum().backward();
    // one kept key (weight 1) or none: the softmax is flat, no gradient reaches q or k
    CHECK_THAT(vals(q.grad()), approx(std::vector<double>(16, 0.0), 1e-15));
    CHECK_THAT(vals(k.grad()), approx(std::vector<double>(24, 0.0), 1e-15));
}

TEST_CASE("head_attention_weights and head_attention_combine agree with the composition in float32", "[heads]") {
    const std::size_t H = 2;
    for (const MaskCase& mc : mask_cases(2, 3, 5)) {
        INFO("mask " << mc.name);
        const Tensor q = param({2, 3, 8}, -2, 2, 1).to(kFloat32), k = param({2, 5, 8}, -2, 2, 2).to(kFloat32);
        const Tensor v = param({2, 5, 6}, -1, 1, 3).to(kFloat32);
        const Tensor w = head_attention_weights(q, k, H, 0.5, mc.mask);
        CHECK(w.dtype() == kFloat32);
        CHECK_THAT(vals(w), approx(vals(reference_weights(q, k, H, 0.5, mc)), 1e-6));
        CHECK_THAT(vals(head_attention_combine(w, v, H)), approx(vals(reference_combine(w, v, H)), 1e-6));
    }
}

TEST_CASE("head_attention_weights passes gradcheck for every mask kind and 1 to 3 heads", "[heads][gradcheck]") {
    for (std::size_t H : {1, 2, 3})
        for (const Sizes& s : sizes)
            for (const MaskCase& mc : mask_cases(s.B, s.Lq, s.Lk)) {
                INFO("H = " << H << ", B = " << s.B << ", Lq = " << s.Lq << ", Lk = " << s.Lk << ", mask " << mc.name);
                const Tensor q = param({s.B, s.Lq, H * s.d}, -2, 2, 1), k = param({s.B, s.Lk, H * s.d}, -2, 2, 2);
                REQUIRE_GRADCHECK([&](auto& x) { return head_attention_weights(x[0], x[1], H, 0.7, mc.mask); },
                                  {q, k}, "head_attention_weights " + mc.name);
            }
}

TEST_CASE("head_attention_combine passes gradcheck for 1 to 3 heads", "[heads][gradcheck]") {
    for (std::size_t H : {1, 2, 3})
        for (const Sizes& s : sizes) {
            INFO("H = " << H << ", B = " << s.B << ", Lq = " << s.Lq << ", Lk = " << s.Lk);
            const Tensor w = param({s.B * H, s.Lq, s.Lk}, 0, 1, 4), v = param({s.B, s.Lk, H * s.dv}, -1, 1, 5);
            REQUIRE_GRADCHECK([&](auto& x) { return head_attention_combine(x[0], x[1], H); }, {w, v},
                              "head_attention_combine");
        }
}

TEST_CASE("DotProductAttention::forward_heads is attention per head of transpose_qkv, merged", "[heads][attention]") {
    DotProductAttention attention(0.0);
    const std::size_t H = 3;
    const Tensor q = param({2, 3, H * 2}, -2, 2, 1), k = param({2, 5, H * 2}, -2, 2, 2),
                 v = param({2, 5, H * 4}, -1, 1, 3);
    for (const MaskCase& mc : mask_cases(2, 3, 5)) {
        INFO("mask " << mc.name);
        const Tensor out = attention.forward_heads(q, k, v, H, mc.mask);
        const Tensor w = reference_weights(q, k, H, 1.0 / std::sqrt(2.0), mc);
        CHECK(attention.attention_weights().shape() == Shape{6, 3, 5});
        CHECK_THAT(vals(attention.attention_weights()), tight(vals(w)));
        CHECK_THAT(vals(out), tight(vals(reference_combine(w, v, H))));
    }
    REQUIRE_GRADCHECK([&](auto& x) { return attention.forward_heads(x[0], x[1], x[2], H, AttentionMask::causal()); },
                      {q, k, v}, "DotProductAttention::forward_heads");
}

TEST_CASE("masked_softmax with a bool mask equals softmax of masked_fill, gradient included", "[masked_softmax]") {
    for (const MaskCase& mc : mask_cases(2, 3, 5)) {
        INFO("mask " << mc.name);
        const Tensor X = param({2, 3, 5}, -3, 3, 11), R = X.detach().requires_grad_(true);
        const Tensor y = masked_softmax(X, mc.mask);
        const Tensor keep = bool_tensor({2, 3, 5}, [&](std::size_t n) { return mc.keeps(n / 15, n / 5 % 3, n % 5); });
        const Tensor want = softmax(masked_fill(R, logical_not(keep), -1e6), -1);
        CHECK_THAT(vals(y), tight(vals(want)));
        const Tensor g = param({2, 3, 5}, -1, 1, 12).detach();
        (y * g).sum().backward();
        (want * g).sum().backward();
        CHECK_THAT(vals(X.grad()), tight(vals(R.grad())));
        REQUIRE_GRADCHECK([&](auto& x) { return masked_softmax(x[0], mc.mask); }, {X}, "masked_softmax " + mc.name);
    }
}

TEST_CASE("head attention ops accept empty batches, queries and keys", "[heads]") {
    for (const Sizes& s : {Sizes{0, 3, 4, 2, 2}, Sizes{2, 0, 4, 2, 2}, Sizes{2, 3, 0, 2, 2}}) {
        INFO("B = " << s.B << ", Lq = " << s.Lq << ", Lk = " << s.Lk);
        for (const MaskCase& mc : mask_cases(s.B, s.Lq, s.Lk)) {
            INFO("mask " << mc.name);
            const Tensor q = param({s.B, s.Lq, 4}), k = param({s.B, s.Lk, 4}), v = param({s.B, s.Lk, 4});
            const Tensor w = head_attention_weights(q, k, 2, 1.0, mc.mask);
            CHECK(w.shape() == Shape{s.B * 2, s.Lq, s.Lk});
            const Tensor out = head_attention_combine(w, v, 2);
            CHECK(out.shape() == Shape{s.B, s.Lq, 4});
            out.sum().backward();
            CHECK(q.grad().shape() == q.shape());
            CHECK(k.grad().shape() == k.shape());
            CHECK(v.grad().shape() == v.shape());
        }
    }
}

TEST_CASE("head attention ops return at once when a length is 0, beside a batch of 2^40", "[heads][sizes]") {
    // Each case leaves 2^40 (batch, head) pairs, or 3·2^40 rows, with nothing to compute: the
    // ops and their backward must not step through them, which took hours.
    const std::size_t P40 = std::size_t(1) << 40;
    const auto grads_match = [](const Tensor& out, const std::vector<Tensor>& inputs) {
        out.sum().backward();
        for (const Tensor& x : inputs) CHECK(x.grad().shape() == x.shape());
    };
    SECTION("no queries and no keys") {
        const Tensor q = zeros({P40, 0, 4}).requires_grad_(), k = zeros({P40, 0, 4}).requires_grad_();
        const Tensor w = head_attention_weights(q, k, 2, 1.0);
        CHECK(w.shape() == Shape{2 * P40, 0, 0});
        grads_match(w, {q, k});
    }
    SECTION("no keys: every mask kind that fits") {
        for (const AttentionMask& mask : {AttentionMask(), AttentionMask::attend_where(zeros({3, 0}, kBool))}) {
            const Tensor q = zeros({P40, 3, 0}).requires_grad_(), k = zeros({P40, 0, 0}).requires_grad_();
            const Tensor w = head_attention_weights(q, k, 1, 1.0, mask);
            CHECK(w.shape() == Shape{P40, 3, 0});
            grads_match(w, {q, k});
            const Tensor x = zeros({P40, 3, 0}).requires_grad_();
            const Tensor y = masked_softmax(x, mask);
            CHECK(y.shape() == x.shape());
            grads_match(y, {x});
        }
    }
    SECTION("no queries, a causal mask") {
        const Tensor q = zeros({P40, 0, 0}).requires_grad_(), k = zeros({P40, 5, 0}).requires_grad_();
        grads_match(head_attention_weights(q, k, 1, 1.0, AttentionMask::causal()), {q, k});
    }
    SECTION("combine: no queries, no keys, no features") {
        const Tensor w = zeros({2 * P40, 0, 3}).requires_grad_(), v = zeros({P40, 3, 0}).requires_grad_();
        const Tensor out = head_attention_combine(w, v, 2);
        CHECK(out.shape() == Shape{P40, 0, 0});
        grads_match(out, {w, v});
        const Tensor w2 = zeros({P40, 3, 0}).requires_grad_(), v2 = zeros({P40, 0, 0}).requires_grad_();
        CHECK(head_attention_combine(w2, v2, 1).shape() == Shape{P40, 3, 0});
    }
    SECTION("combine without keys is zeros, its inputs' gradients empty") {
        const Tensor w = zeros({4, 3, 0}).requires_grad_(), v = zeros({2, 0, 4}).requires_grad_();
        const Tensor out = head_attention_combine(w, v, 2);
        CHECK(vals(out) == std::vector<double>(24, 0.0));
        grads_match(out * 3.0, {w, v});
    }
}

// --- bad input ------------------------------------------------------------------------------

TEST_CASE("bad input: head_attention_weights arguments that do not fit", "[heads][bad]") {
    const Tensor q = ones({2, 3, 6}), k = ones({2, 5, 6});
    CHECK_THROWS_WITH(head_attention_weights(q, k, 0, 1.0),
                      Catch::Contains("head_attention_weights: num_heads must be positive, got 0"));
    CHECK_THROWS_WITH(head_attention_weights(q, k, 4, 1.0),
                      Catch::Contains("head_attention_weights: queries' last axis (6) must be divisible by "
                                      "num_heads (4)") &&
                          Catch::Contains("(2, 3, 6)"));
    CHECK_THROWS_WITH(head_attention_weights(q, ones({3, 5, 6}), 2, 1.0),
                      Catch::Contains("head_attention_weights: queries and keys must have the same batch size") &&
                          Catch::Contains("(3, 5, 6)"));
    CHECK_THROWS_WITH(head_attention_weights(q, ones({2, 5, 4}), 2, 1.0),
                      Catch::Contains("head_attention_weights: queries and keys must have the same last axis") &&
                          Catch::Contains("(2, 5, 4)"));
    CHECK_THROWS_WITH(head_attention_weights(ones({3, 6}), k, 2, 1.0),
                      Catch::Contains("head_attention_weights: queries must be 3-D") && Catch::Contains("(3, 6)"));
    CHECK_THROWS_WITH(head_attention_weights(q, Tensor(), 2, 1.0),
                      Catch::Contains("head_attention_weights: keys is an undefined tensor"));
    CHECK_THROWS_WITH(head_attention_weights(q, k.to(kFloat64), 2, 1.0),
                      Catch::Contains("head_attention_weights: dtypes differ"));
    CHECK_THROWS_WITH(head_attention_weights(q, k, 2, 1.0, AttentionMask::valid_lens(lens({1, 2, 3}))),
                      Catch::Contains("head_attention_weights: valid_lens must have shape (2,) or (2, 3)") &&
                          Catch::Contains("(3,)"));
    CHECK_THROWS_WITH(head_attention_weights(q, k, 2, 1.0, AttentionMask::attend_where(gt(ones({2, 5, 3}), 0.0))),
                      Catch::Contains("head_attention_weights: mask must have shape (2, 3, 5) or (3, 5)") &&
                          Catch::Contains("(2, 5, 3)"));
    CHECK_THROWS_WITH(head_attention_weights(k, q, 2, 1.0, AttentionMask::causal()),
                      Catch::Contains("head_attention_weights: a causal mask needs at least as many keys"));
    CHECK_THROWS_WITH(head_attention_weights(ones({2, 3, 6}, kInt64), ones({2, 5, 6}, kInt64), 2, 1.0),
                      Catch::Contains("head_attention_weights") && Catch::Contains("floating-point"));
}

TEST_CASE("bad input: head_attention_combine arguments that do not fit", "[heads][bad]") {
    const Tensor w = ones({4, 3, 5}), v = ones({2, 5, 6});
    CHECK_THROWS_WITH(head_attention_combine(w, v, 0),
                      Catch::Contains("head_attention_combine: num_heads must be positive, got 0"));
    CHECK_THROWS_WITH(head_attention_combine(w, v, 3),
                      Catch::Contains("head_attention_combine: weights must have shape (batch·num_heads, "
                                      "queries, keys) = (6, queries, 5)") &&
                          Catch::Contains("got (4, 3, 5)"));
    CHECK_THROWS_WITH(head_attention_combine(ones({4, 3, 4}), v, 2),
                      Catch::Contains("head_attention_combine: weights must have shape") &&
                          Catch::Contains("(4, queries, 5)") && Catch::Contains("got (4, 3, 4)"));
    CHECK_THROWS_WITH(head_attention_combine(ones({8, 3, 5}), v, 4),
                      Catch::Contains("head_attention_combine: values' last axis (6) must be divisible by "
                                      "num_heads (4)"));
    CHECK_THROWS_WITH(head_attention_combine(ones({4, 15}), v, 2),
                      Catch::Contains("head_attention_combine: weights must be 3-D") && Catch::Contains("(4, 15)"));
    CHECK_THROWS_WITH(head_attention_combine(w, v.to(kFloat64), 2),
                      Catch::Contains("head_attention_combine: dtypes differ"));
}

TEST_CASE("bad input: DotProductAttention::forward_heads with heads that do not divide the features",
          "[heads][bad]") {
    DotProductAttention attention(0.0);
    const Tensor q = ones({2, 3, 6}), k = ones({2, 5, 6});
    CHECK_THROWS_WITH(attention.forward_heads(q, k, ones({2, 5, 5}), 2),
                      Catch::Contains("DotProductAttention: values' last axis (5) must be divisible by num_heads "
                                      "(2)") &&
                          Catch::Contains("(2, 5, 5)"));
    CHECK_THROWS_WITH(attention.forward_heads(q, k, ones({2, 5, 4}), 4),
                      Catch::Contains("DotProductAttention: queries' last axis (6) must be divisible by "
                                      "num_heads (4)"));
    CHECK_THROWS_WITH(attention.forward_heads(q, k, ones({2, 5, 4}), 0),
                      Catch::Contains("DotProductAttention: num_heads must be positive, got 0"));
    CHECK_THROWS_WITH(attention.forward_heads(q, ones({2, 4, 6}), ones({2, 5, 4}), 2),
                      Catch::Contains("DotProductAttention: keys and values must have the same length"));
}

TEST_CASE("head_attention_weights and matmul_t refuse a scale that is NaN or infinite, naming it", "[heads]") {
    // Every weight or element would come out NaN or infinite without a word.
    const Tensor q = randn({2, 3, 4}), k = randn({2, 5, 4});
    for (double bad : {std::nan(""), std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()}) {
        CAPTURE(bad);
        CHECK_THROWS_WITH(head_attention_weights(q, k, 2, bad, AttentionMask()),
                          Catch::Contains("head_attention_weights: scale must be finite, got"));
        const ResolvedMask all = AttentionMask().resolve("test", 2, 3, 5);
        CHECK_THROWS_WITH(head_attention_weights(q, k, 2, bad, all),
                          Catch::Contains("head_attention_weights: scale must be finite, got"));
        CHECK_THROWS_WITH(matmul_t(q, k, false, true, bad), Catch::Contains("matmul_t: alpha must be finite, got"));
    }
    CHECK_NOTHROW(head_attention_weights(q, k, 2, 0.0, AttentionMask()));  // zero: uniform weights, allowed
}
