// The Tensor handle, graph nodes, and the reverse-mode engine.
#include "core/tensor.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <ostream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "core/autograd.hpp"
#include "core/call_context.hpp"
#include "core/creation.hpp"
#include "core/node.hpp"
#include "core/ops.hpp"
#include "core/ops_util.hpp"
#include "core/runtime/alloc.hpp"
#include "core/runtime/parallel.hpp"
#include "core/views.hpp"

// The one of the two symbols tensor.hpp refers to that matches how this library is built.
#ifdef _GLIBCXX_DEBUG
extern "C" const int xgrad_this_program_has_GLIBCXX_DEBUG_and_xgrad_must_too = 1;
#else
extern "C" const int xgrad_this_program_lacks_GLIBCXX_DEBUG_and_xgrad_must_too = 0;
#endif

namespace xgrad {

namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_detect_anomaly = false;

// Flat index of the first NaN or Inf, or npos. Only called with anomaly detection on.
template <class T> std::size_t first_non_finite(const xt::xarray<T>& a) {
    const T* p = a.data();
    for (std::size_t i = 0, n = a.size(); i < n; ++i)
        if (!std::isfinite(static_cast<double>(p[i]))) return i;
    return static_cast<std::size_t>(-1);
}

template <class T> std::string anomaly_value(const xt::xarray<T>& a, std::size_t i) {
    const double v = static_cast<double>(a.data()[i]);
    return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}
// dst += g elementwise for bfloat16: each sum is formed in float32 and rounded to nearest even,
// as torch adds bfloat16 tensors. Two bfloat16 values sum exactly in float32 unless their
// exponents are over 16 apart, and then the smaller is far below half an ulp of the larger, so
// the result is the exact sum correctly rounded.
void add_rounded(xt::xarray<bfloat16>& dst, const xt::xarray<bfloat16>& g) {
    bfloat16* d = dst.data();
    const bfloat16* s = g.data();
    for (std::size_t i = 0, n = dst.size(); i < n; ++i) d[i] = bfloat16(static_cast<float>(d[i]) + static_cast<float>(s[i]));
}
}  // namespace

void check_no_bfloat16_graph(const char* op, const std::vector<Tensor>& inputs) {
    if (!grad_enabled()) return;
    for (const Tensor& t : inputs)
        if (t.defined() && t.requires_grad())
            throw Error(fmt::format("{}: a bfloat16 tensor that requires grad cannot go through {} (xgrad "
                                    "differentiates bfloat16 only through .to() and clone()); convert it with "
                                    ".to(kFloat32) first, or run {} under NoGradGuard",
                                    op, op, op));
}

// --- Node ---------------------------------------------------------------------------------

namespace {
std::atomic<std::uint64_t> g_next_seq{1};

}  // namespace

// A stand-in for values an in-place op no longer needs: empty, of the same dtype.
Storage empty_storage(Dtype d) {
    return dispatch_all(d, [](auto tag) {
        using T = typename decltype(tag)::type;
        return Storage(xt::xarray<T>::from_shape({0}));
    });
}

Node::Node(Storage values)
    : storage(std::make_shared<StorageImpl>(std::move(values))), seq(g_next_seq.fetch_add(1, std::memory_order_relaxed)) {
    std::visit([this](const auto& a) { shape.assign(a.shape().begin(), a.shape().end()); }, storage->data);
}

std::uint64_t next_node_seq() { return g_next_seq.fetch_add(1, std::memory_order_relaxed); }

Node::~Node() {
    // Unlink parents (and the gradient and past histories, which may hold graphs too) into a
    // local worklist; a node whose last owner is this worklist gives up its own before it dies,
    // so destruction never recurses down a chain.
    std::vector<Tensor> pending = std::move(parents);
    auto take = [&pending](Node& n) {
        if (n.grad.defined()) pending.push_back(std::move(n.grad));
        for (auto& p : n.past) pending.emplace_back(std::move(p));
        n.past.clear();
    };
    take(*this);
    while (!pending.empty()) {
        Tensor t = std::move(pending.back());
        pending.pop_back();
        if (t.defined() && t.node_ptr().use_count() == 1) {
            Node& n = t.node();
            std::move(n.parents.begin(), n.parents.end(), std::back_inserter(pending));
            n.parents.clear();
            take(n);
            n.formula = nullptr;  // captured tensors may also hold parents
        }
    }
}

Tensor make_leaf(Storage value, bool requires_grad) {
    auto node = std::make_shared<Node>(std::move(value));
    Tensor t(std::move(node));
    if (requires_grad) t.requires_grad_(true);
    return t;
}

namespace {

template <class T> void check_forward_anomaly(const char* op, const xt::xarray<T>& value) {
    if (!t_detect_anomaly) return;
    const std::size_t i = first_non_finite(value);
    if (i != static_cast<std::size_t>(-1))
        throw Error(fmt::format("{}: produced {} in its forward result of shape {} (first at flat "
                                "index {}; anomaly detection is on)",
                                op, anomaly_value(value, i), shape_str(shape_of(value)), i));
}

// Records node as made from inputs when gradients are on and an input requires one; `set`
// installs the backward.
template <class Set> void link(Node& node, std::vector<Tensor>&& inputs, Saves saves, Set&& set) {
    for (const Tensor& t : inputs) sync_view(t);
    const bool track = grad_enabled() && std::any_of(inputs.begin(), inputs.end(), [](const Tensor& t) {
                           return t.defined() && t.requires_grad();
                       });
    if (!track) return;
    node.requires_grad = true;
    node.is_leaf = false;
    node.saves = saves;
    node.saved_versions.reserve(inputs.size() + 1);
    node.parent_history.reserve(inputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        const Node* in = inputs[i].defined() ? &inputs[i].node() : nullptr;
        node.saved_versions.push_back(!in ? 0 : saves.reads_input(i) ? in->version() : in->layout_version);
        node.parent_history.push_back(in ? in->history : 0);
    }
    node.saved_versions.push_back(node.version());
    node.parents = std::move(inputs);
    set(node);
}

}  // namespace

void link_node(Node& node, std::vector<Tensor> inputs, Formula formula, Saves saves) {
    link(node, std::move(inputs), saves, [&](Node& n) { n.formula = std::move(formula); });
}

template <class T>
Tensor make_result(xt::xarray<T>&& value, std::vector<Tensor> inputs, const char* op,
                   Formula formula, Saves saves) {
    check_forward_anomaly(op, value);
    auto node = std::make_shared<Node>(Storage(std::move(value)));
    node->op = op;
    link(*node, std::move(inputs), saves, [&](Node& n) { n.formula = std::move(formula); });
    return Tensor(std::move(node));
}

#define XGRAD_INSTANTIATE(T) \
    template Tensor make_result<T>(xt::xarray<T>&&, std::vector<Tensor>, const char*, Formula, Saves);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
XGRAD_INSTANTIATE(bfloat16)
#undef XGRAD_INSTANTIATE

void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
    if (a.dtype() != b.dtype())
        throw Error(fmt::format("{}: dtypes differ: {} and {} (convert one with .to())", op,
                                dtype_name(a.dtype()), dtype_name(b.dtype())));
}

template <class T> xt::xarray<T>& array(const Tensor& t) {
    Node& n = t.node();
    if (n.dtype() != dtype_of<T>())
        throw Error(fmt::format("array: tensor holds {}, asked for {}", dtype_name(n.dtype()),
                                dtype_name(dtype_of<T>())));
    return std::get<xt::xarray<T>>(n.own_data());
}

template <class T> Tensor from_array(xt::xarray<T> values, bool requires_grad) {
    return make_leaf(Storage(std::move(values)), requires_grad);
}

#define XGRAD_INSTANTIATE(T)                              \
    template xt::xarray<T>& array<T>(const Tensor&);      \
    template Tensor from_array<T>(xt::xarray<T>, bool);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
XGRAD_INSTANTIATE(std::int64_t)
XGRAD_INSTANTIATE(bool)
XGRAD_INSTANTIATE(bfloat16)
#undef XGRAD_INSTANTIATE

// --- grad mode ----------------------------------------------------------------------------

bool grad_enabled() { return t_grad_enabled; }
NoGradGuard::NoGradGuard() : m_previous(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = m_previous; }
AutoGradMode::AutoGradMode(bool enabled) : m_previous(t_grad_enabled) { t_grad_enabled = enabled; }
AutoGradMode::~AutoGradMode() { t_grad_enabled = m_previous; }

void set_detect_anomaly(bool on) { t_detect_anomaly = on; }
bool detect_anomaly_enabled() { return t_detect_anomaly; }
DetectAnomalyGuard::DetectAnomalyGuard(bool on) : m_previous(t_detect_anomaly) { t_detect_anomaly = on; }
DetectAnomalyGuard::~DetectAnomalyGuard() { t_detect_anomaly = m_previous; }

// --- Tensor -------------------------------------------------------------------------------

Tensor::Tensor(std::shared_ptr<Node> node) : m_node(std::move(node)) {}

Node& Tensor::node() const {
    if (!m_node) throw Error("Tensor: this tensor is undefined (default-constructed); give it a value first");
    return *m_node;
}

const Shape& Tensor::shape() const { return node().shape; }

// A shape's product fits int64: every op that makes a tensor checks its element count
// (checked_numel) before allocating.
std::int64_t Tensor::numel() const {
    std::size_t n = 1;
    for (auto s : shape()) n *= s;
    return static_cast<std::int64_t>(n);
}

std::int64_t Tensor::size(long axis) const {
    return static_cast<std::int64_t>(shape()[normalize_axis("size", axis, shape())]);
}

Dtype Tensor::dtype() const { return node().dtype(); }

bool Tensor::requires_grad() const {
    if (!m_node) return false;
    // A view whose base an in-place op has since brought into the graph requires grad too (its
    // edge is made when it is next used: sync_view).
    if (const ViewOf* v = m_node->view.get())
        if (v->base->history != v->base_history && !v->made_without_grad && v->base->requires_grad) return true;
    return m_node->requires_grad;
}

Tensor& Tensor::requires_grad_(bool on) {
    Node& n = node();
    if (!n.is_leaf)
        throw Error(fmt::format("requires_grad_: only leaf tensors can change requires_grad; this one "
                                "was made by '{}' (use detach() to get a leaf)", n.op));
    if (on && !is_floating(n.dtype()))
        throw Error(fmt::format("requires_grad_: only floating-point tensors can require gradients, "
                                "got {}", dtype_name(n.dtype())));
    n.requires_grad = on;
    return *this;
}

bool Tensor::is_leaf() const {
    sync_view(*this);
    return node().is_leaf;
}

void Tensor::retain_grad() {
    sync_view(*this);
    Node& n = node();
    if (!n.requires_grad)
        throw Error("retain_grad: the tensor does not require grad, so it will never have one");
    n.retains_grad = true;
}

// The gradient handle is read and replaced under the node's lock, as backward replaces it
// (accumulate_grad): another thread's backward may be accumulating into this leaf.
Tensor Tensor::grad() const {
    const Node& n = node();
    const std::lock_guard<std::mutex> lock(n.grad_mutex);
    return n.grad;
}

Tensor& Tensor::mutable_grad() const { return node().grad; }

void Tensor::set_grad(const Tensor& g) {
    Node& n = node();
    Tensor old;  // released outside the lock (it may hold a graph)
    if (!g.defined()) {
        const std::lock_guard<std::mutex> lock(n.grad_mutex);
        old = std::exchange(n.grad, Tensor());
        return;
    }
    if (g.shape() != n.shape || g.dtype() != n.dtype())
        throw Error(fmt::format("set_grad: gradient must match the tensor: expected {} {}, got {} {}",
                                dtype_name(n.dtype()), shape_str(n.shape), dtype_name(g.dtype()),
                                shape_str(g.shape())));
    const std::lock_guard<std::mutex> lock(n.grad_mutex);
    old = std::exchange(n.grad, g);
}

void Tensor::zero_grad() {
    Node& n = node();
    Tensor old;  // released outside the lock
    const std::lock_guard<std::mutex> lock(n.grad_mutex);
    old = std::exchange(n.grad, Tensor());
}

std::uint64_t Tensor::add_hook(std::function<Tensor(const Tensor&)> hook) {
    sync_view(*this);
    Node& n = node();
    if (!n.requires_grad)
        throw Error("register_hook: the tensor does not require grad, so no gradient will reach the hook "
                    "(call requires_grad_() on a leaf first)");
    if (!hook) throw Error("register_hook: the hook is empty");
    static std::atomic<std::uint64_t> next_id{1};
    const std::uint64_t id = next_id++;
    n.grad_hooks.emplace_back(id, std::move(hook));
    return id;
}

void Tensor::remove_hook(std::uint64_t id) {
    auto& hooks = node().grad_hooks;
    hooks.erase(std::remove_if(hooks.begin(), hooks.end(), [id](const auto& h) { return h.first == id; }),
                hooks.end());
}

std::uint64_t Tensor::register_post_accumulate_grad_hook(std::function<void(Tensor&)> hook) {
    Node& n = node();
    if (!n.is_leaf || !n.requires_grad)
        throw Error(fmt::format("register_post_accumulate_grad_hook: expected a leaf that requires grad, got {}",
                                n.is_leaf ? "a leaf that does not" : fmt::format("a '{}' result", n.op)));
    if (!hook) throw Error("register_post_accumulate_grad_hook: the hook is empty");
    static std::atomic<std::uint64_t> next_id{1};
    const std::uint64_t id = next_id++;
    n.post_grad_hooks.emplace_back(id, std::move(hook));
    return id;
}

void Tensor::remove_post_accumulate_grad_hook(std::uint64_t id) {
    auto& hooks = node().post_grad_hooks;
    hooks.erase(std::remove_if(hooks.begin(), hooks.end(), [id](const auto& h) { return h.first == id; }),
                hooks.end());
}

void check_dims(const char* who, const char* arg, const Tensor& t, std::size_t dims, const char* layout) {
    if (!t.defined()) throw Error(fmt::format("{}: {} is an undefined tensor", who, arg));
    if (t.shape().size() != dims)
        throw Error(fmt::format("{}: {} must be {}-D {}, got shape {}", who, arg, dims, layout, shape_str(t.shape())));
}

bool Tensor::has_grad() const {
    const Node& n = node();
    const std::lock_guard<std::mutex> lock(n.grad_mutex);
    return n.grad.defined();
}

std::string Tensor::op_name() const {
    sync_view(*this);
    return node().op;
}

Tensor Tensor::to(Dtype d) const {
    check_defined("to", *this, "the tensor");
    return as_call("to", [&] { return cast(*this, d); });  // a refused conversion names to, the call made
}

namespace {

// The element at p as its type holds it: a bool's byte, any but 0 true (core/bool_bytes.hpp).
template <class E> E stored_value(const E* p) { return *p; }
bool stored_value(const bool* p) { return *reinterpret_cast<const std::uint8_t*>(p) != 0; }

}  // namespace

template <class T> T Tensor::item_as() const {
    check_defined("item", *this, "the tensor");
    if (numel() != 1)
        throw Error(fmt::format("item: only a one-element tensor has an item, got shape {}",
                                shape_str(shape())));
    return std::visit(
        [](const auto& a) {
            check_convertible<T>("item", a.data(), 1);
            return static_cast<T>(stored_value(a.data()));
        },
        node().data());
}

template <class T> std::vector<T> Tensor::to_vector_as() const {
    check_defined("to_vector", *this, "the tensor");
    return std::visit(
        [](const auto& a) {
            check_convertible<T>("to_vector", a.data(), a.size());
            std::vector<T> out;  // explicit conversions: bfloat16 converts only so
            out.reserve(a.size());
            for (std::size_t i = 0; i < a.size(); ++i) out.push_back(static_cast<T>(stored_value(a.data() + i)));
            return out;
        },
        node().data());
}

namespace {

// Where a typed storage accessor points: element (0, ..., 0) of the tensor in its storage (the
// base's buffer for a view, at the view's offset), T the tensor's own element type: an error
// names the accessor the user called, not the helper.
template <class T> T* storage_at(const Tensor& t, const char* accessor) {
    if (!t.defined()) throw Error(fmt::format("{}: the tensor is undefined (default-constructed)", accessor));
    if (t.dtype() != dtype_of<T>())
        throw Error(fmt::format("{}: the tensor holds {}, asked for {} (T must be the tensor's own element type)",
                                accessor, dtype_name(t.dtype()), dtype_name(dtype_of<T>())));
    const Node& n = t.node();
    T* p = std::get<xt::xarray<T>>(n.storage->data).data();
    return n.view ? p + n.view->offset : p;
}

}  // namespace

template <class T> T* Tensor::data_ptr_as() {
    T* p = storage_at<T>(*this, "data_ptr");
    node().bump_version("data_ptr()");
    return p;
}
template <class T> const T* Tensor::const_data_ptr_as() const { return storage_at<T>(*this, "const_data_ptr"); }

namespace {

// The gradient's array, of the tensor's own type T, or null when there is none. `write` counts
// as an in-place write to the gradient (its version), as data_ptr does for values.
// The pointer is into the gradient's values, which a later backward on another thread may add
// into: reading them while one runs is the caller's to avoid (README, threads).
template <class T> T* grad_array(Node& n, const char* op, bool write) {
    if (n.dtype() != dtype_of<T>())
        throw Error(fmt::format("{}: tensor holds {}, asked for {}", op, dtype_name(n.dtype()),
                                dtype_name(dtype_of<T>())));
    const std::lock_guard<std::mutex> lock(n.grad_mutex);
    if (!n.grad.defined()) return nullptr;
    Node& g = n.grad.node();
    // A gradient set to a view (set_grad) is read where its elements are: in order only if
    // they are row-major.
    if (g.view && !g.view->row_major)
        throw Error(fmt::format("{}: the gradient is a non-contiguous view (strides ({})), whose elements are not "
                                "in row-major order; set_grad(g.contiguous()) first",
                                op, fmt::join(g.view->strides, ", ")));
    if (write) g.bump_version(op);
    T* p = std::get<xt::xarray<T>>(g.storage->data).data();
    return g.view ? p + g.view->offset : p;
}

}  // namespace

template <class T> T* Tensor::grad_ptr_as() { return grad_array<T>(node(), "grad_ptr", true); }

template <class T> const T* Tensor::grad_ptr_as() const { return grad_array<T>(node(), "grad_ptr", false); }

template <class T> T* Tensor::mutable_grad_ptr_as() {
    Node& n = node();
    if (!grad_array<T>(n, "mutable_grad_ptr", false)) {
        Tensor zeros = make_leaf(Storage(xt::xarray<T>(xt::zeros<T>(n.shape))));
        const std::lock_guard<std::mutex> lock(n.grad_mutex);
        if (!n.grad.defined()) n.grad = std::move(zeros);
    }
    return grad_array<T>(n, "mutable_grad_ptr", true);
}

void Tensor::set_data(const Tensor& values) const {
    Node& n = node();
    if (!values.defined()) throw Error("set_data: values is an undefined tensor");
    if (&n == &values.node()) return;
    if (n.view) {
        // Into a view: the values land in its base, which keeps its shape.
        if (values.shape() != n.shape || values.dtype() != n.dtype())
            throw Error(fmt::format("set_data: this tensor is a view ({} {}) of another's storage, so new values must "
                                    "keep its shape and dtype, got {} {}; set_data on the base, or on a clone()",
                                    dtype_name(n.dtype()), shape_str(n.shape), dtype_name(values.dtype()),
                                    shape_str(values.shape())));
        check_no_internal_overlap("set_data", *this);
        write_into_storage("set_data()", *this, values);
        return;
    }
    if (values.shape() != n.shape || values.dtype() != n.dtype()) {
        const std::lock_guard<std::mutex> lock(n.grad_mutex);
        n.grad = Tensor();
    }
    if (values.shape() == n.shape && values.dtype() == n.dtype()) {
        // The same layout: the values are copied into the buffer, which pointers from data_ptr()
        // and this tensor's views keep reading.
        write_into_storage("set_data()", *this, values);
        return;
    }
    ++n.layout_version;
    // Another layout: a storage of its own, as torch's set_data; views of the old one keep it.
    const std::uint64_t version = n.version();
    n.storage = std::make_shared<StorageImpl>(values.node().data());
    n.storage->version = version;
    n.shape = values.shape();
    n.bump_version("set_data()");
}

std::uint64_t Tensor::version() const { return node().version(); }

template <class T> T* Tensor::mutable_data_ptr_as() const {
    T* p = storage_at<T>(*this, "mutable_data_ptr");
    node().bump_version("mutable_data_ptr()");
    return p;
}

#define XGRAD_INSTANTIATE(T)                                 \
    template T* Tensor::grad_ptr_as<T>();                    \
    template const T* Tensor::grad_ptr_as<T>() const;        \
    template T* Tensor::mutable_grad_ptr_as<T>();            \
    template T* Tensor::mutable_data_ptr_as<T>() const;      \
    template T Tensor::item_as<T>() const;                   \
    template std::vector<T> Tensor::to_vector_as<T>() const; \
    template T* Tensor::data_ptr_as<T>();                    \
    template const T* Tensor::const_data_ptr_as<T>() const;
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
XGRAD_INSTANTIATE(std::int64_t)
XGRAD_INSTANTIATE(bool)
XGRAD_INSTANTIATE(bfloat16)
#undef XGRAD_INSTANTIATE

// --- the engine -----------------------------------------------------------------------------

namespace {

// The node that input i of `n` stands for: the input's current history, or the past one it had
// when the op read it (an in-place op on it since started a new one).
const std::shared_ptr<Node>& input_node(const Node& n, std::size_t i) {
    const std::shared_ptr<Node>& p = n.parents[i].node_ptr();
    if (!p || i >= n.parent_history.size()) return p;
    const std::uint32_t h = n.parent_history[i];
    return h == p->history ? p : p->past[h];
}

std::uint32_t input_slot(const Node& n, std::size_t i) { return i < n.parent_slot.size() ? n.parent_slot[i] : 0; }

// Refuses an op whose backward would read values written in place since its forward pass (a
// saved input, or its own output), or whose input set_data gave a new shape or dtype (every
// backward builds its gradients to its inputs' layouts). New values in a tensor an op did not
// save (add's inputs) are fine: its backward does not read them.
void check_versions(const std::shared_ptr<Node>& n) {
    if (n->is_leaf || n->saved_versions.empty()) return;
    const std::size_t k = n->parents.size();
    for (std::size_t i = 0; i <= k; ++i) {
        if (i < k && !n->parents[i].defined()) continue;
        const Node& input = i < k ? n->parents[i].node() : *n;
        // Formatted only for a refusal: with hooks this runs before every op's backward.
        auto what = [&] {
            return i < k ? fmt::format("its input {} ({} of shape {})", i,
                                       *input.op ? fmt::format("a '{}' result", input.op) : std::string("a leaf"),
                                       shape_str(input.shape))
                         : fmt::format("its output (of shape {})", shape_str(input.shape));
        };
        const bool saved = i < k ? n->saves.reads_input(i) : n->saves.output;
        if (!saved) {
            if (i == k || input.layout_version == n->saved_versions[i]) continue;
            throw Error(fmt::format("backward: {} was given another shape or dtype by set_data() after the "
                                    "forward pass of '{}'; run the forward pass again after changing it",
                                    what(), n->op));
        }
        // A past history's output is the value an in-place op has since overwritten.
        if (i == k && n->overwritten)
            throw Error(fmt::format("backward: {} was modified in place after it was saved for backward by '{}' "
                                    "(an in-place op recorded in the graph wrote it); clone it first, or call "
                                    "backward before changing it",
                                    what(), n->op));
        if (input.version() == n->saved_versions[i]) continue;
        const char* last_write = input.storage->last_write;
        const std::string how = *last_write ? fmt::format(", last through {}", last_write) : "";
        const char* hint = std::string_view(last_write) == "data_ptr()"
                               ? "; data_ptr() hands out write access and counts as a write, read with const_data_ptr()"
                               : "";
        throw Error(fmt::format("backward: {} was modified in place after it was saved for backward by '{}' "
                                "(version {} -> {}{}); clone it first, or call backward before changing it{}",
                                what(), n->op, n->saved_versions[i], input.version(), how, hint));
    }
}

// Why a second backward through `n` is refused: its graph was freed by a backward that finished,
// or by one that threw part way (out of memory, anomaly detection), after which only a new
// forward pass helps, though the caller may well think a retry would.
std::string freed_how(const Node& n) {
    return n.freed_by_failure
               ? "freed by an earlier backward() that failed part way through; run the forward pass again "
                 "(retain_graph = true keeps a graph through a failed backward)"
               : "already freed by an earlier backward(); pass retain_graph = true to the first call to go "
                 "through it twice";
}

// After a sweep that throws (anomaly detection, running out of memory, a bad op): the nodes
// already freed remember how (the gradients half delivered die with the sweep's Flows).
void abandon(const std::vector<std::shared_ptr<Node>>& order) {
    for (const auto& n : order)
        // Before this sweep none of them was freed (it refuses to start otherwise).
        if (n->graph_freed) n->freed_by_failure = true;
}

// The non-leaf nodes a sweep goes through, claimed (Node::sweeps) before it reads their
// parents and released when it ends, however it ends. Sweeps that keep the graph only read it
// and may share nodes; one that frees the graph must be alone on every node it frees. Two
// threads whose graphs meet only at leaves (one model trained from two threads) never meet
// here: leaves are not claimed, their .grad has a lock of its own. Declared after the nodes'
// owners, so that it releases before they go.
class Claims {
public:
    explicit Claims(bool keep_graph) : m_shared(keep_graph) {}
    Claims(const Claims&) = delete;
    Claims& operator=(const Claims&) = delete;
    ~Claims() {
        for (Node* n : m_nodes) {
            if (m_shared)
                n->sweeps.fetch_sub(1, std::memory_order_release);
            else
                n->sweeps.store(0, std::memory_order_release);
        }
    }
    void claim(Node& n) {
        int seen = n.sweeps.load(std::memory_order_relaxed);
        for (;;) {
            if (m_shared ? seen < 0 : seen != 0)
                throw Error(fmt::format(
                    "backward: part of this graph (a '{}' result) is in another backward() running at the same "
                    "time (on another thread, or started from a hook); backward passes may share a graph at "
                    "once only when every one of them passes retain_graph = true",
                    n.op));
            if (n.sweeps.compare_exchange_weak(seen, m_shared ? seen + 1 : -1, std::memory_order_acquire,
                                               std::memory_order_relaxed))
                break;
        }
        m_nodes.push_back(&n);
    }

private:
    bool m_shared;
    std::vector<Node*> m_nodes;
};

// The nodes of one sweep in topological order, and where each one is in it.
struct Graph {
    std::vector<std::shared_ptr<Node>> order;
    std::unordered_map<const Node*, std::size_t> position;
};

// Nodes reachable from `roots` through nodes that require grad, parents before children, each
// non-leaf claimed before its parents are read. Iterative DFS (explicit stack), so depth is
// bounded by memory, not by the call stack.
void topological_order(const std::vector<std::shared_ptr<Node>>& roots, Graph& graph, Claims& claims) {
    auto& [order, position] = graph;
    constexpr std::size_t kOnStack = static_cast<std::size_t>(-1);
    std::vector<std::pair<std::shared_ptr<Node>, std::size_t>> stack;  // node, next parent
    auto visit = [&](const std::shared_ptr<Node>& n) {
        if (!position.emplace(n.get(), kOnStack).second) return;
        if (!n->is_leaf) claims.claim(*n);
        stack.emplace_back(n, 0);
    };
    for (const auto& root : roots) {
        visit(root);
        while (!stack.empty()) {
            auto& [node, next] = stack.back();
            if (next < node->parents.size()) {
                const auto& parent = input_node(*node, next++);
                if (parent && parent->requires_grad) visit(parent);
            } else {
                position[node.get()] = order.size();
                order.push_back(std::move(node));
                stack.pop_back();
            }
        }
    }
}

// The gradients arriving at each node of a sweep, one per output slot, by position in its
// order. They belong to the sweep, not to the nodes: two threads' sweeps may reach one leaf.
struct Flows {
    const Graph& graph;
    std::vector<std::vector<Tensor>> at;
    explicit Flows(const Graph& g) : graph(g), at(g.order.size()) {}
    // Null for a node outside the sweep: a leaf a hook made require grad after it started.
    std::vector<Tensor>* of(const Node& n) {
        const auto it = graph.position.find(&n);
        return it == graph.position.end() ? nullptr : &at[it->second];
    }
};

// dst += g in place, for two arrays of one dtype and shape. Element by element into dst's own
// buffer, never through a temporary (xtensor's += may build one and free the old buffer): a
// leaf's .grad keeps its storage while another thread's optimizer step reads it. Over the pool:
// a residual stream's gradients meet here, and one thread adding them while the others waited
// was about 1% of char_gpt's step.
void add_into(Storage& dst, const Storage& g) {
    std::visit(
        [&g](auto& d) {
            using A = std::decay_t<decltype(d)>;
            if constexpr (std::is_same_v<A, xt::xarray<bfloat16>>) {
                add_rounded(d, std::get<A>(g));
            } else {
                auto* out = d.data();
                const auto* in = std::get<A>(g).data();
                parallel_for(d.size(), std::size_t(1) << 16, [out, in](std::size_t i0, std::size_t i1) {
                    for (std::size_t i = i0; i < i1; ++i) {
                        if constexpr (std::is_same_v<A, xt::xarray<bool>>) out[i] = out[i] || in[i];
                        else out[i] += in[i];
                    }
                });
            }
        },
        dst);
}

// a + b as a new tensor: the add op when recording (create_graph), else a plain sum.
Tensor sum_of(const Tensor& a, const Tensor& b) {
    if (grad_enabled() && a.dtype() != kBFloat16) return add(a, b);
    Tensor out = make_leaf(a.node().data());
    add_into(out.node().own_data(), b.node().data());
    return out;
}

// Whether the engine holds the only handle on t and t alone holds its storage (no view, no
// detach() of it): then t may be written in place.
bool sole_owner(const Tensor& t) {
    return t.node_ptr().use_count() == 1 && !t.node().view && t.node().storage.use_count() == 1;
}

// ... and t carries no graph (so the engine may add into it in place).
bool exclusive(const Tensor& t) { return sole_owner(t) && !t.requires_grad(); }

// Adds g into the gradient flowing to slot `slot` of `n` during a sweep.
void add_flow(Flows& flows, const Node& n, std::uint32_t slot, Tensor g) {
    std::vector<Tensor>* in_sweep = flows.of(n);
    if (!in_sweep) return;
    std::vector<Tensor>& flow = *in_sweep;
    if (flow.size() <= slot) flow.resize(std::max<std::size_t>(slot + 1, n.num_outputs));
    Tensor& f = flow[slot];
    if (!f.defined())
        f = std::move(g);
    else if (!grad_enabled() && exclusive(f))
        add_into(f.node().own_data(), g.node().data());
    else
        f = sum_of(f, g);
}

// Adds g into n.grad as torch's AccumulateGrad does: the first gradient is taken as it is when
// nothing else holds it (else a copy, so that .grad() never aliases another tensor); later ones
// add in place, or, with create_graph (or a gradient that has a graph), as a new sum. Under
// the node's lock: another thread's backward may be adding into the same leaf.
void accumulate_grad(Node& n, Tensor g) {
    const std::lock_guard<std::mutex> lock(n.grad_mutex);
    if (!n.grad.defined()) {
        // Kept only if it owns its storage alone: a view (or a tensor sharing storage with
        // one) would be written through by the next accumulation.
        if (sole_owner(g) && (grad_enabled() || !g.requires_grad()))
            n.grad = std::move(g);
        else
            n.grad = grad_enabled() ? g.clone() : make_leaf(g.node().data());
        return;
    }
    if (!grad_enabled() && !n.grad.requires_grad() && !n.grad.node().view) {
        Node& d = n.grad.node();
        add_into(d.own_data(), g.node().data());
        d.bump_version("backward()");
    } else if (!grad_enabled() && !n.grad.requires_grad()) {
        n.grad.add_(g);  // a gradient set to a view (of one flat buffer, say): added through it
    } else {
        n.grad = sum_of(n.grad, g);
    }
}

// Checks what a backward hands to input `input` of `n`: its shape and dtype, and (anomaly
// detection) its values.
void check_gradient(const Node& n, const Node& input, const Tensor& g) {
    if (g.shape() != input.shape)
        throw Error(fmt::format("{} backward: gradient of shape {} does not match its input of shape {}", n.op,
                                shape_str(g.shape()), shape_str(input.shape)));
    if (g.dtype() != input.dtype())
        throw Error(fmt::format("{} backward: an input of '{}' changed dtype from {} to {} after the forward pass "
                                "(e.g. module.to() between forward and backward), or its gradient formula gave "
                                "the wrong dtype; run the forward pass again after converting",
                                n.op, n.op, dtype_name(g.dtype()), dtype_name(input.dtype())));
    if (t_detect_anomaly)
        std::visit(
            [&](const auto& a) {
                using A = std::decay_t<decltype(a)>;
                if constexpr (is_floating_v<typename A::value_type>) {
                    const std::size_t i = first_non_finite(a);
                    if (i != static_cast<std::size_t>(-1))
                        throw Error(fmt::format("{} backward: produced {} in the gradient for an input of shape {} "
                                                "(first at flat index {}; anomaly detection is on)",
                                                n.op, anomaly_value(a, i), shape_str(input.shape), i));
                }
            },
            g.node().data());
}

// Runs the hooks of the tensor behind `n` on its gradient g (see register_hook).
Tensor run_hooks(Node& n, Tensor g) {
    auto hooks = n.grad_hooks;  // a hook may remove itself
    for (auto& h : hooks) {
        Tensor r = h.second(g);
        if (!r.defined()) continue;
        if (r.shape() != g.shape() || r.dtype() != g.dtype())
            throw Error(fmt::format("register_hook: a hook returned a gradient of {} {} for a tensor whose gradient "
                                    "is {} {}",
                                    dtype_name(r.dtype()), shape_str(r.shape()), dtype_name(g.dtype()),
                                    shape_str(g.shape())));
        g = std::move(r);
    }
    return g;
}

using GradModeGuard = AutoGradMode;

struct Sweep {
    bool keep_graph = false;
    bool create_graph = false;
    // autograd::grad: the nodes whose gradients are wanted (returned, not accumulated), else
    // empty (backward: gradients go into .grad()).
    std::vector<const Node*> wanted;
    std::vector<Tensor>* captured = nullptr;
};

// Runs one node's backward and hands each input its gradient.
void run_node(const std::shared_ptr<Node>& sp, std::vector<Tensor>& grads, const Sweep& sweep, Flows& flows,
              const std::unordered_set<const Node*>* needed) {
    Node& n = *sp;
    std::vector<Tensor> results;
    const AllocContext context(n.op, n.shape, AllocContext::Phase::backward);
    const Tensor output(sp);
    {
        // Anomaly detection judges what the formula hands on (check_gradient, naming this op),
        // not each op it is made of.
        const DetectAnomalyGuard quiet(false);
        results = n.formula(GradArgs{grads, n.parents, output, n});
    }
    if (results.size() != n.parents.size())
        throw Error(fmt::format("{} backward: returned {} gradients for its {} inputs (one per input, undefined "
                                "for an input without one)",
                                n.op, results.size(), n.parents.size()));
    for (std::size_t i = 0; i < results.size(); ++i) {
        if (!results[i].defined()) continue;
        const std::shared_ptr<Node>& in = input_node(n, i);
        if (!in || !in->requires_grad) continue;
        if (needed && !needed->count(in.get())) continue;
        // A custom Function's output hands its gradient, already checked against the output,
        // on to one slot of the Function's node, whose own shape is no output's.
        if (n.parent_slot.empty()) check_gradient(n, *in, results[i]);
        Tensor g = std::move(results[i]);
        // Without create_graph no gradient carries a graph (a formula may hand on its input).
        if (!sweep.create_graph && g.requires_grad()) g = make_leaf(g.node().data());
        add_flow(flows, *in, input_slot(n, i), std::move(g));
    }
}

void run_sweep(const std::vector<std::shared_ptr<Node>>& roots, const std::vector<Tensor>& seeds, const Sweep& sweep) {
    Graph graph;
    Claims claims(sweep.keep_graph);
    topological_order(roots, graph, claims);
    const std::vector<std::shared_ptr<Node>>& order = graph.order;
    Flows flows(graph);
    // autograd::grad runs only the nodes between the inputs and the outputs: those with a
    // wanted node among their ancestors (parents come first in `order`).
    std::unordered_set<const Node*> needed;
    const bool pruned = !sweep.wanted.empty();
    if (pruned) {
        for (const auto& n : order) {
            bool need = std::find(sweep.wanted.begin(), sweep.wanted.end(), n.get()) != sweep.wanted.end();
            for (std::size_t i = 0; !need && i < n->parents.size(); ++i) {
                const auto& p = input_node(*n, i);
                need = p && needed.count(p.get());
            }
            if (need) needed.insert(n.get());
        }
    }
    // A node whose graph an earlier backward freed cannot pass gradients on. autograd::grad
    // minds only the ones it needs, unless a wanted input was not reached: it may sit behind
    // one (a freed node's parents are gone).
    bool all_reached = true;
    for (const Node* w : sweep.wanted) all_reached = all_reached && needed.count(w);
    for (const auto& n : order)
        if (n->graph_freed && (!pruned || needed.count(n.get()) || !all_reached))
            throw Error(fmt::format("backward: part of this graph (a '{}' result) was {}", n->op, freed_how(*n)));
    for (const auto& n : order)
        if (!pruned || needed.count(n.get())) check_versions(n);
    const char* running = "";  // the op whose backward is running, for the message below
    try {
        {
            GradModeGuard mode(sweep.create_graph);
            for (std::size_t i = 0; i < roots.size(); ++i) add_flow(flows, *roots[i], 0, seeds[i]);
        }
        bool hooks_ran = false;
        for (auto it = order.rbegin(); it != order.rend(); ++it) {
            Node& n = **it;
            std::vector<Tensor>& flow = flows.at[static_cast<std::size_t>(order.rend() - it) - 1];
            if (flow.empty()) continue;  // no path carried a gradient here
            std::vector<Tensor> grads = std::move(flow);
            flow = {};
            if (!grads[0].defined() && n.num_outputs == 1) continue;
            GradModeGuard mode(sweep.create_graph);
            if (!n.grad_hooks.empty()) {
                grads[0] = run_hooks(n, std::move(grads[0]));
                hooks_ran = true;
            }
            if (pruned) {
                for (std::size_t k = 0; k < sweep.wanted.size(); ++k)
                    if (sweep.wanted[k] == &n) (*sweep.captured)[k] = grads[0];
                // Only a node with a wanted node above it has gradients to pass on.
                bool feeds = false;
                for (std::size_t i = 0; !feeds && !n.is_leaf && i < n.parents.size(); ++i) {
                    const auto& p = input_node(n, i);
                    feeds = p && needed.count(p.get());
                }
                if (!feeds) continue;
            } else if (n.is_leaf) {
                accumulate_grad(n, std::move(grads[0]));
                if (!n.post_grad_hooks.empty()) {
                    Tensor leaf(*it);
                    auto hooks = n.post_grad_hooks;  // a hook may remove itself
                    for (auto& h : hooks) h.second(leaf);
                    hooks_ran = true;
                }
                continue;
            } else if (n.retains_grad) {
                accumulate_grad(n, grads[0]);
            }
            // A hook is user code run in the middle of the sweep: it may have written a tensor
            // that an op still to come saved, after the check above.
            if (hooks_ran) check_versions(*it);
            running = n.op;
            run_node(*it, grads, sweep, flows, pruned ? &needed : nullptr);
            if (!sweep.keep_graph) {
                n.formula = nullptr;
                n.parents.clear();
                n.parent_history.clear();
                n.parent_slot.clear();
                n.graph_freed = true;
            }
        }
    } catch (const std::bad_variant_access&) {
        // A gradient op reads its inputs' arrays with the dtype they had in forward; converting
        // them in between (module.to(kFloat64) after the forward pass) leaves them unreadable.
        abandon(order);
        throw Error(fmt::format("backward: an input of '{}' changed dtype after the forward pass (e.g. "
                                "module.to() between forward and backward); run the forward pass again "
                                "after converting",
                                running));
    } catch (...) {
        abandon(order);
        throw;
    }
}

// The gradient that starts a sweep at `output`: `gradient`, checked, or ones for one element.
Tensor seed_for(const char* who, const Tensor& output, const Tensor& gradient) {
    if (!gradient.defined()) {
        if (output.numel() != 1)
            throw Error(fmt::format("{}: a gradient can be implied only for a one-element output, "
                                    "this one has shape {}; pass one of that shape, e.g. "
                                    "y.backward(ones_like(y))",
                                    who, shape_str(output.shape())));
        NoGradGuard no_grad;
        return ones_like(output);
    }
    if (gradient.shape() != output.shape() || gradient.dtype() != output.dtype())
        throw Error(fmt::format("{}: gradient must match the output: expected {} {}, got {} {}", who,
                                dtype_name(output.dtype()), shape_str(output.shape()),
                                dtype_name(gradient.dtype()), shape_str(gradient.shape())));
    return gradient;
}

}  // namespace

void Tensor::backward(const Tensor& gradient, std::optional<bool> retain_graph, bool create_graph) const {
    sync_view(*this);
    Node& root = node();
    if (!root.requires_grad)
        throw Error("backward: this tensor does not require grad and was not made from one that does; "
                    "call requires_grad_() on the inputs you want gradients for");
    if (root.graph_freed)
        throw Error(fmt::format("backward: the graph behind this '{}' result was {}", root.op, freed_how(root)));
    const Tensor seed = seed_for("backward", *this, gradient);
    Sweep sweep;
    sweep.keep_graph = retain_graph.value_or(create_graph);
    sweep.create_graph = create_graph;
    run_sweep({m_node}, {seed}, sweep);
}

namespace autograd {

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, std::optional<bool> retain_graph,
                         bool create_graph, bool allow_unused) {
    if (outputs.empty()) throw Error("autograd::grad: no outputs given");
    if (!grad_outputs.empty() && grad_outputs.size() != outputs.size())
        throw Error(fmt::format("autograd::grad: {} grad_outputs for {} outputs (give one per output, or none)",
                                grad_outputs.size(), outputs.size()));
    std::vector<std::shared_ptr<Node>> roots;
    std::vector<Tensor> seeds;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
        const Tensor& y = outputs[i];
        if (!y.defined()) throw Error(fmt::format("autograd::grad: output {} is an undefined tensor", i));
        sync_view(y);
        if (!y.requires_grad())
            throw Error(fmt::format("autograd::grad: output {} does not require grad and was not made from a "
                                    "tensor that does",
                                    i));
        if (y.node().graph_freed)
            throw Error(fmt::format("autograd::grad: the graph behind output {} (a '{}' result) was {}", i,
                                    y.node().op, freed_how(y.node())));
        roots.push_back(y.node_ptr());
        seeds.push_back(seed_for("autograd::grad", y, grad_outputs.empty() ? Tensor() : grad_outputs[i]));
    }
    Sweep sweep;
    sweep.keep_graph = retain_graph.value_or(create_graph);
    sweep.create_graph = create_graph;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        const Tensor& x = inputs[i];
        if (!x.defined()) throw Error(fmt::format("autograd::grad: input {} is an undefined tensor", i));
        sync_view(x);
        if (!x.requires_grad())
            throw Error(fmt::format("autograd::grad: input {} (of shape {}) does not require grad", i,
                                    shape_str(x.shape())));
        sweep.wanted.push_back(&x.node());
    }
    std::vector<Tensor> result(inputs.size());
    if (inputs.empty()) return result;
    sweep.captured = &result;
    run_sweep(roots, seeds, sweep);
    for (std::size_t i = 0; i < inputs.size(); ++i)
        if (!result[i].defined() && !allow_unused)
            throw Error(fmt::format("autograd::grad: input {} (of shape {}) was not used to compute the outputs; "
                                    "pass allow_unused = true to get an undefined tensor for it",
                                    i, shape_str(inputs[i].shape())));
    return result;
}

}  // namespace autograd

// --- in-place ops in the graph ----------------------------------------------------------------

void move_history(Node& to, Node& from) {
    to.requires_grad = from.requires_grad;
    to.is_leaf = from.is_leaf;
    to.graph_freed = from.graph_freed;
    to.freed_by_failure = from.freed_by_failure;
    to.op = from.op;
    to.layout_version = from.layout_version;
    to.parents = std::move(from.parents);
    to.parent_history = std::move(from.parent_history);
    to.parent_slot = std::move(from.parent_slot);
    to.history = from.history;
    to.num_outputs = from.num_outputs;
    to.saves = from.saves;
    to.saved_versions = std::move(from.saved_versions);
    to.formula = std::move(from.formula);
}

std::shared_ptr<Node> split_history(Node& self, Storage old_value) {
    auto past = std::make_shared<Node>(std::move(old_value));
    past->shape = self.shape;
    // The past history holds the values as they were at this version.
    past->storage->version = self.storage->version.load();
    past->storage->last_write = self.storage->last_write;
    move_history(*past, self);
    return past;
}

namespace {
// Makes `past` self's history number h, and self's history a new one, h + 1.
void push_history(Node& self, std::shared_ptr<Node> past, std::uint32_t h) {
    self.history = h + 1;
    self.past.resize(h + 1);
    self.past[h] = std::move(past);
    self.graph_freed = false;
    self.freed_by_failure = false;
    self.seq = g_next_seq.fetch_add(1, std::memory_order_relaxed);  // where this history begins
}
}  // namespace

void rebase_history(Node& self, std::shared_ptr<Node> past, Node& made, const char* op) {
    const std::uint32_t h = past->history;
    move_history(self, made);
    self.op = op;
    self.bump_version(op);
    self.layout_version = past->layout_version;
    if (!self.saved_versions.empty()) self.saved_versions.back() = self.version();
    push_history(self, std::move(past), h);
}

void restart_view_history(Node& v, std::shared_ptr<Node> past, Node& made) {
    const std::uint32_t h = past->history;
    const std::uint64_t layout = v.layout_version;
    move_history(v, made);
    v.layout_version = layout;
    if (!v.saved_versions.empty()) v.saved_versions.back() = v.version();
    push_history(v, std::move(past), h);
}

// The ops on the way to `result` that read `self` before the write (an operand made from it, as
// in y.add_(y * 2), or a view of it) would hold self while it holds them through its new
// history: a cycle that is never freed. They read the old history, so they get its node `old`
// instead (what the engine would route them to anyway); only ops made since that history
// began (`since`) can be among them. Returns whether one of them, or an op made here, reads the
// old value (mul_'s gradient for its operand), which must then be kept.
bool reroute_readers(Node& result, Node& self, std::uint64_t since, const Tensor& old) {
    Node& x = old.node();
    bool read = false;
    std::vector<Node*> stack{&result};
    std::unordered_set<const Node*> seen;
    while (!stack.empty()) {
        Node* n = stack.back();
        stack.pop_back();
        if (n->seq < since || !seen.insert(n).second) continue;
        for (std::size_t i = 0; i < n->parents.size(); ++i) {
            Tensor& p = n->parents[i];
            if (!p.defined()) continue;
            Node* pn = &p.node();
            // A view of self read here (b[0].add_(b[1]), b.mul_(b[0])) holds self through its
            // ViewOf, out of reach of the rerouting below: the op reads the history it stands for
            // instead, and the view restarts its own from self's new one when next used.
            if (pn != &self && pn->view && pn->view->base.get() == &self) {
                const std::uint32_t h = i < n->parent_history.size() ? n->parent_history[i] : pn->history;
                if (h != pn->history) {
                    p = Tensor(pn->past[h]);
                } else {
                    auto hist = split_history(*pn, empty_storage(pn->dtype()));
                    // Its values are the storage's, which this op is about to write: an op that
                    // saved them sees one write more than it saved, and is refused at backward.
                    hist->bump_version(self.storage->last_write);
                    push_history(*pn, hist, h);
                    p = Tensor(std::move(hist));
                }
                pn = &p.node();
            }
            if (pn == &self && i < n->parent_history.size() && n->parent_history[i] == x.history) {
                p = old;
                pn = &x;
            }
            if (pn == &x) {
                if (n->saves.reads_input(i)) read = true;
            } else {
                stack.push_back(pn);
            }
        }
    }
    return read;
}

std::recursive_mutex& history_mutex() {
    static std::recursive_mutex m;
    return m;
}

const Tensor& record_in_place(const char* op, const Tensor& self, std::vector<Tensor> others,
                              const std::function<Tensor(const Tensor& old, const std::vector<Tensor>& others)>& compute) {
    // Histories are rebased one at a time: views of one base written from several threads
    // rebase that base's history in turn (torch's autograd has the same need).
    const std::lock_guard<std::recursive_mutex> lock(history_mutex());
    Node& a = self.node();
    for (const Tensor& t : others) sync_view(t);
    if (a.view) return record_in_place_on_view(op, self, std::move(others), compute);
    if (a.is_leaf && a.requires_grad)
        throw Error(fmt::format("{}: a leaf tensor that requires grad cannot be changed in place while gradients are "
                                "recorded (as in torch); do it under NoGradGuard, or on a clone()",
                                op));
    // The old value and history move to a node of their own, which the op reads. With views of
    // this storage about (which read it while the op runs, and whose xarrays point into its
    // buffer) the old value is a copy and the buffer stays; otherwise it moves.
    const bool shared = a.storage.use_count() > 1;
    const std::uint64_t since = a.seq;  // when the history now ending began
    auto past = split_history(a, shared ? a.storage->data : std::move(a.storage->data));
    if (!shared) a.storage->data = empty_storage(past->dtype());
    Node& x = *past;
    const Tensor old(past);
    for (Tensor& t : others)
        if (t.is_same(self)) t = old;
    Tensor r;
    try {
        r = compute(old, others);
        if (!r.defined() || r.shape() != a.shape || r.dtype() != x.dtype())
            throw Error(fmt::format("{}: the in-place result must keep the tensor's {} {}", op, dtype_name(x.dtype()),
                                    shape_str(a.shape)));
        if (r.is_same(old) || r.node_ptr().use_count() != 1 || r.node().view)
            throw Error(fmt::format("{}: internal error: an in-place op must compute a new result with a graph", op));
    } catch (...) {
        if (!shared) a.storage->data = std::move(x.storage->data);
        move_history(a, x);
        throw;
    }
    // Dropped unless read, or a view of it (made by the op) may read it later.
    const bool read = reroute_readers(r.node(), a, since, old);
    if (!read && x.storage.use_count() == 1) x.storage->data = empty_storage(x.dtype());
    x.overwritten = true;
    Node& rn = r.node();
    if (shared) copy_into_storage(a, r);
    else a.storage->data = std::move(rn.storage->data);
    rebase_history(a, std::move(past), rn, op);
    return self;
}

// --- method forms -------------------------------------------------------------------------

Tensor Tensor::clone() const {
    check_defined("clone", *this, "the tensor");
    const AllocContext context("clone", shape());
    // A float copy is differentiable (identity gradient); other dtypes are a plain copy.
    if (!is_floating(dtype())) return make_leaf(node().data());
    return dispatch_all(dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (!is_floating_v<T>) return make_leaf(node().data());  // not reached: is_floating above
        else {
        xt::xarray<T> copy = values<T>(*this);
        // The gradient passes through unchanged (torch's clone backward is grad).
        return make_result<T>(
            std::move(copy), {*this}, "clone",
            Formula([](const GradArgs& in) -> std::vector<Tensor> { return {in.grad()}; }), Saves::none());
        }
    });
}
Tensor Tensor::reshape(const IntList& s) const { return xgrad::reshape(*this, s); }
Tensor Tensor::permute(const IntList& axes) const { return xgrad::permute(*this, axes); }
Tensor Tensor::expand(const IntList& s) const { return xgrad::expand(*this, s); }
Tensor Tensor::repeat(const IntList& r) const { return xgrad::repeat(*this, r); }
Tensor Tensor::narrow(long axis, long start, long length) const { return xgrad::narrow(*this, axis, start, length); }
Tensor Tensor::select(long axis, long index) const { return xgrad::select(*this, axis, index); }
Tensor Tensor::transpose(long a, long b) const { return xgrad::transpose(*this, a, b); }
std::vector<Tensor> Tensor::split(long split_size, long axis) const { return xgrad::split(*this, split_size, axis); }
std::vector<Tensor> Tensor::split(const IntList& sizes, long axis) const { return xgrad::split(*this, sizes, axis); }
std::vector<Tensor> Tensor::chunk(long chunks, long axis) const { return xgrad::chunk(*this, chunks, axis); }
Tensor Tensor::masked_fill(const Tensor& mask, Scalar value) const { return xgrad::masked_fill(*this, mask, value); }
Tensor Tensor::unsqueeze(long axis) const { return xgrad::unsqueeze(*this, axis); }
Tensor Tensor::squeeze(long axis) const { return xgrad::squeeze(*this, axis); }
Tensor Tensor::sum() const { return xgrad::sum(*this); }
Tensor Tensor::sum(const IntList& axes, bool keepdims) const { return xgrad::sum(*this, axes, keepdims); }
Tensor Tensor::mean() const { return xgrad::mean(*this); }
Tensor Tensor::mean(const IntList& axes, bool keepdims) const { return xgrad::mean(*this, axes, keepdims); }
Tensor Tensor::matmul(const Tensor& other) const { return xgrad::matmul(*this, other); }
Tensor Tensor::pow(Scalar p) const { return xgrad::pow(*this, p); }
Tensor Tensor::pow(const Tensor& exponent) const { return xgrad::pow(*this, exponent); }
Tensor Tensor::clamp(std::optional<Scalar> min, std::optional<Scalar> max) const {
    return xgrad::clamp(*this, min, max);
}
Tensor Tensor::clamp_min(Scalar min) const { return xgrad::clamp_min(*this, min); }
Tensor Tensor::clamp_max(Scalar max) const { return xgrad::clamp_max(*this, max); }
Tensor Tensor::exp() const { return xgrad::exp(*this); }
Tensor Tensor::log() const { return xgrad::log(*this); }

// The operators are in ops_elementwise.cpp, beside the ops they call.

}  // namespace xgrad
