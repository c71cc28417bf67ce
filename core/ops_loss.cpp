// The fused losses: cross-entropy (on the softmax kernel's logsumexp) and mean squared error.
// Each is one op with its backward, where the composed forms made several passes and temporaries;
// each backward is an op of its own (cross_entropy_backward, mse_loss_backward) whose gradient
// is written in ops, so the losses are twice differentiable.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/creation.hpp"
#include "core/grad_ops.hpp"
#include "core/node.hpp"
#include "core/ops.hpp"
#include "core/ops_util.hpp"
#include "core/runtime/alloc.hpp"
#include "core/runtime/parallel.hpp"
#include "core/softmax_row.hpp"

namespace xgrad {

namespace {

// "(1, 3)": the position of flat element `flat` in a row-major array of `shape`.
std::string position(std::size_t flat, const Shape& shape) { return shape_str(unravel_index(flat, shape)); }

// Checks class index targets against logits (torch's layout, below) and returns how many are
// not ignore_index; rows_shape is set to logits' shape without the class axis.
std::size_t check_class_targets(const char* op, const Tensor& logits, const Tensor& targets,
                                std::int64_t ignore_index, Shape& rows_shape) {
    if (!logits.defined() || !targets.defined())
        throw Error(fmt::format("{}: logits and targets must be defined tensors", op));
    // torch's layout: the classes on axis 1 of (N, C, d1, ...), or axis 0 of one unbatched (C,).
    const std::size_t class_axis = logits.dim() == 1 ? 0 : 1;
    if (logits.dim() == 0 || logits.shape()[class_axis] == 0)
        throw Error(fmt::format("{}: expected logits (N, C) or (N, C, d1, ...) with a non-empty class axis 1 "
                                "(or one unbatched (C,)), got shape {}",
                                op, shape_str(logits.shape())));
    rows_shape = logits.shape();
    rows_shape.erase(rows_shape.begin() + static_cast<long>(class_axis));
    if (targets.dtype() != kInt64)
        throw Error(fmt::format("{}: targets must be int64 class indices, got {}", op, dtype_name(targets.dtype())));
    if (targets.shape() != rows_shape) {
        // A class-last (B, T, V) tensor with (B, T) targets is the usual slip when porting: say so.
        const bool class_last = logits.dim() >= 3 &&
                                targets.shape() == Shape(logits.shape().begin(), logits.shape().end() - 1);
        throw Error(fmt::format("{}: targets of shape {} do not fit logits of shape {}: expected targets of shape {} "
                                "(logits' shape without the class axis 1, as torch){}",
                                op, shape_str(targets.shape()), shape_str(logits.shape()), shape_str(rows_shape),
                                class_last ? "; for class-last logits (B, T, V) pass logits.permute({0, 2, 1})" : ""));
    }
    const auto classes = static_cast<std::int64_t>(logits.shape()[class_axis]);
    const std::size_t rows = targets.numel();
    const std::int64_t* target = values<std::int64_t>(targets).data();
    std::size_t count = 0;
    for (std::size_t r = 0; r < rows; ++r) {
        if (target[r] == ignore_index) continue;
        if (target[r] < 0 || target[r] >= classes)
            throw Error(fmt::format("{}: target {} at position {} is out of range for {} classes (expected 0..{} or "
                                    "ignore_index {})",
                                    op, target[r], position(r, rows_shape), classes, classes - 1, ignore_index));
        ++count;
    }
    return count;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, Reduction reduction, std::int64_t ignore_index) {
    constexpr const char* op = "cross_entropy";
    if (targets.defined() && is_floating(targets.dtype()))  // class probabilities
        return cross_entropy(logits, targets, CrossEntropyOptions().reduction(reduction).ignore_index(ignore_index));
    Shape rows_shape;
    const std::size_t count = check_class_targets(op, logits, targets, ignore_index, rows_shape);
    const auto classes = static_cast<std::int64_t>(logits.shape()[logits.dim() == 1 ? 0 : 1]);
    const std::size_t class_axis = logits.dim() == 1 ? 0 : 1;
    const std::size_t rows = targets.numel();
    const std::int64_t* target = values<std::int64_t>(targets).data();
    // Row r = o·inner + i (the targets' row-major order) holds classes at (o·C + c)·inner + i.
    const axis_split split = split_at(logits.shape(), class_axis);

    return dispatch_floating(op, logits.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const auto C = static_cast<std::size_t>(classes);
        const std::size_t inner = split.inner;
        const T* x = values<T>(logits).data();
        // Per row: lse = log Σ exp(x) on the softmax kernel, in double whatever T is: a well-fitted
        // token's loss lse − x[target] is a difference of two near-equal numbers, and in float
        // it would keep few of its digits. The total is summed in double too.
        const AllocContext context(op, rows_shape);
        xt::xarray<T> lse = xt::zeros<T>(Shape{rows});
        xt::xarray<T> loss = xt::zeros<T>(rows_shape);
        // The rows over the pool (each lse is a row of double exps), the total then summed in
        // row order on this thread, so that it does not depend on the threads.
        CachedBuffer<double> row_loss(rows);  // ignored rows are skipped when summing
        const std::size_t row_grain = std::max<std::size_t>(1, 2048 / std::max<std::size_t>(C, 1));
        parallel_for(rows, row_grain, [&](std::size_t r0, std::size_t r1) {
            std::vector<double> row(C), scratch(C);
            for (std::size_t r = r0; r < r1; ++r) {
                const T* src = x + (r / inner) * C * inner + r % inner;
                for (std::size_t c = 0; c < C; ++c) row[c] = src[c * inner];
                const double row_lse = kernel::logsumexp(row.data(), C, scratch.data());
                lse.data()[r] = static_cast<T>(row_lse);
                if (target[r] == ignore_index) continue;
                row_loss.data()[r] = row_lse - row[target[r]];
                loss.data()[r] = static_cast<T>(row_loss.data()[r]);
            }
        });
        double total = 0;
        for (std::size_t r = 0; r < rows; ++r)
            if (target[r] != ignore_index) total += row_loss.data()[r];
        xt::xarray<T> value = xt::zeros<T>(Shape{});
        if (reduction == Reduction::none)
            value = std::move(loss);
        else
            value() = static_cast<T>(reduction == Reduction::sum ? total : total / static_cast<double>(count));

        const Tensor lse_t = make_leaf(Storage(std::move(lse)));
        return make_result<T>(std::move(value), {logits, targets}, op,
                              Formula([lse_t, reduction, ignore_index, count](const GradArgs& in) -> std::vector<Tensor> {
                                  return {cross_entropy_backward(in.grad(), in.inputs[0], in.inputs[1], lse_t, reduction,
                                                                 ignore_index, count),
                                          Tensor()};
                              }),
                              Saves::only_inputs(3u));
    });
}

namespace {

// The position of class c of row r in logits (N, C, d1, ...): row r = o·inner + i holds its
// classes at (o·C + c)·inner + i, as in cross_entropy above.
std::size_t class_offset(std::size_t r, std::size_t c, std::size_t C, std::size_t inner) {
    return ((r / inner) * C + c) * inner + r % inner;
}

// torch's F.cross_entropy with a weight, label smoothing or probability targets, composed of
// differentiable ops (so gradcheck and gradgradcheck hold by construction) in the order of
// torch 1.13's formulas (LossNLL.cpp), so that the values are torch's.
Tensor cross_entropy_composed(const Tensor& logits, const Tensor& targets,
                              const CrossEntropyOptions& o) {
    const long ca = logits.dim() == 1 ? 0 : 1;
    const std::size_t C = logits.shape()[static_cast<std::size_t>(ca)];
    const double eps = o.label_smoothing();
    const Reduction reduction = o.reduction();
    // The weight as (C, 1, ..., 1), to broadcast against logits along the class axis.
    Tensor w;
    if (o.weight().defined()) {
        IntList wshape(std::vector<long>(logits.dim() - static_cast<std::size_t>(ca), 1));
        wshape[0] = static_cast<long>(C);
        w = o.weight().detach().reshape(wshape);
    }
    const Tensor logp = log_softmax(logits, ca);
    if (is_floating(targets.dtype())) {
        // torch: target_ = target·(1 − ε) + ε/C, then −(logp·target_·w) summed.
        const Tensor p = eps > 0 ? targets * (1 - eps) + eps / static_cast<double>(C) : targets;
        Tensor prod = logp * p;
        if (w.defined()) prod = prod * w;
        if (reduction == Reduction::none) return -sum(prod, {ca});
        if (reduction == Reduction::sum) return -sum(prod);
        return -sum(prod) / static_cast<double>(logits.numel() / C);
    }
    // Class indices: constant masks from the targets (checked by the caller).
    const std::size_t rows = targets.numel(), inner = split_at(logits.shape(), static_cast<std::size_t>(ca)).inner;
    const std::int64_t* t = values<std::int64_t>(targets).data();
    std::vector<double> pick(logits.numel(), 0.0);  // −1 at (r, t_r) for each row not ignored
    std::vector<std::int64_t> ignored(rows, 0);
    double total_weight = 0;
    std::vector<double> wv;
    if (w.defined()) {
        const Tensor w64 = o.weight().detach().to(kFloat64);
        const double* pw = values<double>(w64).data();
        wv.assign(pw, pw + C);
    }
    for (std::size_t r = 0; r < rows; ++r) {
        if (t[r] == o.ignore_index()) {
            ignored[r] = 1;
            continue;
        }
        pick[class_offset(r, static_cast<std::size_t>(t[r]), C, inner)] = -1.0;
        total_weight += w.defined() ? wv[static_cast<std::size_t>(t[r])] : 1.0;
    }
    const Dtype dt = logits.dtype();
    Tensor neg_w = from_vector(pick, logits.shape(), dt);  // −w[t_r] at (r, t_r)
    if (w.defined()) neg_w = neg_w * w;
    const Tensor nll_rows = sum(logp * neg_w, {ca});
    // The mean's divisor: Σ w[t_r] (the count without a weight), as a value of logits' dtype
    // so that the division rounds as torch's.
    const Tensor divisor = full({}, total_weight, dt);
    Tensor nll = reduction == Reduction::none ? nll_rows
                 : reduction == Reduction::sum ? sum(nll_rows)
                                               : sum(nll_rows) / divisor;
    if (!(eps > 0)) return nll;
    const Tensor mask = cast(from_vector(ignored, targets.shape()), kBool);
    Tensor smooth_rows = -sum(w.defined() ? logp * w : logp, {ca});
    smooth_rows = masked_fill(smooth_rows, mask, 0.0);
    const Tensor smooth = reduction == Reduction::none ? smooth_rows
                          : reduction == Reduction::sum ? sum(smooth_rows)
                                                        : sum(smooth_rows) / divisor;
    return (1 - eps) * nll + smooth * (eps / static_cast<double>(C));
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options) {
    constexpr const char* op = "cross_entropy";
    const double eps = options.label_smoothing();
    if (!(eps >= 0 && eps <= 1))
        throw Error(fmt::format("{}: label_smoothing must be between 0.0 and 1.0, got {}", op, eps));
    const bool probabilities = targets.defined() && is_floating(targets.dtype());
    if (!probabilities && !options.weight().defined() && eps == 0)
        return cross_entropy(logits, targets, options.reduction(), options.ignore_index());
    if (!logits.defined() || !targets.defined())
        throw Error(fmt::format("{}: logits and targets must be defined tensors", op));
    if (!is_floating(logits.dtype()) || logits.dtype() == kBFloat16)
        throw Error(fmt::format("{}: logits must be float32 or float64 with a weight, label smoothing or "
                                "probability targets, got {}", op, dtype_name(logits.dtype())));
    if (probabilities) {
        if (logits.dim() == 0 || targets.shape() != logits.shape() || targets.dtype() != logits.dtype())
            throw Error(fmt::format("{}: targets must be int64 class indices, or probabilities of logits' shape "
                                    "and dtype; got {} {} for logits {} {}",
                                    op, dtype_name(targets.dtype()), shape_str(targets.shape()),
                                    dtype_name(logits.dtype()), shape_str(logits.shape())));
        if (options.ignore_index() != -100)
            throw Error(fmt::format("{}: ignore_index ({}) is not supported for probability targets (as torch)", op,
                                    options.ignore_index()));
    } else {
        Shape rows_shape;
        check_class_targets(op, logits, targets, options.ignore_index(), rows_shape);
    }
    const std::size_t C = logits.shape()[logits.dim() == 1 ? 0 : 1];
    if (const Tensor& w = options.weight(); w.defined()) {
        if (w.dim() != 1 || w.shape()[0] != C || w.dtype() != logits.dtype())
            throw Error(fmt::format("{}: weight must be a 1-D tensor of the {} classes in logits' dtype {}, got {} {}",
                                    op, C, dtype_name(logits.dtype()), dtype_name(w.dtype()), shape_str(w.shape())));
        const Tensor w64 = w.detach().to(kFloat64);
        const double* pw = values<double>(w64).data();
        for (std::size_t c = 0; c < C; ++c)
            if (!std::isfinite(pw[c]))
                throw Error(fmt::format("{}: weight must be finite, got {} for class {}", op, pw[c], c));
    }
    return cross_entropy_composed(logits, targets, options);
}

Tensor cross_entropy_backward(const Tensor& g, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              Reduction reduction, std::int64_t ignore_index, std::size_t count) {
    constexpr const char* op = "cross_entropy_backward";
    check_same_dtype(op, g, logits);
    check_same_dtype(op, lse, logits);
    const std::size_t class_axis = logits.dim() == 1 ? 0 : 1;
    const std::size_t rows = targets.numel();
    if (targets.dtype() != kInt64 || static_cast<std::size_t>(lse.numel()) != rows || logits.dim() == 0 ||
        static_cast<std::size_t>(logits.numel()) != rows * logits.shape()[class_axis])
        throw Error(fmt::format("{}: logits {}, targets {} of {} and logsumexp {} do not fit", op,
                                shape_str(logits.shape()), shape_str(targets.shape()), dtype_name(targets.dtype()),
                                shape_str(lse.shape())));
    if (g.shape() != (reduction == Reduction::none ? targets.shape() : Shape{}))
        throw Error(fmt::format("{}: gradient of shape {} for a loss of shape {}", op, shape_str(g.shape()),
                                shape_str(reduction == Reduction::none ? targets.shape() : Shape{})));
    const axis_split split = split_at(logits.shape(), class_axis);
    const AllocContext context(op, logits.shape());
    return dispatch_floating(op, logits.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const std::size_t C = split.n, inner = split.inner;
        const std::size_t row_grain = std::max<std::size_t>(1, 2048 / std::max<std::size_t>(C, 1));
        // d loss_r / d x_rc = softmax_rc − [c == target_r], softmax_rc = exp(x_rc − lse_r).
        const T* xs = values<T>(logits).data();
        const std::int64_t* t = values<std::int64_t>(targets).data();
        const T* pl = values<T>(lse).data();
        const auto& gv = values<T>(g);
        xt::xarray<T> dx = xt::zeros<T>(logits.shape());
        // Each row writes only its own values of dx: the rows split over the pool.
        parallel_for(rows, row_grain, [&](std::size_t r0, std::size_t r1) {
            std::vector<T> in(inner == 1 ? 0 : C), out(inner == 1 ? 0 : C);
            for (std::size_t r = r0; r < r1; ++r) {
                if (t[r] == ignore_index) continue;
                double scale = reduction == Reduction::none ? gv.data()[r] : gv();
                if (reduction == Reduction::mean) scale /= static_cast<double>(count);
                const std::size_t base = (r / inner) * C * inner + r % inner;
                // A contiguous row (class axis last in memory) is worked in place; a strided
                // one is gathered, worked, and scattered back.
                const T* src = xs + base;
                T* dst = dx.data() + base;
                if (inner != 1) {
                    for (std::size_t c = 0; c < C; ++c) in[c] = src[c * inner];
                    src = in.data();
                    dst = out.data();
                }
                kernel::exp_shifted_sum(src, pl[r], dst, C);  // softmax_rc
                for (std::size_t c = 0; c < C; ++c) dst[c] = static_cast<T>(scale * dst[c]);
                dst[t[r]] -= static_cast<T>(scale);
                if (inner != 1)
                    for (std::size_t c = 0; c < C; ++c) dx.data()[base + c * inner] = out[c];
            }
        });
        return make_result<T>(
            std::move(dx), {g, logits, targets, lse}, op,
            // Captures no more than fits in std::function's own storage: a first-order backward
            // makes the formula and drops it unused.
            Formula([reduction, ignore_index](const GradArgs& in) -> std::vector<Tensor> {
                // d = s ⊙ (p − one_hot(t)) with p = softmax(logits) and s each row's scale (0 on
                // ignored rows): linear in g; in the logits, s ⊙ softmax_backward(G, p).
                const Tensor &g = in.inputs[0], &logits = in.inputs[1], &targets = in.inputs[2];
                const Tensor &lse = in.inputs[3], &G = in.grad();
                const std::size_t class_axis = logits.dim() == 1 ? 0 : 1;
                const std::int64_t* t = values<std::int64_t>(targets).data();
                const std::size_t count = static_cast<std::size_t>(
                    std::count_if(t, t + targets.numel(), [&](std::int64_t c) { return c != ignore_index; }));
                std::vector<Tensor> d(4);
                if (in.needs(0)) {
                    // The gradient for a unit g on every row, p − one_hot(t) (0 where ignored),
                    // weighed by G and summed as the loss is reduced.
                    const Tensor unit = cross_entropy_backward(ones(targets.shape(), logits.dtype()), logits, targets, lse,
                                                               Reduction::none, ignore_index, count);
                    const Tensor per_row = sum(G * unit, {static_cast<long>(class_axis)});
                    d[0] = reduction == Reduction::none ? per_row
                           : reduction == Reduction::sum ? sum(per_row)
                                                         : sum(per_row) / static_cast<double>(count);
                }
                if (in.needs(1)) {
                    Tensor s = g * cast(ne(targets, ignore_index), logits.dtype());
                    if (reduction == Reduction::mean) s = s / static_cast<double>(count);
                    const long axis = static_cast<long>(class_axis);
                    d[1] = unsqueeze(s, axis) * softmax_backward(G, softmax(logits, axis), axis);
                }
                return d;
            }),
            Saves::only_inputs(0xfu));
    });
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
    constexpr const char* op = "mse_loss";
    check_defined(op, input, "input");
    check_defined(op, target, "target");
    if (input.shape() != target.shape())
        throw Error(fmt::format("{}: input of shape {} and target of shape {} differ (expected equal shapes)", op,
                                shape_str(input.shape()), shape_str(target.shape())));
    if (!is_floating(input.dtype()) || input.dtype() != target.dtype())
        throw Error(fmt::format("{}: expected input and target of one floating-point dtype, got {} and {}", op,
                                dtype_name(input.dtype()), dtype_name(target.dtype())));
    if (reduction == Reduction::none) {
        const Tensor diff = input - target;
        return diff * diff;
    }
    // Fused for sum and mean: one pass forward and one backward, where sub, mul and mean made
    // five passes and three full-size temporaries. The difference is recomputed in backward
    // rather than kept: a subtraction costs less than holding a copy of the input.
    return dispatch_floating(op, input.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const std::size_t n = input.numel();
        const T* x = values<T>(input).data();
        const T* t = values<T>(target).data();
        // Summed in double (a float sum over millions of terms drifts), in 8 independent
        // partial sums so the adds do not wait on each other.
        double part[8] = {};
        std::size_t i = 0;
        for (; i + 8 <= n; i += 8)
            for (std::size_t l = 0; l < 8; ++l) {
                const double d = static_cast<double>(x[i + l]) - static_cast<double>(t[i + l]);
                part[l] += d * d;
            }
        for (; i < n; ++i) {
            const double d = static_cast<double>(x[i]) - static_cast<double>(t[i]);
            part[0] += d * d;
        }
        double total = 0;
        for (double p : part) total += p;
        const double scale = reduction == Reduction::mean ? 1.0 / static_cast<double>(n) : 1.0;
        xt::xarray<T> value = xt::zeros<T>(Shape{});
        value() = static_cast<T>(n == 0 && reduction == Reduction::mean ? NAN : total * scale);
        return make_result<T>(std::move(value), {input, target}, op,
                              Formula([reduction](const GradArgs& in) -> std::vector<Tensor> {
                                  // d/dt = −d/dx
                                  const Tensor dx = mse_loss_backward(in.grad(), in.inputs[0], in.inputs[1], reduction);
                                  return {in.needs(0) ? dx : Tensor(), in.needs(1) ? -dx : Tensor()};
                              }),
                              Saves::only_inputs(3u));
    });
}

Tensor mse_loss_backward(const Tensor& g, const Tensor& input, const Tensor& target, Reduction reduction) {
    constexpr const char* op = "mse_loss_backward";
    check_same_dtype(op, g, input);
    check_same_dtype(op, target, input);
    if (g.dim() != 0 || input.shape() != target.shape() || reduction == Reduction::none)
        throw Error(fmt::format("{}: expected a 0-d gradient of a sum or mean and input and target of one shape, got "
                                "{}, {} and {}",
                                op, shape_str(g.shape()), shape_str(input.shape()), shape_str(target.shape())));
    const std::size_t n = input.numel();
    const double scale = reduction == Reduction::mean ? 1.0 / static_cast<double>(n) : 1.0;
    const AllocContext context(op, input.shape());
    return dispatch_floating(op, input.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        // d/dx = 2·(x − t)·scale·g
        const T k = static_cast<T>(2 * scale * static_cast<double>(values<T>(g)()));
        const T* x = values<T>(input).data();
        const T* t = values<T>(target).data();
        xt::xarray<T> dx = xt::empty<T>(input.shape());
        T* d = dx.data();
        for (std::size_t i = 0; i < n; ++i) d[i] = k * (x[i] - t[i]);
        return make_result<T>(std::move(dx), {g, input, target}, op,
                              Formula([scale](const GradArgs& in) -> std::vector<Tensor> {
                                  const Tensor &g = in.inputs[0], &x = in.inputs[1], &t = in.inputs[2], &G = in.grad();
                                  Tensor dg, dx, dt;
                                  if (in.needs(0)) dg = sum(G * (x - t)) * (2 * scale);
                                  if (in.needs(1) || in.needs(2)) dx = G * g * (2 * scale);
                                  if (in.needs(2)) dt = -dx;
                                  return {dg, in.needs(1) ? dx : Tensor(), dt};
                              }),
                              Saves::only_inputs(7u));
    });
}

}  // namespace xgrad
