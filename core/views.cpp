// Views over shared storage: geometry, reading a view as an array, writing through one, the
// strided primitives their gradients and in-place ops are made of, and CopySlices.
#include "core/views.hpp"

#include <algorithm>
#include <unordered_set>

#include "core/creation.hpp"
#include "core/ops.hpp"
#include "core/ops_util.hpp"
#include "core/runtime/parallel.hpp"

namespace xgrad {

// In tensor.cpp, beside the histories they move: a node's creation order, an empty value, the
// moves of a history, and the cycle-breaking walk of record_in_place.
std::uint64_t next_node_seq();
Storage empty_storage(Dtype d);
void move_history(Node& to, Node& from);
std::shared_ptr<Node> split_history(Node& self, Storage old_value);
void rebase_history(Node& self, std::shared_ptr<Node> past, Node& made, const char* op);
void restart_view_history(Node& v, std::shared_ptr<Node> past, Node& made);
bool reroute_readers(Node& result, Node& self, std::uint64_t since, const Tensor& old);

// --- geometry -----------------------------------------------------------------------------

std::vector<std::int64_t> contiguous_strides(const Shape& shape) {
    std::vector<std::int64_t> s(shape.size());
    std::int64_t step = 1;
    for (std::size_t d = shape.size(); d-- > 0;) {
        s[d] = step;
        step *= static_cast<std::int64_t>(std::max<std::size_t>(shape[d], 1));
    }
    return s;
}

bool is_contiguous_layout(const Shape& shape, const std::vector<std::int64_t>& strides) {
    for (std::size_t s : shape)
        if (s == 0) return true;
    std::int64_t expected = 1;
    for (std::size_t d = shape.size(); d-- > 0;) {
        if (shape[d] == 1) continue;
        if (strides[d] != expected) return false;
        expected *= static_cast<std::int64_t>(shape[d]);
    }
    return true;
}

bool may_overlap(const Shape& shape, const std::vector<std::int64_t>& strides) {
    // Axes of more than one element, by increasing stride: disjoint when each stride passes the
    // whole extent the smaller ones span (a sufficient condition; torch's check is weaker).
    std::vector<std::pair<std::int64_t, std::size_t>> axes;
    for (std::size_t d = 0; d < shape.size(); ++d) {
        if (shape[d] == 0) return false;
        if (shape[d] > 1) axes.emplace_back(strides[d] < 0 ? -strides[d] : strides[d], shape[d]);
    }
    std::sort(axes.begin(), axes.end());
    std::int64_t span = 0;  // the largest offset the axes so far reach
    for (const auto& [stride, n] : axes) {
        if (stride <= span) return true;
        span += stride * static_cast<std::int64_t>(n - 1);
    }
    return false;
}

Geometry geometry_of(const Node& n) {
    if (n.view) return {n.shape, n.view->strides, n.view->offset};
    return {n.shape, contiguous_strides(n.shape), 0};
}

std::size_t storage_numel(const Node& n) {
    return std::visit([](const auto& a) { return a.size(); }, n.storage->data);
}

Node::Node(std::shared_ptr<StorageImpl> shared) : storage(std::move(shared)), seq(next_node_seq()) {
    std::visit([this](const auto& a) { shape.assign(a.shape().begin(), a.shape().end()); }, storage->data);
}

Node::Node(const std::shared_ptr<Node>& base, Shape view_shape, std::vector<std::int64_t> strides,
           std::int64_t offset)
    : storage(base->storage), view(std::make_unique<ViewOf>()), shape(std::move(view_shape)), seq(next_node_seq()) {
    view->base = base;
    view->strides = std::move(strides);
    view->offset = offset;
    view->row_major = is_contiguous_layout(shape, view->strides);
    view->base_history = base->history;
}

// --- strided copies -------------------------------------------------------------------------

namespace {

constexpr std::size_t kGrain = std::size_t(1) << 14;

// Calls row(r, pos) for each row r of g's shape (all axes but the last, row-major), pos the
// storage position of its first element, over the pool for large tensors unless `serial`; the
// run along the last axis is g.shape.back() elements apart by g.strides.back().
template <class F> void for_each_row(const Geometry& g, F&& row, bool serial = false) {
    const std::size_t rank = g.shape.size();
    std::size_t numel = 1;
    for (std::size_t s : g.shape) numel *= s;
    if (numel == 0) return;
    if (rank == 0) return row(std::size_t(0), g.offset);
    const std::size_t run = g.shape.back();
    const std::size_t rows = numel / run;
    auto rows_of = [&](std::size_t first, std::size_t end) {
        std::vector<std::size_t> idx(rank, 0);
        std::int64_t pos = g.offset;
        for (std::size_t d = rank - 1, r = first; d-- > 0;) {
            idx[d] = r % g.shape[d];
            r /= g.shape[d];
            pos += static_cast<std::int64_t>(idx[d]) * g.strides[d];
        }
        for (std::size_t r = first; r < end; ++r) {
            row(r, pos);
            for (std::size_t d = rank - 1; d-- > 0;) {
                pos += g.strides[d];
                if (++idx[d] < g.shape[d]) break;
                pos -= g.strides[d] * static_cast<std::int64_t>(g.shape[d]);
                idx[d] = 0;
            }
        }
    };
    if (serial || numel < 2 * kGrain) rows_of(0, rows);
    else parallel_for(rows, std::max<std::size_t>(1, kGrain / run), rows_of);
}

// out (contiguous, g's shape) = the elements at g's positions of `base`.
template <class T> void gather(const T* base, const Geometry& g, T* out) {
    using M = moved_t<T>;
    const M* src = reinterpret_cast<const M*>(base);
    M* dst = reinterpret_cast<M*>(out);
    const std::size_t run = g.shape.empty() ? 1 : g.shape.back();
    const std::int64_t step = g.shape.empty() ? 1 : g.strides.back();
    for_each_row(g, [&](std::size_t r, std::int64_t pos) {
        M* o = dst + r * run;
        const M* s = src + pos;
        if (step == 1) std::copy(s, s + run, o);
        else
            for (std::size_t j = 0; j < run; ++j) o[j] = s[static_cast<std::int64_t>(j) * step];
    });
}

// The elements of contiguous `src` (g's shape) written at (or, with `add`, added into) g's
// positions of `base`.
template <class T> void scatter(T* base, const Geometry& g, const T* src, bool add) {
    using M = moved_t<T>;
    M* dst = reinterpret_cast<M*>(base);
    const M* in = reinterpret_cast<const M*>(src);
    const std::size_t run = g.shape.empty() ? 1 : g.shape.back();
    const std::int64_t step = g.shape.empty() ? 1 : g.strides.back();
    auto row = [&](std::size_t r, std::int64_t pos) {
        const M* s = in + r * run;
        M* o = dst + pos;
        if constexpr (std::is_floating_point_v<T>) {
            if (add) {
                for (std::size_t j = 0; j < run; ++j) o[static_cast<std::int64_t>(j) * step] += s[j];
                return;
            }
        }
        if (step == 1) std::copy(s, s + run, o);
        else
            for (std::size_t j = 0; j < run; ++j) o[static_cast<std::int64_t>(j) * step] = s[j];
    };
    // Adding runs serially: two rows of an overlapping geometry may add into one position.
    for_each_row(g, row, add);
}

template <class T> xt::xarray<T>& base_array(const Node& n) {
    return std::get<xt::xarray<T>>(n.storage->data);
}

}  // namespace

// --- reading a view -----------------------------------------------------------------------

const Storage& Node::data() const {
    if (!view) return storage->data;
    ViewOf& v = *view;
    const std::lock_guard<std::mutex> lock(v.mutex);
    return dispatch_all(dtype(), [&](auto tag) -> const Storage& {
        using T = typename decltype(tag)::type;
        xt::xarray<T>& buffer = base_array<T>(*this);
        const void* at = buffer.data();
        // xtensor default-constructs the elements of a buffer whose type is not trivially
        // default-constructible (bfloat16 clears its bits): such a view is copied instead.
        if (v.row_major && std::is_trivially_default_constructible_v<T>) {
            if (v.snapshot && v.snapshot_at == at) return *v.snapshot;
            // An xarray over the base's buffer: its allocator hands out that memory and frees nothing.
            v.snapshot.reset();
            std::size_t count = 1;
            for (std::size_t s : shape) count *= s;
            using A = xt::xarray<T>;
            typename A::storage_type elements(count, cache_allocator<T>::aliasing(buffer.data() + v.offset));
            typename A::inner_shape_type sh(shape.begin(), shape.end());
            typename A::inner_strides_type st(shape.size());
            xt::compute_strides(sh, xt::layout_type::row_major, st);
            v.snapshot = std::make_unique<Storage>(std::in_place_type<A>, std::move(elements), std::move(sh), std::move(st));
            v.snapshot_at = at;
            return *v.snapshot;
        }
        if (v.snapshot && v.snapshot_at == at && v.snapshot_version == storage->version) return *v.snapshot;
        v.snapshot.reset();
        xt::xarray<T> copy = xt::xarray<T>::from_shape(shape);
        gather(buffer.data(), geometry_of(*this), copy.data());
        v.snapshot = std::make_unique<Storage>(std::move(copy));
        v.snapshot_at = at;
        v.snapshot_version = storage->version;
        return *v.snapshot;
    });
}

Storage& Node::own_data() {
    if (view)
        throw Error(fmt::format("array: this tensor (of shape {}) is a view of another's storage, so its values are "
                                "no array of their own to write; write through the view's in-place ops, or call "
                                "array on its clone() or contiguous() copy",
                                shape_str(shape)));
    return storage->data;
}

const std::uint8_t* bool_bytes(const Tensor& t) {
    return reinterpret_cast<const std::uint8_t*>(values<bool>(t).data());
}

// --- writing through a view -------------------------------------------------------------------

void check_view_write(const char* op, const Tensor& t) {
    const Node& n = t.node();
    if (!grad_enabled() || !n.view || !n.view->made_without_grad) return;
    if (!n.view->base->requires_grad) return;
    throw Error(fmt::format("{}: a view made while gradients were off (NoGradGuard) is being modified in place while "
                            "they are on, and its base requires grad (as torch refuses it); make the view with "
                            "gradients on, or write under NoGradGuard",
                            op));
}

void check_no_internal_overlap(const char* op, const Tensor& t) {
    const Node& n = t.node();
    if (n.view && !n.view->row_major && may_overlap(n.shape, n.view->strides))
        throw Error(fmt::format("{}: unsupported operation: more than one element of the written-to tensor (of shape "
                                "{}, strides ({})) refers to a single memory location; clone() the tensor before "
                                "writing into it",
                                op, shape_str(n.shape), fmt::join(n.view->strides, ", ")));
}

void write_into_storage(const char* op, const Tensor& t, const Tensor& values) {
    copy_into_storage(t.node(), values);
    t.node().bump_version(op);
}

void copy_into_storage(Node& n, const Tensor& source) {
    // Values that share the storage (x.t().set_data(x)) are read whole before any is written.
    const Tensor values = source.node().storage == n.storage && &n != &source.node()
                              ? make_leaf(source.node().data())
                              : source;
    if (&n != &values.node()) {
        dispatch_all(n.dtype(), [&](auto tag) {
            using T = typename decltype(tag)::type;
            const xt::xarray<T>& src = xgrad::values<T>(values);
            xt::xarray<T>& dst = base_array<T>(n);
            if (!n.view) {
                using M = moved_t<T>;
                std::copy(reinterpret_cast<const M*>(src.data()), reinterpret_cast<const M*>(src.data()) + src.size(),
                          reinterpret_cast<M*>(dst.data()));
            } else {
                scatter(dst.data(), geometry_of(n), src.data(), false);
            }
        });
    }
}

// --- the strided primitives -------------------------------------------------------------------

Formula gather_gradient(Geometry g) {
    return Formula([g = std::move(g)](const GradArgs& in) -> std::vector<Tensor> {
        return {as_strided_scatter_add(in.grad(), in.inputs[0].shape(), g)};
    });
}

namespace {
// as_strided_scatter's gradients: the base's is g with the written positions zeroed, the
// written values' is g gathered there.
Formula scatter_gradient(Geometry g) {
    return Formula([g = std::move(g)](const GradArgs& in) -> std::vector<Tensor> {
        const Tensor& grad = in.grad();
        return {in.needs(0) ? as_strided_scatter(grad, zeros(g.shape, grad.dtype()), g) : Tensor(),
                in.needs(1) ? as_strided_gather(grad, g) : Tensor()};
    });
}
}  // namespace

Tensor as_strided_gather(const Tensor& base, const Geometry& g) {
    return dispatch_all(base.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const AllocContext context("as_strided", g.shape);
        xt::xarray<T> out = xt::xarray<T>::from_shape(g.shape);
        gather(values<T>(base).data(), g, out.data());
        return make_any_result<T>(std::move(out), {base}, "as_strided", gather_gradient(g), Saves::none());
    });
}

Tensor as_strided_scatter_add(const Tensor& src, const Shape& base_shape, const Geometry& g) {
    return dispatch_floating("as_strided_backward", src.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const AllocContext context("as_strided_backward", base_shape);
        xt::xarray<T> out = xt::zeros<T>(base_shape);
        scatter(out.data(), g, values<T>(src).data(), true);
        return make_result<T>(std::move(out), {src}, "as_strided_backward", Formula([g](const GradArgs& in) -> std::vector<Tensor> {
            return {as_strided_gather(in.grad(), g)};
        }), Saves::none());
    });
}

Tensor as_strided_scatter(const Tensor& base, const Tensor& src, const Geometry& g) {
    return dispatch_all(base.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const AllocContext context("as_strided_scatter", base.shape());
        xt::xarray<T> out = values<T>(base);
        scatter(out.data(), g, values<T>(src).data(), false);
        return make_any_result<T>(std::move(out), {base, src}, "as_strided_scatter", scatter_gradient(g), Saves::none());
    });
}

// --- making views and keeping their graph edges current -----------------------------------------

Tensor make_view(const Tensor& src, Geometry g, const char* op, Formula formula) {
    Node& s = src.node();
    // Only cast and clone differentiate through bfloat16 (a view's gradient ops take float32).
    if (s.dtype() == kBFloat16) check_no_bfloat16_graph(op, {src});
    if (s.view) sync_view(s);
    const std::shared_ptr<Node> base = s.view ? view_base(s) : src.node_ptr();
    auto node = std::make_shared<Node>(base, std::move(g.shape), std::move(g.strides), g.offset);
    node->op = op;
    // A view of a view keeps how the first was made (torch's creation meta).
    node->view->made_without_grad = (!grad_enabled() && src.requires_grad()) || (s.view && s.view->made_without_grad);
    node->view->multi_output = s.view && s.view->multi_output;
    link_node(*node, {src}, std::move(formula), Saves::none());
    return Tensor(std::move(node));
}

Tensor alias_view(const Tensor& src, const char* op) {
    return make_view(src, geometry_of(src.node()), op, Formula([](const GradArgs& in) -> std::vector<Tensor> {
                         return {in.grad()};
                     }));
}

const std::shared_ptr<Node>& view_base(Node& v) {
    ViewOf& w = *v.view;
    // set_data gave the base a storage of another layout: this view keeps the old one, as in
    // torch, and from now on stands over it alone, with a base of its own (a leaf).
    if (w.base->storage != v.storage) {
        w.base = std::make_shared<Node>(v.storage);
        w.base_history = w.base->history;
        w.made_without_grad = w.multi_output = false;
    }
    return w.base;
}

std::recursive_mutex& history_mutex();  // tensor.cpp: held while a history is rebased

void sync_view(Node& v) {
    ViewOf& w = *v.view;
    if (w.base->history == w.base_history && w.base->storage == v.storage) return;  // the usual case, unlocked
    const std::lock_guard<std::recursive_mutex> lock(history_mutex());
    const std::shared_ptr<Node> base = view_base(v);
    if (base->history == w.base_history) return;
    if (!grad_enabled()) return;  // nothing is recorded now: the edge is made when it is
    if (w.multi_output && base->requires_grad)
        throw Error(fmt::format("a '{}' view of shape {} is used after its base (or another view of it) was modified "
                                "in place; it is one of several views one call returned (split, chunk), and as in "
                                "torch such views do not follow an in-place change of their base: take the pieces "
                                "after the change, or change a clone()",
                                v.op, shape_str(v.shape)));
    w.base_history = base->history;
    if (w.made_without_grad || !base->requires_grad) return;
    // The ops that read this view before keep its old history (its value then); from now on its
    // gradient goes to the base's current history, at its positions.
    auto past = split_history(v, empty_storage(v.dtype()));
    past->shape = v.shape;
    restart_view_from_base(v, std::move(past));
}

void restart_view_from_base(Node& v, std::shared_ptr<Node> past) {
    const std::shared_ptr<Node> base = view_base(v);
    Node made(empty_storage(v.dtype()));
    made.shape = v.shape;
    {
        const AutoGradMode on(true);
        link_node(made, {Tensor(base)}, gather_gradient(geometry_of(v)), Saves::none());
    }
    made.op = "as_strided";
    restart_view_history(v, std::move(past), made);
    v.view->base_history = base->history;
}

void rebase_base_onto(Node& v, const Tensor& written, const char* op) {
    const std::shared_ptr<Node> base_ptr = view_base(v);
    Node& base = *base_ptr;
    const std::uint64_t since = base.seq;
    auto past = split_history(base, empty_storage(base.dtype()));
    past->overwritten = true;  // its value is gone: the function wrote over it
    const Geometry g = geometry_of(v);
    Node made(empty_storage(base.dtype()));
    made.shape = base.shape;
    {
        const AutoGradMode on(true);
        link_node(made, {Tensor(past), written}, scatter_gradient(g), Saves::none());
    }
    // The function read the view, whose own link to the base would close a cycle.
    reroute_readers(made, base, since, Tensor(past));
    rebase_history(base, std::move(past), made, op);
}

// --- in-place ops on views, as torch's CopySlices -------------------------------------------------

const Tensor& record_in_place_on_view(
    const char* op, const Tensor& self, std::vector<Tensor> others,
    const std::function<Tensor(const Tensor& old, const std::vector<Tensor>& others)>& compute) {
    Node& v = self.node();
    const std::shared_ptr<Node> base_ptr = view_base(v);
    Node& base = *base_ptr;
    if (base.is_leaf && base.requires_grad)
        throw Error(fmt::format("{}: a view of a leaf Variable that requires grad is being used in an in-place "
                                "operation (this '{}' view of shape {} shares the storage of a leaf of shape {}; "
                                "refused while gradients are recorded, as in torch); do it under NoGradGuard, or "
                                "on a clone()",
                                op, v.op, shape_str(v.shape), shape_str(base.shape)));
    if (v.view->made_without_grad && base.requires_grad)
        throw Error(fmt::format("{}: a view made while gradients were off (NoGradGuard) is being modified in place "
                                "while they are on, and its base requires grad (as torch refuses it); make the view "
                                "with gradients on, or write under NoGradGuard",
                                op));
    if (v.view->multi_output && (base.requires_grad || v.requires_grad))
        throw Error(fmt::format("{}: this view of shape {} is one of several views one call returned (split, chunk, "
                                "unbind of a tensor that requires grad), and as in torch such views cannot be "
                                "modified in place while gradients are recorded; replace the in-place op by an "
                                "out-of-place one, or write into a clone()",
                                op, shape_str(v.shape)));
    check_no_internal_overlap(op, self);
    sync_view(v);
    const Geometry g = geometry_of(v);
    const std::uint64_t since = base.seq;
    // The base's old value and history move to a node of their own: the op reads the view's old
    // value from it, and its new value is that one with the op's result written at the view.
    auto past = split_history(base, base.storage->data);
    const Tensor old_base(past);
    Tensor old_view, result, new_base;
    try {
        old_view = as_strided_gather(old_base, g);
        for (Tensor& t : others)
            if (t.is_same(self)) t = old_view;
        result = compute(old_view, others);
        if (!result.defined() || result.shape() != v.shape || result.dtype() != v.dtype())
            throw Error(fmt::format("{}: the in-place result must keep the tensor's {} {}", op, dtype_name(v.dtype()),
                                    shape_str(v.shape)));
        new_base = as_strided_scatter(old_base, result, g);
    } catch (...) {
        move_history(base, *past);  // nothing was written: the base takes its history back
        throw;
    }
    const bool read = reroute_readers(new_base.node(), base, since, old_base);
    if (!read && past->storage.use_count() == 1) past->storage->data = empty_storage(past->dtype());
    past->overwritten = true;
    copy_into_storage(base, new_base);
    rebase_history(base, std::move(past), new_base.node(), op);
    sync_view(v);
    return self;
}

}  // namespace xgrad
