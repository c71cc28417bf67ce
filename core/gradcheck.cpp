#include "core/gradcheck.hpp"

#include <cmath>

#include "core/creation.hpp"
#include "core/node.hpp"
#include "core/ops.hpp"

namespace xgrad {

GradcheckResult gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& o) {
    // A NaN tolerance would pass every gradient (no comparison with NaN is true), an eps of 0
    // or inf would measure nothing.
    if (!(o.eps > 0) || !std::isfinite(o.eps))
        throw Error(fmt::format("gradcheck: eps must be positive and finite, got {}", o.eps));
    for (const auto& [name, v] : {std::pair{"atol", o.atol}, std::pair{"rtol", o.rtol}})
        if (!(v >= 0) || !std::isfinite(v))
            throw Error(fmt::format("gradcheck: {} must be finite and >= 0, got {}", name, v));
    // Fresh float64 leaves, so that neither the caller's tensors nor their graphs are touched.
    std::vector<Tensor> x;
    std::vector<bool> checked;
    for (const Tensor& in : inputs) {
        const bool check = in.requires_grad() && is_floating(in.dtype());
        Tensor leaf = is_floating(in.dtype()) ? cast(in.detach(), kFloat64).detach() : in.detach();
        if (check) leaf.requires_grad_(true);
        x.push_back(leaf);
        checked.push_back(check);
    }

    Tensor y0 = f(x);
    if (y0.dtype() != kFloat64)
        throw Error(fmt::format("gradcheck: {} returned {} for float64 inputs; every op on the way must "
                                "keep float64",
                                o.name, dtype_name(y0.dtype())));
    Generator gen(o.seed);
    // R in [0.5, 1.5): non-uniform, no zeros that would mask an element.
    const Tensor weight = uniform(y0.shape(), 0.5, 1.5, kFloat64, gen);
    auto loss_of = [&](const Tensor& y) { return sum(mul(y, weight)); };

    loss_of(y0).backward();

    GradcheckResult result;
    NoGradGuard no_grad;
    for (std::size_t i = 0; i < x.size(); ++i) {
        if (!checked[i]) continue;
        auto& xi = array<double>(x[i]);
        const Tensor gi = x[i].grad();
        // An input the output does not depend on has no gradient: analytically all zeros.
        const std::vector<double> analytic =
            gi.defined() ? gi.to_vector<double>() : std::vector<double>(xi.size(), 0.0);
        double worst_excess = 0;
        std::size_t worst = 0;
        double worst_numeric = 0;
        for (std::size_t k = 0; k < xi.size(); ++k) {
            const double saved = xi.data()[k];
            xi.data()[k] = saved + o.eps;
            const double up = loss_of(f(x)).item<double>();
            xi.data()[k] = saved - o.eps;
            const double down = loss_of(f(x)).item<double>();
            xi.data()[k] = saved;
            const double numeric = (up - down) / (2 * o.eps);
            const double excess = std::abs(analytic[k] - numeric) - (o.atol + o.rtol * std::abs(numeric));
            if (!std::isfinite(analytic[k]) || !std::isfinite(numeric) || excess > worst_excess) {
                worst_excess = std::isfinite(excess) ? excess : INFINITY;
                worst = k;
                worst_numeric = numeric;
            }
        }
        if (worst_excess > 0) {
            const Shape& s = x[i].shape();
            const Shape idx = unravel_index(worst, s);
            result.passed = false;
            result.report += fmt::format(
                "gradcheck: {}: input {} (shape {}): the gradient at index ({}) is {:.8g} by backward but "
                "{:.8g} by central differences (eps {}, atol {}, rtol {})\n",
                o.name, i, shape_str(s), fmt::join(idx, ", "), analytic[worst], worst_numeric, o.eps, o.atol,
                o.rtol);
        }
    }
    return result;
}

}  // namespace xgrad
