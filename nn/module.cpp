#include "module.hpp"

#include <algorithm>
#include <map>
#include <ostream>

#include "core/call_context.hpp"
#include "core/ops.hpp"

namespace xgrad::nn {

std::size_t SizeArg::get(const char* who, const char* what) const {
    if (m_value < 0)
        throw Error(fmt::format("{}: {} must be a non-negative integer, got {}", who, what, m_value));
    if (m_big) throw Error(fmt::format("{}: {} is too large", who, what));
    return static_cast<std::size_t>(m_value);
}

Module::Module(std::string name) : m_name(std::move(name)) {}

void Module::check_new_name(const char* what, const std::string& name) const {
    if (name.empty() || name.find('.') != std::string::npos)
        throw Error(fmt::format("{}: {}: the name must be non-empty and without '.', got '{}'", m_name, what, name));
    // One namespace for parameters, buffers and children, as torch's attributes.
    const auto taken = [&](const char* kind) {
        return Error(fmt::format("{}: {}: '{}' is already registered as a {}", m_name, what, name, kind));
    };
    for (const auto& [n, p] : m_parameters)
        if (n == name) throw taken("parameter");
    for (const auto& b : m_buffers)
        if (b.name == name) throw taken("buffer");
    for (const auto& [n, c] : m_children)
        if (n == name) throw taken("child module");
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
    return m_parameters.back().second;
}

Tensor Module::register_buffer(const std::string& name, Tensor value, bool persistent) {
    check_new_name("register_buffer", name);
    if (!value.defined())
        throw Error(fmt::format("{}: register_buffer: '{}' is an undefined tensor", m_name, name));
    // A buffer is state, not a graph input: keep it out of every graph, as torch's buffers.
    if (!value.is_leaf() || value.requires_grad()) value = value.detach();
    m_buffers.push_back({name, std::move(value), persistent});
    return m_buffers.back().value;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> child) {
    check_new_name("register_module", name);
    if (!child) throw Error(fmt::format("{}: register_module: '{}' is a null pointer", m_name, name));
    m_children.emplace_back(name, std::move(child));
}

void Module::replace_or_add_child(const std::string& name, std::shared_ptr<Module> child) {
    if (!child) throw Error(fmt::format("{}: register_module: '{}' is a null pointer", m_name, name));
    for (auto& [n, c] : m_children)
        if (n == name) {
            c = std::move(child);
            return;
        }
    add_child(name, std::move(child));
}

std::shared_ptr<Module> Module::remove_child(const std::string& name) {
    for (auto it = m_children.begin(); it != m_children.end(); ++it)
        if (it->first == name) {
            auto child = std::move(it->second);
            m_children.erase(it);
            return child;
        }
    throw Error(fmt::format("{}: no child module named '{}'", m_name, name));
}

void Module::collect_parameters(const std::string& prefix,
                                std::vector<std::pair<std::string, Tensor>>& out) const {
    for (const auto& [name, p] : m_parameters) out.emplace_back(prefix + name, p);
    for (const auto& [name, child] : m_children) child->collect_parameters(prefix + name + ".", out);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
    std::vector<std::pair<std::string, Tensor>> all, out;
    collect_parameters("", all);
    // Tied weights once: an optimizer given the same tensor twice refuses it.
    for (auto& entry : all)
        if (std::none_of(out.begin(), out.end(), [&](const auto& seen) { return seen.second.is_same(entry.second); }))
            out.push_back(std::move(entry));
    return out;
}

std::vector<Tensor> Module::parameters() const {
    std::vector<Tensor> out;
    for (auto& [name, p] : named_parameters()) out.push_back(p);
    return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
    return m_children;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
    std::vector<std::shared_ptr<Module>> out;
    for (const auto& [name, c] : m_children) out.push_back(c);
    return out;
}

std::size_t Module::num_parameters() const {
    std::size_t n = 0;
    for (const auto& p : parameters()) n += p.numel();
    return n;
}

template <class M>
void Module::collect_modules(M* m, const std::string& prefix, std::vector<std::pair<std::string, M*>>& out) {
    // A module reachable twice (shared) is listed once, under its first name, as torch.
    if (std::any_of(out.begin(), out.end(), [&](const auto& seen) { return seen.second == m; })) return;
    out.emplace_back(prefix, m);
    for (const auto& [name, child] : m->m_children)
        collect_modules<M>(child.get(), prefix.empty() ? name : prefix + "." + name, out);
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
    std::vector<std::pair<std::string, Module*>> out;
    collect_modules<Module>(this, "", out);
    return out;
}

std::vector<std::pair<std::string, const Module*>> Module::named_modules() const {
    std::vector<std::pair<std::string, const Module*>> out;
    collect_modules<const Module>(this, "", out);
    return out;
}

std::vector<Module*> Module::modules() {
    std::vector<Module*> out;
    for (auto& [name, m] : named_modules()) out.push_back(m);
    return out;
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
    for (auto& [n, c] : m_children) c->apply(fn);
    fn(*this);
    return *this;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
    std::vector<std::pair<std::string, Tensor>> out;
    for (const auto& [prefix, m] : named_modules())
        for (const auto& b : m->m_buffers) {
            if (std::any_of(out.begin(), out.end(), [&](const auto& seen) { return seen.second.is_same(b.value); }))
                continue;
            out.emplace_back(prefix.empty() ? b.name : prefix + "." + b.name, b.value);
        }
    return out;
}

std::vector<Tensor> Module::buffers() const {
    std::vector<Tensor> out;
    for (auto& [name, b] : named_buffers()) out.push_back(b);
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
    const auto dot = dotted_name.find('.');
    if (dot == std::string::npos) {
        local_name = dotted_name;
        return *this;
    }
    const std::string head = dotted_name.substr(0, dot);
    for (auto& [n, c] : m_children)
        if (n == head) return c->owner_of(dotted_name.substr(dot + 1), local_name);
    throw Error(fmt::format("{}: no child module named '{}' (in '{}')", m_name, head, dotted_name));
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
    m_training = on;
    for (auto& [n, c] : m_children) c->train(on);
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

void Module::collect_state(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) const {
    for (const auto& [name, p] : m_parameters) out.emplace_back(prefix + name, p);
    for (const auto& b : m_buffers)
        if (b.persistent) out.emplace_back(prefix + b.name, b.value);
    for (const auto& [name, child] : m_children) child->collect_state(prefix + name + ".", out);
}

NamedTensors Module::state_dict() const {
    std::vector<std::pair<std::string, Tensor>> entries;
    collect_state("", entries);  // every name, shared tensors included
    return entries;
}

LoadResult Module::load_state_dict(const NamedTensors& state, bool strict) {
    std::vector<std::pair<std::string, Tensor>> entries;
    collect_state("", entries);
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
        if (given.count(name) &&
            std::find(result.unexpected_keys.begin(), result.unexpected_keys.end(), name) ==
                result.unexpected_keys.end())
            result.unexpected_keys.push_back(name);

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
    std::vector<const void*> targets;
    for (const auto& l : to_load) targets.push_back(l.into.node_ptr().get());
    auto is_target = [&](const Tensor& t) {
        return std::find(targets.begin(), targets.end(), t.node_ptr().get()) != targets.end();
    };
    std::vector<Tensor> converted;
    for (const auto& l : to_load) {
        try {
            converted.push_back(l.from->dtype() != l.into.dtype() ? cast(*l.from, l.into.dtype())
                                : is_target(*l.from)               ? l.from->detach()
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

namespace {

std::vector<std::string> split_lines(const std::string& s) {
    std::vector<std::string> lines;
    std::size_t start = 0;
    while (true) {
        const auto nl = s.find('\n', start);
        lines.push_back(s.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
        if (nl == std::string::npos) break;
        start = nl + 1;
    }
    return lines;
}

// torch.nn.modules.module._addindent: every line but the first gets `spaces` more.
std::string add_indent(const std::string& s, int spaces) {
    const auto lines = split_lines(s);
    std::string out = lines[0];
    for (std::size_t i = 1; i < lines.size(); ++i) out += "\n" + std::string(spaces, ' ') + lines[i];
    return out;
}

}  // namespace

// torch.nn.Module.__repr__, line for line.
std::string to_string(const Module& m) {
    const std::string extra = m.extra_repr();
    const std::vector<std::string> extra_lines =
        extra.empty() ? std::vector<std::string>{} : split_lines(extra);
    std::vector<std::string> child_lines;
    for (const auto& [name, child] : m.named_children())
        child_lines.push_back("(" + name + "): " + add_indent(to_string(*child), 2));
    std::string s = m.name() + "(";
    if (extra_lines.size() == 1 && child_lines.empty()) {
        s += extra_lines[0];
    } else if (!extra_lines.empty() || !child_lines.empty()) {
        std::vector<std::string> lines = extra_lines;
        lines.insert(lines.end(), child_lines.begin(), child_lines.end());
        s += "\n  " + fmt::format("{}", fmt::join(lines, "\n  ")) + "\n";
    }
    return s + ")";
}

std::ostream& operator<<(std::ostream& os, const Module& module) { return os << to_string(module); }

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
