// The view ops that ops_shape.cpp does not hold, and Tensor's accessors of its layout: each
// result shares its input's storage (core/views.hpp), its gradient formula beside it.
#include <algorithm>

#include "core/call_context.hpp"
#include "core/int_arith.hpp"
#include "core/ops.hpp"
#include "core/ops_util.hpp"
#include "core/sequence_ops.hpp"
#include "core/views.hpp"

namespace xgrad {

namespace {

// The view `make(geometry)` gives of a, with its geometry relative to a's storage, and the
// same op applied to a contiguous layout of a's shape from 0 (the positions its gradient adds
// back to).
template <class Make> Tensor derived_view(const char* op, const Tensor& a, Make make) {
    const Geometry in = geometry_of(a.node());
    Geometry own = make(in);
    Geometry relative = make(Geometry{in.shape, contiguous_strides(in.shape), 0});
    return make_view(a, std::move(own), op, gather_gradient(std::move(relative)));
}

}  // namespace

// --- views --------------------------------------------------------------------------------------

Tensor flatten(const Tensor& a, long start_dim, long end_dim) {
    check_defined("flatten", a);
    if (a.dim() == 0) return a.reshape({1});
    const Shape& in = a.shape();
    const std::size_t s = normalize_axis("flatten", start_dim, in), e = normalize_axis("flatten", end_dim, in);
    if (s > e)
        throw Error(fmt::format("flatten: start_dim {} comes after end_dim {} (shape {})", start_dim, end_dim,
                                shape_str(in)));
    IntList out;
    for (std::size_t d = 0; d < s; ++d) out.push_back(static_cast<long>(in[d]));
    std::size_t merged = 1;
    for (std::size_t d = s; d <= e; ++d) merged *= in[d];
    out.push_back(static_cast<long>(merged));
    for (std::size_t d = e + 1; d < in.size(); ++d) out.push_back(static_cast<long>(in[d]));
    return as_call("flatten", [&] { return reshape(a, out); });
}

Tensor squeeze(const Tensor& a) {
    check_defined("squeeze", a);
    IntList out;
    for (std::size_t s : a.shape())
        if (s != 1) out.push_back(static_cast<long>(s));
    return as_call("squeeze", [&] { return reshape(a, out); });
}

Tensor diagonal(const Tensor& a, long offset, long dim1, long dim2) {
    check_defined("diagonal", a);
    const Shape& in = a.shape();
    if (in.size() < 2) throw Error(fmt::format("diagonal: needs at least 2 axes, got shape {}", shape_str(in)));
    const std::size_t d1 = normalize_axis("diagonal", dim1, in), d2 = normalize_axis("diagonal", dim2, in);
    if (d1 == d2)
        throw Error(fmt::format("diagonal: dim1 and dim2 are both axis {} (shape {}); give two different axes", d1,
                                shape_str(in)));
    const long n1 = static_cast<long>(in[d1]), n2 = static_cast<long>(in[d2]);
    // Rows from max(0, -offset), columns from max(0, offset): as many as both have left.
    const long r0 = offset < 0 ? std::min(-offset, n1) : 0, c0 = offset > 0 ? std::min(offset, n2) : 0;
    const std::size_t length = static_cast<std::size_t>(std::max(0L, std::min(n1 - r0, n2 - c0)));
    return derived_view("diagonal", a, [&](Geometry g) {
        Geometry out{{}, {}, g.offset};
        if (length > 0) out.offset += r0 * g.strides[d1] + c0 * g.strides[d2];
        for (std::size_t d = 0; d < g.shape.size(); ++d)
            if (d != d1 && d != d2) {
                out.shape.push_back(g.shape[d]);
                out.strides.push_back(g.strides[d]);
            }
        out.shape.push_back(length);
        out.strides.push_back(g.strides[d1] + g.strides[d2]);
        return out;
    });
}

Tensor as_strided(const Tensor& a, const IntList& size, const IntList& stride, std::optional<std::int64_t> offset) {
    constexpr const char* op = "as_strided";
    check_defined(op, a);
    size.check(op);
    stride.check(op);
    if (size.size() != stride.size())
        throw Error(fmt::format("{}: {} sizes but {} strides (give one stride per axis)", op, size.size(), stride.size()));
    const Node& n = a.node();
    const std::int64_t at = offset.value_or(n.view ? n.view->offset : 0);
    if (at < 0) throw Error(fmt::format("{}: the storage offset must not be negative, got {}", op, at));
    Geometry g{Shape(size.size()), std::vector<std::int64_t>(stride.begin(), stride.end()), at};
    // The last position it reaches, computed without overflow, must lie in the storage.
    const std::size_t storage = storage_numel(n);
    std::uint64_t last = static_cast<std::uint64_t>(at), count = 1;
    for (std::size_t d = 0; d < size.size(); ++d) {
        if (size[d] < 0) throw Error(fmt::format("{}: size {} is negative at axis {}", op, size[d], d));
        if (stride[d] < 0)
            throw Error(fmt::format("{}: stride {} at axis {} is negative (as torch, negative strides are not "
                                    "supported)",
                                    op, stride[d], d));
        g.shape[d] = static_cast<std::size_t>(size[d]);
        count = checked_mul<std::uint64_t>(op, "the element count", count, g.shape[d]);
    }
    if (count > 0)
        for (std::size_t d = 0; d < size.size(); ++d)
            last = checked_add<std::uint64_t>(
                op, "the last position",
                last, checked_mul<std::uint64_t>(op, "a stride times a size", static_cast<std::uint64_t>(stride[d]),
                                                  g.shape[d] - 1));
    if ((count > 0 && last >= storage) || static_cast<std::uint64_t>(at) > storage)
        throw Error(fmt::format("{}: size ({}) with stride ({}) from offset {} reaches position {} of a storage of {} "
                                "elements (of a tensor of shape {})",
                                op, fmt::join(size, ", "), fmt::join(stride, ", "), at, last, storage,
                                shape_str(a.shape())));
    // The gradient adds back to the storage's positions, then reads a's own from them.
    const Geometry own = geometry_of(n);
    const Shape storage_shape{storage};
    return make_view(a, g, op, Formula([g, own, storage_shape](const GradArgs& in) -> std::vector<Tensor> {
        const Tensor whole = as_strided_scatter_add(in.grad(), storage_shape, g);
        return {as_strided_gather(whole, own)};
    }));
}

// --- Tensor's view methods and layout ------------------------------------------------------------

Tensor Tensor::flatten(long start_dim, long end_dim) const { return xgrad::flatten(*this, start_dim, end_dim); }

Tensor Tensor::unflatten(long dim, const IntList& sizes) const {
    check_defined("unflatten", *this);
    sizes.check("unflatten");
    const std::size_t d = normalize_axis("unflatten", dim, shape());
    IntList out;
    for (std::size_t k = 0; k < d; ++k) out.push_back(static_cast<long>(shape()[k]));
    // sizes may hold one -1; reshape infers it from the whole count.
    long known = 1;
    bool inferred = false;
    for (long s : sizes) {
        if (s == -1 && !inferred) inferred = true;
        else known *= s;
        out.push_back(s);
    }
    if (!inferred && known != static_cast<long>(shape()[d]))
        throw Error(fmt::format("unflatten: sizes ({}) multiply to {}, but axis {} has length {} (shape {})",
                                fmt::join(sizes, ", "), known, d, shape()[d], shape_str(shape())));
    for (std::size_t k = d + 1; k < shape().size(); ++k) out.push_back(static_cast<long>(shape()[k]));
    return as_call("unflatten", [&] { return view(out); });
}

Tensor Tensor::t() const {
    check_defined("t", *this);
    if (dim() > 2) throw Error(fmt::format("t: expects a tensor with at most 2 axes, got shape {} (use transpose)", shape_str(shape())));
    if (dim() < 2) return alias_view(*this, "t");
    return as_call("t", [&] { return transpose(0, 1); });
}

std::vector<Tensor> Tensor::unbind(long axis) const { return xgrad::unbind(*this, axis); }
Tensor Tensor::diagonal(long offset, long dim1, long dim2) const { return xgrad::diagonal(*this, offset, dim1, dim2); }
Tensor Tensor::squeeze() const { return xgrad::squeeze(*this); }
Tensor Tensor::as_strided(const IntList& size, const IntList& stride, std::optional<std::int64_t> offset) const {
    return xgrad::as_strided(*this, size, stride, offset);
}

Tensor Tensor::unfold(long dim, long size, long step) const {
    constexpr const char* op = "unfold";
    check_defined(op, *this);
    const Shape& in = shape();
    const std::size_t d = in.empty() ? 0 : normalize_axis(op, dim, in);
    const long n = in.empty() ? 1 : static_cast<long>(in[d]);
    if (size < 0 || size > n)
        throw Error(fmt::format("{}: size {} is not in [0, {}] (axis {} of shape {})", op, size, n, dim, shape_str(in)));
    if (step <= 0) throw Error(fmt::format("{}: step must be positive, got {}", op, step));
    const std::size_t windows = static_cast<std::size_t>((n - size) / step + 1);
    return derived_view(op, *this, [&](Geometry g) {
        if (g.shape.empty()) {  // a 0-d tensor unfolds into (size,) windows of itself
            g.shape = {static_cast<std::size_t>(size)};
            g.strides = {1};
            return g;
        }
        const std::int64_t s = g.strides[d];
        g.shape[d] = windows;
        g.strides[d] = s * step;
        g.shape.push_back(static_cast<std::size_t>(size));
        g.strides.push_back(s);
        return g;
    });
}

Tensor Tensor::contiguous() const {
    check_defined("contiguous", *this);
    return is_contiguous() ? *this : as_call("contiguous", [&] { return clone(); });
}

bool Tensor::is_contiguous() const {
    const Node& n = node();
    return !n.view || n.view->row_major;
}

std::vector<std::int64_t> Tensor::strides() const { return geometry_of(node()).strides; }

std::int64_t Tensor::stride(long axis) const { return strides()[normalize_axis("stride", axis, shape())]; }

std::int64_t Tensor::storage_offset() const {
    const Node& n = node();
    return n.view ? n.view->offset : 0;
}

bool Tensor::is_view() const { return defined() && node().view != nullptr; }

Tensor Tensor::_base() const {
    Node& n = node();
    return n.view ? Tensor(view_base(n)) : Tensor();
}

bool Tensor::is_alias_of(const Tensor& other) const {
    return defined() && other.defined() && node().storage == other.node().storage;
}

Tensor Tensor::detach() const {
    check_defined("detach", *this);
    const Node& n = node();
    // A leaf over the same storage, with no link to this tensor's graph (holding the base would
    // keep the graph alive): a tensor that is no view gets a base of its own over the storage.
    auto base = std::make_shared<Node>(n.storage);
    if (!n.view) return Tensor(std::move(base));
    auto view = std::make_shared<Node>(base, n.shape, n.view->strides, n.view->offset);
    view->op = "detach";
    return Tensor(std::move(view));
}

Tensor Tensor::select_index(long i) const {
    if (!defined()) throw Error("index: t[i] on an undefined tensor");
    if (dim() == 0) throw Error(fmt::format("index: t[{}] on a 0-d tensor (it has no axis to index)", i));
    const long n = static_cast<long>(shape()[0]);
    if (i < -n || i >= n)
        throw Error(fmt::format("index: index {} is out of range for dimension 0 with size {} (tensor of shape {})", i,
                                n, shape_str(shape())));
    return as_call("index", [&] { return xgrad::select(*this, 0, i); });
}

void mark_multi_output_view(const Tensor& t) {
    if (!t.defined() || !t.node().view) return;
    ViewOf& v = *t.node().view;
    v.multi_output = true;
    v.made_without_grad = false;
}

}  // namespace xgrad
