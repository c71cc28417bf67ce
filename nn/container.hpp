#pragma once
/// Containers, as torch.nn.Sequential, ModuleList and ModuleDict: modules that hold other
/// modules as children, so their parameters get torch's dotted names ("heads.0.q.weight",
/// "blks.block0.ffn.dense1.bias") and the tree prints as torch 1.13 prints it:
///   (heads): ModuleList(
///     (0): AttentionHead(...)
///   )
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "nn/module.hpp"

namespace xgrad::nn {

namespace detail {

template <class M, class = void>
struct takes_one_tensor : std::false_type {};
template <class M>
struct takes_one_tensor<
    M, std::enable_if_t<std::is_convertible_v<decltype(std::declval<M&>().forward(std::declval<const Tensor&>())),
                                              Tensor>>> : std::true_type {};

/// Typed access to the i-th or named child, with an error naming the container and both types.
[[noreturn]] void throw_wrong_type(const std::string& container, const std::string& key, const Module& got);

}  // namespace detail

/// Whether M's forward takes one tensor and returns one (what Sequential chains).
template <class M>
inline constexpr bool takes_one_tensor_v = detail::takes_one_tensor<M>::value;

/// Sequential: forward(x) = m_n(...m_2(m_1(x))), children named "0", "1", ... in order.
///   auto net = std::make_shared<nn::Sequential>(
///       std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 1));
///   Tensor y = (*net)(x);  // net->forward(x)
/// push_back accepts only modules whose forward takes and returns one tensor (checked when it
/// compiles). add_module(name, m), as torch's, takes any module under a chosen name, so a
/// Sequential can hold blocks with more arguments (d2l's `blks`) and be iterated; forward then
/// refuses to run, naming the child it cannot chain.
/// Every call that adds a module (the constructors too) refuses one that is this container or
/// holds it (a cycle), as register_module does, naming the call.
class Sequential : public Module, public Callable<Sequential> {
public:
    Sequential() : Module("Sequential") {}
    template <class... M>
    explicit Sequential(std::shared_ptr<M>... modules) : Sequential() {
        (chain_in("Sequential", std::to_string(size()), std::move(modules)), ...);
    }

    template <class M>
    void push_back(std::shared_ptr<M> module) {
        chain_in("push_back", std::to_string(size()), std::move(module));
    }
    template <class M>
    void push_back(const std::string& name, std::shared_ptr<M> module) {
        chain_in("push_back", name, std::move(module));
    }
    /// torch's add_module: any module, under `name`.
    template <class M>
    void add_module(const std::string& name, std::shared_ptr<M> module) {
        static_assert(std::is_base_of_v<Module, M>, "Sequential holds modules");
        if constexpr (takes_one_tensor_v<M>)
            chain_in("add_module", name, std::move(module));
        else
            add("add_module", name, std::move(module), Chain());
    }

    Tensor forward(const Tensor& x);

    std::size_t size() const { return m_items.size(); }
    bool empty() const { return m_items.empty(); }
    /// The i-th module, negative i counting from the end (torch's heads[-1]); throws outside
    /// [-size(), size()), and for an unsigned index that went below zero.
    template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
    const std::shared_ptr<Module>& operator[](I i) const {
        return item(checked_index(name().c_str(), i));
    }
    /// The i-th module as an M&; throws if it is not one.
    template <class M, class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
    M& at(I i) const {
        const auto& m = (*this)[i];
        if (auto* typed = dynamic_cast<M*>(m.get())) return *typed;
        detail::throw_wrong_type(name(), std::to_string(i), *m);
    }
    auto begin() const { return m_items.begin(); }
    auto end() const { return m_items.end(); }

private:
    const std::shared_ptr<Module>& item(long i) const;
    using Chain = std::function<Tensor(const Tensor&)>;
    template <class M>
    void chain_in(const char* call, const std::string& name, std::shared_ptr<M> module) {
        static_assert(std::is_base_of_v<Module, M>, "Sequential holds modules");
        static_assert(takes_one_tensor_v<M>,
                      "Sequential::push_back: the module's forward must take one tensor and return one "
                      "(use add_module for others)");
        M* raw = module.get();
        Sequential* nested = nullptr;
        if constexpr (std::is_same_v<M, Sequential>) nested = raw;
        add(call, name, std::move(module),
            raw ? Chain([raw](const Tensor& x) { return Tensor(raw->forward(x)); }) : Chain(), nested);
    }
    /// `call` names the user's call in errors. `nested`: the module, when it is a Sequential
    /// itself, which forward enters without a call (a nesting of any depth runs in constant stack).
    void add(const char* call, const std::string& name, std::shared_ptr<Module> module, Chain chain,
             Sequential* nested = nullptr);
    void check_chainable() const;

    std::vector<std::shared_ptr<Module>> m_items;
    std::vector<std::string> m_names;
    std::vector<Chain> m_chains;
    std::vector<Sequential*> m_nested;
};

/// ModuleList: a list of modules registered as children "0", "1", ... (torch's ModuleList).
/// It has no forward: iterate it, as `for h in self.heads` does. Adding a module that is this
/// list or holds it (a cycle) is refused, naming the call.
///   heads = register_module("heads", std::make_shared<nn::ModuleList>());
///   for (...) heads->push_back(std::make_shared<AttentionHead>(d, d / h));
///   for (const auto& h : *heads) ... h->as<AttentionHead>() ...   // or heads->at<AttentionHead>(i)
class ModuleList : public Module {
public:
    /// The modules a list is built from. make_shared cannot pass on a braced list, so build
    /// one as `std::make_shared<nn::ModuleList>(nn::ModuleList::Items{a, b})`.
    using Items = std::vector<std::shared_ptr<Module>>;
    ModuleList() : Module("ModuleList") {}
    ModuleList(std::initializer_list<std::shared_ptr<Module>> modules);
    explicit ModuleList(const Items& modules);

    template <class M>
    void push_back(std::shared_ptr<M> module) {
        static_assert(std::is_base_of_v<Module, M>, "ModuleList holds modules");
        add_item("push_back", std::move(module));
    }
    /// torch's name for push_back.
    template <class M>
    void append(std::shared_ptr<M> module) {
        static_assert(std::is_base_of_v<Module, M>, "ModuleList holds modules");
        add_item("append", std::move(module));
    }
    /// Appends every module of `other` (torch's extend); the modules are shared, not copied.
    void extend(const ModuleList& other);

    std::size_t size() const { return m_items.size(); }
    bool empty() const { return m_items.empty(); }
    /// The i-th module, negative i counting from the end (torch's heads[-1]); throws outside
    /// [-size(), size()), and for an unsigned index that went below zero.
    template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
    const std::shared_ptr<Module>& operator[](I i) const {
        return item(checked_index(name().c_str(), i));
    }
    /// The i-th module as an M&; throws if it is not one.
    template <class M, class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
    M& at(I i) const {
        const auto& m = (*this)[i];
        if (auto* typed = dynamic_cast<M*>(m.get())) return *typed;
        detail::throw_wrong_type(name(), std::to_string(i), *m);
    }
    /// The i-th module as a shared_ptr<M>; throws if it is not one.
    template <class M, class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
    std::shared_ptr<M> ptr(I i) const {
        return std::shared_ptr<M>((*this)[i], &at<M>(i));
    }
    auto begin() const { return m_items.begin(); }
    auto end() const { return m_items.end(); }

private:
    const std::shared_ptr<Module>& item(long i) const;
    /// `call` names the user's call in errors.
    void add_item(const char* call, std::shared_ptr<Module> module);
    std::vector<std::shared_ptr<Module>> m_items;
};

/// ModuleDict: modules by key, in insertion order (torch's ModuleDict). Inserting a key that
/// is there replaces its module in place, as `d[key] = m` does in torch; keys may not be
/// empty or contain '.'. A module that is this dict or holds it (a cycle) is refused.
class ModuleDict : public Module {
public:
    /// The (key, module) pairs a dict is built from, in order. make_shared cannot pass on a
    /// braced list: `std::make_shared<nn::ModuleDict>(nn::ModuleDict::Items{{"a", m}, {"b", n}})`.
    using Items = std::vector<std::pair<std::string, std::shared_ptr<Module>>>;
    ModuleDict() : Module("ModuleDict") {}
    ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> items);
    explicit ModuleDict(const Items& items);

    template <class M>
    void insert(const std::string& key, std::shared_ptr<M> module) {
        static_assert(std::is_base_of_v<Module, M>, "ModuleDict holds modules");
        put("insert", key, std::move(module));
    }
    /// Removes `key` and returns its module (torch's pop); throws if absent.
    std::shared_ptr<Module> pop(const std::string& key);

    std::size_t size() const { return m_items.size(); }
    bool empty() const { return m_items.empty(); }
    bool contains(const std::string& key) const;
    /// The module under `key`; throws naming the keys there are if it is absent.
    const std::shared_ptr<Module>& operator[](const std::string& key) const;
    template <class M>
    M& at(const std::string& key) const {
        const auto& m = (*this)[key];
        if (auto* typed = dynamic_cast<M*>(m.get())) return *typed;
        detail::throw_wrong_type(name(), key, *m);
    }
    std::vector<std::string> keys() const;
    std::vector<std::shared_ptr<Module>> values() const;
    const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& items() const { return m_items; }
    auto begin() const { return m_items.begin(); }
    auto end() const { return m_items.end(); }

private:
    /// `call` names the user's call in errors.
    void put(const char* call, const std::string& key, std::shared_ptr<Module> module);
    std::vector<std::pair<std::string, std::shared_ptr<Module>>> m_items;
    std::unordered_map<std::string, std::size_t> m_index;  // key → its place in m_items
};

}  // namespace xgrad::nn
