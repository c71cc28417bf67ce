// Shape ops on any dtype; the gradient flows only for float inputs. Results are contiguous
// row-major copies (nodes own their arrays), so later ops never see strided views.
#include <algorithm>

#include "core/autograd_function.hpp"
#include "core/bool_bytes.hpp"
#include "core/broadcast.hpp"
#include "core/call_context.hpp"
#include "core/grad_ops.hpp"
#include "core/int_arith.hpp"
#include "core/ops.hpp"
#include "core/ops_util.hpp"
#include "core/views.hpp"

namespace xgrad {

namespace {

// Elements per chunk of a copy split over the pool, and half of what a copy must have to be split:
// 64 KiB of float32 copies in a few microseconds, about what handing a chunk to a spinning pool
// thread costs. Measured on bench_gpt_ops at batch 8 (its q, k and v are 65,536 elements each):
// chunks of 2^16 left those copies on one thread, 2^14 took the step from 0.99 to 0.93 of before.
constexpr std::size_t kCopyGrain = std::size_t(1) << 14;

// Copies `rows` runs of `run` elements, run r from src + src_at(r) to dst + dst_at(r) (offsets
// in elements), split over the pool by element so that one long run splits too: concat and the
// slices' gradients copy in every backward, and on one thread the others would wait them out.
template <class T, class SrcAt, class DstAt>
void copy_runs(const T* src_values, T* dst_values, std::size_t rows, std::size_t run, SrcAt src_at, DstAt dst_at) {
    using M = moved_t<T>;
    const M* src = reinterpret_cast<const M*>(src_values);
    M* dst = reinterpret_cast<M*>(dst_values);
    const std::size_t total = rows * run;  // a tensor's element count: it fits
    if (total == 0) return;
    auto copy = [&](std::size_t begin, std::size_t end) {
        while (begin < end) {
            const std::size_t r = begin / run, c = begin % run, len = std::min(run - c, end - begin);
            std::copy_n(src + src_at(r) + c, len, dst + dst_at(r) + c);
            begin += len;
        }
    };
    if (total < 2 * kCopyGrain) copy(0, total);
    else parallel_for(total, kCopyGrain, copy);
}

// copy_runs's offset of a single run, or of every run of a contiguous whole.
constexpr auto kAtStart = [](std::size_t) -> std::size_t { return 0; };

// The offset in the sliced array of row r (r = o·count + j) of the `inner`-long rows a slice keeps:
// indices from, from + stride, ... along the axis s splits at, count of them per outer index o.
auto kept_rows(const axis_split& s, std::size_t from, std::size_t count, std::size_t stride) {
    return [=](std::size_t r) { return (r / count * s.n + from + r % count * stride) * s.inner; };
}

std::string dims_str(const std::vector<long>& dims) {
    if (dims.size() == 1) return fmt::format("({},)", dims[0]);
    return fmt::format("({})", fmt::join(dims, ", "));
}

// The strides that show a tensor of `shape` and `strides` as one of `to` without moving an
// element, or none when no strides can (an axis of `to` would span two of the strides'
// runs): torch's computeStride. Axes of length 1 take the stride their neighbour gives.
std::optional<std::vector<std::int64_t>> view_strides(const Shape& shape, const std::vector<std::int64_t>& strides,
                                                      const Shape& to) {
    std::size_t numel = 1;
    for (std::size_t s : shape) numel *= s;
    if (numel == 0 || shape.empty()) return contiguous_strides(to);
    std::vector<std::int64_t> out(to.size());
    long view_d = static_cast<long>(to.size()) - 1;
    std::int64_t chunk_base = strides.back();
    std::size_t tensor_numel = 1, view_numel = 1;
    for (long d = static_cast<long>(shape.size()) - 1; d >= 0; --d) {
        tensor_numel *= shape[static_cast<std::size_t>(d)];
        const bool run_ends =
            d == 0 || (shape[static_cast<std::size_t>(d - 1)] != 1 &&
                       strides[static_cast<std::size_t>(d - 1)] != static_cast<std::int64_t>(tensor_numel) * chunk_base);
        if (!run_ends) continue;
        while (view_d >= 0 && (view_numel < tensor_numel || to[static_cast<std::size_t>(view_d)] == 1)) {
            out[static_cast<std::size_t>(view_d)] = static_cast<std::int64_t>(view_numel) * chunk_base;
            view_numel *= to[static_cast<std::size_t>(view_d)];
            --view_d;
        }
        if (view_numel != tensor_numel) return std::nullopt;
        if (d > 0) {
            chunk_base = strides[static_cast<std::size_t>(d - 1)];
            tensor_numel = view_numel = 1;
        }
    }
    if (view_d != -1) return std::nullopt;
    return out;
}

// The same elements under another shape (reshape, view, squeeze, unsqueeze, flatten): a view,
// of a contiguous copy when a's strides cannot show the new shape (refused for `view`).
Tensor reshaped(const char* op, const Tensor& a, const Shape& shape) {
    Geometry g = geometry_of(a.node());
    std::optional<std::vector<std::int64_t>> strides = view_strides(g.shape, g.strides, shape);
    Tensor src = a;
    if (!strides) {
        if (std::string_view(op) == "view")
            throw Error(fmt::format("view: the shape {} cannot be viewed as {}: its strides ({}) put an axis of the "
                                    "result across two runs of memory; use reshape, which copies then (or call "
                                    "contiguous() first)",
                                    shape_str(a.shape()), shape_str(shape), fmt::join(g.strides, ", ")));
        src = a.contiguous();
        g = geometry_of(src.node());
        strides = contiguous_strides(shape);
    }
    return make_view(src, {shape, std::move(*strides), g.offset}, op, Formula([op](const GradArgs& in) -> std::vector<Tensor> {
        return {reshaped(std::string_view(op) == "view" ? "reshape" : op, in.grad(), in.inputs[0].shape())};
    }));
}

// A view with output axis d taken from input axis perm[d].
Tensor permute_impl(const char* op, const Tensor& a, std::vector<std::size_t> perm) {
    const Geometry in = geometry_of(a.node());
    Geometry g{Shape(perm.size()), std::vector<std::int64_t>(perm.size()), in.offset};
    for (std::size_t d = 0; d < perm.size(); ++d) {
        g.shape[d] = in.shape[perm[d]];
        g.strides[d] = in.strides[perm[d]];
    }
    // The gradient goes back through the inverse permutation (itself a permute).
    std::vector<std::size_t> inverse(perm.size());
    for (std::size_t d = 0; d < perm.size(); ++d) inverse[perm[d]] = d;
    return make_view(a, std::move(g), op, Formula([op, inverse = std::move(inverse)](const GradArgs& in) -> std::vector<Tensor> {
        return {permute_impl(op, in.grad(), inverse)};
    }));
}

}  // namespace

namespace {
// reshape's sizes with the -1 filled in, checked against a's element count.
Shape reshape_sizes(const Tensor& a, const IntList& shape);
}  // namespace

Tensor reshape(const Tensor& a, const IntList& shape) {
    check_defined("reshape", a);
    return reshaped("reshape", a, reshape_sizes(a, shape));
}

Tensor Tensor::view(const IntList& shape) const {
    check_defined("view", *this);
    return as_call("view", [&] { return reshaped("view", *this, reshape_sizes(*this, shape)); });
}

namespace {
Shape reshape_sizes(const Tensor& a, const IntList& shape) {
    shape.check("reshape");
    const Shape& in = a.shape();
    const std::size_t total = a.numel();
    long inferred = -1;
    Shape out(shape.size());
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (shape[i] == -1) {
            if (inferred >= 0)
                throw Error(fmt::format("reshape: only one size may be -1, got {}", dims_str(shape)));
            inferred = static_cast<long>(i);
            out[i] = 1;  // for now: the product of the others is counted below
        } else if (shape[i] < 0) {
            throw Error(fmt::format("reshape: invalid size {} in {} (sizes are ≥ 0, or -1 for one inferred size)",
                                    shape[i], dims_str(shape)));
        } else {
            out[i] = static_cast<std::size_t>(shape[i]);
        }
    }
    if (inferred >= 0) {
        const std::size_t known = checked_numel("reshape", out);
        if (known == 0)
            throw Error(fmt::format("reshape: cannot infer the -1 in {}: the other sizes multiply to 0, so any "
                                    "length would fit (input shape {})",
                                    dims_str(shape), shape_str(in)));
        if (total % known != 0)
            throw Error(fmt::format("reshape: cannot reshape {} ({} elements) into {}", shape_str(in), total,
                                    dims_str(shape)));
        out[static_cast<std::size_t>(inferred)] = total / known;
    }
    const std::size_t count = checked_numel("reshape", out);
    if (count != total)
        throw Error(fmt::format("reshape: cannot reshape {} ({} elements) into {} ({} elements)", shape_str(in),
                                total, shape_str(out), count));
    return out;
}
}  // namespace

Tensor permute(const Tensor& a, const IntList& axes) {
    axes.check("permute");
    const Shape& in = a.shape();
    if (axes.size() != in.size())
        throw Error(fmt::format("permute: got {} axes {} for a tensor of rank {} (shape {})", axes.size(),
                                dims_str(axes), in.size(), shape_str(in)));
    std::vector<std::size_t> perm;
    std::vector<bool> seen(in.size(), false);
    for (long axis : axes) {
        const std::size_t d = normalize_axis("permute", axis, in);
        if (seen[d])
            throw Error(fmt::format("permute: axes {} are not a permutation of 0..{} (axis {} repeats; shape {})",
                                    dims_str(axes), in.size() - 1, d, shape_str(in)));
        seen[d] = true;
        perm.push_back(d);
    }
    return permute_impl("permute", a, std::move(perm));
}

Tensor transpose(const Tensor& a, long axis0, long axis1) {
    const Shape& in = a.shape();
    const std::size_t i = normalize_axis("transpose", axis0, in);
    const std::size_t j = normalize_axis("transpose", axis1, in);
    std::vector<std::size_t> perm(in.size());
    for (std::size_t d = 0; d < perm.size(); ++d) perm[d] = d;
    std::swap(perm[i], perm[j]);
    return permute_impl("transpose", a, std::move(perm));
}

Tensor unsqueeze(const Tensor& a, long axis) {
    const Shape& in = a.shape();
    const long rank = static_cast<long>(in.size());
    if (axis < -rank - 1 || axis > rank)
        throw Error(fmt::format("unsqueeze: axis {} is out of range [{}, {}] for a tensor of rank {} (shape {})",
                                axis, -rank - 1, rank, rank, shape_str(in)));
    const long pos = axis < 0 ? axis + rank + 1 : axis;
    Shape out = in;
    out.insert(out.begin() + pos, 1);
    return reshaped("unsqueeze", a, out);
}

Tensor squeeze(const Tensor& a, long axis) {
    const Shape& in = a.shape();
    if (in.empty() && (axis == 0 || axis == -1)) return reshaped("squeeze", a, in);  // torch: a 0-d tensor itself
    const std::size_t d = normalize_axis("squeeze", axis, in);
    if (in[d] != 1)
        throw Error(fmt::format("squeeze: axis {} has length {}, expected 1 (shape {})", axis, in[d], shape_str(in)));
    Shape out = in;
    out.erase(out.begin() + static_cast<long>(d));
    return reshaped("squeeze", a, out);
}

Tensor concat(const std::vector<Tensor>& tensors, long axis) {
    if (tensors.empty()) throw Error("concat: expected at least one tensor, got none");
    // Mixed dtypes promote as torch.cat's do (int64 with float32 gives float32); the casts carry
    // the gradient back to each input in its own dtype.
    Dtype common = Dtype::Bool;
    for (std::size_t t = 0; t < tensors.size(); ++t) {
        if (!tensors[t].defined()) throw Error(fmt::format("concat: tensor {} is undefined", t));
        common = promote_types(common, tensors[t].dtype());
    }
    if (std::any_of(tensors.begin(), tensors.end(), [&](const Tensor& t) { return t.dtype() != common; })) {
        std::vector<Tensor> same;
        same.reserve(tensors.size());
        for (const Tensor& t : tensors) same.push_back(t.dtype() == common ? t : cast(t, common));
        return concat(same, axis);
    }
    const Shape& first = tensors[0].shape();
    const std::size_t ax = normalize_axis("concat", axis, first);
    Shape out_shape = first;
    out_shape[ax] = 0;
    for (std::size_t t = 0; t < tensors.size(); ++t) {
        const Shape& s = tensors[t].shape();
        check_same_dtype("concat", tensors[0], tensors[t]);
        bool match = s.size() == first.size();
        for (std::size_t d = 0; match && d < s.size(); ++d) match = d == ax || s[d] == first[d];
        if (!match)
            throw Error(fmt::format("concat: tensor {} has shape {} but tensor 0 has shape {}; they must "
                                    "match except along axis {}",
                                    t, shape_str(s), shape_str(first), axis));
        if (__builtin_add_overflow(out_shape[ax], s[ax], &out_shape[ax]))
            throw Error(fmt::format("concat: the lengths along axis {} add up to more than fit in memory (tensor {} "
                                    "of shape {} overflows it)",
                                    axis, t, shape_str(s)));
    }
    checked_numel("concat", out_shape);
    const AllocContext context("concat", out_shape);
    // Per input, its length along the axis and its start within the result's axis.
    std::vector<std::size_t> lengths, starts;
    for (const Tensor& t : tensors) {
        starts.push_back(lengths.empty() ? 0 : starts.back() + lengths.back());
        lengths.push_back(t.shape()[ax]);
    }
    const axis_split s = split_at(out_shape, ax);
    return dispatch_all(tensors[0].dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> y = xt::xarray<T>::from_shape(out_shape);
        for (std::size_t t = 0; t < tensors.size(); ++t) {
            const std::size_t block = lengths[t] * s.inner, at = starts[t] * s.inner, row = s.n * s.inner;
            copy_runs(values<T>(tensors[t]).data(), y.data(), s.outer, block, [&](std::size_t o) { return o * block; },
                      [&](std::size_t o) { return o * row + at; });
        }
        // Each input's gradient is its slice of g along the axis.
        return make_any_result<T>(
            std::move(y), tensors, "concat", Formula([ax, lengths, starts](const GradArgs& in) -> std::vector<Tensor> {
                std::vector<Tensor> grads(lengths.size());
                const long axis = static_cast<long>(ax);
                for (std::size_t t = 0; t < lengths.size(); ++t)
                    if (in.needs(t))
                        grads[t] = slice(in.grad(), axis, static_cast<long>(starts[t]),
                                         static_cast<long>(starts[t] + lengths[t]));
                return grads;
            }), Saves::none());
    });
}

Tensor slice(const Tensor& a, long axis, long start, long end, long step) {
    const Shape& in = a.shape();
    const std::size_t ax = normalize_axis("slice", axis, in);
    if (step < 1) throw Error(fmt::format("slice: step must be at least 1, got {}", step));
    const long n = static_cast<long>(in[ax]);
    // numpy: negative bounds count from the end, then both clamp to [0, n].
    auto clamp = [n](long v) { return std::clamp(v < 0 ? v + n : v, 0L, n); };
    const long first = clamp(start);
    const long stop = clamp(end);
    // ceil((stop - first) / step) without the sum stop - first + step, which overflows for a huge step
    const std::size_t count = stop > first ? static_cast<std::size_t>((stop - first - 1) / step + 1) : 0;
    Geometry g = geometry_of(a.node());
    if (count > 0) g.offset += first * g.strides[ax];
    g.shape[ax] = count;
    g.strides[ax] *= step;
    return make_view(a, std::move(g), "slice", Formula([ax, first, step](const GradArgs& in) -> std::vector<Tensor> {
        return {slice_backward(in.grad(), in.inputs[0].shape(), static_cast<long>(ax), first, step)};
    }));
}

Tensor slice_backward(const Tensor& g, const Shape& input_shape, long axis, long start, long step) {
    constexpr const char* op = "slice_backward";
    const std::size_t ax = normalize_axis(op, axis, input_shape);
    const std::size_t count = g.shape().size() == input_shape.size() ? g.shape()[ax] : 0;
    Shape expected = input_shape;
    expected[ax] = count;
    const long n = static_cast<long>(input_shape[ax]);
    const bool fits = start >= 0 && step >= 1 && start <= n &&
                      (count == 0 || (start < n && static_cast<std::size_t>((n - start - 1) / step) >= count - 1));
    if (g.shape() != expected || !fits)
        throw Error(fmt::format("{}: a gradient of shape {} is not a slice of {} along axis {} from {} in steps of {}",
                                op, shape_str(g.shape()), shape_str(input_shape), axis, start, step));
    const AllocContext context(op, input_shape);
    const axis_split s = split_at(input_shape, ax);
    const std::size_t from = static_cast<std::size_t>(start), stride = static_cast<std::size_t>(step);
    return dispatch_floating(op, g.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> gx = xt::zeros<T>(input_shape);
        copy_runs(values<T>(g).data(), gx.data(), s.outer * count, s.inner, [&](std::size_t r) { return r * s.inner; },
                  kept_rows(s, from, count, stride));
        return make_result<T>(std::move(gx), {g}, op, Formula([ax, start, step](const GradArgs& in) -> std::vector<Tensor> {
            // The slice g was: its length along the axis fixes where it ended.
            const long m = static_cast<long>(in.inputs[0].shape()[ax]);
            const long end = m == 0 ? start : start + (m - 1) * step + 1;
            return {slice(in.grad(), static_cast<long>(ax), start, end, step)};
        }), Saves::none());
    });
}

Tensor expand(const Tensor& a, const IntList& shape_arg) {
    shape_arg.check("expand");
    // torch's -1: the size a already has at that axis (aligned from the right); not for a new one.
    IntList sizes = shape_arg;
    const std::size_t lead = sizes.size() >= a.shape().size() ? sizes.size() - a.shape().size() : 0;
    for (std::size_t i = lead; i < sizes.size(); ++i)
        if (sizes[i] == -1) sizes[i] = static_cast<long>(a.shape()[i - lead]);
    const Shape shape = sizes.shape("expand");
    if (!broadcastable_to(a.shape(), shape))
        throw Error(fmt::format("expand: cannot broadcast shape {} to {} (each axis must match or be 1, "
                                "aligned from the right)",
                                shape_str(a.shape()), shape_str(shape)));
    checked_numel("expand", shape);
    // A view: a new or stretched axis steps 0 through the storage.
    const Geometry in = geometry_of(a.node());
    const std::size_t extra = shape.size() - in.shape.size();
    Geometry g{shape, std::vector<std::int64_t>(shape.size(), 0), in.offset};
    for (std::size_t d = 0; d < in.shape.size(); ++d)
        if (in.shape[d] == shape[extra + d]) g.strides[extra + d] = in.strides[d];
    return make_view(a, std::move(g), "expand", Formula([](const GradArgs& in) -> std::vector<Tensor> {
        return {sum_to(in.grad(), in.inputs[0].shape())};
    }));
}

Tensor repeat(const Tensor& a, const IntList& repeats_arg) {
    check_defined("repeat", a);
    repeats_arg.check("repeat");
    const Shape repeats = repeats_arg.shape("repeat");
    if (repeats.size() < a.shape().size())
        throw Error(fmt::format("repeat: expected at least as many repeats as the tensor has axes ({}), got {} for "
                                "shape {}",
                                a.dim(), shape_str(repeats), shape_str(a.shape())));
    // Each axis of size s repeated r times is a new axis of r in front of it: a broadcast of
    // (1, s0, 1, s1, ...) to (r0, s0, r1, s1, ...), merged pairwise. The gradient is the sum over
    // the r axes, which expand and reshape already give.
    const std::size_t lead = repeats.size() - a.dim();
    Shape spread, tiled, out;
    for (std::size_t i = 0; i < repeats.size(); ++i) {
        const std::size_t s = i < lead ? 1 : a.shape()[i - lead];
        spread.insert(spread.end(), {1, s});
        tiled.insert(tiled.end(), {repeats[i], s});
        out.push_back(checked_mul("repeat", "a repeated axis' length", repeats[i], s));
    }
    checked_numel("repeat", out);
    return as_call("repeat", [&] { return reshape(expand(reshape(a, spread), tiled), out); });
}

Tensor narrow(const Tensor& a, long axis, long start, long length) {
    check_defined("narrow", a);
    const std::size_t ax = normalize_axis("narrow", axis, a.shape());
    const long n = static_cast<long>(a.shape()[ax]);
    // torch: start in [-n, n] (negative counts from the end), then start + length within n.
    const long first = start < 0 && start >= -n ? start + n : start;
    if (first < 0 || first > n || length < 0 || length > n - first)
        throw Error(fmt::format("narrow: start {} and length {} do not lie within axis {} of size {} (shape {})", start,
                                length, axis, n, shape_str(a.shape())));
    return as_call("narrow", [&] { return slice(a, static_cast<long>(ax), first, first + length); });
}

Tensor select(const Tensor& a, long axis, long index) {
    check_defined("select", a);
    const std::size_t ax = normalize_axis("select", axis, a.shape());
    const long n = static_cast<long>(a.shape()[ax]);
    if (index < -n || index >= n)
        throw Error(fmt::format("select: index {} is out of range for axis {} of size {} (shape {})", index, axis, n,
                                shape_str(a.shape())));
    const long i = index < 0 ? index + n : index;
    return as_call("select", [&] { return squeeze(slice(a, static_cast<long>(ax), i, i + 1), static_cast<long>(ax)); });
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
    if (g.shape() == shape) return g;
    if (!broadcastable_to(shape, g.shape()))
        throw Error(fmt::format("sum_to: shape {} does not broadcast to the gradient's shape {}", shape_str(shape),
                                shape_str(g.shape())));
    const AllocContext context("sum_to", shape);
    return dispatch_floating("sum_to", g.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const xt::xarray<T>& gv = values<T>(g);
        xt::xarray<T> out;
        // The broadcasts the fast loops know sum straight from g; the others from a copy.
        const auto split = split_for(shape, g.shape());
        const auto steps = split ? steps_for(shape, g.shape(), split->first, split->second) : std::nullopt;
        if (steps) {
            out = xt::xarray<T>::from_shape(shape);
            const T* pg = gv.data();
            const std::size_t cols = split->second;
            reduce_plan<T>(split->first, cols, *steps, out.data(), [pg, cols](std::size_t r, std::size_t c) { return pg[r * cols + c]; });
        } else {
            out = sum_to<T>(xt::xarray<T>(gv), shape);
        }
        return make_result<T>(std::move(out), {g}, "sum_to", Formula([](const GradArgs& in) -> std::vector<Tensor> {
            return {expand(in.grad(), in.inputs[0].shape())};
        }), Saves::none());
    });
}

}  // namespace xgrad

// --- stack, split, chunk, tril and triu -------------------------------------------------------

namespace xgrad {

Tensor stack(const std::vector<Tensor>& tensors, long axis) {
    if (tensors.empty()) throw Error("stack: expected at least one tensor, got none");
    for (std::size_t t = 0; t < tensors.size(); ++t) {
        if (!tensors[t].defined()) throw Error(fmt::format("stack: tensor {} is undefined", t));
        if (tensors[t].shape() != tensors[0].shape())
            throw Error(fmt::format("stack: expects each tensor to be equal size, but got {} at entry 0 and {} at "
                                    "entry {}",
                                    shape_str(tensors[0].shape()), shape_str(tensors[t].shape()), t));
    }
    if (tensors[0].dtype() == kBFloat16) check_no_bfloat16_graph("stack", tensors);  // named as stack, not its parts
    // A new axis in [-rank-1, rank], as unsqueeze takes it; then one concat along it.
    const long rank = static_cast<long>(tensors[0].dim()) + 1;
    if (axis < -rank || axis >= rank)
        throw Error(fmt::format("stack: axis {} is out of range for stacking tensors of shape {} (the result has rank "
                                "{}: axis must be in [{}, {}])",
                                axis, shape_str(tensors[0].shape()), rank, -rank, rank - 1));
    return as_call("stack", [&] {
        std::vector<Tensor> parts;
        parts.reserve(tensors.size());
        for (const Tensor& t : tensors) parts.push_back(unsqueeze(t, axis));
        return concat(parts, axis < 0 ? axis + rank : axis);
    });
}

namespace {

// split's bodies, without its as_call: chunk runs them as its own.
std::vector<Tensor> split_sizes(const Tensor& a, const std::vector<long>& sizes, long axis);
std::vector<Tensor> split_even(const Tensor& a, long split_size, long axis);

}  // namespace

std::vector<Tensor> split(const Tensor& a, const IntList& sizes, long axis) {
    check_defined("split", a);
    sizes.check("split");
    return as_call("split", [&] { return split_sizes(a, sizes, axis); });
}

std::vector<Tensor> split(const Tensor& a, long split_size, long axis) {
    check_defined("split", a);
    return as_call("split", [&] { return split_even(a, split_size, axis); });
}

namespace {

// All the pieces as one node (a custom Function, which the engine runs once with every piece's
// gradient, zeros where none arrived): the backward is one concat. Pieces as slices would each
// send back a zero tensor of the whole input for the engine to add up: the qkv split of every
// attention block paid for three. The pieces are views of a (nothing is copied), and as in
// torch, views that one node returns together refuse in-place ops while a requires grad.
struct SplitPieces : autograd::Function<SplitPieces> {
    static constexpr const char* name = "split";
    static autograd::variable_list forward(autograd::AutogradContext* ctx, const Tensor& a, long axis,
                                           const std::vector<long>& sizes) {
        ctx->saved_data["axis"] = axis;
        autograd::variable_list out;
        out.reserve(sizes.size());
        long start = 0;
        for (long size : sizes) {
            out.push_back(slice(a, axis, start, start + size));
            start += size;
        }
        return out;
    }
    static autograd::variable_list backward(autograd::AutogradContext* ctx, autograd::variable_list grads) {
        return {concat(grads, ctx->saved_data["axis"].get<long>()), Tensor(), Tensor()};
    }
};

std::vector<Tensor> split_sizes(const Tensor& a, const std::vector<long>& sizes, long axis) {
    if (a.dtype() == kBFloat16) check_no_bfloat16_graph("split", {a});
    const std::size_t ax = normalize_axis("split", axis, a.shape());
    const long n = static_cast<long>(a.shape()[ax]);
    long total = 0;
    for (long s : sizes) {
        if (s < 0) throw Error(fmt::format("split: sizes must not be negative, got {}", s));
        total = checked_add<long>("split", "the sum of the sizes", total, s);
    }
    if (total != n)
        throw Error(fmt::format("split: sizes ({}) add up to {}, but axis {} of shape {} has length {}",
                                fmt::join(sizes, ", "), total, ax, shape_str(a.shape()), n));
    std::vector<Tensor> pieces = SplitPieces::apply(a, static_cast<long>(ax), sizes);
    for (Tensor& p : pieces) mark_multi_output_view(p);
    return pieces;
}

std::vector<Tensor> split_even(const Tensor& a, long split_size, long axis) {
    const std::size_t ax = normalize_axis("split", axis, a.shape());
    const long n = static_cast<long>(a.shape()[ax]);
    if (split_size <= 0 && n > 0)
        throw Error(fmt::format("split: split_size must be positive, got {}", split_size));
    std::vector<long> sizes;
    // Each step is at most what is left, so start never passes n (start + split_size could overflow).
    for (long start = 0; start < n;) {
        sizes.push_back(std::min(split_size, n - start));
        start += sizes.back();
    }
    if (sizes.empty()) sizes.push_back(0);  // an empty axis splits into one empty piece, as torch
    return split_sizes(a, sizes, axis);
}

}  // namespace

std::vector<Tensor> chunk(const Tensor& a, long chunks, long axis) {
    check_defined("chunk", a);
    if (chunks <= 0) throw Error(fmt::format("chunk: chunks must be positive, got {}", chunks));
    if (a.dtype() == kBFloat16) check_no_bfloat16_graph("chunk", {a});
    const std::size_t ax = normalize_axis("chunk", axis, a.shape());
    const long n = static_cast<long>(a.shape()[ax]);
    // ceil(n / chunks), without n + chunks - 1 (which overflows for a huge count): torch.chunk may give fewer pieces
    const long size = n / chunks + (n % chunks != 0 ? 1 : 0);
    return as_call("chunk", [&] { return split_even(a, std::max(size, 1L), axis); });
}

namespace {

Tensor triangle(const char* op, const Tensor& a, long k, bool lower) {
    if (!a.defined() || a.dim() < 2)
        throw Error(fmt::format("{}: expected a tensor of at least 2 dimensions, got shape {}", op,
                                a.defined() ? shape_str(a.shape()) : "undefined"));
    const Shape& in = a.shape();
    const AllocContext context(op, in);
    const std::size_t rows = in[in.size() - 2], cols = in.back();
    // keep(i, j): j − i ≤ k for the lower triangle, j − i ≥ k for the upper.
    auto keep = [k, lower](std::size_t i, std::size_t j) {
        const long d = static_cast<long>(j) - static_cast<long>(i);
        return lower ? d <= k : d >= k;
    };
    auto apply = [rows, cols, keep](auto* p, std::size_t numel) {
        for (std::size_t m = 0; m * rows * cols < numel; ++m)
            for (std::size_t i = 0; i < rows; ++i)
                for (std::size_t j = 0; j < cols; ++j)
                    if (!keep(i, j)) p[(m * rows + i) * cols + j] = std::decay_t<decltype(*p)>(0);
    };
    return dispatch_all(a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> y = values<T>(a);
        apply(y.data(), y.size());
        // The same triangle of the gradient: the zeroed entries had no effect.
        return make_any_result<T>(
            std::move(y), {a}, op, Formula([op, k, lower](const GradArgs& in) -> std::vector<Tensor> {
                return {triangle(op, in.grad(), k, lower)};
            }),
            Saves::none());
    });
}

}  // namespace

Tensor tril(const Tensor& a, long k) { return triangle("tril", a, k, true); }
Tensor triu(const Tensor& a, long k) { return triangle("triu", a, k, false); }

}  // namespace xgrad
