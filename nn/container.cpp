#include "container.hpp"

#include <algorithm>

#include "core/call_context.hpp"
#include "core/ops.hpp"

namespace xgrad::nn {

namespace detail {

void throw_wrong_type(const std::string& container, const std::string& key, const Module& got) {
    throw Error(fmt::format("{}: entry {} is of type {}, not the type asked for", container, key, got.name()));
}

}  // namespace detail

namespace {

// torch's list indexing: -size ≤ i < size, negative from the end.
const std::shared_ptr<Module>& pick(const char* who, const std::vector<std::shared_ptr<Module>>& items, long i) {
    const long size = static_cast<long>(items.size());
    if (i < -size || i >= size)
        throw Error(fmt::format("{}: index {} is out of range for a container of {} modules (expected {} to {})",
                                who, i, size, -size, size - 1));
    return items[static_cast<std::size_t>(i < 0 ? i + size : i)];
}

}  // namespace

void Sequential::add(const std::string& name, std::shared_ptr<Module> module, Chain chain) {
    register_module(name, module);  // checks the name and null
    m_items.push_back(std::move(module));
    m_names.push_back(name);
    m_chains.push_back(std::move(chain));
}

Tensor Sequential::forward(const Tensor& x) {
    return as_call("Sequential", [&]() -> Tensor {
        for (std::size_t i = 0; i < m_items.size(); ++i)
            if (!m_chains[i])
                throw Error(fmt::format("Sequential: cannot chain child '{}' ({}): its forward does not take and return "
                                        "one tensor; call it yourself (iterate the Sequential)",
                                        m_names[i], m_items[i]->name()));
        Tensor y = x;
        for (const auto& chain : m_chains) y = chain(y);
        return y;
    });
}

const std::shared_ptr<Module>& Sequential::item(long i) const { return pick("Sequential", m_items, i); }

ModuleList::ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) : ModuleList() {
    for (const auto& m : modules) add_item(m);
}

void ModuleList::add_item(std::shared_ptr<Module> module) {
    register_module(std::to_string(m_items.size()), module);
    m_items.push_back(std::move(module));
}

void ModuleList::extend(const ModuleList& other) {
    const std::vector<std::shared_ptr<Module>> items = other.m_items;  // other may be *this
    for (const auto& m : items) add_item(m);
}

const std::shared_ptr<Module>& ModuleList::item(long i) const { return pick("ModuleList", m_items, i); }

ModuleDict::ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> items)
    : ModuleDict() {
    for (const auto& [key, m] : items) put(key, m);
}

void ModuleDict::put(const std::string& key, std::shared_ptr<Module> module) {
    replace_or_add_child(key, module);  // checks the key and null
    for (auto& [k, m] : m_items)
        if (k == key) {
            m = std::move(module);
            return;
        }
    m_items.emplace_back(key, std::move(module));
}

std::shared_ptr<Module> ModuleDict::pop(const std::string& key) {
    const auto& found = (*this)[key];  // throws if absent
    std::shared_ptr<Module> m = found;
    remove_child(key);
    m_items.erase(std::find_if(m_items.begin(), m_items.end(), [&](const auto& kv) { return kv.first == key; }));
    return m;
}

bool ModuleDict::contains(const std::string& key) const {
    return std::any_of(m_items.begin(), m_items.end(), [&](const auto& kv) { return kv.first == key; });
}

const std::shared_ptr<Module>& ModuleDict::operator[](const std::string& key) const {
    for (const auto& kv : m_items)
        if (kv.first == key) return kv.second;
    throw Error(fmt::format("ModuleDict: no key '{}' (keys: {})", key, fmt::join(keys(), ", ")));
}

std::vector<std::string> ModuleDict::keys() const {
    std::vector<std::string> out;
    for (const auto& kv : m_items) out.push_back(kv.first);
    return out;
}

std::vector<std::shared_ptr<Module>> ModuleDict::values() const {
    std::vector<std::shared_ptr<Module>> out;
    for (const auto& kv : m_items) out.push_back(kv.second);
    return out;
}

}  // namespace xgrad::nn
