// Indexing: repeat_interleave, index_select (embedding lookup), gather, and basic indexing
// (t[i], t.index({...}), index_put_). Any dtype forward;
// float inputs get gradients, which scatter-add back (repeated picks sum).
#include <algorithm>

#include "core/call_context.hpp"
#include "core/creation.hpp"
#include "core/grad_ops.hpp"
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

// --- basic indexing: t[i], t.index({...}) and index_put_ -------------------------------------

namespace xgrad {

namespace {

// What a list of basic indices picks: the element at `offset` and, along each result axis, a
// step of `strides` elements in the source (0 for an axis None adds). Every pick is distinct.
struct IndexPlan {
    std::size_t offset = 0;
    Shape shape;
    std::vector<std::size_t> strides;
};

// Python's clamp of a slice bound into [0, n].
long slice_bound(const indexing::SliceBound& b, long n, long open) {
    if (!b.set) return open;
    return b.value < 0 ? std::max(b.value + n, 0L) : std::min(b.value, n);
}

IndexPlan plan_index(const char* op, const Shape& in, const std::vector<TensorIndex>& indices) {
    std::size_t consumed = 0, ellipses = 0;
    for (const TensorIndex& i : indices) {
        if (i.kind() == TensorIndex::Kind::integer || i.kind() == TensorIndex::Kind::slice) ++consumed;
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
        switch (i.kind()) {
            case TensorIndex::Kind::integer: {
                const long n = static_cast<long>(in[axis]);
                long v = i.integer();
                if (v < -n || v >= n)
                    throw Error(fmt::format("{}: index {} is out of range for dimension {} with size {} (tensor of "
                                            "shape {})",
                                            op, v, axis, n, shape_str(in)));
                if (v < 0) v += n;
                p.offset += static_cast<std::size_t>(v) * stride[axis];
                ++axis;
                break;
            }
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

}  // namespace

Tensor Tensor::select_index(long i) const {
    if (!defined()) throw Error("index: t[i] on an undefined tensor");
    if (dim() == 0) throw Error(fmt::format("index: t[{}] on a 0-d tensor (it has no axis to index)", i));
    return index_values({i});
}

Tensor Tensor::index_values(const std::vector<TensorIndex>& indices) const {
    constexpr const char* op = "index";
    if (!defined()) throw Error("index: an undefined tensor cannot be indexed");
    const IndexPlan plan = plan_index(op, shape(), indices);
    checked_numel(op, plan.shape);
    const AllocContext context(op, plan.shape);
    return dispatch_all(dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> y = xt::xarray<T>::from_shape(plan.shape);
        const T* src = values<T>(*this).data();
        T* dst = y.data();
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

}  // namespace

const Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, const Tensor& value) const {
    constexpr const char* op = "index_put_";
    if (!defined() || !value.defined()) throw Error("index_put_: the tensor and the value must be defined");
    const IndexPlan plan = plan_index(op, shape(), indices);
    Shape kept(value.shape().begin(), value.shape().end());
    while (kept.size() > plan.shape.size() && kept.front() == 1) kept.erase(kept.begin());
    if (!broadcastable_to(kept, plan.shape))
        throw Error(fmt::format("{}: value of shape {} cannot be broadcast to the indexed shape {} (tensor of shape {})",
                                op, shape_str(value.shape()), shape_str(plan.shape), shape_str(shape())));
    if (grad_enabled() && (requires_grad() || value.requires_grad())) {
        // Recorded: the value reaches the picks through expand and cast, which carry its
        // gradient back to its own shape and dtype.
        check_in_place_leaf(op, *this);
        return as_call(op, [&]() -> const Tensor& {
            return record_in_place(op, *this, {value}, [&](const Tensor& old, const std::vector<Tensor>& others) {
                const Tensor v = drop_leading_ones(others[0], plan.shape.size());
                return index_put(old, plan, indices, cast(expand(v, plan.shape), old.dtype()));
            });
        });
    }
    Tensor v;
    {
        NoGradGuard no_grad;
        // the value's conversion errors name index_put_, the call made, not its cast
        v = as_call(op, [&] { return cast(expand(drop_leading_ones(value, plan.shape.size()), plan.shape), dtype()); });
        if (v.is_same(*this)) v = v.clone();  // never read the storage being written
    }
    dispatch_all(dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* src = v.const_data_ptr<T>();
        T* dst = mutable_data_ptr<T>();  // bumps the version
        for_each_pick(plan, [&](std::size_t d, std::size_t s) { dst[s] = src[d]; });
    });
    return *this;
}

const Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, Scalar value) const {
    const Tensor v = value.kind() == kFloat64 ? full(Shape{}, value.to_double(), kFloat64)
                                              : from_vector(std::vector<std::int64_t>{value.to_int64()}, Shape{});
    return index_put_(indices, v);
}

}  // namespace xgrad

namespace xgrad {

Tensor one_hot(const Tensor& indices, long num_classes) {
    constexpr const char* op = "one_hot";
    if (!indices.defined()) throw Error("one_hot: indices is an undefined tensor");
    if (indices.dtype() != kInt64)
        throw Error(fmt::format("one_hot: indices must be an int64 tensor, got {}", dtype_name(indices.dtype())));
    if (num_classes < -1) throw Error(fmt::format("one_hot: num_classes must be -1 or at least 0, got {}", num_classes));
    const std::int64_t* x = indices.const_data_ptr<std::int64_t>();
    const std::size_t n = indices.numel();
    std::int64_t largest = -1;
    for (std::size_t i = 0; i < n; ++i) {
        if (x[i] < 0)
            throw Error(fmt::format("one_hot: class values must be non-negative, got {} at flat index {}", x[i], i));
        largest = std::max(largest, x[i]);
    }
    if (num_classes == -1) {
        if (n == 0) throw Error("one_hot: cannot infer num_classes from an empty tensor (pass num_classes)");
        num_classes = largest + 1;
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
