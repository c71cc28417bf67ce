// Softmax, log-softmax and the masked softmax, fused, on the one row kernel of softmax_row.hpp:
// one pass for the max, one for the exps and their sum, one to scale; backward from the saved
// output alone. Along an axis other than the last, each line is gathered into a contiguous row
// first, so every softmax runs the same kernel. Each backward is an op of its own
// (softmax_backward, ...) on the same rows, whose gradient is written in ops (grad_ops.hpp).
#include <array>
#include <cmath>
#include <vector>

#include "core/call_context.hpp"
#include "core/creation.hpp"
#include "core/grad_ops.hpp"
#include "core/ops.hpp"
#include "core/ops_util.hpp"
#include "core/runtime/parallel.hpp"
#include "core/softmax_row.hpp"

namespace xgrad {

namespace {

// Rows per parallel chunk: about 16k elements each.
std::size_t row_grain(std::size_t n) { return std::max<std::size_t>(1, 16384 / std::max<std::size_t>(n, 1)); }

// Calls f(in_row, out_row) for every line of `l.n` elements along the split axis of in → out,
// with the lines gathered into contiguous rows (and the results scattered back) when the axis
// is not the last. `in` may be several arrays read alike: f gets one row pointer for each.
template <class T, std::size_t K, class F>
void for_each_row(const axis_split& l, const std::array<const T*, K>& in, T* out, F&& f) {
    const std::size_t n = l.n, lines = l.outer * l.inner;
    if (n == 0) return;
    parallel_for(lines, row_grain(n), [&](std::size_t a, std::size_t b) {
        std::vector<T> rows(l.inner == 1 ? 0 : (K + 1) * n);
        for (std::size_t line = a; line < b; ++line) {
            const std::size_t o = line / l.inner, i = line % l.inner, base = o * n * l.inner + i;
            std::array<const T*, K> r;
            if (l.inner == 1) {
                for (std::size_t k = 0; k < K; ++k) r[k] = in[k] + base;
                f(r, out + base);
                continue;
            }
            for (std::size_t k = 0; k < K; ++k) {
                T* row = rows.data() + k * n;
                for (std::size_t j = 0; j < n; ++j) row[j] = in[k][base + j * l.inner];
                r[k] = row;
            }
            T* y = rows.data() + K * n;
            f(r, y);
            for (std::size_t j = 0; j < n; ++j) out[base + j * l.inner] = y[j];
        }
    });
}

// A backward op's gradient g and the forward's output y: one dtype, one shape.
void check_grad_of(const char* op, const Tensor& g, const Tensor& y) {
    check_same_dtype(op, g, y);
    if (g.shape() != y.shape())
        throw Error(fmt::format("{}: gradient of shape {} for an output of shape {}", op, shape_str(g.shape()),
                                shape_str(y.shape())));
}

// 1 where the mask keeps a key of scores (batch, queries, keys), else 0, in dtype d: (queries,
// keys) for a bool mask shared by the batch. For the masked softmax's second derivative only.
Tensor kept_keys(const ResolvedMask& mask, Dtype d) {
    if (mask.by_mask()) return cast(mask.where(), d);
    const std::size_t n = mask.keys(), rows = mask.batch() * mask.queries();
    std::vector<double> keep(rows * n, 0.0);
    for (std::size_t r = 0; n != 0 && r < rows; ++r)
        for (std::size_t j = 0; j < mask.prefix()[r] && j < n; ++j) keep[r * n + j] = 1.0;
    return from_vector(keep, {mask.batch(), mask.queries(), n}, d);
}

}  // namespace

Tensor softmax(const Tensor& a, long axis) {
    const std::size_t ax = normalize_axis("softmax", axis, a.shape());
    const axis_split l = split_at(a.shape(), ax);
    const AllocContext context("softmax", a.shape());
    return dispatch_floating("softmax", a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> out = xt::empty<T>(a.shape());
        for_each_row<T, 1>(l, {values<T>(a).data()}, out.data(),
                           [&](const auto& x, T* y) { kernel::softmax_prefix(x[0], y, l.n, l.n); });
        return make_result<T>(std::move(out), {a}, "softmax", Formula([ax](const GradArgs& in) -> std::vector<Tensor> {
            return {softmax_backward(in.grad(), in.output, static_cast<long>(ax))};
        }), Saves::only_output());
    });
}

Tensor softmax_backward(const Tensor& g, const Tensor& y, long axis) {
    // d = y ⊙ (g − s), s = Σₖ g⊙y. In g it is linear and self-adjoint (its gradient is
    // softmax_backward of gg); in y, ∂d_j/∂y_k = δ_jk·(g_j − s) − y_j·g_k.
    constexpr const char* op = "softmax_backward";
    check_grad_of(op, g, y);
    const std::size_t ax = normalize_axis(op, axis, y.shape());
    const axis_split l = split_at(y.shape(), ax);
    const AllocContext context(op, y.shape());
    return dispatch_floating(op, y.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> gx = xt::empty<T>(y.shape());
        for_each_row<T, 2>(l, {values<T>(y).data(), values<T>(g).data()}, gx.data(),
                           [&](const auto& yg, T* d) { kernel::softmax_grad_prefix(yg[0], yg[1], d, l.n, l.n); });
        return make_result<T>(std::move(gx), {g, y}, op, Formula([ax](const GradArgs& in) -> std::vector<Tensor> {
            const Tensor &g = in.inputs[0], &y = in.inputs[1], &gg = in.grad();
            const std::vector<long> axes{static_cast<long>(ax)};
            Tensor dg, dy;
            if (in.needs(0)) dg = softmax_backward(gg, y, axes[0]);
            if (in.needs(1)) dy = softmax_backward_grad_y(gg, g, y, axes[0]);
            return {dg, dy};
        }), Saves::only_inputs(3u));
    });
}

Tensor softmax_backward_grad_y(const Tensor& gg, const Tensor& g, const Tensor& y, long axis) {
    const std::vector<long> axes{axis};
    return gg * (g - sum(g * y, axes, true)) - g * sum(gg * y, axes, true);
}

Tensor log_softmax(const Tensor& a, long axis) {
    const std::size_t ax = normalize_axis("log_softmax", axis, a.shape());
    const axis_split l = split_at(a.shape(), ax);
    const AllocContext context("log_softmax", a.shape());
    return dispatch_floating("log_softmax", a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> out = xt::empty<T>(a.shape());
        for_each_row<T, 1>(l, {values<T>(a).data()}, out.data(), [&](const auto& x, T* y) {
            const T lse = kernel::logsumexp(x[0], l.n, y);  // y as scratch, then overwritten
            for (std::size_t k = 0; k < l.n; ++k) y[k] = x[0][k] - lse;
        });
        return make_result<T>(std::move(out), {a}, "log_softmax", Formula([ax](const GradArgs& in) -> std::vector<Tensor> {
            return {log_softmax_backward(in.grad(), in.output, static_cast<long>(ax))};
        }), Saves::only_output());
    });
}

Tensor log_softmax_backward(const Tensor& g, const Tensor& y, long axis) {
    // d = g − exp(y)·Σₖ g (exp(y) the softmax). Its gradient: gg − Σₖ gg⊙exp(y) in g (the
    // transpose), −gg⊙exp(y)·Σₖ g in y.
    constexpr const char* op = "log_softmax_backward";
    check_grad_of(op, g, y);
    const std::size_t ax = normalize_axis(op, axis, y.shape());
    const axis_split l = split_at(y.shape(), ax);
    const AllocContext context(op, y.shape());
    return dispatch_floating(op, y.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> gx = xt::empty<T>(y.shape());
        for_each_row<T, 2>(l, {values<T>(y).data(), values<T>(g).data()}, gx.data(), [&](const auto& yg, T* d) {
            T total = 0;
            for (std::size_t k = 0; k < l.n; ++k) total += yg[1][k];
            for (std::size_t k = 0; k < l.n; ++k) d[k] = yg[1][k] - std::exp(yg[0][k]) * total;
        });
        return make_result<T>(std::move(gx), {g, y}, op, Formula([ax](const GradArgs& in) -> std::vector<Tensor> {
            const Tensor &g = in.inputs[0], &y = in.inputs[1], &gg = in.grad();
            const std::vector<long> axes{static_cast<long>(ax)};
            const Tensor p = exp(y);
            Tensor dg, dy;
            if (in.needs(0)) dg = gg - sum(gg * p, axes, true);
            if (in.needs(1)) dy = -(gg * p * sum(g, axes, true));
            return {dg, dy};
        }), Saves::only_inputs(3u));
    });
}

Tensor masked_softmax(const Tensor& X, const AttentionMask& mask) {
    check_defined("masked_softmax", X, "X");
    // Without a mask it is the softmax, whose errors name masked_softmax, the call made.
    if (mask.kind() == AttentionMask::Kind::all) return as_call("masked_softmax", [&] { return softmax(X, -1); });
    if (X.dim() != 3)
        throw Error(fmt::format("masked_softmax: X must be 3-D (batch, queries, keys) when masked, got shape {}",
                                shape_str(X.shape())));
    return masked_softmax(X, mask.resolve("masked_softmax", X.size(0), X.size(1), X.size(2)));
}

Tensor masked_softmax(const Tensor& X, const Tensor& valid_lens) {
    return as_call("masked_softmax", [&] { return masked_softmax(X, AttentionMask::valid_lens(valid_lens)); });
}

Tensor masked_softmax(const Tensor& X, const ResolvedMask& mask) {
    // softmax(masked_fill(X, not kept, -1e6), -1) as one op: no mask tensor for lengths and
    // causal, no filled copy for any mask. Values and gradients are those of the composition.
    check_defined("masked_softmax", X, "X");
    if (X.dim() != 3)
        throw Error(fmt::format("masked_softmax: X must be 3-D (batch, queries, keys), got shape {}",
                                shape_str(X.shape())));
    mask.check_fits("masked_softmax", X.size(0), X.size(1), X.size(2));
    // Without keys there is nothing to normalise: no pass over 2^40 empty rows.
    const std::size_t n = X.size(2), rows = n == 0 ? 0 : X.size(0) * X.size(1);
    return dispatch_floating("masked_softmax", X.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* x = values<T>(X).data();
        xt::xarray<T> out = xt::empty<T>(X.shape());
        T* y = out.data();
        const kernel::MaskedRows kept(mask);
        parallel_for(rows, row_grain(n), [&](std::size_t r0, std::size_t r1) {
            kept.forward_rows(r0, r1 - r0, x + r0 * n, y + r0 * n);
        });
        // A bool mask is read again by the backward: it is an input, so writing it after the
        // forward pass makes the backward refuse (lengths and causal are copied into `mask`).
        std::vector<Tensor> inputs{X};
        if (mask.by_mask()) inputs.push_back(mask.where());
        return make_result<T>(std::move(out), std::move(inputs), "masked_softmax",
                              Formula([mask](const GradArgs& in) -> std::vector<Tensor> {
                                  std::vector<Tensor> d(in.inputs.size());
                                  d[0] = masked_softmax_backward(in.grad(), in.output, mask);
                                  return d;
                              }),
                              Saves{2u, true});
    });
}

Tensor masked_softmax_backward(const Tensor& g, const Tensor& y, const ResolvedMask& mask) {
    // d = keep ⊙ y ⊙ (g − s), s = Σₖ g⊙y over every key: the composition's softmax_backward
    // followed by masked_fill's zeros. Its gradient is the composition's: with ĝ = keep ⊙ gg
    // (what masked_fill passes back), softmax_backward(ĝ, y) in g and ĝ⊙(g − s) − g·Σₖ ĝ⊙y in y.
    constexpr const char* op = "masked_softmax_backward";
    check_grad_of(op, g, y);
    if (y.dim() != 3)
        throw Error(fmt::format("{}: the output must be 3-D (batch, queries, keys), got shape {}", op,
                                shape_str(y.shape())));
    mask.check_fits(op, y.size(0), y.size(1), y.size(2));
    const std::size_t n = y.size(2), rows = n == 0 ? 0 : y.size(0) * y.size(1);
    const AllocContext context(op, y.shape());
    return dispatch_floating(op, y.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* py = values<T>(y).data();
        const T* pg = values<T>(g).data();
        xt::xarray<T> gx = xt::empty<T>(y.shape());
        T* d = gx.data();
        const kernel::MaskedRows kept(mask);
        parallel_for(rows, row_grain(n), [&](std::size_t r0, std::size_t r1) {
            for (std::size_t r = r0; r < r1; ++r) kept.backward(r, py + r * n, pg + r * n, d + r * n);
        });
        std::vector<Tensor> inputs{g, y};
        if (mask.by_mask()) inputs.push_back(mask.where());
        // The formula copies the mask: made only when it can be recorded (a first-order
        // backward runs with gradients off and would drop it unused).
        Formula formula;
        if (grad_enabled())
            formula = [mask](const GradArgs& in) -> std::vector<Tensor> {
                const Tensor &g = in.inputs[0], &y = in.inputs[1];
                const Tensor gk = in.grad() * kept_keys(mask, y.dtype());
                std::vector<Tensor> d(in.inputs.size());
                if (in.needs(0)) d[0] = softmax_backward(gk, y, -1);
                if (in.needs(1)) d[1] = softmax_backward_grad_y(gk, g, y, -1);
                return d;
            };
        return make_result<T>(std::move(gx), std::move(inputs), op, std::move(formula), Saves::only_inputs(~0u));
    });
}

}  // namespace xgrad
