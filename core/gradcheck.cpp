#include "core/gradcheck.hpp"

#include <cmath>

#include "core/autograd.hpp"
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
        // clone: detach shares the caller's storage, which the differences write into.
        Tensor leaf = (is_floating(in.dtype()) ? cast(in.detach(), kFloat64).detach() : in.detach()).clone();
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

GradcheckResult gradgradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& o) {
    std::vector<std::size_t> checked;
    std::vector<Tensor> x;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        const Tensor& in = inputs[i];
        if (in.requires_grad() && is_floating(in.dtype())) checked.push_back(i);
        x.push_back((is_floating(in.dtype()) ? cast(in.detach(), kFloat64).detach() : in.detach()).clone());
    }
    Shape out_shape;
    {
        NoGradGuard no_grad;
        out_shape = f(x).shape();
    }
    Generator gen(o.seed + 1);
    // v in [-1, 1) with no zeros near: the gradient flowing into f's output, checked too.
    Tensor v = uniform(out_shape, 0.5, 1.5, kFloat64, gen);
    v = mul(v, where(uniform(out_shape, 0, 1, kFloat64, gen) < 0.5, full({}, -1.0, kFloat64), full({}, 1.0, kFloat64)));
    std::vector<Tensor> with_v = inputs;
    with_v.push_back(v.detach().requires_grad_(true));
    auto first_order = [&](const std::vector<Tensor>& xs) {
        // gradcheck evaluates the function under NoGradGuard for its differences: the inner
        // gradient needs its graph all the same.
        AutoGradMode grad_mode(true);
        std::vector<Tensor> xin(xs.begin(), xs.end() - 1);
        std::vector<Tensor> wrt;
        for (std::size_t i : checked) {
            // The differences run on leaves that do not require grad: take the gradient
            // with respect to a leaf that does, with the same values.
            if (!xin[i].requires_grad()) xin[i] = xin[i].detach().requires_grad_(true);
            wrt.push_back(xin[i]);
        }
        const Tensor y = f(xin);
        std::vector<Tensor> parts;
        std::vector<Tensor> grads;
        if (y.requires_grad() && !wrt.empty())
            grads = autograd::grad({y}, wrt, {xs.back()}, true, true, /*allow_unused=*/true);
        for (std::size_t k = 0; k < wrt.size(); ++k) {
            const Tensor& g = k < grads.size() ? grads[k] : Tensor();
            parts.push_back(reshape(g.defined() ? g : zeros_like(wrt[k]), {-1}));
        }
        if (parts.empty()) return zeros({0}, kFloat64);
        return concat(parts, 0);
    };
    GradcheckOptions inner = o;
    inner.name = fmt::format("the gradient of {}", o.name);
    return gradcheck(first_order, with_v, inner);
}

}  // namespace xgrad
