// The Tensor handle, graph nodes, and the reverse-mode engine.
#include "core/tensor.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <ostream>
#include <string_view>
#include <unordered_set>

#include "core/creation.hpp"
#include "core/node.hpp"
#include "core/ops.hpp"
#include "core/ops_util.hpp"
#include "core/runtime/alloc.hpp"

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

Node::Node(Storage values) : data(std::move(values)) {
    std::visit([this](const auto& a) { shape.assign(a.shape().begin(), a.shape().end()); }, data);
}

Node::~Node() {
    // Unlink parents into a local worklist; a parent whose last owner is this worklist gives
    // up its own parents before it dies, so destruction never recurses down a chain.
    std::vector<Tensor> pending = std::move(parents);
    while (!pending.empty()) {
        Tensor t = std::move(pending.back());
        pending.pop_back();
        if (t.defined() && t.node_ptr().use_count() == 1) {
            auto& grand = t.node().parents;
            std::move(grand.begin(), grand.end(), std::back_inserter(pending));
            grand.clear();
            t.node().backward = nullptr;  // captured tensors may also hold parents
        }
    }
}

Tensor make_leaf(Storage value, bool requires_grad) {
    auto node = std::make_shared<Node>(std::move(value));
    Tensor t(std::move(node));
    if (requires_grad) t.requires_grad_(true);
    return t;
}

template <class T>
Tensor make_result(xt::xarray<T>&& value, std::vector<Tensor> inputs, const char* op,
                   BackwardFn backward, Saves saves) {
    if (t_detect_anomaly) {
        const std::size_t i = first_non_finite(value);
        if (i != static_cast<std::size_t>(-1))
            throw Error(fmt::format("{}: produced {} in its forward result of shape {} (first at flat "
                                    "index {}; anomaly detection is on)",
                                    op, anomaly_value(value, i), shape_str(shape_of(value)), i));
    }
    auto node = std::make_shared<Node>(Storage(std::move(value)));
    node->op = op;
    const bool track = grad_enabled() && std::any_of(inputs.begin(), inputs.end(), [](const Tensor& t) {
                           return t.defined() && t.requires_grad();
                       });
    if (track) {
        node->requires_grad = true;
        node->is_leaf = false;
        node->saves = saves;
        node->saved_versions.reserve(inputs.size() + 1);
        for (std::size_t i = 0; i < inputs.size(); ++i) {
            const Node* in = inputs[i].defined() ? &inputs[i].node() : nullptr;
            node->saved_versions.push_back(!in ? 0 : saves.reads_input(i) ? in->version : in->layout_version);
        }
        node->saved_versions.push_back(0);
        node->parents = std::move(inputs);
        node->backward = std::move(backward);
    }
    return Tensor(std::move(node));
}

template <class T> void accumulate(const char* op, const Tensor& input, xt::xarray<T>&& g) {
    if (!input.requires_grad()) return;
    Node& n = input.node();
    if (!std::equal(g.shape().begin(), g.shape().end(), n.shape.begin(), n.shape.end()))
        throw Error(fmt::format("{} backward: gradient of shape {} does not match its input of shape {}",
                                op, shape_str(shape_of(g)), shape_str(n.shape)));
    if (n.dtype() != dtype_of<T>())
        throw Error(fmt::format("{} backward: its input changed dtype from {} to {} after the forward pass "
                                "(e.g. module.to() between forward and backward); run the forward pass "
                                "again after converting",
                                op, dtype_name(dtype_of<T>()), dtype_name(n.dtype())));
    if (t_detect_anomaly) {
        const std::size_t i = first_non_finite(g);
        if (i != static_cast<std::size_t>(-1))
            throw Error(fmt::format("{} backward: produced {} in the gradient for an input of shape {} "
                                    "(first at flat index {}; anomaly detection is on)",
                                    op, anomaly_value(g, i), shape_str(n.shape), i));
    }
    if (!n.flow)
        n.flow = Storage(std::move(g));
    else if constexpr (std::is_same_v<T, bfloat16>)
        add_rounded(std::get<xt::xarray<T>>(*n.flow), g);
    else
        std::get<xt::xarray<T>>(*n.flow) += g;
}

#define XGRAD_INSTANTIATE(T)                                                                    \
    template Tensor make_result<T>(xt::xarray<T>&&, std::vector<Tensor>, const char*, BackwardFn, Saves); \
    template void accumulate<T>(const char*, const Tensor&, xt::xarray<T>&&);
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
    return std::get<xt::xarray<T>>(n.data);
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

std::size_t Tensor::numel() const {
    std::size_t n = 1;
    for (auto s : shape()) n *= s;
    return n;
}

std::size_t Tensor::size(long axis) const { return shape()[normalize_axis("size", axis, shape())]; }

Dtype Tensor::dtype() const { return node().dtype(); }

bool Tensor::requires_grad() const { return m_node && m_node->requires_grad; }

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

bool Tensor::is_leaf() const { return node().is_leaf; }

void Tensor::retain_grad() {
    Node& n = node();
    if (!n.requires_grad)
        throw Error("retain_grad: the tensor does not require grad, so it will never have one");
    n.retains_grad = true;
}

Tensor Tensor::grad() const {
    const Node& n = node();
    if (!n.grad) return Tensor();
    return make_leaf(*n.grad);
}

void Tensor::set_grad(const Tensor& g) {
    Node& n = node();
    if (!g.defined()) {
        n.grad.reset();
        return;
    }
    if (g.shape() != n.shape || g.dtype() != n.dtype())
        throw Error(fmt::format("set_grad: gradient must match the tensor: expected {} {}, got {} {}",
                                dtype_name(n.dtype()), shape_str(n.shape), dtype_name(g.dtype()),
                                shape_str(g.shape())));
    n.grad = g.node().data;
}

void Tensor::zero_grad() { node().grad.reset(); }

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
    if (t.dim() != dims)
        throw Error(fmt::format("{}: {} must be {}-D {}, got shape {}", who, arg, dims, layout, shape_str(t.shape())));
}

bool Tensor::has_grad() const { return node().grad.has_value(); }

std::string Tensor::op_name() const { return node().op; }

Tensor Tensor::detach() const {
    // Shares nothing with the graph; the values are copied once (xarray owns its buffer).
    const AllocContext context("detach", shape());
    return make_leaf(node().data);
}

Tensor Tensor::to(Dtype d) const { return cast(*this, d); }

template <class T> T Tensor::item() const {
    if (numel() != 1)
        throw Error(fmt::format("item: only a one-element tensor has an item, got shape {}",
                                shape_str(shape())));
    return std::visit(
        [](const auto& a) {
            check_convertible<T>("item", a.data(), 1);
            return static_cast<T>(*a.data());
        },
        node().data);
}

template <class T> std::vector<T> Tensor::to_vector() const {
    return std::visit(
        [](const auto& a) {
            check_convertible<T>("to_vector", a.data(), a.size());
            std::vector<T> out;  // explicit conversions: bfloat16 converts only so
            out.reserve(a.size());
            for (const auto& v : a) out.push_back(static_cast<T>(v));
            return out;
        },
        node().data);
}

template <class T> T* Tensor::data_ptr() {
    T* p = array<T>(*this).data();
    Node& n = node();
    ++n.version;
    n.last_write = "data_ptr()";
    return p;
}
template <class T> const T* Tensor::const_data_ptr() const { return array<T>(*this).data(); }
template <class T> const T* Tensor::data_ptr() const { return array<T>(*this).data(); }

namespace {

// A handle reaches its node as Node& even when const (it aliases, as torch's): no cast needed.
template <class T> xt::xarray<T>* grad_array(Node& n, const char* op) {
    if (n.dtype() != dtype_of<T>())
        throw Error(fmt::format("{}: tensor holds {}, asked for {}", op, dtype_name(n.dtype()),
                                dtype_name(dtype_of<T>())));
    if (!n.grad) return nullptr;
    return &std::get<xt::xarray<T>>(*n.grad);
}

}  // namespace

template <class T> T* Tensor::grad_ptr() {
    auto* g = grad_array<T>(node(), "grad_ptr");
    return g ? g->data() : nullptr;
}

template <class T> const T* Tensor::grad_ptr() const {
    const auto* g = grad_array<T>(node(), "grad_ptr");
    return g ? g->data() : nullptr;
}

template <class T> T* Tensor::mutable_grad_ptr() {
    Node& n = node();
    if (!grad_array<T>(n, "mutable_grad_ptr")) n.grad = Storage(xt::xarray<T>(xt::zeros<T>(n.shape)));
    return std::get<xt::xarray<T>>(*n.grad).data();
}

void Tensor::set_data(const Tensor& values) const {
    Node& n = node();
    if (!values.defined()) throw Error("set_data: values is an undefined tensor");
    if (&n == &values.node()) return;
    if (n.grad && (values.shape() != n.shape || values.dtype() != n.dtype())) n.grad.reset();
    if (values.shape() != n.shape || values.dtype() != n.dtype()) ++n.layout_version;
    n.data = values.node().data;
    n.shape = values.shape();
    ++n.version;
    n.last_write = "set_data()";
}

std::uint64_t Tensor::version() const { return node().version; }

template <class T> T* Tensor::mutable_data_ptr() const {
    T* p = array<T>(*this).data();
    Node& n = node();
    ++n.version;
    n.last_write = "mutable_data_ptr()";
    return p;
}

#define XGRAD_INSTANTIATE(T)                               \
    template T* Tensor::grad_ptr<T>();                     \
    template const T* Tensor::grad_ptr<T>() const;         \
    template T* Tensor::mutable_grad_ptr<T>();             \
    template T* Tensor::mutable_data_ptr<T>() const;       \
    template T Tensor::item<T>() const;                    \
    template std::vector<T> Tensor::to_vector<T>() const;  \
    template T* Tensor::data_ptr<T>();                     \
    template const T* Tensor::data_ptr<T>() const;         \
    template const T* Tensor::const_data_ptr<T>() const;
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
XGRAD_INSTANTIATE(std::int64_t)
XGRAD_INSTANTIATE(bool)
XGRAD_INSTANTIATE(bfloat16)
#undef XGRAD_INSTANTIATE

// --- the engine -----------------------------------------------------------------------------

namespace {

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
        if (input.version == n->saved_versions[i]) continue;
        const std::string how = *input.last_write ? fmt::format(", last through {}", input.last_write) : "";
        const char* hint = std::string_view(input.last_write) == "data_ptr()"
                               ? "; data_ptr() hands out write access and counts as a write, read with const_data_ptr()"
                               : "";
        throw Error(fmt::format("backward: {} was modified in place after it was saved for backward by '{}' "
                                "(version {} -> {}{}); clone it first, or call backward before changing it{}",
                                what(), n->op, n->saved_versions[i], input.version, how, hint));
    }
}

// The same for every op of a graph, before any backward runs.
void check_versions(const std::vector<std::shared_ptr<Node>>& order) {
    for (const auto& n : order) check_versions(n);
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

// After a backward that throws (anomaly detection, running out of memory, a bad op): the
// gradients half delivered to the nodes still waiting are dropped, so that a later backward
// starts clean, and the nodes already freed remember how.
void abandon(const std::vector<std::shared_ptr<Node>>& order) {
    for (const auto& n : order) {
        n->flow.reset();
        // Before this sweep none of them was freed (it refuses to start otherwise).
        if (n->graph_freed) n->freed_by_failure = true;
    }
}

// Nodes reachable from `root` through nodes that require grad, parents before children.
// Iterative DFS (explicit stack), so depth is bounded by memory, not by the call stack.
std::vector<std::shared_ptr<Node>> topological_order(const std::shared_ptr<Node>& root) {
    std::vector<std::shared_ptr<Node>> order;
    std::unordered_set<const Node*> visited;
    std::vector<std::pair<std::shared_ptr<Node>, std::size_t>> stack;  // node, next parent
    stack.emplace_back(root, 0);
    visited.insert(root.get());
    while (!stack.empty()) {
        auto& [node, next] = stack.back();
        if (next < node->parents.size()) {
            const auto& parent = node->parents[next++].node_ptr();
            if (parent && parent->requires_grad && visited.insert(parent.get()).second)
                stack.emplace_back(parent, 0);
        } else {
            order.push_back(std::move(node));
            stack.pop_back();
        }
    }
    return order;
}

void add_into(std::optional<Storage>& dst, Storage&& g) {
    if (!dst) {
        dst = std::move(g);
        return;
    }
    std::visit(
        [&g](auto& d) {
            using A = std::decay_t<decltype(d)>;
            if constexpr (std::is_same_v<A, xt::xarray<bfloat16>>)
                add_rounded(d, std::get<A>(g));
            else
                d += std::get<A>(g);
        },
        *dst);
}

}  // namespace

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
    Node& root = node();
    if (!root.requires_grad)
        throw Error("backward: this tensor does not require grad and was not made from one that does; "
                    "call requires_grad_() on the inputs you want gradients for");
    if (root.graph_freed)
        throw Error(fmt::format("backward: the graph behind this '{}' result was {}", root.op, freed_how(root)));
    Storage seed;
    if (!gradient.defined()) {
        if (numel() != 1)
            throw Error(fmt::format("backward: a gradient can be implied only for a one-element output, "
                                    "this one has shape {}; pass one of that shape, e.g. "
                                    "y.backward(ones_like(y))",
                                    shape_str(shape())));
        seed = ones_like(*this).node().data;
    } else {
        if (gradient.shape() != shape() || gradient.dtype() != dtype())
            throw Error(fmt::format("backward: gradient must match the output: expected {} {}, got {} {}",
                                    dtype_name(dtype()), shape_str(shape()),
                                    dtype_name(gradient.dtype()), shape_str(gradient.shape())));
        seed = gradient.node().data;
    }

    auto order = topological_order(m_node);
    // A node whose graph an earlier backward freed cannot pass gradients on.
    for (const auto& n : order)
        if (n->graph_freed)
            throw Error(fmt::format("backward: part of this graph (a '{}' result) was {}", n->op, freed_how(*n)));
    check_versions(order);
    root.flow = std::move(seed);
    NoGradGuard no_grad;  // backward computations are not themselves recorded
    const char* running = "";  // the op whose backward is running, for the message below
    bool hooks_ran = false;
    try {
        for (auto it = order.rbegin(); it != order.rend(); ++it) {
            Node& n = **it;
            if (!n.flow) continue;  // no path carried a gradient here
            Storage g = std::move(*n.flow);
            n.flow.reset();
            if (n.is_leaf) {
                add_into(n.grad, std::move(g));
                if (!n.post_grad_hooks.empty()) {
                    Tensor leaf(*it);
                    auto hooks = n.post_grad_hooks;  // a hook may remove itself
                    for (auto& h : hooks) h.second(leaf);
                    hooks_ran = true;
                }
                continue;
            }
            // A hook is user code run in the middle of the sweep: it may have written a tensor
            // that an op still to come saved, after the check above.
            if (hooks_ran) check_versions(*it);
            if (n.retains_grad) add_into(n.grad, Storage(g));
            running = n.op;
            {
                const AllocContext context(n.op, n.shape, AllocContext::Phase::backward);
                n.backward(n, g);
            }
            if (!retain_graph) {
                n.backward = nullptr;
                n.parents.clear();
                n.graph_freed = true;
            }
        }
    } catch (const std::bad_variant_access&) {
        // A backward lambda reads its inputs with the dtype they had in forward; converting
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

// --- method forms -------------------------------------------------------------------------

Tensor Tensor::clone() const {
    const AllocContext context("clone", shape());
    // A float copy is differentiable (identity gradient); other dtypes are a plain copy.
    if (!is_floating(dtype())) return make_leaf(node().data);
    return dispatch_all(dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (!is_floating_v<T>) return make_leaf(node().data);  // not reached: is_floating above
        else {
        xt::xarray<T> copy = values<T>(*this);
        return make_result<T>(
            std::move(copy), {*this}, "clone",
            [](Node& self, const Storage& gs) { accumulate<T>("clone", self.parents[0], xt::xarray<T>(grad_as<T>(gs))); },
            Saves::none());
        }
    });
}
Tensor Tensor::reshape(const std::vector<long>& s) const { return xgrad::reshape(*this, s); }
Tensor Tensor::permute(const std::vector<long>& axes) const { return xgrad::permute(*this, axes); }
Tensor Tensor::transpose(long a, long b) const { return xgrad::transpose(*this, a, b); }
Tensor Tensor::unsqueeze(long axis) const { return xgrad::unsqueeze(*this, axis); }
Tensor Tensor::squeeze(long axis) const { return xgrad::squeeze(*this, axis); }
Tensor Tensor::sum() const { return xgrad::sum(*this); }
Tensor Tensor::sum(const std::vector<long>& axes, bool keepdims) const { return xgrad::sum(*this, axes, keepdims); }
Tensor Tensor::mean() const { return xgrad::mean(*this); }
Tensor Tensor::mean(const std::vector<long>& axes, bool keepdims) const { return xgrad::mean(*this, axes, keepdims); }
Tensor Tensor::matmul(const Tensor& other) const { return xgrad::matmul(*this, other); }
Tensor Tensor::pow(double p) const { return xgrad::pow(*this, p); }
Tensor Tensor::exp() const { return xgrad::exp(*this); }
Tensor Tensor::log() const { return xgrad::log(*this); }

// The operators are in ops_elementwise.cpp, beside the ops they call.

}  // namespace xgrad
