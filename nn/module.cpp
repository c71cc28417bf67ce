#include "module.hpp"

#include <algorithm>
#include <map>
#include <ostream>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "core/call_context.hpp"
#include "core/ops.hpp"
#include "module_tree.hpp"

namespace xgrad::nn {

std::size_t SizeArg::get(const char* who, const char* what) const {
    if (m_value < 0)
        throw Error(fmt::format("{}: {} must be a non-negative integer, got {}", who, what, m_value));
    if (m_big) throw Error(fmt::format("{}: {} is too large", who, what));
    return static_cast<std::size_t>(m_value);
}

Module::Module(std::string name) : m_name(std::move(name)) {}

Module::~Module() { ModuleTree::tear_down(*this); }

void Module::check_new_name(const char* what, const std::string& name) const {
    if (name.empty() || name.find('.') != std::string::npos)
        throw Error(fmt::format("{}: {}: the name must be non-empty and without '.', got '{}'", m_name, what, name));
    // One namespace for parameters, buffers and children, as torch's attributes.
    const auto taken = [&](const char* kind) {
        return Error(fmt::format("{}: {}: '{}' is already registered as a {}", m_name, what, name, kind));
    };
    const auto at = m_names.find(name);
    if (at == m_names.end()) return;
    if (at->second != kNotChild) throw taken("child module");
    for (const auto& b : m_buffers)
        if (b.name == name) throw taken("buffer");
    throw taken("parameter");
}

Tensor Module::register_parameter(const std::string& name, Tensor value) {
    check_new_name("register_parameter", name);
    if (!value.defined())
        throw Error(fmt::format("{}: register_parameter: '{}' is an undefined tensor", m_name, name));
    if (!value.is_leaf())
        throw Error(
            fmt::format("{}: register_parameter: '{}' must be a leaf tensor, got the result of '{}' "
                        "(detach() it)",
                        m_name, name, value.op_name()));
    if (value.dtype() == kBFloat16)
        throw Error(fmt::format("{}: register_parameter: '{}' is bfloat16; parameters are float32 or float64 "
                                "(as under torch's autocast, which keeps them float32): register it as float32 "
                                "and run the products in bfloat16 under AutocastGuard",
                                m_name, name));
    if (is_floating(value.dtype()) && !value.requires_grad()) value.requires_grad_(true);
    m_parameters.emplace_back(name, std::move(value));
    m_names.emplace(name, kNotChild);
    return m_parameters.back().second;
}

Tensor Module::register_buffer(const std::string& name, Tensor value, bool persistent) {
    check_new_name("register_buffer", name);
    if (!value.defined())
        throw Error(fmt::format("{}: register_buffer: '{}' is an undefined tensor", m_name, name));
    // A buffer is state, not a graph input: keep it out of every graph, as torch's buffers.
    if (!value.is_leaf() || value.requires_grad()) value = value.detach();
    m_buffers.push_back({name, std::move(value), persistent});
    m_names.emplace(name, kNotChild);
    return m_buffers.back().value;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> child, const char* call) {
    check_new_name(call, name);
    if (!child) throw Error(fmt::format("{}: {}: '{}' is a null pointer", m_name, call, name));
    check_no_cycle(call, name, *child);
    link(name, std::move(child));
}

void Module::replace_or_add_child(const std::string& name, std::shared_ptr<Module> child, const char* call) {
    if (!child) throw Error(fmt::format("{}: {}: '{}' is a null pointer", m_name, call, name));
    const auto at = m_names.find(name);
    if (at == m_names.end() || at->second == kNotChild) {
        add_child(name, std::move(child), call);  // refuses a parameter's or buffer's name
        return;
    }
    check_no_cycle(call, name, *child);
    std::shared_ptr<Module>& c = m_children[at->second].second;
    std::shared_ptr<Module> old = std::move(c);
    c = std::move(child);
    ++c->m_parents[this];
    unlink(*old);
}

void Module::check_no_cycle(const char* call, const std::string& name, const Module& child) const {
    std::string path;
    if (!ModuleTree::contains(child, *this, path)) return;
    if (path.empty())
        throw Error(fmt::format("{}: {}: '{}' is this {} itself; a module cannot contain itself (the tree would "
                                "have a cycle)",
                                m_name, call, name, m_name));
    throw Error(fmt::format("{}: {}: cannot add '{}' ({}): this {} is inside it, at '{}', so the tree would have "
                            "a cycle",
                            m_name, call, name, child.m_name, m_name, path));
}

void Module::link(const std::string& name, std::shared_ptr<Module> child) {
    ++child->m_parents[this];
    m_names.emplace(name, m_children.size());
    m_children.emplace_back(name, std::move(child));
}

void Module::unlink(Module& child) {
    const auto it = child.m_parents.find(this);
    if (it != child.m_parents.end() && --it->second == 0) child.m_parents.erase(it);
}

std::shared_ptr<Module> Module::remove_child(const std::string& name) {
    const auto at = m_names.find(name);
    if (at == m_names.end() || at->second == kNotChild)
        throw Error(fmt::format("{}: no child module named '{}'", m_name, name));
    const std::size_t i = at->second;
    m_names.erase(at);
    auto child = std::move(m_children[i].second);
    m_children.erase(m_children.begin() + static_cast<std::ptrdiff_t>(i));
    for (std::size_t j = i; j < m_children.size(); ++j) m_names[m_children[j].first] = j;
    unlink(*child);
    return child;
}

namespace {

std::string dotted(const std::string& path, const std::string& name) {
    return path.empty() ? name : path + "." + name;
}

// Each module's own parameters, modules in torch's order, each tensor once (under its first
// name: tied weights once, as torch, and an optimizer given a tensor twice refuses it).
// Without `names` the names are not built: a deep chain's are quadratic in its depth.
void collect_parameters(const Module& root, bool names, std::vector<std::pair<std::string, Tensor>>& out) {
    std::unordered_set<const void*> seen;
    ModuleTree::preorder(root, true, [&](const Module& m, const std::string& path) {
        for (const auto& [name, p] : ModuleTree::own_parameters(m))
            if (seen.insert(p.node_ptr().get()).second) out.emplace_back(names ? dotted(path, name) : std::string(), p);
    });
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
    std::vector<std::pair<std::string, Tensor>> out;
    collect_parameters(*this, true, out);
    return out;
}

std::vector<Tensor> Module::parameters() const {
    std::vector<std::pair<std::string, Tensor>> all;
    collect_parameters(*this, false, all);
    std::vector<Tensor> out;
    out.reserve(all.size());
    for (auto& [name, p] : all) out.push_back(std::move(p));
    return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
    std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
    std::unordered_set<const Module*> seen;
    for (const auto& [name, c] : m_children)
        if (seen.insert(c.get()).second) out.emplace_back(name, c);
    return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
    std::vector<std::shared_ptr<Module>> out;
    for (auto& [name, c] : named_children()) out.push_back(std::move(c));
    return out;
}

std::size_t Module::num_parameters() const {
    std::size_t n = 0;
    for (const auto& p : parameters()) n += p.numel();
    return n;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
    std::vector<std::pair<std::string, Module*>> out;
    // this module is not const here, nor is any module below it
    ModuleTree::preorder(*this, true, [&](const Module& m, const std::string& path) {
        out.emplace_back(path, const_cast<Module*>(&m));
    });
    return out;
}

std::vector<std::pair<std::string, const Module*>> Module::named_modules() const {
    std::vector<std::pair<std::string, const Module*>> out;
    ModuleTree::preorder(*this, true, [&](const Module& m, const std::string& path) { out.emplace_back(path, &m); });
    return out;
}

std::vector<Module*> Module::modules() {
    std::vector<Module*> out;
    ModuleTree::preorder(*this, true, [&](const Module& m, const std::string&) { out.push_back(const_cast<Module*>(&m)); });
    return out;
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
    ModuleTree::apply(*this, fn);
    return *this;
}

namespace {

// Each module's own buffers, modules in torch's order, each tensor once, as torch's named_buffers.
void collect_buffers(const Module& root, bool names, std::vector<std::pair<std::string, Tensor>>& out) {
    std::unordered_set<const void*> seen;
    ModuleTree::preorder(root, true, [&](const Module& m, const std::string& path) {
        for (const auto& b : ModuleTree::own_buffers(m))
            if (seen.insert(b.value.node_ptr().get()).second)
                out.emplace_back(names ? dotted(path, b.name) : std::string(), b.value);
    });
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
    std::vector<std::pair<std::string, Tensor>> out;
    collect_buffers(*this, true, out);
    return out;
}

std::vector<Tensor> Module::buffers() const {
    std::vector<std::pair<std::string, Tensor>> all;
    collect_buffers(*this, false, all);
    std::vector<Tensor> out;
    out.reserve(all.size());
    for (auto& [name, b] : all) out.push_back(std::move(b));
    return out;
}

const Tensor& Module::buffer(const std::string& name) const {
    for (const auto& b : m_buffers)
        if (b.name == name) return b.value;
    throw Error(fmt::format("{}: no buffer named '{}'", m_name, name));
}

const Tensor& Module::parameter(const std::string& name) const {
    for (const auto& [n, p] : m_parameters)
        if (n == name) return p;
    throw Error(fmt::format("{}: no parameter named '{}'", m_name, name));
}

Module& Module::owner_of(const std::string& dotted_name, std::string& local_name) {
    Module* owner = this;
    std::size_t start = 0;  // the part of dotted_name below `owner`
    for (std::size_t dot; (dot = dotted_name.find('.', start)) != std::string::npos; start = dot + 1) {
        const std::string head = dotted_name.substr(start, dot - start);
        const auto it = owner->m_names.find(head);
        if (it == owner->m_names.end() || it->second == kNotChild)
            throw Error(fmt::format("{}: no child module named '{}' (in '{}')", owner->m_name, head,
                                    dotted_name.substr(start)));
        owner = owner->m_children[it->second].second.get();
    }
    local_name = dotted_name.substr(start);
    return *owner;
}

void Module::set_parameter(const std::string& dotted_name, const Tensor& value) {
    std::string local;
    Module& owner = owner_of(dotted_name, local);
    for (auto& [n, p] : owner.m_parameters) {
        if (n != local) continue;
        if (!value.defined() || value.shape() != p.shape() || value.dtype() != p.dtype())
            throw Error(fmt::format(
                "{}: set_parameter: '{}' is {} {}, got {}", m_name, dotted_name, dtype_name(p.dtype()),
                shape_str(p.shape()),
                value.defined() ? fmt::format("{} {}", dtype_name(value.dtype()), shape_str(value.shape()))
                                : std::string("an undefined tensor")));
        p = value;
        return;
    }
    throw Error(fmt::format("{}: set_parameter: no parameter named '{}'", m_name, dotted_name));
}

void Module::train(bool on) {
    for (Module* m : modules()) m->m_training = on;
}

void Module::zero_grad() {
    for (auto& p : parameters()) p.zero_grad();
}

Module& Module::to(Dtype dtype) {
    if (dtype != kFloat32 && dtype != kFloat64)
        throw Error(fmt::format("{}: to: parameters can be float32 or float64, got {}{}", m_name, dtype_name(dtype),
                                dtype == kBFloat16 ? " (parameters stay float32, as under torch's autocast: run the "
                                                     "products in bfloat16 under AutocastGuard instead)"
                                                   : ""));
    NoGradGuard no_grad;
    for (auto& p : parameters()) {
        if (p.dtype() == dtype) continue;
        p.set_data(cast(p, dtype));
        p.zero_grad();
    }
    for (auto& b : buffers())
        if (is_floating(b.dtype()) && b.dtype() != dtype) b.set_data(cast(b, dtype));
    return *this;
}

NamedTensors Module::state_dict() const {
    // Every path, as torch's: a shared module's tensors appear under each of its names.
    NamedTensors entries;
    ModuleTree::preorder(*this, false, [&](const Module& m, const std::string& path) {
        for (const auto& [name, p] : m.m_parameters) entries.emplace_back(dotted(path, name), p);
        for (const auto& b : m.m_buffers)
            if (b.persistent) entries.emplace_back(dotted(path, b.name), b.value);
    });
    return entries;
}

namespace {

void order_as_torch(const Module& root, std::vector<std::string>& unexpected) {
    // torch's load visits the modules in preorder and each lists, in the state's order, the
    // keys under its prefix whose next name is neither its child nor its own tensor. So a key
    // belongs to the deepest module its leading names reach. (torch drops a key naming a
    // module itself, or a path below a tensor, without a word; here they stay listed, with the
    // module holding that name.)
    if (unexpected.size() < 2) return;
    std::unordered_map<std::string, std::size_t> rank;  // module path -> preorder position
    ModuleTree::preorder(root, false, [&](const Module&, const std::string& path) {
        rank.emplace(path, rank.size());
    });
    auto owner = [&](const std::string& key) {
        std::size_t at = rank.at(""), from = 0;
        for (std::size_t dot; (dot = key.find('.', from)) != std::string::npos; from = dot + 1) {
            const auto it = rank.find(key.substr(0, dot));
            if (it == rank.end()) break;
            at = it->second;
        }
        return at;
    };
    std::vector<std::pair<std::size_t, std::string>> keyed;
    keyed.reserve(unexpected.size());
    for (auto& key : unexpected) keyed.emplace_back(owner(key), std::move(key));
    std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (std::size_t i = 0; i < keyed.size(); ++i) unexpected[i] = std::move(keyed[i].second);
}

}  // namespace

LoadResult Module::load_state_dict(const NamedTensors& state, bool strict) {
    const NamedTensors entries = state_dict();
    std::map<std::string, const Tensor*> given;
    std::vector<std::string> repeated, mismatched;
    LoadResult result;
    for (const auto& [name, t] : state)
        if (!given.emplace(name, &t).second) repeated.push_back(name);
    struct Load {
        std::string name;
        Tensor into;
        const Tensor* from;
    };
    std::vector<Load> to_load;
    for (const auto& [name, p] : entries) {
        auto it = given.find(name);
        if (it == given.end()) {
            result.missing_keys.push_back(name);
            continue;
        }
        const Tensor& t = *it->second;
        // torch's copy_ converts the dtype but never the shape.
        if (!t.defined())
            mismatched.push_back(fmt::format("{}: expected {} {}, got an undefined tensor", name,
                                             dtype_name(p.dtype()), shape_str(p.shape())));
        else if (t.shape() != p.shape())
            mismatched.push_back(fmt::format("{}: expected shape {}, got {} (size mismatch)", name,
                                             shape_str(p.shape()), shape_str(t.shape())));
        else
            to_load.push_back({name, p, &t});
        given.erase(it);
    }
    for (const auto& [name, t] : state)
        if (given.erase(name)) result.unexpected_keys.push_back(name);  // each once, in the state's order
    order_as_torch(*this, result.unexpected_keys);

    const bool keys_wrong = strict && !(result.missing_keys.empty() && result.unexpected_keys.empty());
    if (keys_wrong || !repeated.empty() || !mismatched.empty()) {
        std::string msg =
            fmt::format("load_state_dict: the state does not match {}; nothing was loaded", m_name);
        if (strict && !result.missing_keys.empty())
            msg += fmt::format("\n  missing: {}", fmt::join(result.missing_keys, ", "));
        if (strict && !result.unexpected_keys.empty())
            msg += fmt::format("\n  unexpected: {}", fmt::join(result.unexpected_keys, ", "));
        if (!repeated.empty()) msg += fmt::format("\n  repeated: {}", fmt::join(repeated, ", "));
        for (const auto& m : mismatched) msg += fmt::format("\n  mismatched {}", m);
        if (keys_wrong) msg += "\n  (with strict = false the entries that match are loaded and the others returned)";
        throw Error(msg);
    }

    // Every conversion first (one can throw: a NaN into an integer buffer), then the writes. A
    // state_dict() entry is the tensor itself: one that is also loaded into (entries under
    // other names) is copied first, so that every entry loads the values it had.
    NoGradGuard no_grad;
    std::unordered_set<const void*> targets;
    for (const auto& l : to_load) targets.insert(l.into.node_ptr().get());
    auto is_target = [&](const Tensor& t) {
        return targets.count(t.node_ptr().get()) != 0;
    };
    std::vector<Tensor> converted;
    for (const auto& l : to_load) {
        try {
            converted.push_back(l.from->dtype() != l.into.dtype() ? cast(*l.from, l.into.dtype())
                                : is_target(*l.from)               ? l.from->detach().clone()
                                                                   : *l.from);
        } catch (const Error& e) {
            throw Error(fmt::format("load_state_dict: {} ({} into {}) cannot be converted, nothing was loaded: {}",
                                    l.name, dtype_name(l.from->dtype()), dtype_name(l.into.dtype()), e.what()));
        }
    }
    // Written in place, as torch's copy_: every handle sees the values and the version counts
    // the write (a graph made before refuses its backward), even when the values are the same.
    for (std::size_t i = 0; i < to_load.size(); ++i) to_load[i].into.copy_(converted[i]);
    return result;
}

std::string to_string(const Module& m) {
    std::ostringstream os;
    ModuleTree::print(os, m);
    return os.str();
}

std::ostream& operator<<(std::ostream& os, const Module& module) {
    ModuleTree::print(os, module);
    return os;
}

// The file's errors (its own words name the path) start with the call made, save or load.
void save(const Module& module, const std::string& path) {
    as_call("save", [&] { save_npz(path, module.state_dict()); });
}

LoadResult load(Module& module, const std::string& path, bool strict) {
    const NamedTensors state = as_call("load", [&] { return load_npz(path); });
    try {
        return module.load_state_dict(state, strict);
    } catch (const Error& e) {
        throw Error(fmt::format("load: {}: {}", path, e.what()));
    }
}

std::string python_float(double v) {
    std::string s = fmt::format("{}", v);
    if (s.find_first_of(".eni") == std::string::npos) s += ".0";  // "0" → "0.0"; not inf/nan/1e-05
    return s;
}

}  // namespace xgrad::nn
