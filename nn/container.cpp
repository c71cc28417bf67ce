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

void Sequential::add(const char* call, const std::string& name, std::shared_ptr<Module> module, Chain chain,
                     Sequential* nested) {
    add_child(name, module, call);  // checks the name, null and a cycle
    m_items.push_back(std::move(module));
    m_names.push_back(name);
    m_chains.push_back(std::move(chain));
    m_nested.push_back(nested);
}

void Sequential::check_chainable() const {
    for (std::size_t i = 0; i < m_items.size(); ++i)
        if (!m_chains[i])
            throw Error(fmt::format("Sequential: cannot chain child '{}' ({}): its forward does not take and return "
                                    "one tensor; call it yourself (iterate the Sequential)",
                                    m_names[i], m_items[i]->name()));
}

Tensor Sequential::forward(const Tensor& x) {
    return as_call("Sequential", [&]() -> Tensor {
        // A Sequential inside is entered here rather than called, each checked as it is entered
        // (as its own forward would be), so nesting depth costs heap, not call stack.
        struct Frame {
            const Sequential* s;
            std::size_t next;
        };
        check_chainable();
        std::vector<Frame> stack{{this, 0}};
        Tensor y = x;
        while (!stack.empty()) {
            Frame& f = stack.back();
            if (f.next == f.s->m_items.size()) {
                stack.pop_back();
                continue;
            }
            const std::size_t i = f.next++;
            if (Sequential* inner = f.s->m_nested[i]) {
                inner->check_chainable();
                stack.push_back({inner, 0});
            } else {
                y = f.s->m_chains[i](y);
            }
        }
        return y;
    });
}

const std::shared_ptr<Module>& Sequential::item(long i) const { return pick("Sequential", m_items, i); }

ModuleList::ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) : ModuleList() {
    for (const auto& m : modules) add_item("ModuleList", m);
}

ModuleList::ModuleList(const Items& modules) : ModuleList() {
    for (const auto& m : modules) add_item("ModuleList", m);
}

void ModuleList::add_item(const char* call, std::shared_ptr<Module> module) {
    add_child(std::to_string(m_items.size()), module, call);  // checks null and a cycle
    m_items.push_back(std::move(module));
}

void ModuleList::extend(const ModuleList& other) {
    const std::vector<std::shared_ptr<Module>> items = other.m_items;  // other may be *this
    for (const auto& m : items) add_item("extend", m);
}

const std::shared_ptr<Module>& ModuleList::item(long i) const { return pick("ModuleList", m_items, i); }

ModuleDict::ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> items)
    : ModuleDict() {
    for (const auto& [key, m] : items) put("ModuleDict", key, m);
}

ModuleDict::ModuleDict(const Items& items) : ModuleDict() {
    for (const auto& [key, m] : items) put("ModuleDict", key, m);
}

void ModuleDict::put(const char* call, const std::string& key, std::shared_ptr<Module> module) {
    replace_or_add_child(key, module, call);  // checks the key, null and a cycle
    const auto at = m_index.find(key);
    if (at != m_index.end()) {
        m_items[at->second].second = std::move(module);
        return;
    }
    m_index.emplace(key, m_items.size());
    m_items.emplace_back(key, std::move(module));
}

std::shared_ptr<Module> ModuleDict::pop(const std::string& key) {
    std::shared_ptr<Module> m = (*this)[key];  // throws if absent
    remove_child(key);
    const std::size_t i = m_index.at(key);
    m_index.erase(key);
    m_items.erase(m_items.begin() + static_cast<std::ptrdiff_t>(i));
    for (std::size_t j = i; j < m_items.size(); ++j) m_index[m_items[j].first] = j;
    return m;
}

bool ModuleDict::contains(const std::string& key) const { return m_index.count(key) != 0; }

const std::shared_ptr<Module>& ModuleDict::operator[](const std::string& key) const {
    const auto at = m_index.find(key);
    if (at != m_index.end()) return m_items[at->second].second;
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
