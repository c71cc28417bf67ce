// Indexing: repeat_interleave, index_select (embedding lookup) and gather. Any dtype forward;
// float inputs get gradients, which scatter-add back (repeated picks sum).
#include "core/ops.hpp"
#include "core/ops_util.hpp"

namespace xgrad {

namespace {

void check_index_dtype(const char* op, const Tensor& index) {
    if (index.dtype() != kInt64)
        throw Error(fmt::format("{}: index must be an int64 tensor, got {}", op, dtype_name(index.dtype())));
}

// Every index lies in [0, n); negative ones are rejected rather than wrapped (as torch's
// index_select and gather do).
void check_indices(const char* op, const xt::xarray<std::int64_t>& index, std::size_t axis, const Shape& in) {
    const auto n = static_cast<std::int64_t>(in[axis]);
    for (std::int64_t v : index) {
        if (v < 0)
            throw Error(fmt::format("{}: index {} is negative; indices must lie in [0, {}) for axis {} of the "
                                    "input (shape {}), negative indices are not supported",
                                    op, v, n, axis, shape_str(in)));
        if (v >= n)
            throw Error(fmt::format("{}: index {} is out of range [0, {}) for axis {} of the input (shape {})", op,
                                    v, n, axis, shape_str(in)));
    }
}

}  // namespace

Tensor repeat_interleave(const Tensor& a, std::size_t repeats, long axis) {
    const Shape& in = a.shape();
    const std::size_t ax = normalize_axis("repeat_interleave", axis, in);
    const axis_split s = split_at(in, ax);
    Shape out_shape = in;
    if (__builtin_mul_overflow(in[ax], repeats, &out_shape[ax]))
        throw Error(fmt::format("repeat_interleave: {} repeats of axis {} of shape {} are more elements than "
                                "fit in memory", repeats, ax, shape_str(in)));
    checked_numel("repeat_interleave", out_shape);
    const AllocContext context("repeat_interleave", out_shape);
    return dispatch_all(a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> y = xt::xarray<T>::from_shape(out_shape);
        const T* src = values<T>(a).data();
        T* dst = y.data();
        for (std::size_t row = 0; row < s.outer * s.n; ++row)
            for (std::size_t r = 0; r < repeats; ++r, dst += s.inner)
                std::copy(src + row * s.inner, src + (row + 1) * s.inner, dst);
        return make_any_result<T>(
            std::move(y), {a}, "repeat_interleave",
            floating_backward("repeat_interleave", [s, repeats](auto gtag, Node& self, const Storage& gs) {
                using G = typename decltype(gtag)::type;
                const Tensor& x = self.parents[0];
                xt::xarray<G> gx = xt::zeros<G>(x.shape());
                const G* g = grad_as<G>(gs).data();
                for (std::size_t row = 0; row < s.outer * s.n; ++row) {
                    G* d = gx.data() + row * s.inner;
                    for (std::size_t r = 0; r < repeats; ++r, g += s.inner)
                        for (std::size_t i = 0; i < s.inner; ++i) d[i] += g[i];
                }
                accumulate<G>("repeat_interleave", x, std::move(gx));
            }), Saves::none());
    });
}

Tensor index_select(const Tensor& a, long axis, const Tensor& index) {
    const Shape& in = a.shape();
    const std::size_t ax = normalize_axis("index_select", axis, in);
    check_index_dtype("index_select", index);
    const auto& idx = values<std::int64_t>(index);
    check_indices("index_select", idx, ax, in);
    // (outer, n, inner) picks (outer, index.shape..., inner).
    Shape out_shape(in.begin(), in.begin() + static_cast<long>(ax));
    out_shape.insert(out_shape.end(), index.shape().begin(), index.shape().end());
    out_shape.insert(out_shape.end(), in.begin() + static_cast<long>(ax) + 1, in.end());
    checked_numel("index_select", out_shape);
    const AllocContext context("index_select", out_shape);
    const axis_split s = split_at(in, ax);
    return dispatch_all(a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> y = xt::xarray<T>::from_shape(out_shape);
        const T* src = values<T>(a).data();
        T* dst = y.data();
        for (std::size_t o = 0; o < s.outer; ++o)
            for (std::int64_t k : idx) {
                const T* row = src + (o * s.n + static_cast<std::size_t>(k)) * s.inner;
                dst = std::copy(row, row + s.inner, dst);
            }
        return make_any_result<T>(
            std::move(y), {a, index}, "index_select",
            floating_backward("index_select", [s](auto gtag, Node& self, const Storage& gs) {
                using G = typename decltype(gtag)::type;
                const Tensor& x = self.parents[0];
                const auto& ids = values<std::int64_t>(self.parents[1]);
                xt::xarray<G> gx = xt::zeros<G>(x.shape());
                const G* g = grad_as<G>(gs).data();
                for (std::size_t o = 0; o < s.outer; ++o)
                    for (std::int64_t k : ids) {
                        G* d = gx.data() + (o * s.n + static_cast<std::size_t>(k)) * s.inner;
                        for (std::size_t i = 0; i < s.inner; ++i) d[i] += g[i];
                        g += s.inner;
                    }
                accumulate<G>("index_select", x, std::move(gx));
            }), Saves::only_inputs(2u));
    });
}

Tensor gather(const Tensor& a, long axis, const Tensor& index) {
    const Shape& in = a.shape();
    const std::size_t ax = normalize_axis("gather", axis, in);
    check_index_dtype("gather", index);
    const Shape& is = index.shape();
    if (is.size() != in.size())
        throw Error(fmt::format("gather: index has rank {} but the input has rank {} (shapes {} and {}); they "
                                "must be equal",
                                is.size(), in.size(), shape_str(is), shape_str(in)));
    for (std::size_t d = 0; d < in.size(); ++d)
        if (d != ax && is[d] > in[d])
            throw Error(fmt::format("gather: index shape {} is larger than the input shape {} at axis {} ({} > {})",
                                    shape_str(is), shape_str(in), d, is[d], in[d]));
    const auto& idx = values<std::int64_t>(index);
    check_indices("gather", idx, ax, in);

    // Flat source offset of every output element: walk the index in row-major order with an
    // odometer over its coordinates, addressing the input through its own strides.
    const auto strides = row_major_strides(in);
    std::vector<std::size_t> offsets(idx.size());
    std::vector<std::size_t> coord(is.size(), 0);
    std::size_t base = 0;  // offset of coord in the input, leaving out the gathered axis
    for (std::size_t k = 0; k < offsets.size(); ++k) {
        offsets[k] = base + static_cast<std::size_t>(idx.data()[k]) * strides[ax];
        for (std::size_t d = is.size(); d-- > 0;) {
            const std::size_t step = d == ax ? 0 : strides[d];
            base += step;
            if (++coord[d] < is[d]) break;
            base -= step * is[d];
            coord[d] = 0;
        }
    }
    return dispatch_all(a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> y = xt::xarray<T>::from_shape(is);
        const T* src = values<T>(a).data();
        for (std::size_t k = 0; k < offsets.size(); ++k) y.data()[k] = src[offsets[k]];
        return make_any_result<T>(
            std::move(y), {a, index}, "gather",
            floating_backward("gather", [offsets = std::move(offsets)](auto gtag, Node& self, const Storage& gs) {
                using G = typename decltype(gtag)::type;
                const Tensor& x = self.parents[0];
                xt::xarray<G> gx = xt::zeros<G>(x.shape());
                const G* g = grad_as<G>(gs).data();
                for (std::size_t k = 0; k < offsets.size(); ++k) gx.data()[offsets[k]] += g[k];
                accumulate<G>("gather", x, std::move(gx));
            }), Saves::none());
    });
}

}  // namespace xgrad
