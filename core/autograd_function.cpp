// Custom autograd functions: how a call of Function<Derived>::apply becomes nodes of the graph.
//
// A call with k outputs records one hidden node F (op = the function's name, num_outputs = k,
// parents = the tensor inputs, formula = the user's backward through the context) and makes
// each differentiable output a node reading slot i of F, whose formula hands its gradient on.
// The engine gathers one gradient per slot of F and runs F's formula once with all of them.
//
// The context is owned by F's formula and refers to F weakly. A saved output is held weakly
// too: the output owns F (its parent), F owns the context, so a strong handle there would be a
// cycle that never frees. An output is alive whenever a backward reaches F through it; only
// with several outputs can a saved one be dropped while another still leads to F, so for those
// the context keeps a copy of the value, revived as an output of F when needed.
#include "core/autograd_function.hpp"

#include <cxxabi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <typeindex>

#include "core/creation.hpp"
#include "core/node.hpp"
#include "core/views.hpp"

namespace xgrad::autograd {

// --- SavedValue -----------------------------------------------------------------------------

namespace {

std::string kind_name(const std::type_info& t) {
    if (t == typeid(void)) return "nothing";
    if (t == typeid(bool)) return "a bool";
    if (t == typeid(std::int64_t)) return "an integer";
    if (t == typeid(double)) return "a double";
    if (t == typeid(std::string)) return "a string";
    if (t == typeid(Tensor)) return "a Tensor";
    if (t == typeid(std::vector<std::int64_t>)) return "a list of integers";
    if (t == typeid(std::vector<double>)) return "a list of doubles";
    return detail::readable_type_name(t);
}

template <class T> const T& stored(const std::any& value, const char* asked) {
    const T* p = std::any_cast<T>(&value);
    if (!p)
        throw Error(fmt::format("saved_data: the value is {}, asked for {}", kind_name(value.type()), asked));
    return *p;
}

}  // namespace

void SavedValue::wrong_kind(const std::type_info& asked) const {
    throw Error(fmt::format("saved_data: the value is {}, asked for {}", kind_name(m_value.type()), kind_name(asked)));
}

bool SavedValue::is_bool() const { return m_value.type() == typeid(bool); }
bool SavedValue::is_int() const { return m_value.type() == typeid(std::int64_t); }
bool SavedValue::is_double() const { return m_value.type() == typeid(double); }
bool SavedValue::is_string() const { return m_value.type() == typeid(std::string); }
bool SavedValue::is_tensor() const { return m_value.type() == typeid(Tensor); }
bool SavedValue::to_bool() const { return stored<bool>(m_value, "a bool"); }
std::int64_t SavedValue::to_int() const { return stored<std::int64_t>(m_value, "an integer"); }
double SavedValue::to_double() const {
    if (is_int()) return static_cast<double>(to_int());
    return stored<double>(m_value, "a double");
}
const std::string& SavedValue::to_string() const { return stored<std::string>(m_value, "a string"); }
Tensor SavedValue::to_tensor() const { return stored<Tensor>(m_value, "a Tensor"); }
std::vector<std::int64_t> SavedValue::to_int_list() const {
    return stored<std::vector<std::int64_t>>(m_value, "a list of integers");
}
std::vector<double> SavedValue::to_double_list() const {
    if (m_value.type() == typeid(std::vector<std::int64_t>)) {
        const auto& v = std::any_cast<const std::vector<std::int64_t>&>(m_value);
        return std::vector<double>(v.begin(), v.end());
    }
    return stored<std::vector<double>>(m_value, "a list of doubles");
}

// --- names ------------------------------------------------------------------------------------

namespace detail {

const char* readable_type_name(const std::type_info& type) {
    static std::mutex mutex;
    static std::unordered_map<std::type_index, std::string> names;  // elements never move
    const std::lock_guard<std::mutex> lock(mutex);
    auto it = names.find(type);
    if (it != names.end()) return it->second.c_str();
    int status = 0;
    char* demangled = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
    std::string full = status == 0 && demangled ? demangled : type.name();
    std::free(demangled);
    // Drop the scopes ("xgrad::test::", "(anonymous namespace)::", "a_function()::"): the part
    // after the last "::" outside brackets.
    std::size_t start = 0;
    int depth = 0;
    for (std::size_t i = 0; i + 1 < full.size(); ++i) {
        const char c = full[i];
        if (c == '<' || c == '(' || c == '[') ++depth;
        if (c == '>' || c == ')' || c == ']') --depth;
        if (depth == 0 && c == ':' && full[i + 1] == ':') start = i + 2;
    }
    return names.emplace(type, full.substr(start)).first->second.c_str();
}

}  // namespace detail

// --- the context ------------------------------------------------------------------------------

namespace {

struct TensorInfo {
    bool defined = false;
    Shape shape;
    Dtype dtype = kFloat32;
};

TensorInfo info_of(const Tensor& t) { return t.defined() ? TensorInfo{true, t.shape(), t.dtype()} : TensorInfo{}; }

// A stand-in value for a node whose value is elsewhere or gone: empty, of dtype d.
Storage empty_storage(Dtype d) {
    return dispatch_all(d, [](auto tag) {
        using T = typename decltype(tag)::type;
        return Storage(xt::xarray<T>::from_shape({0}));
    });
}

// An output's formula: its gradient goes on, unchanged, to its slot of the function's node.
std::vector<Tensor> pass_on(const GradArgs& args) { return {args.grad()}; }

// Makes `n` (a leaf holding an output's value) output `slot` of the function node `fn`.
void link_output(Node& n, const Tensor& fn, std::size_t slot, const char* name) {
    n.op = name;
    link_node(n, {fn}, Formula(pass_on), Saves::none());
    if (!n.is_leaf) n.parent_slot = {static_cast<std::uint32_t>(slot)};
}

bool contains(const std::vector<Tensor>& list, const Tensor& t) {
    return std::any_of(list.begin(), list.end(), [&](const Tensor& x) { return x.defined() && x.is_same(t); });
}

// Anomaly mode: the first NaN or Inf in output i, named after the function.
void check_output_anomaly(const char* name, std::size_t i, const Tensor& t) {
    std::visit(
        [&](const auto& a) {
            using T = typename std::decay_t<decltype(a)>::value_type;
            if constexpr (is_floating_v<T>) {
                const T* p = a.data();
                for (std::size_t j = 0, n = a.size(); j < n; ++j) {
                    const double v = static_cast<double>(p[j]);
                    if (std::isfinite(v)) continue;
                    throw Error(fmt::format("{}: produced {} in output {} of its forward, of shape {} (first at "
                                            "flat index {}; anomaly detection is on)",
                                            name, std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"), i,
                                            shape_str(t.shape()), j));
                }
            }
        },
        t.node().data());
}

}  // namespace

struct AutogradContext::State {
    const char* name = "";
    detail::BackwardFn backward = nullptr;
    bool once_differentiable = false;
    // The arguments of forward: which are tensors (a vector's elements one by one), the tensor
    // inputs, their shapes and dtypes, and which need a gradient.
    std::vector<bool> is_tensor_argument;
    std::vector<Tensor> inputs;
    std::vector<TensorInfo> input_info;
    std::vector<bool> needs;
    bool recording = false;
    // What forward asked for.
    bool forward_done = false;
    std::vector<Tensor> to_save, dirty, non_differentiable;
    bool materialize = true;
    // After forward: the outputs' shapes and dtypes, the saved tensors, the function's node.
    std::vector<TensorInfo> output_info;
    struct Saved {
        bool defined = false;
        Tensor tensor;                // not an output: held
        std::weak_ptr<Node> output;   // an output: not held (see the top of this file)
        std::size_t slot = 0;
        Tensor copy;                  // an output's value, with several outputs
        std::uint64_t version = 0;
    };
    std::vector<Saved> saved;
    std::weak_ptr<Node> node;

    void check_in_forward(const char* what) const {
        if (forward_done) throw Error(fmt::format("{}: {} is for forward, which has returned", name, what));
    }
    std::vector<Tensor> finish(const std::shared_ptr<AutogradContext>& ctx, std::vector<Tensor> outputs);
    std::vector<Tensor> run_backward(AutogradContext& ctx, const GradArgs& args);
    std::vector<Tensor> unpack() const;
};

AutogradContext::AutogradContext() : m_state(std::make_unique<State>()) {}
AutogradContext::~AutogradContext() = default;

const char* AutogradContext::name() const { return m_state->name; }

void AutogradContext::save_for_backward(std::vector<Tensor> to_save) {
    m_state->check_in_forward("save_for_backward");
    m_state->to_save = std::move(to_save);
}

void AutogradContext::mark_dirty(const std::vector<Tensor>& inputs) {
    m_state->check_in_forward("mark_dirty");
    m_state->dirty.insert(m_state->dirty.end(), inputs.begin(), inputs.end());
}

void AutogradContext::mark_non_differentiable(const std::vector<Tensor>& outputs) {
    m_state->check_in_forward("mark_non_differentiable");
    m_state->non_differentiable.insert(m_state->non_differentiable.end(), outputs.begin(), outputs.end());
}

void AutogradContext::set_materialize_grads(bool value) { m_state->materialize = value; }

bool AutogradContext::needs_input_grad(std::size_t index) const {
    const State& s = *m_state;
    if (index >= s.needs.size())
        throw Error(fmt::format("{}: needs_input_grad({}), but the function has {} tensor input{} (it counts "
                                "tensor inputs only, as LibTorch's)",
                                s.name, index, s.needs.size(), s.needs.size() == 1 ? "" : "s"));
    return s.needs[index];
}

bool AutogradContext::needs_input_grad(std::initializer_list<std::size_t> indices) const {
    return std::any_of(indices.begin(), indices.end(), [this](std::size_t i) { return needs_input_grad(i); });
}

std::vector<Tensor> AutogradContext::get_saved_variables() const {
    if (!m_state->forward_done)
        throw Error(fmt::format("{}: get_saved_variables is for backward; forward has not returned yet", m_state->name));
    return m_state->unpack();
}

std::vector<Tensor> AutogradContext::State::unpack() const {
    std::vector<Tensor> out;
    out.reserve(saved.size());
    for (std::size_t j = 0; j < saved.size(); ++j) {
        const Saved& e = saved[j];
        if (!e.defined) {
            out.emplace_back();
            continue;
        }
        Tensor t = e.tensor;
        if (!t.defined()) {
            if (auto alive = e.output.lock()) {
                t = Tensor(std::move(alive));
            } else {
                // Every handle on this output was dropped, but another output led here: its
                // value, as output `slot` again (with a graph under create_graph).
                if (!e.copy.defined())
                    throw Error(fmt::format("{} backward: output {} was saved for backward and no longer exists",
                                            name, e.slot));
                t = make_leaf(e.copy.node().data());
                if (auto fn = node.lock()) link_output(t.node(), Tensor(std::move(fn)), e.slot, name);
                out.push_back(std::move(t));
                continue;
            }
        }
        const Node& n = t.node();
        if (n.version() != e.version) {
            const std::string what = !e.tensor.defined() ? fmt::format("output {}", e.slot)
                                     : contains(inputs, e.tensor)
                                         ? fmt::format("an input")
                                         : std::string("a tensor forward made");
            throw Error(fmt::format("{} backward: saved tensor {} ({}, of shape {}) was modified in place after "
                                    "{}'s forward saved it (version {} -> {}{}); clone it before changing it, or "
                                    "call backward first",
                                    name, j, what, shape_str(n.shape), name, e.version, n.version(),
                                    *n.storage->last_write ? fmt::format(", last through {}", n.storage->last_write) : ""));
        }
        out.push_back(std::move(t));
    }
    return out;
}

// --- recording a call -------------------------------------------------------------------------

std::vector<Tensor> AutogradContext::State::finish(const std::shared_ptr<AutogradContext>& ctx,
                                                   std::vector<Tensor> outputs) {
    forward_done = true;
    const std::size_t k = outputs.size();
    for (const Tensor& d : dirty) {
        if (!d.defined()) throw Error(fmt::format("{}: mark_dirty was given an undefined tensor", name));
        if (!contains(inputs, d))
            throw Error(fmt::format("{}: mark_dirty was given a tensor of shape {} that is not an input of the "
                                    "function (mark only the inputs forward changed in place)",
                                    name, shape_str(d.shape())));
        if (!contains(outputs, d))
            throw Error(fmt::format("{}: an input marked dirty (changed in place) must be returned as an output of "
                                    "forward, as in torch",
                                    name));
    }
    // Which outputs become nodes of the graph, before any is replaced by a copy below.
    std::vector<bool> differentiable(k, false), is_dirty(k, false);
    output_info.assign(k, TensorInfo{});
    for (std::size_t i = 0; i < k; ++i) {
        Tensor& o = outputs[i];
        if (!o.defined()) continue;
        const bool repeated = std::any_of(outputs.begin(), outputs.begin() + i,
                                          [&](const Tensor& p) { return p.defined() && p.is_same(o); });
        is_dirty[i] = contains(dirty, o) && !repeated;
        differentiable[i] = recording && is_floating(o.dtype()) && !contains(non_differentiable, o);
        // An output becomes this function's own tensor: an input returned as it is (not marked
        // dirty), one returned twice, or one with a graph of its own is copied first.
        if (!is_dirty[i] && (repeated || contains(inputs, o) || o.requires_grad())) o = make_leaf(o.node().data());
        if (detect_anomaly_enabled()) check_output_anomaly(name, i, o);
        output_info[i] = info_of(o);
    }
    if (!recording) {
        for (std::size_t i = 0; i < k; ++i)
            if (is_dirty[i]) outputs[i].node().bump_version(name);
        return outputs;
    }

    // Refusals first, so that a refused call leaves the graph as it was.
    for (const auto& [key, value] : ctx->saved_data)
        if (value.is_tensor() && contains(outputs, value.to_tensor()))
            throw Error(fmt::format("{}: saved_data[\"{}\"] holds an output of the function, which would keep its "
                                    "graph alive forever; save it with save_for_backward",
                                    name, key));
    for (std::size_t i = 0; i < k; ++i) {
        if (!is_dirty[i]) continue;
        const Tensor& x = outputs[i];
        if (x.node().view && x.node().view->base->is_leaf && x.node().view->base->requires_grad)
            throw Error(fmt::format("{}: marked dirty (changed in place) a view of shape {} of a leaf that requires "
                                    "grad; as in torch, such a view cannot be changed in place while gradients are "
                                    "recorded: pass a clone(), or call it under NoGradGuard",
                                    name, shape_str(x.shape())));
        if (x.is_leaf() && x.requires_grad())
            throw Error(fmt::format("{}: marked dirty (changed in place) a leaf tensor of shape {} that requires grad; "
                                    "as in torch, such a leaf cannot be changed in place while gradients are "
                                    "recorded: pass a clone(), or call it under NoGradGuard",
                                    name, shape_str(x.shape())));
        if (!differentiable[i] && x.requires_grad())
            throw Error(fmt::format("{}: input of shape {} was marked both dirty and non-differentiable, but it "
                                    "requires grad: its history cannot simply end here; pass a detach()ed tensor",
                                    name, shape_str(x.shape())));
    }

    // The function's node, reading the inputs; a dirty input's old history stands in for it.
    auto fn_node = std::make_shared<Node>(empty_storage(kFloat32));
    fn_node->op = name;
    fn_node->num_outputs = static_cast<std::uint32_t>(std::max<std::size_t>(k, 1));
    std::vector<Tensor> parents = inputs;
    std::vector<std::shared_ptr<Node>> past(k);
    for (std::size_t i = 0; i < k; ++i) {
        if (!is_dirty[i]) continue;
        Node& x = outputs[i].node();
        if (!differentiable[i]) {  // an int64 buffer changed in place: no history to move
            x.bump_version(name);
            continue;
        }
        past[i] = split_history(x, empty_storage(x.dtype()));
        past[i]->shape = x.shape;     // what its readers' gradients are checked against
        past[i]->overwritten = true;  // its value is gone: forward wrote over it
        for (Tensor& p : parents)
            if (p.defined() && p.is_same(outputs[i])) p = Tensor(past[i]);
    }
    link_node(*fn_node, std::move(parents),
              Formula([ctx](const GradArgs& args) { return ctx->m_state->run_backward(*ctx, args); }), Saves::none());
    const Tensor fn(fn_node);
    for (std::size_t i = 0; i < k; ++i) {
        if (!differentiable[i]) continue;
        Node& o = outputs[i].node();
        if (past[i] && o.view) {
            // A view marked dirty: its base's history is rebased (torch's CopySlices), the
            // function's output i written at the view's positions, and the view reads its
            // gradient from the base, as after any in-place op on a view.
            auto made = std::make_shared<Node>(empty_storage(o.dtype()));
            made->shape = o.shape;
            link_output(*made, fn, i, name);
            rebase_base_onto(o, Tensor(std::move(made)), name);
            restart_view_from_base(o, std::move(past[i]));
        } else if (past[i]) {
            auto made = std::make_shared<Node>(empty_storage(o.dtype()));
            link_output(*made, fn, i, name);
            rebase_history(o, std::move(past[i]), *made, name);
        } else {
            link_output(o, fn, i, name);
        }
    }
    node = fn_node;

    saved.reserve(to_save.size());
    for (const Tensor& t : to_save) {
        Saved e;
        if (t.defined()) {
            e.defined = true;
            e.version = t.node().version();
            std::size_t i = 0;
            while (i < k && !(differentiable[i] && outputs[i].is_same(t))) ++i;
            if (i < k) {
                e.output = t.node_ptr();
                e.slot = i;
                if (k > 1) e.copy = make_leaf(t.node().data());
            } else {
                e.tensor = t;
            }
        }
        saved.push_back(std::move(e));
    }
    to_save.clear();
    // The context lives in the function's node, so it must not hold the outputs: a dirty input
    // is one (node -> context -> output -> node would never be freed).
    for (std::size_t i = 0; i < k; ++i)
        if (is_dirty[i])
            for (Tensor& t : inputs)
                if (t.defined() && t.is_same(outputs[i])) t = Tensor();
    dirty.clear();
    non_differentiable.clear();
    return outputs;
}

std::vector<Tensor> AutogradContext::State::run_backward(AutogradContext& ctx, const GradArgs& args) {
    std::vector<Tensor> grads(args.grads.begin(), args.grads.end());
    grads.resize(output_info.size());
    if (materialize)
        for (std::size_t i = 0; i < grads.size(); ++i)
            if (!grads[i].defined() && output_info[i].defined)
                grads[i] = zeros(output_info[i].shape, output_info[i].dtype);
    // A backward that is not differentiable runs without recording; its gradients then carry
    // an op that refuses to be differentiated (torch's DelayedError), when there is something
    // they would have depended on.
    const bool refuse_twice = once_differentiable && grad_enabled();
    std::vector<Tensor> depends;
    if (refuse_twice) {
        for (const Tensor& g : grads)
            if (g.defined() && g.requires_grad()) depends.push_back(g);
        for (const Tensor& t : unpack())
            if (t.defined() && t.requires_grad()) depends.push_back(t);
    }
    std::vector<Tensor> result;
    {
        AutoGradMode mode(grad_enabled() && !once_differentiable);
        result = backward(&ctx, std::move(grads));
    }
    if (refuse_twice && !depends.empty())
        for (Tensor& g : result) {
            if (!g.defined()) continue;
            Tensor wrapped = make_leaf(g.node().data());
            wrapped.node().op = name;
            const char* who = name;
            link_node(wrapped.node(), depends, Formula([who](const GradArgs&) -> std::vector<Tensor> {
                throw Error(fmt::format("{}: its backward is marked once_differentiable (not written in "
                                        "differentiable ops), so its gradient cannot be differentiated again",
                                        who));
            }), Saves::none());
            g = wrapped;
        }

    const std::size_t n = is_tensor_argument.size();
    if (result.size() > n &&
        std::all_of(result.begin() + n, result.end(), [](const Tensor& g) { return !g.defined(); }))
        result.resize(n);
    if (result.size() != n)
        throw Error(fmt::format("{} backward: returned {} gradient{}, expected {}: one per argument of forward "
                                "(undefined for an argument that is not a tensor or needs no gradient)",
                                name, result.size(), result.size() == 1 ? "" : "s", n));
    std::vector<Tensor> grads_in;
    grads_in.reserve(inputs.size());
    for (std::size_t p = 0; p < n; ++p) {
        Tensor& g = result[p];
        if (!is_tensor_argument[p]) {
            if (g.defined())
                throw Error(fmt::format("{} backward: returned a gradient at position {}, but argument {} of forward "
                                        "is not a tensor (return an undefined Tensor() there)",
                                        name, p, p));
            continue;
        }
        const TensorInfo& in = input_info[grads_in.size()];
        if (g.defined() && in.defined) {
            if (g.shape() != in.shape)
                throw Error(fmt::format("{} backward: gradient {} has shape {}, but its input has shape {}", name, p,
                                        shape_str(g.shape()), shape_str(in.shape)));
            if (g.dtype() != in.dtype)
                throw Error(fmt::format("{} backward: gradient {} is {}, but its input is {}", name, p,
                                        dtype_name(g.dtype()), dtype_name(in.dtype)));
        }
        grads_in.push_back(std::move(g));
    }
    return grads_in;
}

// --- FunctionCall -----------------------------------------------------------------------------

namespace detail {

FunctionCall::FunctionCall(const char* name, BackwardFn backward, bool once_differentiable)
    : m_ctx(new AutogradContext()) {
    m_ctx->m_state->name = name;
    m_ctx->m_state->backward = backward;
    m_ctx->m_state->once_differentiable = once_differentiable;
}

FunctionCall::~FunctionCall() = default;

void FunctionCall::add_tensor(const Tensor& t) {
    auto& s = *m_ctx->m_state;
    s.is_tensor_argument.push_back(true);
    s.inputs.push_back(t);
    s.input_info.push_back(info_of(t));
    const bool need = grad_enabled() && t.defined() && t.requires_grad();
    s.needs.push_back(need);
    s.recording = s.recording || need;
}

void FunctionCall::add_other() { m_ctx->m_state->is_tensor_argument.push_back(false); }

std::vector<Tensor> FunctionCall::finish(std::vector<Tensor> outputs) {
    return m_ctx->m_state->finish(m_ctx, std::move(outputs));
}

}  // namespace detail

}  // namespace xgrad::autograd
