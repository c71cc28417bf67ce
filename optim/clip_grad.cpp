#include "clip_grad.hpp"

#include <algorithm>
#include <cmath>

#include "core/arguments.hpp"
#include "core/dispatch.hpp"
#include "core/reduce_rules.hpp"
#include "core/runtime/kernel_loops.hpp"

namespace xgrad::optim {

double clip_grad_norm(const std::vector<Tensor>& parameters, double max_norm, double norm_type_arg) {
    constexpr const char* op = "clip_grad_norm";
    // max_norm = inf is meaningful (never clip), as in torch.
    check_argument(max_norm >= 0, op, "max_norm", max_norm, "max_norm >= 0");
    check_argument(norm_type_arg > 0, op, "norm_type", norm_type_arg, "norm_type > 0 or INFINITY");
    // The order as torch's norms read it (a float): 1e300 is the inf-norm, where Σ|g|^p would
    // overflow to inf and zero every gradient; one that rounds to 0 is refused.
    const double norm_type = norm_order(op, norm_type_arg);
    check_argument(norm_type > 0, op, "norm_type", norm_type_arg,
                   "norm_type > 0 or INFINITY, not below float's smallest value, where torch reads it as 0");
    const bool inf = std::isinf(norm_type);
    // Per-tensor norms first, then the norm of those (torch's order), accumulated in double.
    double total = 0;
    bool any = false;
    // Each gradient is read through a handle taken once: another thread's zero_grad() cannot
    // take it away mid-read.
    for (const Tensor& p : parameters) {
        Tensor grad = p.grad();
        if (!grad.defined()) continue;
        if (!grad.is_contiguous()) grad = grad.contiguous();  // a gradient set to a view: its values
        any = true;
        const double norm = dispatch_floating("clip_grad_norm", p.dtype(), [&](auto tag) {
            using T = typename decltype(tag)::type;
            const T* g = grad.const_data_ptr<T>();
            const std::size_t n = grad.numel();
            double acc = 0;
            // The sums in interleaved partial sums (lane_sum), so that they vectorise; the order
            // depends only on n. A NaN or an inf |g| reaches the sum whatever the order.
            if (inf)
                for (std::size_t j = 0; j < n; ++j) acc = nan_max(acc, std::abs(static_cast<double>(g[j])));
            else if (norm_type == 2)
                acc = lane_sum<double>(n, [g](std::size_t j) {
                    const double a = static_cast<double>(g[j]);
                    return a * a;
                });
            else
                acc = lane_sum<double>(
                    n, [g, norm_type](std::size_t j) { return std::pow(std::abs(static_cast<double>(g[j])), norm_type); });
            if (inf) return acc;
            return norm_type == 2 ? std::sqrt(acc) : std::pow(acc, 1 / norm_type);
        });
        if (inf)
            total = nan_max(total, norm);
        else
            total += norm_type == 2 ? norm * norm : std::pow(norm, norm_type);
    }
    if (!any) return 0;
    if (!inf) total = norm_type == 2 ? std::sqrt(total) : std::pow(total, 1 / norm_type);

    const double coef = max_norm / (total + 1e-6);
    if (!(coef >= 1)) {  // a NaN norm spreads to the gradients, as in torch
        for (const Tensor& p : parameters) {
            const Tensor grad = p.grad();
            if (!grad.defined()) continue;
            if (!grad.is_contiguous()) {  // a gradient set to a view: scaled through it
                NoGradGuard no_grad;
                grad.mul_(coef);
                continue;
            }
            dispatch_floating("clip_grad_norm", p.dtype(), [&](auto tag) {
                using T = typename decltype(tag)::type;
                T* g = grad.mutable_data_ptr<T>();
                const T c = static_cast<T>(coef);
                for (std::size_t j = 0, n = grad.numel(); j < n; ++j) g[j] *= c;
            });
        }
    }
    return total;
}

}  // namespace xgrad::optim
