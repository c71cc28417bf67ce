#include "module.hpp"

#include <algorithm>
#include <map>
#include <ostream>

#include "core/ops.hpp"

namespace xgrad::nn {

Module::Module(std::string name) : m_name(std::move(name)) {}

Tensor Module::register_parameter(const std::string& name, Tensor value) {
    if (name.empty() || name.find('.') != std::string::npos)
        throw Error(fmt::format(
            "{}: register_parameter: the name must be non-empty and without '.', got '{}'", m_name, name));
    if (!value.defined())
        throw Error(fmt::format("{}: register_parameter: '{}' is an undefined tensor", m_name, name));
    for (const auto& [n, p] : m_parameters)
        if (n == name)
            throw Error(fmt::format("{}: register_parameter: '{}' is already registered", m_name, name));
    if (!value.is_leaf())
        throw Error(
            fmt::format("{}: register_parameter: '{}' must be a leaf tensor, got the result of '{}' "
                        "(detach() it)",
                        m_name, name, value.op_name()));
    if (is_floating(value.dtype()) && !value.requires_grad()) value.requires_grad_(true);
    m_parameters.emplace_back(name, std::move(value));
    return m_parameters.back().second;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> child) {
    if (name.empty() || name.find('.') != std::string::npos)
        throw Error(fmt::format("{}: register_module: the name must be non-empty and without '.', got '{}'",
                                m_name, name));
    if (!child) throw Error(fmt::format("{}: register_module: '{}' is a null pointer", m_name, name));
    for (const auto& [n, c] : m_children)
        if (n == name)
            throw Error(fmt::format("{}: register_module: '{}' is already registered", m_name, name));
    m_children.emplace_back(name, std::move(child));
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
    if (!is_floating(dtype))
        throw Error(
            fmt::format("{}: to: parameters can be float32 or float64, got {}", m_name, dtype_name(dtype)));
    NoGradGuard no_grad;
    for (auto& p : parameters()) {
        if (p.dtype() == dtype) continue;
        p.set_data(cast(p, dtype));
        p.zero_grad();
    }
    return *this;
}

NamedTensors Module::state_dict() const {
    std::vector<std::pair<std::string, Tensor>> params;
    collect_parameters("", params);  // every name, shared tensors included
    NamedTensors out;
    for (const auto& [name, p] : params) out.emplace_back(name, p.detach());
    return out;
}

void Module::load_state_dict(const NamedTensors& state) {
    std::vector<std::pair<std::string, Tensor>> params;
    collect_parameters("", params);
    std::map<std::string, const Tensor*> given;
    std::vector<std::string> repeated, unexpected, missing, mismatched;
    for (const auto& [name, t] : state)
        if (!given.emplace(name, &t).second) repeated.push_back(name);
    for (const auto& [name, p] : params) {
        auto it = given.find(name);
        if (it == given.end()) {
            missing.push_back(name);
            continue;
        }
        const Tensor& t = *it->second;
        if (!t.defined())
            mismatched.push_back(fmt::format("{}: expected {} {}, got an undefined tensor", name,
                                             dtype_name(p.dtype()), shape_str(p.shape())));
        else if (t.shape() != p.shape() || t.dtype() != p.dtype())
            mismatched.push_back(fmt::format("{}: expected {} {}, got {} {}", name, dtype_name(p.dtype()),
                                             shape_str(p.shape()), dtype_name(t.dtype()),
                                             shape_str(t.shape())));
        given.erase(it);
    }
    for (const auto& [name, t] : state)
        if (given.count(name) && std::find(unexpected.begin(), unexpected.end(), name) == unexpected.end())
            unexpected.push_back(name);

    if (!(repeated.empty() && unexpected.empty() && missing.empty() && mismatched.empty())) {
        std::string msg =
            fmt::format("load_state_dict: the state does not match {}; nothing was loaded", m_name);
        if (!missing.empty()) msg += fmt::format("\n  missing: {}", fmt::join(missing, ", "));
        if (!unexpected.empty()) msg += fmt::format("\n  unexpected: {}", fmt::join(unexpected, ", "));
        if (!repeated.empty()) msg += fmt::format("\n  repeated: {}", fmt::join(repeated, ", "));
        for (const auto& m : mismatched) msg += fmt::format("\n  mismatched {}", m);
        throw Error(msg);
    }

    std::map<std::string, const Tensor*> by_name;
    for (const auto& [name, t] : state) by_name.emplace(name, &t);
    for (const auto& [name, p] : params) {
        const Tensor& src = *by_name.at(name);
        if (!src.is_same(p)) p.set_data(src);
    }
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

void save(const Module& module, const std::string& path) { save_npz(path, module.state_dict()); }

void load(Module& module, const std::string& path) {
    const NamedTensors state = load_npz(path);
    try {
        module.load_state_dict(state);
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
