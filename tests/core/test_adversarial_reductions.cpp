// Reductions as torch 1.13 does them, probed as a hostile user would: a NaN at every position
// (first, middle, last, everywhere) and on every axis of every max-type reduction and norm, in
// float32, float64 and (where the op takes it) bfloat16; every p of norm, including 0,
// negative, ±inf and the extremes torch reads through float32 (1e300 is inf, 1e-300 is 0);
// empty inputs, which give an identity or throw naming the op and the axis; and gradients that
// agree with torch's at NaNs, zeros and ties. Expected values were printed by torch 1.13.
#include <cmath>
#include <limits>

#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using Catch::Contains;

namespace {

// Equal as torch prints them: NaN where NaN, the same infinities, finite values within rel.
void check_like(const std::vector<double>& got, const std::vector<double>& want, double rel) {
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
        if (std::isnan(want[i])) CHECK(std::isnan(got[i]));
        else if (std::isinf(want[i])) CHECK(got[i] == want[i]);
        else CHECK(got[i] == Approx(want[i]).epsilon(rel).margin(1e-30));
    }
}

const Shape kShape{3, 4, 5};

// Values with no ties, signs mixed, and NaN at the flat offsets `nans`.
std::vector<double> values_with(const std::vector<std::size_t>& nans) {
    std::vector<double> v(60);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(1.3 * static_cast<double>(i) + 0.2) * 4;
    for (std::size_t i : nans) v[i] = kNaN;
    return v;
}

// The slices of kShape that a reduction over `axes` folds: for each output slot (row-major over
// the kept axes), the flat offsets it reads, in row-major order.
std::vector<std::vector<std::size_t>> slices(const std::vector<long>& axes) {
    std::vector<bool> reduced(3, axes.empty());
    for (long a : axes) reduced[static_cast<std::size_t>(a)] = true;
    std::vector<std::vector<std::size_t>> out;
    std::vector<std::size_t> slot_of(60);
    std::size_t slots = 1;
    for (std::size_t d = 0; d < 3; ++d)
        if (!reduced[d]) slots *= kShape[d];
    out.resize(slots);
    for (std::size_t i = 0; i < 3; ++i)
        for (std::size_t j = 0; j < 4; ++j)
            for (std::size_t k = 0; k < 5; ++k) {
                const std::size_t idx[3] = {i, j, k};
                std::size_t slot = 0;
                for (std::size_t d = 0; d < 3; ++d)
                    if (!reduced[d]) slot = slot * kShape[d] + idx[d];
                out[slot].push_back((i * 4 + j) * 5 + k);
            }
    return out;
}

// torch's p-norm of the values at `at`, in double, p already read as torch reads it.
double norm_ref(const std::vector<double>& v, const std::vector<std::size_t>& at, double p) {
    bool nan = false;
    for (std::size_t i : at) nan = nan || std::isnan(v[i]);
    if (p == 0) {
        double count = 0;
        for (std::size_t i : at) count += v[i] != 0;
        return count;
    }
    if (nan) return kNaN;
    if (std::isinf(p)) {
        double r = p > 0 ? 0 : kInf;
        for (std::size_t i : at) r = p > 0 ? std::max(r, std::abs(v[i])) : std::min(r, std::abs(v[i]));
        return r;
    }
    double s = 0;
    for (std::size_t i : at) s += std::pow(std::abs(v[i]), p);
    return std::pow(s, 1 / p);
}

}  // namespace

TEST_CASE("every max-type reduction and norm propagates a NaN from any position on any axis",
          "[adversarial][reductions]") {
    const std::vector<std::pair<const char*, std::vector<std::size_t>>> placements{
        {"none", {}}, {"first", {0}}, {"middle", {33}}, {"last", {59}}, {"two", {7, 52}}, {"all", {}}};
    for (const auto& [where, nans_in] : placements) {
        std::vector<std::size_t> nans = nans_in;
        if (std::string(where) == "all")
            for (std::size_t i = 0; i < 60; ++i) nans.push_back(i);
        const std::vector<double> v = values_with(nans);
        for (Dtype d : {kFloat32, kFloat64, kBFloat16}) {
            const Tensor x = from_vector(v, kShape, kFloat64).to(d);
            // What x holds once in its dtype: the references read the same rounded values.
            const std::vector<double> xv = vals(x.to(kFloat64));
            for (long axis = 0; axis < 3; ++axis) {
                INFO("NaN " << where << ", dtype " << dtype_name(d) << ", axis " << axis);
                const auto sl = slices({axis});
                std::vector<double> want_max, want_min, want_argmax, want_argmin;
                for (const auto& s : sl) {
                    // The first NaN wins; otherwise the first extreme.
                    std::size_t best_max = 0, best_min = 0;
                    for (std::size_t k = 0; k < s.size(); ++k) {
                        const double a = xv[s[k]];
                        const double bmax = xv[s[best_max]], bmin = xv[s[best_min]];
                        if (!std::isnan(bmax) && (std::isnan(a) || a > bmax)) best_max = k;
                        if (!std::isnan(bmin) && (std::isnan(a) || a < bmin)) best_min = k;
                    }
                    want_max.push_back(xv[s[best_max]]);
                    want_min.push_back(xv[s[best_min]]);
                    want_argmax.push_back(static_cast<double>(best_max));
                    want_argmin.push_back(static_cast<double>(best_min));
                }
                check_like(vals(max(x, axis).values.to(kFloat64)), want_max, 0);
                check_like(vals(min(x, axis).values.to(kFloat64)), want_min, 0);
                CHECK(vals(max(x, axis).indices) == want_argmax);
                CHECK(vals(min(x, axis).indices) == want_argmin);
                CHECK(vals(argmax(x, axis)) == want_argmax);
                CHECK(vals(argmin(x, axis)) == want_argmin);
            }
            INFO("NaN " << where << ", dtype " << dtype_name(d) << ", every axis");
            const bool any_nan = !nans.empty();
            CHECK(std::isnan(max(x).to(kFloat64).item<double>()) == any_nan);
            CHECK(std::isnan(min(x).to(kFloat64).item<double>()) == any_nan);
            if (d == kBFloat16) continue;  // norm does no arithmetic in bfloat16
            // Every kind of p (1e300 and -1e300 are ±inf to torch, 1e-300 is 0), every axis set.
            for (double p : {kInf, -kInf, 0.0, 1.0, 2.0, 3.0, 0.5, -1.0, -2.5, 1e300, -1e300, 1e-300}) {
                const double pe = std::abs(p) > 1e38 ? std::copysign(kInf, p) : std::abs(p) < 1e-45 ? 0.0 : p;
                for (const std::vector<long>& axes : std::vector<std::vector<long>>{{0}, {1}, {2}, {0, 2}, {}}) {
                    INFO("NaN " << where << ", dtype " << dtype_name(d) << ", p " << p << ", axes " << axes.size()
                                << (axes.empty() ? "" : " from " + std::to_string(axes[0])));
                    std::vector<double> want;
                    for (const auto& s : slices(axes)) want.push_back(norm_ref(xv, s, pe));
                    check_like(vals(norm(x, p, axes).to(kFloat64)), want, d == kFloat32 ? 1e-5 : 1e-12);
                }
            }
        }
    }
}

TEST_CASE("norm reads p as torch 1.13 does, through float32, for float32 and float64", "[adversarial][reductions]") {
    for (Dtype d : {kFloat32, kFloat64}) {
        INFO(dtype_name(d));
        const Tensor y = tensor({1.0, 2.0, 3.0, -5.0}, d);
        // Above float's range p is inf (the max), below its smallest subnormal 0 (the count).
        CHECK(norm(y, 1e300).item<double>() == 5);
        CHECK(norm(y, 3.5e38).item<double>() == 5);
        CHECK(norm(y, 1e39).item<double>() == 5);
        CHECK(norm(y, -1e300).item<double>() == 1);
        CHECK(norm(y, 1e-300).item<double>() == 4);
        CHECK(norm(y, -1e-300).item<double>() == 4);
        CHECK(norm(y, 1e-46).item<double>() == 4);
        // Just inside float's range the formula overflows, as torch's does.
        CHECK(norm(y, 3.4e38).item<double>() == kInf);
        CHECK(norm(y, 1e-45).item<double>() == kInf);
        CHECK(norm(y, 1e10).item<double>() == kInf);
        CHECK(norm(tensor({0.5, 0.25}, d), 1e300).item<double>() == 0.5);
        CHECK(norm(tensor({0.5, 0.25}, d), 1e-300).item<double>() == 2);
        // No rescaling: a sum of squares that overflows is inf, as torch.
        CHECK(norm(tensor({1e30, 1e30}, kFloat32)).item<double>() == kInf);
        CHECK_THROWS_WITH(norm(y, kNaN), Contains("norm: invalid p nan"));
    }
    // float64 computes with the float32 order: p = 1/3 and 0.1 give torch's digits.
    const Tensor y = tensor({1.0, 2.0, 3.0, -5.0}, kFloat64);
    CHECK(norm(y, 1.0 / 3).item<double>() == Approx(158.5289542096621).epsilon(1e-14));
    CHECK(norm(y, 0.1).item<double>() == Approx(2496719.8830891117).epsilon(1e-14));
    CHECK(norm(tensor({1.0, 2.0, 3.0, -5.0}), 1.0 / 3).item<double>() == Approx(158.5289764404297).epsilon(1e-6));
    // Negative p.
    const Tensor m = tensor({{1.0, 2.0}, {3.0, -5.0}}, kFloat64);
    CHECK_THAT(vals(norm(m, -0.5, {0})), approx({0.4019237886466841, 0.7504940885147124}, 1e-12));
    CHECK(norm(m, -1).item<double>() == Approx(0.49180327868852464).epsilon(1e-14));
    const Tensor z = tensor({{0.0, 0.0, 0.0}, {4.0, 5.0, 6.0}});
    CHECK_THAT(vals(norm(z, -1, {1})), approx({0, 1.6216216087341309}));
    CHECK_THAT(vals(norm(z, -2.5, {1})), approx({0, 3.071558713912964}));
    CHECK_THAT(vals(norm(z, -kInf, {1})), approx({0, 4}));
    CHECK_THAT(vals(norm(z, 0, {1})), approx({0, 3}));
}

TEST_CASE("empty reductions give torch's identity or throw naming the op and the axis", "[adversarial][reductions]") {
    for (Dtype d : {kFloat32, kFloat64}) {
        INFO(dtype_name(d));
        const Tensor e = zeros({0}, d), e2 = zeros({2, 0}, d);
        // Identities.
        CHECK(sum(e).item<double>() == 0);
        CHECK(vals(sum(e2, {1})) == std::vector<double>{0, 0});
        CHECK(std::isnan(mean(e).item<double>()));
        for (double v : vals(mean(e2, {1}))) CHECK(std::isnan(v));
        CHECK(std::isnan(var(e).item<double>()));
        for (double v : vals(xgrad::std(e2, {1}))) CHECK(std::isnan(v));
        for (double p : {0.0, 1.0, 2.0, 3.0, 0.5, 1e-300}) {
            INFO("p " << p);
            CHECK(norm(e, p).item<double>() == 0);
            CHECK(vals(norm(e2, p, {1})) == std::vector<double>{0, 0});
        }
        // No identity: the op and the empty axis are named.
        for (double p : {kInf, -kInf, -1.0, -0.5, 1e300, -1e300}) {
            INFO("p " << p);
            CHECK_THROWS_WITH(norm(e, p), Contains("norm: cannot take the") && Contains("axis 0 of length 0"));
            CHECK_THROWS_WITH(norm(e2, p, {1}), Contains("norm: cannot take the") && Contains("axis 1 of length 0"));
            CHECK_THROWS_WITH(norm(e2, p), Contains("axis 1 of length 0") && Contains("(2, 0)"));
            // A non-empty reduced axis of an empty tensor gives an empty result.
            CHECK(norm(e2, p, {0}).shape() == Shape{0});
        }
        CHECK_THROWS_WITH(norm(e2, kInf, {1}), Contains("the inf norm"));
        CHECK_THROWS_WITH(max(e), Contains("max: cannot take the maximum over axis 0 of length 0"));
        CHECK_THROWS_WITH(min(e), Contains("min: cannot take the minimum over axis 0 of length 0"));
        CHECK_THROWS_WITH(max(e2), Contains("max:") && Contains("axis 1 of length 0"));
        CHECK_THROWS_WITH(max(e2, 1), Contains("max:") && Contains("axis 1 of length 0"));
        CHECK_THROWS_WITH(min(e2, -1), Contains("min:") && Contains("axis 1 of length 0"));
        CHECK_THROWS_WITH(argmax(e2, 1), Contains("argmax: cannot take the index of the maximum over axis 1"));
        CHECK_THROWS_WITH(argmin(e2, 1), Contains("argmin: cannot take the index of the minimum over axis 1"));
        CHECK(max(e2, 0).values.shape() == Shape{0});
        CHECK(argmin(e2, 0).shape() == Shape{0});
        CHECK(cumsum(e2, 1).shape() == Shape{2, 0});
        CHECK(softmax(e2, 1).shape() == Shape{2, 0});
        CHECK(log_softmax(e2, 0).shape() == Shape{2, 0});
        CHECK(sort(e2, 1).values.shape() == Shape{2, 0});
        CHECK(topk(e2, 0, 1).values.shape() == Shape{2, 0});
    }
    CHECK_THROWS_WITH(max(zeros({0}, kBFloat16)), Contains("max:") && Contains("axis 0 of length 0"));
    CHECK_THROWS_WITH(argmax(zeros({3, 0}, kInt64), 1), Contains("argmax:") && Contains("axis 1 of length 0"));
    // Gradients of the identities have the input's (empty) shape.
    const Tensor e = zeros({2, 0}, TensorOptions(kFloat64).requires_grad(true));
    (sum(e, {1}).sum() + norm(e, 2) + norm(e, 0) + norm(e, -1, {0}).sum()).backward();
    CHECK(e.grad().shape() == Shape{2, 0});
}

TEST_CASE("norm, max and min gradients agree with torch at NaNs, zeros and ties", "[adversarial][reductions]") {
    // max and min: the NaNs share it (all elements), the first NaN takes it (along an axis).
    Tensor w = tensor({1.0, kNaN, 2.0, kNaN}, TensorOptions(kFloat64).requires_grad(true));
    max(w).backward();
    check_like(vals(w.grad()), {0, 0.5, 0, 0.5}, 0);
    w.zero_grad();
    min(w).backward();
    check_like(vals(w.grad()), {0, 0.5, 0, 0.5}, 0);
    w.zero_grad();
    max(w, 0).values.backward();
    check_like(vals(w.grad()), {0, 1, 0, 0}, 0);
    w.zero_grad();
    min(w, 0).values.backward();
    check_like(vals(w.grad()), {0, 1, 0, 0}, 0);
    // norm, every p.
    auto grad_of = [](const Tensor& x0, double p, const std::vector<long>& axes) {
        const Tensor x = x0.detach().requires_grad_();
        norm(x, p, axes).sum().backward();
        return vals(x.grad());
    };
    const Tensor x = tensor({1.0, 2.0, -5.0, 0.0, -5.0}, kFloat64);
    check_like(grad_of(x, kInf, {}), {0, 0, -0.5, 0, -0.5}, 1e-12);
    check_like(grad_of(x, -kInf, {}), {0, 0, 0, 0, 0}, 1e-12);
    check_like(grad_of(x, -1e300, {}), {0, 0, 0, 0, 0}, 1e-12);
    check_like(grad_of(x, 0, {}), {0, 0, 0, 0, 0}, 1e-12);
    check_like(grad_of(x, -1, {}), {0, 0, 0, 0, 0}, 1e-12);
    check_like(grad_of(x, 0.5, {}), {6.8863495173726745, 4.869384441354926, -3.079669127533634, 0, -3.079669127533634},
               1e-12);
    check_like(grad_of(x, 3, {}), {0.02461123972173396, 0.09844495888693584, -0.615280993043349, 0, -0.615280993043349},
               1e-12);
    // A NaN row: the ±inf norms send nothing to the NaN (torch's sgn(NaN) = 0), the others NaN.
    const Tensor n = tensor({{1.0, kNaN, 3.0}, {4.0, 5.0, 6.0}});
    check_like(grad_of(n, kInf, {1}), {0, 0, 0, 0, 0, 1}, 1e-6);
    check_like(grad_of(n, -kInf, {1}), {0, 0, 0, 1, 0, 0}, 1e-6);
    check_like(grad_of(n, 1, {1}), {1, 0, 1, 1, 1, 1}, 1e-6);
    check_like(grad_of(n, -1, {1}), {kNaN, kNaN, kNaN, 0.16435353457927704, 0.10518626123666763, 0.073046013712883},
               1e-6);
    check_like(grad_of(n, 0, {1}), {0, 0, 0, 0, 0, 0}, 1e-6);
    // A row of zeros: norm 0 for p < 0, gradient 0 there.
    const Tensor z = tensor({{0.0, 0.0, 0.0}, {4.0, 5.0, 6.0}});
    check_like(grad_of(z, -2.5, {1}), {0, 0, 0, 0.3967764675617218, 0.18170247972011566, 0.09599011391401291}, 1e-6);
    check_like(grad_of(z, -kInf, {1}), {0, 0, 0, 1, 0, 0}, 1e-6);
    // Away from ties and zeros every p is differentiable, twice.
    const Tensor p = param({3, 4}, 0.5, 2, 7) * 1.0;  // positive, no ties
    const Tensor q = (p * tensor({1.0, -1.0, 1.0, -1.0}, kFloat64)).detach().requires_grad_();
    for (double order : {-kInf, -2.5, -1.0, 0.5, 1.5, 3.0, kInf}) {
        INFO("p " << order);
        REQUIRE_GRADCHECK([order](auto& v) { return norm(v[0], order, {1}); }, {q}, "norm");
        REQUIRE_GRADCHECK([order](auto& v) { return norm(v[0], order); }, {q}, "norm of all");
        REQUIRE_GRADGRADCHECK([order](auto& v) { return norm(v[0], order, {0}); }, {q}, "norm twice");
    }
    REQUIRE_GRADGRADCHECK([](auto& v) { return norm(v[0], 0, {0}); }, {q}, "norm 0 twice");
}

TEST_CASE("reductions of extreme values overflow as torch's do, without a rescale", "[adversarial][reductions]") {
    CHECK(var(tensor({1e30, -1e30})).item<double>() == kInf);
    CHECK(var(tensor({1e200, -1e200}, kFloat64)).item<double>() == kInf);
    CHECK(mean(tensor({3e38, 3e38})).item<double>() == kInf);
    CHECK(norm(tensor({1e-30, 1e-30})).item<double>() == 0);
    CHECK(norm(tensor({1e200, 1e200}, kFloat64)).item<double>() == kInf);
    // The max norms never overflow: they compare.
    CHECK(norm(tensor({3e38, -3.1e38}), kInf).item<double>() == Approx(3.1e38));
    CHECK(norm(tensor({1e-40, -3e-41}), -kInf).item<double>() == Approx(3e-41).epsilon(1e-3));
    // A correction past the count divides by 0: inf, as torch; a huge finite one too.
    CHECK(var(tensor({1.0, 2.0, 3.0, -5.0}), {}, Correction{10}).item<double>() == kInf);
    CHECK(var(tensor({1.0, 2.0, 3.0, -5.0}), {}, Correction{1e300}).item<double>() == kInf);
    CHECK(var(tensor({1.0, 2.0, 3.0, -5.0}), {0}, Correction{-3}).item<double>() == Approx(5.535714149475098));
}
