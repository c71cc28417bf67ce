// Softmax, log-softmax and the masked softmax, fused, on the one row kernel of softmax_row.hpp:
// one pass for the max, one for the exps and their sum, one to scale; backward from the saved
// output alone. Along an axis other than the last, each line is gathered into a contiguous row
// first, so every softmax runs the same kernel.
#include <array>
#include <cmath>
#include <vector>

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

}  // namespace

Tensor softmax(const Tensor& a, long axis) {
    const axis_split l = split_at(a.shape(), normalize_axis("softmax", axis, a.shape()));
    const AllocContext context("softmax", a.shape());
    return dispatch_floating("softmax", a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> out = xt::empty<T>(a.shape());
        for_each_row<T, 1>(l, {values<T>(a).data()}, out.data(),
                           [&](const auto& x, T* y) { kernel::softmax_prefix(x[0], y, l.n, l.n); });
        return make_result<T>(std::move(out), {a}, "softmax", [l](Node& self, const Storage& gs) {
            // gx = y ⊙ (g − Σₖ g⊙y)
            xt::xarray<T> gx = xt::empty<T>(self.shape);
            for_each_row<T, 2>(l, {values<T>(self).data(), grad_as<T>(gs).data()}, gx.data(),
                               [&](const auto& yg, T* d) { kernel::softmax_grad_prefix(yg[0], yg[1], d, l.n, l.n); });
            accumulate<T>("softmax", self.parents[0], std::move(gx));
        }, Saves::only_output());
    });
}

Tensor log_softmax(const Tensor& a, long axis) {
    const axis_split l = split_at(a.shape(), normalize_axis("log_softmax", axis, a.shape()));
    const AllocContext context("log_softmax", a.shape());
    return dispatch_floating("log_softmax", a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> out = xt::empty<T>(a.shape());
        for_each_row<T, 1>(l, {values<T>(a).data()}, out.data(), [&](const auto& x, T* y) {
            const T lse = kernel::logsumexp(x[0], l.n, y);  // y as scratch, then overwritten
            for (std::size_t k = 0; k < l.n; ++k) y[k] = x[0][k] - lse;
        });
        return make_result<T>(std::move(out), {a}, "log_softmax", [l](Node& self, const Storage& gs) {
            // gx = g − softmax ⊙ Σₖ g, with softmax = exp(y)
            xt::xarray<T> gx = xt::empty<T>(self.shape);
            for_each_row<T, 2>(l, {values<T>(self).data(), grad_as<T>(gs).data()}, gx.data(),
                               [&](const auto& yg, T* d) {
                                   T total = 0;
                                   for (std::size_t k = 0; k < l.n; ++k) total += yg[1][k];
                                   for (std::size_t k = 0; k < l.n; ++k) d[k] = yg[1][k] - std::exp(yg[0][k]) * total;
                               });
            accumulate<T>("log_softmax", self.parents[0], std::move(gx));
        }, Saves::only_output());
    });
}

Tensor masked_softmax(const Tensor& X, const AttentionMask& mask) {
    if (mask.kind() == AttentionMask::Kind::all) return softmax(X, -1);
    if (X.dim() != 3)
        throw Error(fmt::format("masked_softmax: X must be 3-D (batch, queries, keys) when masked, got shape {}",
                                shape_str(X.shape())));
    return masked_softmax(X, mask.resolve("masked_softmax", X.size(0), X.size(1), X.size(2)));
}

Tensor masked_softmax(const Tensor& X, const Tensor& valid_lens) {
    return masked_softmax(X, AttentionMask::valid_lens(valid_lens));
}

Tensor masked_softmax(const Tensor& X, const ResolvedMask& mask) {
    // softmax(masked_fill(X, not kept, -1e6), -1) as one op: no mask tensor for lengths and
    // causal, no filled copy for any mask. Values and gradients are those of the composition.
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
        return make_result<T>(std::move(out), std::move(inputs), "masked_softmax", [mask, rows, n](Node& self, const Storage& gs) {
            const T* y = values<T>(self).data();
            const T* g = grad_as<T>(gs).data();
            xt::xarray<T> gx = xt::empty<T>(self.shape);
            T* d = gx.data();
            const kernel::MaskedRows kept(mask);
            parallel_for(rows, row_grain(n), [&](std::size_t r0, std::size_t r1) {
                for (std::size_t r = r0; r < r1; ++r) kept.backward(r, y + r * n, g + r * n, d + r * n);
            });
            accumulate<T>("masked_softmax", self.parents[0], std::move(gx));
        }, Saves{2u, true});
    });
}

}  // namespace xgrad
