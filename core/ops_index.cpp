// Indexing: repeat_interleave, index_select (embedding lookup), gather, and basic indexing
// (t[i], t.index({...}), index_put_). Any dtype forward;
// float inputs get gradients, which scatter-add back (repeated picks sum).
#include <algorithm>
#include <type_traits>

#include "core/call_context.hpp"
#include "core/creation.hpp"
#include "core/fill_value.hpp"
#include "core/grad_ops.hpp"
#include "core/int_arith.hpp"
#include "core/ops.hpp"
#include "core/ops_util.hpp"
#include "core/views.hpp"

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

Tensor repeat_interleave(const Tensor& a, std::int64_t repeats) {
    return as_call("repeat_interleave", [&] { return repeat_interleave(a.reshape({-1}), repeats, 0); });
}

Tensor repeat_interleave(const Tensor& a, std::int64_t repeats_arg, long axis) {
    // Refused before anything is read: on an empty input a wrapped count would make an empty
    // result and pass unnoticed.
    if (repeats_arg < 0)
        throw Error(fmt::format("repeat_interleave: repeats must be non-negative, got {} (as torch's \"repeats can "
                                "not be negative\")",
                                repeats_arg));
    const auto repeats = static_cast<std::size_t>(repeats_arg);
    const Shape& in = a.shape();
    const std::size_t ax = normalize_axis("repeat_interleave", axis, in);
    const axis_split s = split_at(in, ax);
    Shape out_shape = in;
    out_shape[ax] = checked_mul("repeat_interleave", "the repeated axis's length", in[ax], repeats);
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
            std::move(y), {a}, "repeat_interleave", Formula([repeats, ax](const GradArgs& in) -> std::vector<Tensor> {
                return {repeat_interleave_backward(in.grad(), in.inputs[0].shape(), repeats, static_cast<long>(ax))};
            }), Saves::none());
    });
}

Tensor repeat_interleave_backward(const Tensor& g, const Shape& input_shape, std::size_t repeats, long axis) {
    constexpr const char* op = "repeat_interleave_backward";
    const std::size_t ax = normalize_axis(op, axis, input_shape);
    Shape expected = input_shape;
    expected[ax] *= repeats;
    if (g.shape() != expected)
        throw Error(fmt::format("{}: a gradient of shape {} does not match {} repeated {} times along axis {} "
                                "(expected {})",
                                op, shape_str(g.shape()), shape_str(input_shape), repeats, axis, shape_str(expected)));
    const AllocContext context(op, input_shape);
    const axis_split s = split_at(input_shape, ax);
    return dispatch_floating(op, g.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        // Each input slice sums its `repeats` copies, in order, from zero.
        xt::xarray<T> gx = xt::zeros<T>(input_shape);
        const T* pg = values<T>(g).data();
        for (std::size_t row = 0; row < s.outer * s.n; ++row) {
            T* d = gx.data() + row * s.inner;
            for (std::size_t r = 0; r < repeats; ++r, pg += s.inner)
                for (std::size_t i = 0; i < s.inner; ++i) d[i] += pg[i];
        }
        return make_result<T>(std::move(gx), {g}, op, Formula([repeats, ax](const GradArgs& in) -> std::vector<Tensor> {
            return {repeat_interleave(in.grad(), repeats, static_cast<long>(ax))};
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
            std::move(y), {a, index}, "index_select", Formula([ax](const GradArgs& in) -> std::vector<Tensor> {
                return {index_select_backward(in.grad(), in.inputs[0].shape(), static_cast<long>(ax), in.inputs[1]),
                        Tensor()};
            }), Saves::only_inputs(2u));
    });
}

Tensor index_select_backward(const Tensor& g, const Shape& input_shape, long axis, const Tensor& index) {
    constexpr const char* op = "index_select_backward";
    const std::size_t ax = normalize_axis(op, axis, input_shape);
    check_index_dtype(op, index);
    const auto& idx = values<std::int64_t>(index);
    check_indices(op, idx, ax, input_shape);
    Shape expected(input_shape.begin(), input_shape.begin() + static_cast<long>(ax));
    expected.insert(expected.end(), index.shape().begin(), index.shape().end());
    expected.insert(expected.end(), input_shape.begin() + static_cast<long>(ax) + 1, input_shape.end());
    if (g.shape() != expected)
        throw Error(fmt::format("{}: a gradient of shape {} does not match index_select of {} along axis {} by an "
                                "index of shape {} (expected {})",
                                op, shape_str(g.shape()), shape_str(input_shape), axis, shape_str(index.shape()),
                                shape_str(expected)));
    const AllocContext context(op, input_shape);
    const axis_split s = split_at(input_shape, ax);
    return dispatch_floating(op, g.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        // Slice k of g adds into slice idx[k]: repeated indices sum, in index order.
        xt::xarray<T> gx = xt::zeros<T>(input_shape);
        const T* pg = values<T>(g).data();
        for (std::size_t o = 0; o < s.outer; ++o)
            for (std::int64_t k : idx) {
                T* d = gx.data() + (o * s.n + static_cast<std::size_t>(k)) * s.inner;
                for (std::size_t i = 0; i < s.inner; ++i) d[i] += pg[i];
                pg += s.inner;
            }
        return make_result<T>(std::move(gx), {g, index}, op, Formula([ax](const GradArgs& in) -> std::vector<Tensor> {
            return {index_select(in.grad(), static_cast<long>(ax), in.inputs[1]), Tensor()};
        }), Saves::only_inputs(2u));
    });
}

namespace {

// gather's checks, shared with its gradient: index is int64, of the input's rank, no longer than
// the input off the gathered axis, and in range along it.
void check_gather(const char* op, const Shape& in, std::size_t ax, const Tensor& index) {
    check_index_dtype(op, index);
    const Shape& is = index.shape();
    if (is.size() != in.size())
        throw Error(fmt::format("{}: index has rank {} but the input has rank {} (shapes {} and {}); they "
                                "must be equal",
                                op, is.size(), in.size(), shape_str(is), shape_str(in)));
    for (std::size_t d = 0; d < in.size(); ++d)
        if (d != ax && is[d] > in[d])
            throw Error(fmt::format("{}: index shape {} is larger than the input shape {} at axis {} ({} > {})", op,
                                    shape_str(is), shape_str(in), d, is[d], in[d]));
    check_indices(op, values<std::int64_t>(index), ax, in);
}

// Flat source offset of every element gather picks: walk the index in row-major order with an
// odometer over its coordinates, addressing the input through its own strides.
std::vector<std::size_t> gather_offsets(const Shape& in, std::size_t ax, const Tensor& index) {
    const auto& idx = values<std::int64_t>(index);
    const Shape& is = index.shape();
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
    return offsets;
}

using Offsets = std::shared_ptr<const std::vector<std::size_t>>;

// gather_backward with the offsets gather already worked out (checked by the caller).
Tensor scatter_add_at(const Tensor& g, const Shape& input_shape, std::size_t ax, const Tensor& index,
                      const Offsets& offsets) {
    constexpr const char* op = "gather_backward";
    const AllocContext context(op, input_shape);
    return dispatch_floating(op, g.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> gx = xt::zeros<T>(input_shape);
        const T* pg = values<T>(g).data();
        const std::vector<std::size_t>& at = *offsets;
        for (std::size_t k = 0; k < at.size(); ++k) gx.data()[at[k]] += pg[k];
        return make_result<T>(std::move(gx), {g, index}, op, Formula([ax](const GradArgs& in) -> std::vector<Tensor> {
            return {gather(in.grad(), static_cast<long>(ax), in.inputs[1]), Tensor()};
        }), Saves::only_inputs(2u));
    });
}

}  // namespace

Tensor gather(const Tensor& a, long axis, const Tensor& index) {
    const Shape& in = a.shape();
    const std::size_t ax = normalize_axis("gather", axis, in);
    check_gather("gather", in, ax, index);
    auto offsets = std::make_shared<const std::vector<std::size_t>>(gather_offsets(in, ax, index));
    return dispatch_all(a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> y = xt::xarray<T>::from_shape(index.shape());
        const T* src = values<T>(a).data();
        const std::vector<std::size_t>& at = *offsets;
        for (std::size_t k = 0; k < at.size(); ++k) y.data()[k] = src[at[k]];
        // The gradient adds g back where each element came from: the offsets are kept, not
        // worked out again; the index is saved for the gradient's own gradient (a gather).
        return make_any_result<T>(
            std::move(y), {a, index}, "gather", Formula([ax, offsets](const GradArgs& in) -> std::vector<Tensor> {
                return {scatter_add_at(in.grad(), in.inputs[0].shape(), ax, in.inputs[1], offsets), Tensor()};
            }), Saves::only_inputs(2u));
    });
}

Tensor gather_backward(const Tensor& g, const Shape& input_shape, long axis, const Tensor& index) {
    constexpr const char* op = "gather_backward";
    const std::size_t ax = normalize_axis(op, axis, input_shape);
    check_gather(op, input_shape, ax, index);
    if (g.shape() != index.shape())
        throw Error(fmt::format("{}: a gradient of shape {} for an index of shape {} (they must be equal)", op,
                                shape_str(g.shape()), shape_str(index.shape())));
    auto offsets = std::make_shared<const std::vector<std::size_t>>(gather_offsets(input_shape, ax, index));
    return scatter_add_at(g, input_shape, ax, index, offsets);
}

}  // namespace xgrad

// --- indexing: t[i], t.index({...}), index_put_ and scatter ---------------------------------
//
// An index list is planned in two steps, as torch applies it: the basic indices (integers,
// slices, None, Ellipsis) make a strided "view" (IndexPlan), in which every advanced index (an
// int64 tensor, a list, a bool mask) keeps the axes it covers; then, when there are advanced
// indices, resolve() turns the plan into the flat offset of every element picked. Basic-only
// plans are walked by their strides (each element picked once); advanced ones go through
// take_flat and put_flat, which allow repeated offsets.

namespace xgrad {

namespace {

// An advanced index in the view: an int64 tensor at view axis `view_dim` (input axis `axis`), or
// a bool mask whose axes start there.
struct AdvancedIndex {
    std::size_t view_dim;
    std::size_t axis;
    Tensor index;
};

// What a list of basic indices picks: the element at `offset` and, along each result axis, a
// step of `strides` elements in the source (0 for an axis None adds). Every pick is distinct.
// With advanced indices, the view they index further (see resolve).
struct IndexPlan {
    std::size_t offset = 0;
    Shape shape;
    std::vector<std::size_t> strides;
    std::vector<AdvancedIndex> advanced;
};

// Python's clamp of a slice bound into [0, n].
long slice_bound(const indexing::SliceBound& b, long n, long open) {
    if (!b.set) return open;
    return b.value < 0 ? std::max(b.value + n, 0L) : std::min(b.value, n);
}

// A 0-d int64 tensor is an integer index, as in torch; a 0-d bool mask adds an axis of length
// 1 or 0, as numpy's and torch's.
bool is_integer_index(const TensorIndex& i) {
    return i.kind() == TensorIndex::Kind::integer ||
           (i.kind() == TensorIndex::Kind::tensor && i.tensor().dtype() == kInt64 && i.tensor().dim() == 0);
}

// The input axes one index covers.
std::size_t axes_covered(const TensorIndex& i) {
    switch (i.kind()) {
        case TensorIndex::Kind::integer:
        case TensorIndex::Kind::slice: return 1;
        case TensorIndex::Kind::tensor: return i.tensor().dtype() == kBool ? i.tensor().dim() : 1;
        default: return 0;
    }
}

IndexPlan plan_index(const char* op, const Shape& in, const std::vector<TensorIndex>& indices) {
    std::size_t consumed = 0, ellipses = 0;
    for (std::size_t k = 0; k < indices.size(); ++k) {
        const TensorIndex& i = indices[k];
        if (i.kind() == TensorIndex::Kind::tensor) {
            const Tensor& t = i.tensor();
            if (!t.defined()) throw Error(fmt::format("{}: index {} of the list is an undefined tensor", op, k));
            if (t.dtype() != kInt64 && t.dtype() != kBool)
                throw Error(fmt::format("{}: tensors used as indices must be int64 (long) or bool tensors, got {} "
                                        "(index {} of the list)",
                                        op, dtype_name(t.dtype()), k));
        }
        consumed += axes_covered(i);
        if (i.kind() == TensorIndex::Kind::ellipsis) ++ellipses;
    }
    if (ellipses > 1) throw Error(fmt::format("{}: an index can have only one Ellipsis, got {}", op, ellipses));
    if (consumed > in.size())
        throw Error(fmt::format("{}: too many indices for a tensor of shape {}: {} axes indexed, it has {}", op,
                                shape_str(in), consumed, in.size()));
    const std::vector<std::size_t> stride = row_major_strides(in);
    IndexPlan p;
    std::size_t axis = 0;
    auto keep_axis = [&] {
        p.shape.push_back(in[axis]);
        p.strides.push_back(stride[axis]);
        ++axis;
    };
    for (const TensorIndex& i : indices) {
        if (is_integer_index(i)) {
            const long n = static_cast<long>(in[axis]);
            long v = i.kind() == TensorIndex::Kind::integer ? i.integer() : i.tensor().item<std::int64_t>();
            if (v < -n || v >= n)
                throw Error(fmt::format("{}: index {} is out of range for dimension {} with size {} (tensor of "
                                        "shape {})",
                                        op, v, axis, n, shape_str(in)));
            if (v < 0) v += n;
            p.offset += static_cast<std::size_t>(v) * stride[axis];
            ++axis;
            continue;
        }
        switch (i.kind()) {
            case TensorIndex::Kind::slice: {
                const indexing::Slice& s = i.slice();
                if (s.step < 1)
                    throw Error(fmt::format("{}: slice step must be at least 1 (as torch), got {} for dimension {}",
                                            op, s.step, axis));
                const long n = static_cast<long>(in[axis]);
                const long first = slice_bound(s.start, n, 0), stop = slice_bound(s.stop, n, n);
                const std::size_t count = stop > first ? static_cast<std::size_t>((stop - first - 1) / s.step + 1) : 0;
                if (count > 0) p.offset += static_cast<std::size_t>(first) * stride[axis];
                p.shape.push_back(count);
                p.strides.push_back(stride[axis] * static_cast<std::size_t>(s.step));
                ++axis;
                break;
            }
            case TensorIndex::Kind::none:
                p.shape.push_back(1);
                p.strides.push_back(0);
                break;
            case TensorIndex::Kind::ellipsis:
                for (std::size_t k = consumed; k < in.size(); ++k) keep_axis();
                break;
            case TensorIndex::Kind::tensor: {
                const Tensor& t = i.tensor();
                p.advanced.push_back({p.shape.size(), axis, t});
                if (t.dtype() == kBool && t.dim() == 0) {  // a new axis, picked once or not at all
                    p.shape.push_back(1);
                    p.strides.push_back(0);
                    break;
                }
                if (t.dtype() == kBool) {
                    for (std::size_t k = 0; k < t.shape().size(); ++k)
                        if (t.shape()[k] != in[axis + k])
                            throw Error(fmt::format("{}: the shape of the mask {} does not match the shape of the "
                                                    "indexed tensor {} at dimension {} (mask axis {} has {}, the "
                                                    "tensor {})",
                                                    op, shape_str(t.shape()), shape_str(in), axis + k, k,
                                                    t.shape()[k], in[axis + k]));
                    for (std::size_t k = 0; k < t.shape().size(); ++k) keep_axis();
                } else {
                    keep_axis();
                }
                break;
            }
            case TensorIndex::Kind::integer: break;  // handled above
        }
    }
    while (axis < in.size()) keep_axis();
    return p;
}

// Calls f(result flat index, source flat index) for every element the plan picks, in order.
template <class F> void for_each_pick(const IndexPlan& p, F f) {
    std::size_t n = 1;
    for (std::size_t d : p.shape) n *= d;
    if (n == 0) return;
    const std::size_t rank = p.shape.size();
    std::vector<std::size_t> pos(rank, 0);
    std::size_t src = p.offset;
    for (std::size_t dst = 0; dst < n; ++dst) {
        f(dst, src);
        for (std::size_t d = rank; d-- > 0;) {
            if (++pos[d] < p.shape[d]) {
                src += p.strides[d];
                break;
            }
            src -= p.strides[d] * (p.shape[d] - 1);
            pos[d] = 0;
        }
    }
}

// The source offsets a strided plan picks, in order.
std::vector<std::size_t> pick_offsets(const IndexPlan& p) {
    std::vector<std::size_t> at;
    for_each_pick(p, [&](std::size_t, std::size_t s) { at.push_back(s); });
    return at;
}

// The shape and flat source offsets of every element an index list picks.
struct Picks {
    Shape shape;
    FlatOffsets at;
};

// One view axis an advanced index covers, with the (unbroadcast) positions it picks along it.
struct AdvancedAxis {
    std::size_t view_dim, axis;
    Shape shape;
    std::vector<std::int64_t> positions;
};

// Each bool mask as the coordinates of its true elements (torch's nonzero), one int64 index
// per axis it covers; the int64 indices as they are.
std::vector<AdvancedAxis> advanced_axes(const IndexPlan& p) {
    std::vector<AdvancedAxis> axes;
    for (const AdvancedIndex& a : p.advanced) {
        const Tensor& t = a.index;
        if (t.dtype() == kInt64) {
            const auto& v = values<std::int64_t>(t);
            axes.push_back({a.view_dim, a.axis, t.shape(), std::vector<std::int64_t>(v.begin(), v.end())});
            continue;
        }
        const std::uint8_t* m = bool_bytes(t);
        const std::size_t n = values<bool>(t).size(), rank = std::max<std::size_t>(t.dim(), 1);
        const std::size_t count = n - static_cast<std::size_t>(std::count(m, m + n, std::uint8_t(0)));
        const std::size_t first = axes.size();
        for (std::size_t k = 0; k < rank; ++k) axes.push_back({a.view_dim + k, a.axis + k, Shape{count}, {}});
        const Shape& s = t.dim() ? t.shape() : Shape{1};
        for (std::size_t flat = 0; flat < n; ++flat) {
            if (!m[flat]) continue;
            for (std::size_t k = rank, rest = flat; k-- > 0; rest /= s[k])
                axes[first + k].positions.push_back(static_cast<std::int64_t>(rest % s[k]));
        }
    }
    return axes;
}

Picks resolve(const char* op, const Shape& in, const IndexPlan& p) {
    std::vector<AdvancedAxis> axes = advanced_axes(p);
    // The advanced indices broadcast together (numpy's rule).
    Shape b = axes.front().shape;
    for (const AdvancedAxis& a : axes) {
        if (broadcastable_to(a.shape, b)) continue;
        if (!broadcastable_to(b, a.shape)) {
            Shape both(std::max(a.shape.size(), b.size()), 1);
            for (std::size_t k = 1; k <= both.size(); ++k) {
                const std::size_t x = k <= a.shape.size() ? a.shape[a.shape.size() - k] : 1;
                const std::size_t y = k <= b.size() ? b[b.size() - k] : 1;
                if (x != y && x != 1 && y != 1) {
                    std::string shapes;
                    for (const AdvancedAxis& c : axes) shapes += (shapes.empty() ? "" : ", ") + shape_str(c.shape);
                    throw Error(fmt::format("{}: shape mismatch: indexing tensors could not be broadcast together "
                                            "with shapes {}",
                                            op, shapes));
                }
                both[both.size() - k] = std::max(x, y);
            }
            b = both;
        } else {
            b = a.shape;
        }
    }
    // Every position in range, negative ones counted from the end.
    for (AdvancedAxis& a : axes) {
        const auto n = static_cast<std::int64_t>(p.shape[a.view_dim]);
        for (std::int64_t& v : a.positions) {
            if (v < -n || v >= n)
                throw Error(fmt::format("{}: index {} is out of bounds for dimension {} with size {} (tensor of "
                                        "shape {})",
                                        op, v, a.axis, n, shape_str(in)));
            if (v < 0) v += n;
        }
    }
    // The advanced axes' result axes replace them when adjacent, else come first.
    const bool adjacent = axes.back().view_dim - axes.front().view_dim + 1 == axes.size();
    IndexPlan before, after;
    for (std::size_t d = 0, k = 0; d < p.shape.size(); ++d) {
        if (k < axes.size() && axes[k].view_dim == d) {
            ++k;
            continue;
        }
        IndexPlan& side = adjacent && d < axes.front().view_dim ? before : after;
        side.shape.push_back(p.shape[d]);
        side.strides.push_back(p.strides[d]);
    }
    Picks r;
    r.shape = before.shape;
    r.shape.insert(r.shape.end(), b.begin(), b.end());
    r.shape.insert(r.shape.end(), after.shape.begin(), after.shape.end());
    // The offsets take 8 bytes an element, whatever the dtype: refuse what no machine here holds
    // before asking for it (broadcast indices multiply: (n, 1) with (1, n) picks n² elements).
    const std::size_t count = checked_numel(op, r.shape);
    const std::uint64_t memory = physical_memory_bytes();
    if (memory != 0 && count > memory / sizeof(std::size_t))
        throw Error(fmt::format("{}: out of memory: the indices pick a result of shape {} ({} elements, {} of "
                                "offsets alone), more than this machine's {}",
                                op, shape_str(r.shape), count, format_bytes(static_cast<double>(count) * 8.0),
                                format_bytes(static_cast<double>(memory))));
    // Offset of each broadcast position: every advanced axis read through its broadcast strides.
    IndexPlan over_b;
    over_b.shape = b;
    std::vector<std::size_t> adv(checked_numel(op, b), p.offset);
    for (const AdvancedAxis& a : axes) {
        const std::vector<std::size_t> own = row_major_strides(a.shape);
        over_b.strides.assign(b.size(), 0);
        for (std::size_t k = 0; k < a.shape.size(); ++k)
            if (a.shape[k] != 1) over_b.strides[b.size() - a.shape.size() + k] = own[k];
        const std::size_t step = p.strides[a.view_dim];
        for_each_pick(over_b, [&](std::size_t d, std::size_t s) {
            adv[d] += static_cast<std::size_t>(a.positions[s]) * step;
        });
    }
    const std::vector<std::size_t> pre = pick_offsets(before), post = pick_offsets(after);
    auto at = std::make_shared<std::vector<std::size_t>>();
    at->reserve(pre.size() * adv.size() * post.size());
    for (std::size_t i : pre)
        for (std::size_t k : adv)
            for (std::size_t j : post) at->push_back(i + k + j);
    r.at = std::move(at);
    return r;
}

// dst[at[k]] = src[k] in order (the last of repeated offsets wins), or += when accumulating.
template <class T> void put_values(T* dst, const T* src, const std::vector<std::size_t>& at, bool accumulate) {
    if (!accumulate) {
        for (std::size_t k = 0; k < at.size(); ++k) dst[at[k]] = src[k];
    } else if constexpr (std::is_same_v<T, bool>) {
        for (std::size_t k = 0; k < at.size(); ++k) dst[at[k]] = dst[at[k]] || src[k];
    } else if constexpr (std::is_same_v<T, bfloat16>) {
        throw Error("index_put_: accumulating into a bfloat16 tensor (no arithmetic on bfloat16; convert to float32)");
    } else if constexpr (std::is_same_v<T, std::int64_t>) {  // wraps as torch's (int_arith.hpp)
        for (std::size_t k = 0; k < at.size(); ++k) dst[at[k]] = wrapping_add(dst[at[k]], src[k]);
    } else {
        for (std::size_t k = 0; k < at.size(); ++k) dst[at[k]] += src[k];
    }
}

// Where repeated offsets overwrite a value (all but the last write to each element), as a bool
// mask of the values' shape; undefined when no offset repeats.
Tensor overwritten(const std::vector<std::size_t>& at, const Shape& shape) {
    std::vector<std::size_t> order(at.size());
    for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return at[a] < at[b]; });
    xt::xarray<bool> lost = xt::zeros<bool>(shape);
    bool any = false;
    for (std::size_t k = 0; k + 1 < order.size(); ++k)
        if (at[order[k]] == at[order[k + 1]]) lost.data()[order[k]] = any = true;
    return any ? make_leaf(Storage(std::move(lost))) : Tensor();
}

Tensor put_flat(const char* op, const Tensor& x, const FlatOffsets& at, const Tensor& v, bool accumulate);

// x's elements at the flat offsets `at`, as a tensor of `shape` (any dtype). The gradient adds g
// back where each element came from (repeated offsets sum): put_flat into zeros, accumulating.
Tensor take_flat(const char* op, const Tensor& x, const FlatOffsets& at, const Shape& shape) {
    const AllocContext context(op, shape);
    return dispatch_all(x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        using M = moved_t<T>;
        xt::xarray<T> y = xt::xarray<T>::from_shape(shape);
        const M* src = reinterpret_cast<const M*>(values<T>(x).data());
        M* dst = reinterpret_cast<M*>(y.data());
        const std::vector<std::size_t>& offsets = *at;
        for (std::size_t k = 0; k < offsets.size(); ++k) dst[k] = src[offsets[k]];
        return make_any_result<T>(std::move(y), {x}, op, Formula([at](const GradArgs& in) -> std::vector<Tensor> {
            const Tensor& g = in.grad();
            return {put_flat("index_backward", zeros(in.inputs[0].shape(), g.dtype()), at, g, true)};
        }), Saves::none());
    });
}

// x with v (one value per offset, x's dtype) written at the flat offsets `at` in order, or
// added when `accumulate`. The gradient: x gets g (where not overwritten, unless accumulating),
// v gets g where each value went, 0 for a value a later one overwrote.
Tensor put_flat(const char* op, const Tensor& x, const FlatOffsets& at, const Tensor& v, bool accumulate) {
    const AllocContext context(op, x.shape());
    return dispatch_all(x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> y = values<T>(x);
        put_values<T>(y.data(), values<T>(v).data(), *at, accumulate);
        return make_any_result<T>(
            std::move(y), {x, v}, op, Formula([at, accumulate](const GradArgs& in) -> std::vector<Tensor> {
                const Tensor& g = in.grad();
                const Shape& vs = in.inputs[1].shape();
                Tensor gx, gv;
                if (in.needs(0))
                    gx = accumulate ? g : put_flat("index_put_backward", g, at, zeros(vs, g.dtype()), false);
                if (in.needs(1)) {
                    gv = take_flat("index_put_backward", g, at, vs);
                    if (!accumulate)
                        if (const Tensor lost = overwritten(*at, vs); lost.defined()) gv = masked_fill(gv, lost, 0.0);
                }
                return {gx, gv};
            }), Saves::none());
    });
}

}  // namespace

Tensor TensorIndex::list_tensor(const std::vector<long>& list) {
    return from_vector(std::vector<std::int64_t>(list.begin(), list.end()), Shape{list.size()});
}

namespace {

// t.index(indices) with integers, slices, None and Ellipsis only (plan_index has checked them):
// a view, one view op per index.
Tensor basic_index_view(const Tensor& t, const std::vector<TensorIndex>& indices) {
    std::size_t consumed = 0;
    for (const TensorIndex& i : indices)
        if (i.kind() == TensorIndex::Kind::integer || i.kind() == TensorIndex::Kind::slice) ++consumed;
    Tensor r = t;
    long axis = 0;  // the axis of r the next index applies to
    for (const TensorIndex& i : indices) {
        switch (i.kind()) {
            case TensorIndex::Kind::integer: r = select(r, axis, i.integer()); break;
            case TensorIndex::Kind::slice: {
                const indexing::Slice& s = i.slice();
                const long n = static_cast<long>(r.shape()[static_cast<std::size_t>(axis)]);
                r = slice(r, axis, s.start.set ? s.start.value : 0, s.stop.set ? s.stop.value : n, s.step);
                ++axis;
                break;
            }
            case TensorIndex::Kind::none: r = unsqueeze(r, axis++); break;
            case TensorIndex::Kind::ellipsis: axis += static_cast<long>(t.shape().size() - consumed); break;
            case TensorIndex::Kind::tensor: break;  // not here
        }
    }
    // No index that moves anything (t.index({}), t.index({Ellipsis})) is still a view, as torch's t[...].
    if (r.is_same(t)) r = alias_view(t, "alias");
    return r;
}

}  // namespace

Tensor Tensor::index(const std::vector<TensorIndex>& indices) const {
    constexpr const char* op = "index";
    if (!defined()) throw Error("index: an undefined tensor cannot be indexed");
    const IndexPlan plan = plan_index(op, shape(), indices);
    if (!plan.advanced.empty()) {
        const Picks picks = resolve(op, shape(), plan);
        Tensor picked = take_flat(op, *this, picks.at, picks.shape);
        picked.node().advanced_index = true;
        return picked;
    }
    bool integer_tensor = false;  // a 0-d int64 tensor index counts as an integer: copied, as before
    for (const TensorIndex& i : indices) integer_tensor = integer_tensor || i.kind() == TensorIndex::Kind::tensor;
    if (!integer_tensor) return as_call(op, [&] { return basic_index_view(*this, indices); });
    checked_numel(op, plan.shape);
    const AllocContext context(op, plan.shape);
    return dispatch_all(dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        using M = moved_t<T>;
        xt::xarray<T> y = xt::xarray<T>::from_shape(plan.shape);
        const M* src = reinterpret_cast<const M*>(values<T>(*this).data());
        M* dst = reinterpret_cast<M*>(y.data());
        for_each_pick(plan, [&](std::size_t d, std::size_t s) { dst[d] = src[s]; });
        return make_any_result<T>(
            std::move(y), {*this}, op, Formula([indices](const GradArgs& in) -> std::vector<Tensor> {
                return {index_backward(in.grad(), in.inputs[0].shape(), indices)};
            }),
            Saves::none());
    });
}

namespace {

// x with v written at the elements `plan` picks, as a new tensor: what index_put_ records in the
// graph (v already of the picked shape and of x's dtype). Its gradient: g to x except at the
// picks (index_put of zeros), g at the picks to v (index).
Tensor index_put(const Tensor& x, const IndexPlan& plan, const std::vector<TensorIndex>& indices, const Tensor& v) {
    constexpr const char* op = "index_put_";
    const AllocContext context(op, x.shape());
    return dispatch_all(x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> y = values<T>(x);
        const T* src = values<T>(v).data();
        T* dst = y.data();
        for_each_pick(plan, [&](std::size_t d, std::size_t s) { dst[s] = src[d]; });
        return make_any_result<T>(
            std::move(y), {x, v}, op,
            Formula([plan, indices](const GradArgs& in) -> std::vector<Tensor> {
                const Tensor& g = in.grad();
                return {in.needs(0) ? index_put(g, plan, indices, zeros(plan.shape, g.dtype())) : Tensor(),
                        in.needs(1) ? Tensor(g.index(indices)) : Tensor()};
            }),
            Saves::none());
    });
}

// The value without the leading axes of length 1 it has beyond the indexed part's rank, as
// torch's setitem drops them (t[0][1] = tensor({5.0}) writes a (1,) value into a 0-d part).
Tensor drop_leading_ones(const Tensor& value, std::size_t rank) {
    const Shape& s = value.shape();
    std::size_t lead = 0;
    while (s.size() - lead > rank && s[lead] == 1) ++lead;
    if (lead == 0) return value;
    return value.reshape(std::vector<long>(s.begin() + static_cast<long>(lead), s.end()));
}

// `value` as written into `picked` elements of a `dtype` tensor: its leading axes of length 1
// dropped, broadcast, cast (each differentiable back to the value).
Tensor fit_value(const Tensor& value, const Shape& picked, Dtype dtype) {
    return cast(expand(drop_leading_ones(value, picked.size()), picked), dtype);
}

void check_value(const char* op, const Tensor& self, const Tensor& value, const Shape& picked) {
    if (!self.defined() || !value.defined())
        throw Error(fmt::format("{}: the tensor and the value must be defined", op));
    Shape kept(value.shape().begin(), value.shape().end());
    while (kept.size() > picked.size() && kept.front() == 1) kept.erase(kept.begin());
    if (!broadcastable_to(kept, picked))
        throw Error(fmt::format("{}: value of shape {} cannot be broadcast to the indexed shape {} (tensor of shape {})",
                                op, shape_str(value.shape()), shape_str(picked), shape_str(self.shape())));
}

// Writes (or adds) `value`, fitted to `picked`, at the flat offsets `at` of self, in place: the
// one path of index_put_ with advanced indices or accumulate, and of scatter_ and scatter_add_.
const Tensor& put_in_place(const char* op, const Tensor& self, const FlatOffsets& at, const Shape& picked,
                           const Tensor& value, bool accumulate) {
    check_value(op, self, value, picked);
    check_no_internal_overlap(op, self);
    check_view_write(op, self);
    if (accumulate && self.dtype() == kBFloat16)
        throw Error(fmt::format("{}: accumulating into a bfloat16 tensor (no arithmetic on bfloat16; convert to "
                                "float32)",
                                op));
    if (grad_enabled() && (self.requires_grad() || value.requires_grad())) {
        check_in_place_leaf(op, self);
        return record_in_place(op, self, {value}, [&](const Tensor& old, const std::vector<Tensor>& others) {
            return put_flat(op, old, at, fit_value(others[0], picked, old.dtype()), accumulate);
        });
    }
    Tensor v;
    {
        NoGradGuard no_grad;
        v = as_call(op, [&] { return fit_value(value, picked, self.dtype()); });  // errors name op, not its cast
        if (v.is_alias_of(self)) v = v.clone();  // never read the storage being written
    }
    dispatch_all(self.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* src = values<T>(v).data();
        write_row_major<T>(op, self, [&](T* dst) { put_values<T>(dst, src, *at, accumulate); });  // bumps the version
    });
    return self;
}

Tensor scalar_tensor(Scalar value) {
    return value.kind() == kFloat64 ? full(Shape{}, value.to_double(), kFloat64)
                                    : from_vector(std::vector<std::int64_t>{value.to_int64()}, Shape{});
}

}  // namespace

const Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, const Tensor& value, bool accumulate) const {
    constexpr const char* op = "index_put_";
    if (!defined() || !value.defined()) throw Error("index_put_: the tensor and the value must be defined");
    const IndexPlan plan = plan_index(op, shape(), indices);
    if (!plan.advanced.empty()) {
        const Picks picks = resolve(op, shape(), plan);
        return put_in_place(op, *this, picks.at, picks.shape, value, accumulate);
    }
    if (accumulate)  // basic picks are distinct: adding there is the same path
        return put_in_place(op, *this, std::make_shared<const std::vector<std::size_t>>(pick_offsets(plan)),
                            plan.shape, value, true);
    check_value(op, *this, value, plan.shape);
    check_no_internal_overlap(op, *this);
    check_view_write(op, *this);
    if (grad_enabled() && (requires_grad() || value.requires_grad())) {
        // Recorded: the value reaches the picks through expand and cast, which carry its
        // gradient back to its own shape and dtype.
        check_in_place_leaf(op, *this);
        return record_in_place(op, *this, {value}, [&](const Tensor& old, const std::vector<Tensor>& others) {
            return index_put(old, plan, indices, fit_value(others[0], plan.shape, old.dtype()));
        });
    }
    Tensor v;
    {
        NoGradGuard no_grad;
        v = as_call(op, [&] { return fit_value(value, plan.shape, dtype()); });  // errors name op, not its cast
        if (v.is_alias_of(*this)) v = v.clone();  // never read the storage being written
    }
    dispatch_all(dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* src = values<T>(v).data();
        write_row_major<T>(op, *this, [&](T* dst) {  // bumps the version
            for_each_pick(plan, [&](std::size_t d, std::size_t s) { dst[s] = src[d]; });
        });
    });
    return *this;
}

const Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, Scalar value, bool accumulate) const {
    if (defined()) check_fill_value("index_put_", "value", value, dtype());
    return index_put_(indices, scalar_tensor(value), accumulate);
}

// --- scatter and scatter_add: torch's, through the same flat writes ---------------------------

namespace {

// Where scatter writes into a (`into`) and, for a src, where it reads each value (`from`: the
// element of src at each position of index), after torch's checks.
struct ScatterPlan {
    FlatOffsets into, from;
};

ScatterPlan plan_scatter(const char* op, const Tensor& a, long axis, const Tensor& index, const Tensor* src) {
    if (!a.defined() || !index.defined() || (src && !src->defined()))
        throw Error(fmt::format("{}: the tensor, the index and the source must be defined", op));
    const std::size_t ax = normalize_axis(op, axis, a.shape());
    check_gather(op, a.shape(), ax, index);
    ScatterPlan p;
    p.into = std::make_shared<const std::vector<std::size_t>>(gather_offsets(a.shape(), ax, index));
    if (src) {
        check_same_dtype(op, a, *src);
        const Shape &is = index.shape(), &ss = src->shape();
        if (ss.size() != is.size())
            throw Error(fmt::format("{}: src has rank {} but the index has rank {} (shapes {} and {}); they must "
                                    "be equal",
                                    op, ss.size(), is.size(), shape_str(ss), shape_str(is)));
        for (std::size_t d = 0; d < is.size(); ++d)
            if (is[d] > ss[d])
                throw Error(fmt::format("{}: index shape {} is larger than src's shape {} at axis {} ({} > {})", op,
                                        shape_str(is), shape_str(ss), d, is[d], ss[d]));
        IndexPlan over_index;
        over_index.shape = is;
        over_index.strides = row_major_strides(ss);
        p.from = std::make_shared<const std::vector<std::size_t>>(pick_offsets(over_index));
    }
    return p;
}

}  // namespace

Tensor scatter(const Tensor& a, long axis, const Tensor& index, const Tensor& src) {
    const ScatterPlan p = plan_scatter("scatter", a, axis, index, &src);
    return put_flat("scatter", a, p.into, take_flat("scatter", src, p.from, index.shape()), false);
}

Tensor scatter(const Tensor& a, long axis, const Tensor& index, Scalar value) {
    const ScatterPlan p = plan_scatter("scatter", a, axis, index, nullptr);
    check_fill_value("scatter", "value", value, a.dtype());
    return put_flat("scatter", a, p.into, fit_value(scalar_tensor(value), index.shape(), a.dtype()), false);
}

Tensor scatter_add(const Tensor& a, long axis, const Tensor& index, const Tensor& src) {
    const ScatterPlan p = plan_scatter("scatter_add", a, axis, index, &src);
    if (a.dtype() == kBFloat16)
        throw Error("scatter_add: adding into a bfloat16 tensor (no arithmetic on bfloat16; convert to float32)");
    return put_flat("scatter_add", a, p.into, take_flat("scatter_add", src, p.from, index.shape()), true);
}

const Tensor& Tensor::scatter_(long axis, const Tensor& index, const Tensor& src) const {
    const ScatterPlan p = plan_scatter("scatter_", *this, axis, index, &src);
    return put_in_place("scatter_", *this, p.into, index.shape(), take_flat("scatter_", src, p.from, index.shape()),
                        false);
}

const Tensor& Tensor::scatter_(long axis, const Tensor& index, Scalar value) const {
    const ScatterPlan p = plan_scatter("scatter_", *this, axis, index, nullptr);
    check_fill_value("scatter_", "value", value, dtype());
    return put_in_place("scatter_", *this, p.into, index.shape(), scalar_tensor(value), false);
}

namespace {

enum class ScatterReduce { add, multiply };

ScatterReduce parse_reduce(const char* op, const std::string& reduce) {
    if (reduce == "add") return ScatterReduce::add;
    if (reduce == "multiply") return ScatterReduce::multiply;
    throw Error(fmt::format("{}: reduce must be \"add\" or \"multiply\", got \"{}\"", op, reduce));
}

// a with the values v (one per offset, a's dtype) added or multiplied in at the flat offsets
// `at`, in order. Recorded from `inputs` with a gradient that throws, as torch 1.13 has none.
Tensor scatter_reduced(const char* op, const Tensor& a, const FlatOffsets& at, const Tensor& v, ScatterReduce reduce,
                       std::vector<Tensor> inputs) {
    if (a.dtype() == kBFloat16)
        throw Error(fmt::format("{}: reducing into a bfloat16 tensor (no arithmetic on bfloat16; convert to float32)",
                                op));
    const AllocContext context(op, a.shape());
    return dispatch_all(a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> y = values<T>(a);
        if constexpr (!std::is_same_v<T, bfloat16>) {  // refused above
            const std::vector<std::size_t>& offsets = *at;
            const T* src = values<T>(v).data();
            for (std::size_t k = 0; k < offsets.size(); ++k) {
                T& out = y.data()[offsets[k]];
                if constexpr (std::is_same_v<T, bool>)
                    out = reduce == ScatterReduce::add ? (out || src[k]) : (out && src[k]);
                else if constexpr (std::is_same_v<T, std::int64_t>)  // wraps as torch's (int_arith.hpp)
                    out = reduce == ScatterReduce::add ? wrapping_add(out, src[k]) : wrapping_mul(out, src[k]);
                else
                    out = reduce == ScatterReduce::add ? out + src[k] : out * src[k];
            }
        }
        return make_any_result<T>(std::move(y), std::move(inputs), op, Formula([op](const GradArgs&) -> std::vector<Tensor> {
            throw Error(fmt::format("{}: with reduce it has no derivative (torch 1.13: \"derivative for aten::scatter "
                                    "is not implemented\")",
                                    op));
        }), Saves::none());
    });
}

// The values scatter with reduce writes: src's picks or `value`, fitted to index's shape, as
// plain values (the op records its inputs itself).
Tensor reduce_values(const char* op, const Tensor& a, const ScatterPlan& p, const Tensor& index, const Tensor* src,
                     const Tensor& value) {
    NoGradGuard no_grad;
    return src ? take_flat(op, *src, p.from, index.shape())
               : as_call(op, [&] { return fit_value(value, index.shape(), a.dtype()); });
}

// scatter_ with reduce: recorded (through the out-of-place op, whose gradient throws) when
// gradients are on and self or src requires grad, else written into self's values.
const Tensor& scatter_reduce_in_place(const Tensor& self, long axis, const Tensor& index, const Tensor* src,
                                      const Tensor& value, const std::string& reduce) {
    constexpr const char* op = "scatter_";
    const ScatterReduce r = parse_reduce(op, reduce);
    const ScatterPlan p = plan_scatter(op, self, axis, index, src);
    check_no_internal_overlap(op, self);
    check_view_write(op, self);
    const Tensor v = reduce_values(op, self, p, index, src, value);
    if (grad_enabled() && (self.requires_grad() || (src && src->requires_grad()))) {
        check_in_place_leaf(op, self);
        return record_in_place(op, self, src ? std::vector<Tensor>{*src} : std::vector<Tensor>{},
                               [&](const Tensor& old, const std::vector<Tensor>& others) {
                                   std::vector<Tensor> inputs{old};
                                   inputs.insert(inputs.end(), others.begin(), others.end());
                                   return scatter_reduced(op, old, p.into, v, r, inputs);
                               });
    }
    Tensor out;
    {
        NoGradGuard no_grad;
        out = scatter_reduced(op, self, p.into, v, r, {});
    }
    dispatch_all(self.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* src = values<T>(out).data();
        write_row_major<T>(op, self, [&](T* dst) { std::copy_n(src, out.numel(), dst); });  // bumps the version
    });
    return self;
}

}  // namespace

Tensor scatter(const Tensor& a, long axis, const Tensor& index, const Tensor& src, const std::string& reduce) {
    const ScatterReduce r = parse_reduce("scatter", reduce);
    const ScatterPlan p = plan_scatter("scatter", a, axis, index, &src);
    return scatter_reduced("scatter", a, p.into, reduce_values("scatter", a, p, index, &src, Tensor()), r, {a, src});
}

Tensor scatter(const Tensor& a, long axis, const Tensor& index, Scalar value, const std::string& reduce) {
    const ScatterReduce r = parse_reduce("scatter", reduce);
    const ScatterPlan p = plan_scatter("scatter", a, axis, index, nullptr);
    check_fill_value("scatter", "value", value, a.dtype());
    return scatter_reduced("scatter", a, p.into, reduce_values("scatter", a, p, index, nullptr, scalar_tensor(value)), r,
                           {a});
}

const Tensor& Tensor::scatter_(long axis, const Tensor& index, const Tensor& src, const std::string& reduce) const {
    return scatter_reduce_in_place(*this, axis, index, &src, Tensor(), reduce);
}

const Tensor& Tensor::scatter_(long axis, const Tensor& index, Scalar value, const std::string& reduce) const {
    if (defined()) check_fill_value("scatter_", "value", value, dtype());
    return scatter_reduce_in_place(*this, axis, index, nullptr, scalar_tensor(value), reduce);
}

const Tensor& Tensor::scatter_add_(long axis, const Tensor& index, const Tensor& src) const {
    const ScatterPlan p = plan_scatter("scatter_add_", *this, axis, index, &src);
    return put_in_place("scatter_add_", *this, p.into, index.shape(),
                        take_flat("scatter_add_", src, p.from, index.shape()), true);
}

}  // namespace xgrad

namespace xgrad {

Tensor one_hot(const Tensor& indices, long num_classes) {
    constexpr const char* op = "one_hot";
    if (!indices.defined()) throw Error("one_hot: indices is an undefined tensor");
    if (indices.dtype() != kInt64)
        throw Error(fmt::format("one_hot: indices must be an int64 tensor, got {}", dtype_name(indices.dtype())));
    if (num_classes < -1) throw Error(fmt::format("one_hot: num_classes must be -1 or at least 0, got {}", num_classes));
    const std::int64_t* x = values<std::int64_t>(indices).data();  // a view read as its values
    const std::size_t n = indices.numel();
    std::int64_t largest = -1;
    for (std::size_t i = 0; i < n; ++i) {
        if (x[i] < 0)
            throw Error(fmt::format("one_hot: class values must be non-negative, got {} at flat index {}", x[i], i));
        largest = std::max(largest, x[i]);
    }
    if (num_classes == -1) {
        if (n == 0) throw Error("one_hot: cannot infer num_classes from an empty tensor (pass num_classes)");
        num_classes = checked_add<long>(op, "num_classes (the largest class value + 1)", largest, 1);
    } else if (largest >= num_classes) {
        throw Error(fmt::format("one_hot: class values must be smaller than num_classes {}, got {}", num_classes,
                                largest));
    }
    Shape out_shape = indices.shape();
    out_shape.push_back(static_cast<std::size_t>(num_classes));
    checked_numel(op, out_shape);
    const AllocContext context(op, out_shape);
    xt::xarray<std::int64_t> y = xt::zeros<std::int64_t>(out_shape);
    for (std::size_t i = 0; i < n; ++i) y.data()[i * static_cast<std::size_t>(num_classes) + x[i]] = 1;
    return make_leaf(Storage(std::move(y)));
}

}  // namespace xgrad

// --- basic indexing's gradient ----------------------------------------------------------------

namespace xgrad {

Tensor index_backward(const Tensor& g, const Shape& input_shape, const std::vector<TensorIndex>& indices) {
    constexpr const char* op = "index_backward";
    const IndexPlan plan = plan_index(op, input_shape, indices);
    if (!plan.advanced.empty()) {
        const Picks picks = resolve(op, input_shape, plan);
        if (g.shape() != picks.shape)
            throw Error(fmt::format("{}: a gradient of shape {} for an index of {} that picks shape {}", op,
                                    shape_str(g.shape()), shape_str(input_shape), shape_str(picks.shape)));
        return put_flat(op, zeros(input_shape, g.dtype()), picks.at, g, true);
    }
    if (g.shape() != plan.shape)
        throw Error(fmt::format("{}: a gradient of shape {} for an index of {} that picks shape {}", op,
                                shape_str(g.shape()), shape_str(input_shape), shape_str(plan.shape)));
    const AllocContext context(op, input_shape);
    return dispatch_floating(op, g.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> gx = xt::zeros<T>(input_shape);
        const T* pg = values<T>(g).data();
        T* out = gx.data();
        for_each_pick(plan, [&](std::size_t d, std::size_t s) { out[s] += pg[d]; });
        return make_result<T>(std::move(gx), {g}, op, Formula([indices](const GradArgs& in) -> std::vector<Tensor> {
            return {in.grad().index(indices)};
        }), Saves::none());
    });
}

}  // namespace xgrad
