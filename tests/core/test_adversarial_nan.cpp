// NaN and ±inf through every softmax-family kernel and the max reductions, in both float dtypes.
// torch's semantics: a NaN among the scores a row attends to makes the whole row NaN (never a
// weight of 0); a NaN in a masked position is replaced by the fill, as masked_fill would; +inf
// gives NaN (inf - inf), -inf gives weight 0; argmax and max pick the first NaN. float32 runs
// the vectorised exp (its body and its tail), float64 std::exp: both must agree, and UBSan
// (tools/check --sanitize) must stay quiet on every value here.
#include <cmath>
#include <limits>

#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

namespace {

// Same NaN positions, same infinities, finite values within `tol`: float32 against float64.
#define CHECK_SAME_SPECIALS(got, want, tol)                                                  \
    do {                                                                                     \
        const auto g_ = (got);                                                               \
        const auto w_ = (want);                                                              \
        REQUIRE(g_.size() == w_.size());                                                     \
        for (std::size_t i_ = 0; i_ < g_.size(); ++i_) {                                     \
            INFO("element " << i_ << ": got " << g_[i_] << ", want " << w_[i_]);             \
            if (std::isnan(w_[i_])) CHECK(std::isnan(g_[i_]));                               \
            else if (std::isinf(w_[i_])) CHECK(g_[i_] == w_[i_]);                            \
            else CHECK(g_[i_] == Approx(w_[i_]).margin(tol));                                \
        }                                                                                    \
    } while (0)

// A (rows, n) float64 batch of ordinary scores with `v` at row 0, column `at`.
Tensor scores(std::size_t rows, std::size_t n, std::size_t at, double v) {
    std::vector<double> x(rows * n);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7 * static_cast<double>(i)) * 3;
    x[at] = v;
    return from_vector(x, {1, rows, n}, kFloat64);
}

bool all_nan(const std::vector<double>& v, std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to; ++i)
        if (!std::isnan(v[i])) return false;
    return true;
}

bool all_finite(const std::vector<double>& v, std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to; ++i)
        if (!std::isfinite(v[i])) return false;
    return true;
}

}  // namespace

TEST_CASE("a NaN anywhere in a row poisons that row in every softmax kernel and dtype", "[nan]") {
    // Row lengths around the float kernel's 8-lane body and its tail; the NaN at every position.
    for (std::size_t n : {1u, 2u, 7u, 8u, 9u, 16u, 17u}) {
        for (std::size_t at = 0; at < n; ++at) {
            INFO("n " << n << ", NaN at " << at);
            const Tensor x64 = scores(2, n, at, kNaN);
            for (Dtype d : {kFloat32, kFloat64}) {
                INFO(dtype_name(d));
                const Tensor x = x64.to(d);
                const auto lens_all = from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(n)}, {1});
                for (const Tensor& y : {softmax(x, -1), log_softmax(x, -1), masked_softmax(x, lens_all),
                                        masked_softmax(x, AttentionMask::attend_where(ones({1, 2, n}, kBool)))}) {
                    INFO(y.op_name());
                    const auto v = vals(y);
                    CHECK(all_nan(v, 0, n));
                    CHECK(all_finite(v, n, 2 * n));
                }
                // Along the other axis the NaN poisons only its column.
                const auto c = vals(softmax(x, 1));
                CHECK(std::isnan(c[at]));
                CHECK(std::isnan(c[n + at]));
                for (std::size_t j = 0; j < n; ++j)
                    if (j != at) CHECK(std::isfinite(c[j]));
            }
        }
    }
}

TEST_CASE("a NaN the mask leaves out is replaced by the fill, as masked_fill then softmax", "[nan]") {
    for (std::size_t n : {3u, 8u, 9u, 17u}) {
        for (std::size_t at = 0; at < n; ++at) {
            for (std::size_t L : {std::size_t(0), at, at + 1, n}) {
                if (L > n) continue;
                INFO("n " << n << ", NaN at " << at << ", valid length " << L);
                const Tensor x64 = scores(1, n, at, kNaN);
                // The composition in float64 is the reference: masked_fill(x, j >= L, -1e6), softmax.
                const Tensor masked = lt(arange(static_cast<double>(n), kFloat64).reshape({1, 1, -1}),
                                         static_cast<double>(L));
                const auto want = vals(softmax(masked_fill(x64, logical_not(masked), -1e6), -1));
                CHECK(all_nan(want, 0, n) == (at < L));
                for (Dtype d : {kFloat32, kFloat64}) {
                    INFO(dtype_name(d));
                    const Tensor x = x64.to(d);
                    const auto lens = from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(L)}, {1});
                    const double tol = d == kFloat32 ? 1e-6 : 1e-12;
                    CHECK_SAME_SPECIALS(vals(masked_softmax(x, lens)), want, tol);
                    CHECK_SAME_SPECIALS(vals(masked_softmax(x, AttentionMask::attend_where(masked))), want, tol);
                    // per-query lengths go through the same prefix kernel
                    const auto lens2 = from_vector(std::vector<double>{static_cast<double>(L)}, {1, 1}, d);
                    CHECK_SAME_SPECIALS(vals(masked_softmax(x, lens2)), want, tol);
                }
            }
        }
    }
}

TEST_CASE("inf and -inf scores follow torch in every softmax kernel and dtype", "[nan]") {
    // Each row with its float64 result as torch computes it (max subtracted first).
    const double e = std::exp(1.0);
    struct Case {
        std::vector<double> x, softmax, log_softmax;
    };
    const std::vector<Case> cases = {
        {{-kInf, 0, 1}, {0, 1 / (1 + e), e / (1 + e)}, {-kInf, -std::log1p(e), 1 - std::log1p(e)}},
        {{kInf, 0, 1}, {kNaN, kNaN, kNaN}, {kNaN, kNaN, kNaN}},
        {{kInf, kInf, 1}, {kNaN, kNaN, kNaN}, {kNaN, kNaN, kNaN}},
        {{-kInf, -kInf, -kInf}, {kNaN, kNaN, kNaN}, {kNaN, kNaN, kNaN}},
        {{kInf, -kInf, kNaN}, {kNaN, kNaN, kNaN}, {kNaN, kNaN, kNaN}},
        {{-kInf, 1e30, -1e30}, {0, 1, 0}, {-kInf, 0, -2e30}},
    };
    for (const Case& c : cases) {
        INFO(c.x[0] << " " << c.x[1] << " " << c.x[2]);
        for (Dtype d : {kFloat32, kFloat64}) {
            INFO(dtype_name(d));
            const Tensor x = from_vector(c.x, {1, 1, 3}, d);
            const double tol = d == kFloat32 ? 1e-6 : 1e-12;
            CHECK_SAME_SPECIALS(vals(softmax(x, -1)), c.softmax, tol);
            CHECK_SAME_SPECIALS(vals(masked_softmax(x, Tensor())), c.softmax, tol);
            CHECK_SAME_SPECIALS(vals(masked_softmax(x, tensor({3.0}))), c.softmax, tol);
            if (d == kFloat64) CHECK_SAME_SPECIALS(vals(log_softmax(x, -1)), c.log_softmax, 1e-12);
            else CHECK_SAME_SPECIALS(vals(log_softmax(x, -1)), c.log_softmax, 1e30 * 1e-7);
        }
    }
    // All kept scores -inf but a masked key present: NaN, as the softmax of the kept scores (and
    // torch's scaled_dot_product_attention); a masked key never takes the weight, as d2l's
    // -1e6 fill would give it.
    for (Dtype d : {kFloat32, kFloat64}) {
        CHECK_SAME_SPECIALS(vals(masked_softmax(tensor({{{-kInf, -kInf, 5}}}, d), tensor({2.0}))),
                            std::vector<double>({kNaN, kNaN, kNaN}), 1e-12);
        const Tensor keep = from_vector(std::vector<double>{1, 1, 0}, {1, 3}, kFloat64).to(kBool);
        CHECK_SAME_SPECIALS(vals(masked_softmax(tensor({{{-kInf, -kInf, 5}}}, d), AttentionMask::attend_where(keep))),
                            std::vector<double>({kNaN, kNaN, kNaN}), 1e-12);
    }
}

TEST_CASE("head attention weights: a NaN in one head's query poisons only its rows", "[nan]") {
    // queries (1, 2, 4) with 2 heads of size 2: a NaN in query 1, head 1 → weights row (b·H + 1, 1).
    for (Dtype d : {kFloat32, kFloat64}) {
        INFO(dtype_name(d));
        Tensor Q = from_vector({0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, kNaN}, {1, 2, 4}, d);
        Tensor K = from_vector({0.2, -0.1, 0.4, 0.3, -0.5, 0.6, 0.1, 0.2, 0.3, 0.3, 0.2, 0.1}, {1, 3, 4}, d);
        for (const AttentionMask& m : {AttentionMask(), AttentionMask::valid_lens(tensor({2.0})),
                                       AttentionMask::causal()}) {
            const auto w = vals(head_attention_weights(Q, K, 2, 0.5, m));  // (2, 2, 3)
            CHECK(all_finite(w, 0, 9));     // head 0 both queries, head 1 query 0
            CHECK(all_nan(w, 9, 12));       // head 1, query 1
        }
        // A NaN key poisons every query of its head that attends it, and none that masks it out.
        const Tensor K2 = from_vector({0.2, -0.1, 0.4, 0.3, -0.5, 0.6, 0.1, 0.2, kNaN, 0.3, 0.2, 0.1}, {1, 3, 4}, d);
        const Tensor Q2 = from_vector({0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8}, {1, 2, 4}, d);
        const auto w_all = vals(head_attention_weights(Q2, K2, 2, 0.5));
        CHECK(all_nan(w_all, 0, 6));    // head 0 reads key 2's NaN in both queries
        CHECK(all_finite(w_all, 6, 12));
        const auto w_two = vals(head_attention_weights(Q2, K2, 2, 0.5, AttentionMask::valid_lens(tensor({2.0}))));
        CHECK(all_finite(w_two, 0, 12));  // key 2 is masked out
    }
}

TEST_CASE("cross_entropy: NaN and inf logits give torch's losses and gradients", "[nan]") {
    for (Dtype d : {kFloat32, kFloat64}) {
        INFO(dtype_name(d));
        // rows: NaN at the target; NaN elsewhere; -inf at a non-target; -inf at the target;
        // +inf anywhere; a NaN row that is ignored; an ordinary row
        const std::vector<double> x = {kNaN, 1,     2,     //
                                       0,    kNaN,  2,     //
                                       -kInf, 1,    2,     //
                                       -kInf, 1,    2,     //
                                       kInf, 1,     2,     //
                                       kNaN, kNaN,  kNaN,  //
                                       0,    1,     2};
        Tensor logits = from_vector(x, {7, 3}, TensorOptions(d).requires_grad(true));
        const Tensor targets = from_vector(std::vector<std::int64_t>{0, 2, 1, 0, 1, -100, 2}, {7});
        const auto loss = vals(cross_entropy(logits, targets, Reduction::none));
        CHECK(std::isnan(loss[0]));
        CHECK(std::isnan(loss[1]));
        CHECK(loss[2] == Approx(std::log1p(std::exp(1.0))).epsilon(1e-6));  // log(e + e²) − 1
        CHECK(loss[3] == kInf);
        CHECK(std::isnan(loss[4]));
        CHECK(loss[5] == 0);  // ignored: the NaN row does not count
        CHECK(loss[6] == Approx(std::log(1 + std::exp(1.0) + std::exp(2.0)) - 2).epsilon(1e-6));
        CHECK(std::isnan(cross_entropy(logits, targets).item<double>()));
        // Without the poisoned rows the mean is finite, and the ignored NaN row stays out of it.
        const Tensor fine = from_vector(std::vector<std::int64_t>{-100, -100, 1, -100, -100, -100, 2}, {7});
        CHECK(std::isfinite(cross_entropy(logits, fine).item<double>()));
        cross_entropy(logits, fine).backward();
        const auto g = vals(logits.grad());
        CHECK(all_finite(g, 0, 21));
        for (std::size_t j = 0; j < 6; ++j) CHECK(g[j] == 0);    // ignored rows get no gradient
        CHECK(g[6] == 0);                                        // -inf logit: weight exactly 0
        for (std::size_t j = 15; j < 18; ++j) CHECK(g[j] == 0);  // the ignored NaN row
        // A NaN row that counts poisons its own gradient row only.
        logits.zero_grad();
        cross_entropy(logits, from_vector(std::vector<std::int64_t>{-100, 2, 1, -100, -100, -100, 2}, {7}),
                      Reduction::sum)
            .backward();
        const auto g2 = vals(logits.grad());
        CHECK(all_nan(g2, 3, 6));
        CHECK(all_finite(g2, 6, 9));
        CHECK(all_finite(g2, 18, 21));
    }
}

TEST_CASE("max and argmax: the first NaN wins, along any axis and in every dtype", "[nan]") {
    for (Dtype d : {kFloat32, kFloat64}) {
        INFO(dtype_name(d));
        // column-wise and row-wise: NaN after inf, NaN first, two NaNs, no NaN
        const Tensor x = from_vector({kInf, kNaN, 1,        //
                                      kNaN, 2,    kNaN,     //
                                      3,    kNaN, -kInf},   //
                                     {3, 3}, TensorOptions(d).requires_grad(true));
        CHECK(argmax(x, 1).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0, 1});
        CHECK(argmax(x, 0).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0, 1});
        const auto m = vals(max(x, 1).values);
        CHECK((std::isnan(m[0]) && std::isnan(m[1]) && std::isnan(m[2])));
        const Tensor y = from_vector({-kInf, kInf, 1, -kInf, -kInf, -kInf}, {2, 3}, d);
        CHECK(argmax(y, 1).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0});
        CHECK(vals(max(y, 1).values) == std::vector<double>{kInf, -kInf});
        // max's gradient goes to the NaN that won
        max(x, 1).values.sum().backward();
        CHECK(vals(x.grad()) == std::vector<double>{0, 1, 0, 1, 0, 0, 0, 1, 0});
    }
}

TEST_CASE("relu passes NaN through as torch does, value and gradient", "[nan]") {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (Dtype d : {kFloat32, kFloat64}) {
        INFO(dtype_name(d));
        Tensor x = tensor({nan, -1.0, 0.0, 2.0}, d).requires_grad_();
        Tensor y = relu(x);
        const std::vector<double> v = y.to_vector<double>();
        CHECK(std::isnan(v[0]));  // torch: relu(nan) = nan; a maximum with 0 would hide it
        CHECK(v[1] == 0);
        CHECK(v[2] == 0);
        CHECK(v[3] == 2);
        y.sum().backward();
        CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 0, 0, 1});  // torch's threshold_backward
    }
}
