#pragma once
/// Views: tensors that share their base's storage, as torch's TensorImpl over a StorageImpl.
/// Internal to core/ (the public face is Tensor's view methods in tensor.hpp and ops.hpp).
///
/// A view is a Node whose `storage` is its base's and whose ViewOf says where its elements sit:
/// strides and an offset, in elements. The base is always a tensor that is no view (a view of a
/// view points at the same base), so a position in the storage is a flat row-major index into
/// the base. What it costs:
///  - making one is free (a transpose, a slice, a head split copy nothing);
///  - a kernel reads a view through Node::data(): a row-major view is an xarray over the base's
///    own buffer (no copy), another view is copied once per write to the storage;
///  - a write through a view (in-place ops, copy_, index_put_, data_ptr) lands in the base;
///  - with gradients recorded, an in-place op on a view rebases its base's history (torch's
///    CopySlices): the base's new value is as_strided_scatter of the old one and the op's
///    result, and every view of it reads its gradient from that new history (sync_view).
#include <cstdint>
#include <vector>

#include "core/node.hpp"

namespace xgrad {

/// Where a tensor's elements sit in its storage.
struct Geometry {
    Shape shape;
    std::vector<std::int64_t> strides;
    std::int64_t offset = 0;
};

/// Row-major strides of `shape`, in elements.
std::vector<std::int64_t> contiguous_strides(const Shape& shape);
/// torch's is_contiguous: the strides are row-major ones, ignoring axes of length 1 (and any
/// layout of an empty tensor).
bool is_contiguous_layout(const Shape& shape, const std::vector<std::int64_t>& strides);
/// Whether two index tuples can reach one position (a written-to tensor must not: torch's
/// internal-overlap check). Conservative: an as_strided layout it cannot prove disjoint counts.
bool may_overlap(const Shape& shape, const std::vector<std::int64_t>& strides);
/// n's geometry in its storage: its ViewOf, or row-major from 0 for a tensor that is no view.
Geometry geometry_of(const Node& n);
/// The number of elements of n's storage.
std::size_t storage_numel(const Node& n);

/// A view of src's storage with `g` (in storage positions) as a new tensor: its gradient edge
/// goes to src through `formula` (src's gradient from the view's), as every view op's does.
/// Nothing is copied. The caller has checked that `g` stays inside the storage.
Tensor make_view(const Tensor& src, Geometry g, const char* op, Formula formula);

/// v's base: the tensor whose storage it shares and whose history its gradient goes to (a new
/// leaf over the storage once set_data has given the old base another layout).
const std::shared_ptr<Node>& view_base(Node& v);

/// Marks t (a view) as one of several views a single node returned (split, chunk): as torch,
/// it then refuses in-place ops while gradients are recorded, and refuses to be used after an
/// in-place change of its base.
void mark_multi_output_view(const Tensor& t);

/// A view of all of src with its geometry (t() of a 1-D tensor, t.index({})): the gradient
/// passes through unchanged.
Tensor alias_view(const Tensor& src, const char* op);

/// Brings a view's graph edge up to date after an in-place op recorded in the graph rebased its
/// base (torch regenerates a view's grad_fn the same way): the view then reads its gradient from
/// the base's new history, and ops that read it before keep theirs (its past history).
void sync_view(Node& v);
inline void sync_view(const Tensor& t) {
    if (t.defined() && t.node().view) sync_view(t.node());
}

/// For a custom Function that marked view v dirty: v's base gets a new history, its old one
/// with `written` (the function's output, v's shape) at v's positions, named `op` (one
/// version bump); restart_view_from_base then makes v read its gradient from that history,
/// `past` (v's history before the write) kept for the ops that read v before.
void rebase_base_onto(Node& v, const Tensor& written, const char* op);
void restart_view_from_base(Node& v, std::shared_ptr<Node> past);

/// The in-place write of contiguous `values` (t's shape and dtype) into t's storage at t's
/// positions, as a write named `op` (version bump). No graph.
void write_into_storage(const char* op, const Tensor& t, const Tensor& values);

/// The same without the version bump, for code that counts the write itself.
void copy_into_storage(Node& n, const Tensor& values);

/// Refuses, as torch, an in-place write with gradients on into a view made while they were off
/// from a base that requires grad (its write could not be recorded).
void check_view_write(const char* op, const Tensor& t);

/// Refuses a write into t when several of its elements share one memory location (an
/// expanded view), with torch's message naming `op`.
void check_no_internal_overlap(const char* op, const Tensor& t);

/// An in-place op on a view recorded in the graph (record_in_place calls it for a view): the
/// base's history is rebased onto as_strided_scatter(base's old value, compute(view's old
/// value, others)), torch's CopySlices.
const Tensor& record_in_place_on_view(
    const char* op, const Tensor& self, std::vector<Tensor> others,
    const std::function<Tensor(const Tensor& old, const std::vector<Tensor>& others)>& compute);

// --- the differentiable strided primitives (positions are flat row-major indices into
// `base`, which is contiguous: a base tensor or a past history of one) ----------------------

/// The elements of base at g's positions, as a new contiguous tensor (torch's as_strided of a
/// base). Gradient: as_strided_scatter_add into zeros of base's shape.
Tensor as_strided_gather(const Tensor& base, const Geometry& g);
/// as_strided_gather's gradient (of a gather at g's positions): as_strided_scatter_add of the
/// incoming gradient into zeros of the input's shape, so that repeated positions sum.
Formula gather_gradient(Geometry g);
/// zeros(base_shape) with each element of src added at its position in g (repeats add).
/// Gradient: as_strided_gather of g's positions.
Tensor as_strided_scatter_add(const Tensor& src, const Shape& base_shape, const Geometry& g);
/// A copy of base with src written at g's positions (g must not overlap): torch's
/// as_strided_scatter. Gradients: base's is g with those positions zeroed, src's is gathered.
Tensor as_strided_scatter(const Tensor& base, const Tensor& src, const Geometry& g);

/// Runs write(dst), dst the row-major elements of t for code that writes them in place
/// (index_put_, scatter_): t's own buffer, or for a view a copy of its elements that is then
/// written into its storage at its positions.
template <class T, class W> void write_row_major(const char* op, const Tensor& t, W&& write) {
    if (!t.node().view) return write(t.mutable_data_ptr<T>());
    check_no_internal_overlap(op, t);
    xt::xarray<T> copy = values<T>(t);
    write(copy.data());
    write_into_storage(op, t, make_leaf(Storage(std::move(copy))));
}

}  // namespace xgrad
