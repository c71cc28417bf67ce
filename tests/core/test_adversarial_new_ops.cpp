// The ops added for issues 26 and 28, as a careless or hostile user calls them: int64 values at
// their limits through scatter's reduce, scatter_add and index_put_'s accumulate (they wrap as
// torch's, never a signed overflow, which is undefined behaviour: the sanitizer build sees it);
// NaN and inf through flash_attention against the materialised ops; an in-place write to its
// input refused at backward; and the refusals of repeat, cat, the logical and bitwise ops,
// masked_fill, where and dropout_mask, each naming the op, the argument and what came.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/flash_attention.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using Catch::Contains;

namespace {

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();

Tensor ints(const std::vector<std::int64_t>& v, const Shape& shape) { return from_vector(v, shape); }
std::vector<std::int64_t> int_vals(const Tensor& t) { return t.to_vector<std::int64_t>(); }

// Equal within 1e-12 (or Approx's default relative tolerance), NaN where the other is NaN.
void check_same_or_both_nan(const Tensor& got, const Tensor& want) {
    check_close_or_both_nan(got.to_vector<double>(), want.to_vector<double>(), Tolerance{Tolerance().relative, 1e-12});
}

}  // namespace

TEST_CASE("int64 scatter with reduce wraps at the limits as torch's", "[adversarial][scatter-reduce][int64]") {
    // torch 1.13: tensor([[2**62, 1]]).scatter(1, tensor([[0, 0]]), tensor([[4, 4]]), reduce='multiply')
    // → [[0, 1]]; with reduce='add' from INT64_MAX, two ones → INT64_MIN + 1.
    const Tensor idx = ints({0, 0}, {1, 2});
    CHECK(int_vals(scatter(ints({std::int64_t(1) << 62, 1}, {1, 2}), 1, idx, ints({4, 4}, {1, 2}), "multiply")) ==
          std::vector<std::int64_t>{0, 1});
    CHECK(int_vals(scatter(ints({kMax, 1}, {1, 2}), 1, idx, ints({1, 1}, {1, 2}), "add")) ==
          std::vector<std::int64_t>{kMin + 1, 1});
    CHECK(int_vals(scatter(ints({kMin, 1}, {1, 2}), 1, idx, -1, "add")) == std::vector<std::int64_t>{kMax - 1, 1});
    CHECK(int_vals(scatter(ints({kMin, 1}, {1, 2}), 1, idx, -1, "multiply")) == std::vector<std::int64_t>{kMin, 1});
    Tensor in_place = ints({kMax, 7}, {1, 2});
    in_place.scatter_(1, idx, ints({kMax, 1}, {1, 2}), "add");
    CHECK(int_vals(in_place) == std::vector<std::int64_t>{-1, 7});  // 2·MAX + 1 = 2^64 − 1 wraps to −1
}

TEST_CASE("int64 scatter_add and index_put_ with accumulate wrap at the limits as torch's", "[adversarial][int64]") {
    // torch: tensor([2**63 - 1]).scatter_add(0, tensor([0]), tensor([1])) → [-2**63]
    CHECK(int_vals(scatter_add(ints({kMax, 1}, {2}), 0, ints({0}, {1}), ints({1}, {1}))) ==
          std::vector<std::int64_t>{kMin, 1});
    Tensor a = ints({kMax, 1}, {2});
    a.scatter_add_(0, ints({0, 0}, {2}), ints({1, 1}, {2}));
    CHECK(int_vals(a) == std::vector<std::int64_t>{kMin + 1, 1});
    Tensor b = ints({kMin, 1}, {2});
    b.index_put_({ints({0, 0}, {2})}, ints({-1, -1}, {2}), true);
    CHECK(int_vals(b) == std::vector<std::int64_t>{kMax - 1, 1});
}

TEST_CASE("flash_attention carries NaN and inf as the materialised ops do", "[adversarial][flash][nan]") {
    Generator gen(3);
    const TensorOptions f64(kFloat64);
    const Tensor q = uniform({2, 5, 4}, -1, 1, f64, gen), k = uniform({2, 3, 4}, -1, 1, f64, gen),
                 v = uniform({2, 3, 6}, -1, 1, f64, gen);
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    const auto materialised = [](const Tensor& Q, const Tensor& K, const Tensor& V) {
        return head_attention_combine(head_attention_weights(Q, K, 2, 0.5), V, 2);
    };
    SECTION("a NaN query poisons its row of one head only") {
        Tensor qn = q.clone();
        qn.index_put_({0, 0, 0}, nan);
        check_same_or_both_nan(flash_attention(qn, k, v, 2, 0.5), materialised(qn, k, v));
    }
    SECTION("an infinite key") {
        Tensor kn = k.clone();
        kn.index_put_({0, 0, 0}, inf);
        check_same_or_both_nan(flash_attention(q, kn, v, 2, 0.5), materialised(q, kn, v));
    }
    SECTION("a NaN value") {
        Tensor vn = v.clone();
        vn.index_put_({1, 2, 5}, nan);
        check_same_or_both_nan(flash_attention(q, k, vn, 2, 0.5), materialised(q, k, vn));
    }
}

TEST_CASE("flash_attention refuses a backward after its input was written in place, and a second backward",
          "[adversarial][flash][version]") {
    Tensor q = param({2, 5, 4}, -1, 1, 1), k = param({2, 3, 4}, -1, 1, 2), v = param({2, 3, 6}, -1, 1, 3);
    Tensor qm = q * 1.0;
    const Tensor out = flash_attention(qm, k, v, 2, 0.5);
    qm.mul_(2.0);
    CHECK_THROWS_WITH(out.sum().backward(), Contains("modified in place") && Contains("flash_attention"));
    const Tensor again = flash_attention(q, k, v, 2, 0.5).sum();
    again.backward();
    CHECK_THROWS_WITH(again.backward(), Contains("already freed") && Contains("retain_graph"));
    NoGradGuard no_grad;
    CHECK_FALSE(flash_attention(q, k, v, 2, 0.5).requires_grad());
}

TEST_CASE("flash_attention refuses what does not fit, naming itself, the argument and what came",
          "[adversarial][flash][bad]") {
    const Tensor q = zeros({2, 5, 4}, kFloat64), k = zeros({2, 3, 4}, kFloat64), v = zeros({2, 3, 6}, kFloat64);
    CHECK_THROWS_WITH(flash_attention(cast(q, kInt64), cast(k, kInt64), cast(v, kInt64), 2, 0.5),
                      Contains("flash_attention: expected a floating-point tensor") && Contains("int64"));
    CHECK_THROWS_WITH(flash_attention(gt(q, 0), gt(k, 0), gt(v, 0), 2, 0.5), Contains("got bool"));
    CHECK_THROWS_WITH(flash_attention(cast(q, kBFloat16), cast(k, kBFloat16), cast(v, kBFloat16), 2, 0.5),
                      Contains("bfloat16") && Contains("AutocastGuard"));
    CHECK_THROWS_WITH(flash_attention(q, cast(k, kFloat32), v, 2, 0.5), Contains("flash_attention: dtypes differ"));
    CHECK_THROWS_WITH(flash_attention(q, k, v, 3, 0.5), Contains("divisible by num_heads (3)"));
    CHECK_THROWS_WITH(flash_attention(q, k, v, 4, 0.5), Contains("values' last axis (6)"));
    for (double p : {std::nan(""), 1.0, -0.1, 2.0})
        CHECK_THROWS_WITH(flash_attention(q, k, v, 2, 0.5, AttentionMask(), p), Contains("dropout must be in [0, 1)"));
    CHECK_THROWS_WITH(flash_attention(q, k, v, 2, std::nan("")), Contains("scale must be finite"));
    const auto lens = [&](const Tensor& l) { return flash_attention(q, k, v, 2, 0.5, AttentionMask::valid_lens(l)); };
    CHECK_THROWS_WITH(lens(ints({-1, 2}, {2})), Contains("valid_lens must be non-negative, got -1 at [0]"));
    CHECK_THROWS_WITH(lens(from_vector(std::vector<double>{std::nan(""), 2}, {2}, kFloat64)),
                      Contains("valid_lens must be whole numbers, got nan"));
    CHECK_THROWS_WITH(lens(from_vector(std::vector<double>{1.5, 2}, {2}, kFloat64)), Contains("got 1.5 at [0]"));
    CHECK_THROWS_WITH(lens(gt(ones({2}), 0)), Contains("got bool"));
    CHECK_THROWS_WITH(lens(zeros({2, 2}, kInt64)), Contains("valid_lens must have shape (2,) or (2, 5), got (2, 2)"));
    CHECK_THROWS_WITH(lens(zeros({}, kInt64)), Contains("got ()"));
    // A length past the keys, however large, means every key.
    CHECK(flash_attention(q + 1.0, k, v + 1.0, 2, 0.5, AttentionMask::valid_lens(from_vector(std::vector<double>{1e300, 2}, {2}, kFloat64)))
              .to_vector<double>()[0] == Approx(1.0));
    CHECK_THROWS_WITH(flash_attention(q, k, v, 2, 0.5, AttentionMask::attend_where(gt(zeros({2, 5, 4}), 0))),
                      Contains("mask must have shape (2, 5, 3) or (5, 3), got (2, 5, 4)"));
    CHECK_THROWS_WITH(flash_attention(q, k, v, 2, 0.5, AttentionMask::attend_where(zeros({2, 5, 3}))),
                      Contains("mask must be a bool tensor"));
    CHECK_THROWS_WITH(flash_attention(q, k, v, 2, 0.5, AttentionMask::causal()),
                      Contains("needs at least as many keys as queries, got 5 queries and 3 keys"));
    CHECK_THROWS_WITH(flash_attention(Tensor(), k, v, 2, 0.5), Contains("queries is an undefined tensor"));
}

TEST_CASE("repeat, cat and the logical and bitwise ops refuse what torch refuses, naming the op",
          "[adversarial][repeat][logical]") {
    CHECK_THROWS_WITH(repeat(ones({2, 3}), {-1, 1}), Contains("repeat: sizes must be non-negative"));
    CHECK_THROWS_WITH(repeat(ones({2, 3}), {2}), Contains("repeat: expected at least as many repeats"));
    CHECK_THROWS_WITH(repeat(ones({2, 3}), {1L << 40, 1L << 40}), Contains("repeat:") && Contains("memory"));
    CHECK(repeat(full({}, 3.0), {2, 3}).shape() == Shape{2, 3});
    CHECK(repeat(ones({0, 3}), {5, 2}).shape() == Shape{0, 6});
    CHECK(repeat(gt(from_vector(std::vector<double>{1, -1}, {2}), 0), {2}).to_vector<bool>() ==
          std::vector<bool>{true, false, true, false});
    CHECK_THROWS_WITH(cat({}), Contains("concat: expected at least one tensor"));
    CHECK_THROWS_WITH(cat({ones({2}), Tensor()}), Contains("tensor 1 is undefined"));
    CHECK_THROWS_WITH(cat({full({}, 1.0), full({}, 1.0)}), Contains("out of range for a tensor of rank 0"));
    // torch's truth: NaN and any non-zero are true, ±0 false.
    const double nan = std::numeric_limits<double>::quiet_NaN();
    CHECK(logical_and(from_vector(std::vector<double>{nan, 0.0, -0.0, 1.0}, {4}), ones({1})).to_vector<bool>() ==
          std::vector<bool>{true, false, false, true});
    CHECK_THROWS_WITH(logical_xor(ones({2}), ones({3})), Contains("logical_xor: shapes (2,) and (3,)"));
    CHECK_THROWS_WITH(ones({2}) & ones({2}), Contains("bitwise_and: the `&` operator needs bool or int64"));
    CHECK_THROWS_WITH(cast(ones({2}), kBFloat16) | ones({2}, kInt64), Contains("got bfloat16 and int64"));
    CHECK_THROWS_WITH(ones({2}, kInt64) ^ ones({3}, kInt64), Contains("bitwise_xor: shapes (2,) and (3,)"));
    CHECK(int_vals(gt(ones({2}), 0) & ints({6, 7}, {2})) == std::vector<std::int64_t>{0, 1});
}

TEST_CASE("masked_fill, where and dropout_mask refuse bad arguments and carry NaN", "[adversarial][where]") {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const auto filled = masked_fill(from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2}),
                                    gt(from_vector(std::vector<double>{1, 0}, {2}), 0.5), nan)
                            .to_vector<float>();
    CHECK(std::isnan(filled[0]));
    CHECK(filled[1] == 2);
    CHECK(std::isnan(filled[2]));
    CHECK(filled[3] == 4);
    CHECK_THROWS_WITH(masked_fill(ones({2}, kInt64), gt(ones({2}), 0), nan), Contains("masked_fill: value must be finite"));
    CHECK_THROWS_WITH(masked_fill(ones({2}), gt(ones({3, 2}), 0), 0), Contains("mask of shape (3, 2) cannot be broadcast"));
    // A NaN in the branch where does not take sends it no gradient and takes none back.
    Tensor a = from_vector(std::vector<double>{1, nan}, {2}, TensorOptions(kFloat64).requires_grad(true));
    Tensor b = from_vector(std::vector<double>{2, 3}, {2}, TensorOptions(kFloat64).requires_grad(true));
    where(gt(from_vector(std::vector<double>{1, 0}, {2}), 0.5), a, b).sum().backward();
    CHECK(a.grad().to_vector<double>() == std::vector<double>{1, 0});
    CHECK(b.grad().to_vector<double>() == std::vector<double>{0, 1});
    for (double p : {nan, 1.0, -0.1})
        CHECK_THROWS_WITH(dropout_mask({3}, p), Contains("dropout_mask: p must be in [0, 1)"));
    CHECK_THROWS_WITH(dropout_mask({3}, 0.5, kInt64), Contains("dropout_mask: expected dtype float32 or float64, got int64"));
    CHECK(dropout_mask({0, 6}, 0.5).numel() == 0);
    // p just below 1 (1 in float32): everything dropped, no inf or NaN.
    for (float x : dropout_mask({64}, 0.99999999).to_vector<float>()) CHECK(x == 0.0f);
}
