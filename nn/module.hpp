#pragma once
/// Module: the base of every layer, as torch.nn.Module. It owns named parameters, buffers and
/// child modules, each in registration order, and gives the recursive services every layer
/// needs: parameter, buffer and module lists with dotted names, apply, train/eval mode,
/// zero_grad, dtype conversion, state_dict save/load (.npz) and PyTorch's printed tree.
///
/// Users hold layers as std::shared_ptr (`auto mha = std::make_shared<MultiHeadAttention>(...)`);
/// a layer keeps its children as typed shared_ptr members and registers the same pointers.
///
/// The modules form a tree, or a DAG when one module is registered in two places (shared, as
/// torch allows), never a cycle: every call that links a child refuses one that holds its new
/// parent. Every walk of the tree keeps its own stack, so a tree as deep as memory allows is
/// walked, printed and destroyed without overflowing the call stack.
///
/// The registry is the one place a parameter handle lives: layers read their parameters back
/// with parameter("weight") rather than keeping a second copy of the handle, so that
/// set_parameter() (a functional call, as torch.func.functional_call) is seen by forward().
///
/// Every accessor here hands out the registered tensors themselves, as torch's: parameters(),
/// named_parameters(), buffers(), named_buffers(), parameter(), buffer() and the entries of
/// state_dict() alias, so a write through one (under NoGradGuard for a parameter, as in torch)
/// is what the module computes with. Take a snapshot with detach() (a copy).
#include <cstddef>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/io/npz.hpp"
#include "core/tensor.hpp"

namespace xgrad::nn {

using xgrad::NamedTensors;

/// What load_state_dict(state, strict = false) reports, as torch's _IncompatibleKeys:
/// entries the module has and the state lacks, and entries the state has and the module lacks.
struct LoadResult {
    std::vector<std::string> missing_keys;
    std::vector<std::string> unexpected_keys;
};

class Module {
public:
    /// `name` is what the printed tree calls the class ("Linear", "MultiHeadAttention").
    explicit Module(std::string name);
    /// Unlinks this module from its children and frees the ones it owned last without
    /// recursing, so that a chain of any depth is destroyed in constant stack.
    virtual ~Module();
    // Copies would alias the parameters; hold modules by shared_ptr instead.
    Module(const Module&) = delete;
    Module& operator=(const Module&) = delete;

    const std::string& name() const { return m_name; }

    // --- parameters and children -----------------------------------------------------------
    /// Own parameters first, then each child's, depth first (torch's order); names dotted
    /// from the path: "W_q.weight", "addnorm1.ln.bias". A tensor shared by two modules (tied
    /// weights) is listed once, under its first name, as torch does. The handles alias the
    /// parameters: `{ NoGradGuard g; p.mul_(0.5); }` on one changes the module.
    std::vector<std::pair<std::string, Tensor>> named_parameters() const;
    std::vector<Tensor> parameters() const;
    /// The direct children, in registration order, each module once (a module registered under
    /// two names is listed under the first, as torch's named_children).
    std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
    std::vector<std::shared_ptr<Module>> children() const;
    /// Total number of parameter elements (weights and biases of every descendant).
    std::size_t num_parameters() const;

    /// Every module of the tree, this one first under "" and then depth first with dotted
    /// names ("blks.block0.attention"), each module once (as torch's named_modules). The
    /// pointers do not own: they are valid while this module lives.
    std::vector<std::pair<std::string, Module*>> named_modules();
    std::vector<std::pair<std::string, const Module*>> named_modules() const;
    std::vector<Module*> modules();
    /// Calls fn on every descendant, children before their parent, then on this module (torch's
    /// apply: `net.apply(init_weights)`). As torch's, it goes through children(): a child held
    /// twice by one parent is visited once, a module shared by two parents once under each.
    /// Returns *this.
    Module& apply(const std::function<void(Module&)>& fn);

    /// This module as an M (LibTorch's as<M>()): null when it is not one.
    template <class M> M* as() { return dynamic_cast<M*>(this); }
    template <class M> const M* as() const { return dynamic_cast<const M*>(this); }

    /// Buffers: tensors that are state but not parameters (running statistics, fixed tables).
    /// Own buffers first, then each child's, depth first, each tensor once, as torch's
    /// named_buffers. Persistent and non-persistent alike. The handles alias the buffers.
    std::vector<std::pair<std::string, Tensor>> named_buffers() const;
    std::vector<Tensor> buffers() const;
    /// One of this module's own buffers by its local name (the buffer itself); throws if there is none.
    const Tensor& buffer(const std::string& name) const;

    /// One of this module's own parameters by its local name (the parameter itself); throws if there is none.
    const Tensor& parameter(const std::string& name) const;
    /// Replaces the handle registered under a dotted name with `value` (same shape and dtype).
    /// The module computes with `value` from then on; an optimizer built earlier still holds
    /// the old handle. For functional calls (gradient checks w.r.t. parameters) and for tying
    /// weights, as torch's `self.transformer.wte.weight = self.lm_head.weight`:
    /// `set_parameter("transformer.wte.weight", lm_head->weight())` (then both modules compute
    /// with one tensor, which gets both gradients, named_parameters() lists it once under its
    /// first name and state_dict() under both, as torch's). To change values while keeping
    /// handles, use load_state_dict.
    void set_parameter(const std::string& dotted_name, const Tensor& value);

    // --- modes ----------------------------------------------------------------------------
    /// Sets training mode on this module and every descendant (Dropout reads it).
    void train(bool on = true);
    void eval() { train(false); }
    bool is_training() const { return m_training; }

    /// Drops every parameter's gradient (PyTorch's zero_grad(set_to_none=True)).
    void zero_grad();

    /// Converts every parameter and every floating buffer to `dtype` (float32 or float64) in
    /// place (torch's to(dtype) leaves integer buffers alone): the handles stay the same, so
    /// optimizers built earlier see the new values (their own state, built for the old dtype,
    /// must be rebuilt). Gradients are dropped. Returns *this.
    Module& to(Dtype dtype);

    // --- state ----------------------------------------------------------------------------
    /// Every parameter and persistent buffer by dotted name, in torch's order: a module's own
    /// parameters, then its own persistent buffers, then each child's entries; a shared tensor
    /// appears under each of its names (as in torch). The entries alias the module's tensors,
    /// as torch's do: `{ NoGradGuard g; sd[0].second.copy_(w); }` sets the weight, and a later
    /// training step shows in them. Unlike torch's detached entries, a parameter's entry still
    /// requires grad. For a snapshot (to roll back to, or to keep the best model), copy each
    /// entry with detach(), as torch needs copy.deepcopy.
    NamedTensors state_dict() const;
    /// Copies values into the existing parameter and persistent-buffer handles, in place as
    /// torch's copy_ (each write bumps the tensor's version, even of equal values), converting
    /// the dtype as copy_ does (a float64 .npz from numpy loads into a float32 model). The state
    /// may be this module's own state_dict(), whose entries are its tensors.
    /// First checks every entry: a shape that differs, an undefined tensor or a repeated name
    /// is always an error; with `strict`, so is an entry the module lacks or a parameter or
    /// buffer with no entry. If anything is wrong it throws one Error listing all of it and the
    /// module is unchanged. Without `strict` the names that did not match are returned
    /// (torch's missing_keys and unexpected_keys) and every matching entry is loaded.
    /// missing_keys come in state_dict() order; unexpected_keys in torch's: by the module the
    /// key's leading names reach, in preorder, and in the state's order within one module.
    LoadResult load_state_dict(const NamedTensors& state, bool strict = true);

    // --- printing -------------------------------------------------------------------------
    /// The text between the parentheses of this module's line: "in_features=3, ...".
    virtual std::string extra_repr() const { return {}; }

protected:
    /// Registers a parameter, which must be a leaf; requires_grad is switched on for floating ones.
    /// Returns the registered handle (a copy of it: handles alias).
    Tensor register_parameter(const std::string& name, Tensor value);
    /// Registers a child module; returns the same pointer, typed, for the layer's member.
    /// A child that is this module, or holds it anywhere below, is refused (it would make a
    /// cycle), naming both modules and the path.
    template <class M>
    std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> child) {
        add_child(name, child);
        return child;
    }
    /// What register_module does, with `call` naming the user's call in its errors ("append").
    void add_child(const std::string& name, std::shared_ptr<Module> child, const char* call = "register_module");
    /// Registers a buffer (torch's register_buffer): state that is not a parameter, so it gets
    /// no gradient and no optimizer step. Persistent buffers are in state_dict and loaded by
    /// load_state_dict; non-persistent ones are not. to(dtype) converts floating buffers.
    /// Returns the registered handle; read it back with buffer(name).
    Tensor register_buffer(const std::string& name, Tensor value, bool persistent = true);
    /// Puts `child` under `name`: in the same place if the name is taken by a child (torch's
    /// ModuleDict assignment), else appended. Refuses a cycle as add_child does.
    void replace_or_add_child(const std::string& name, std::shared_ptr<Module> child,
                              const char* call = "register_module");
    /// Unregisters the child `name` and returns it; throws if there is none.
    std::shared_ptr<Module> remove_child(const std::string& name);

private:
    struct Buffer {
        std::string name;
        Tensor value;
        bool persistent;
    };
    // The walks of the tree (module.cpp, module_tree.cpp): they read the children and parents.
    friend struct ModuleTree;
    void check_new_name(const char* what, const std::string& name) const;
    void check_no_cycle(const char* call, const std::string& name, const Module& child) const;
    void link(const std::string& name, std::shared_ptr<Module> child);
    void unlink(Module& child);
    Module& owner_of(const std::string& dotted_name, std::string& local_name);

    std::string m_name;
    bool m_training = true;
    std::vector<std::pair<std::string, Tensor>> m_parameters;
    std::vector<Buffer> m_buffers;
    std::vector<std::pair<std::string, std::shared_ptr<Module>>> m_children;
    // Every registered name (one namespace, as torch's attributes): a child's index in
    // m_children, kNotChild for a parameter or a buffer. Registration costs O(1) however wide.
    static constexpr std::size_t kNotChild = ~std::size_t{0};
    std::unordered_map<std::string, std::size_t> m_names;
    // The modules that hold this one as a child, each with how many times (not owning: a
    // parent unlinks itself when it drops the child or dies). For the cycle check.
    std::unordered_map<Module*, std::size_t> m_parents;
};

/// A size or count argument of a module's constructor: any integer type, never a
/// floating-point value or a bool. d2l's constructors take ten positional arguments; one typed
/// a place too early (a dropout 0.5 where a size belongs) must not compile.
/// A negative value is refused with an Error naming the module and the argument by get().
class SizeArg {
public:
    template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
    constexpr SizeArg(T v) : m_value(static_cast<long long>(v)) {  // NOLINT: implicit by design
        if constexpr (std::is_unsigned_v<T>) m_big = v > static_cast<unsigned long long>(m_max);
    }
    template <class T, std::enable_if_t<std::is_floating_point_v<T> || std::is_same_v<T, bool>, int> = 0>
    SizeArg(T) = delete;  // a size is an integer: 0.5 or true here is an argument in the wrong place

    /// The value; throws "who: what must be a non-negative integer, got -3" for a negative one.
    std::size_t get(const char* who, const char* what) const;

private:
    static constexpr long long m_max = static_cast<long long>(~0ull >> 1);
    long long m_value;
    bool m_big = false;
};

/// A bool argument of a module's constructor: only a bool converts (not 0.5, not 1).
class BoolArg {
public:
    template <class T, std::enable_if_t<std::is_same_v<T, bool>, int> = 0>
    constexpr BoolArg(T v) : m_value(v) {}  // NOLINT: implicit by design
    template <class T, std::enable_if_t<!std::is_same_v<T, bool>, int> = 0>
    BoolArg(T) = delete;  // a dropout or a size in a flag's place must not compile
    constexpr operator bool() const { return m_value; }

private:
    bool m_value;
};

/// Chainable options, as LibTorch's TORCH_ARG: `opts.dropout(0.1)` sets and returns the
/// options, `opts.dropout()` reads. The size and bool forms take SizeArg and BoolArg, so a
/// value of the wrong kind does not compile; a negative size throws naming the option.
#define XGRAD_ARG(Options, T, name, init)      \
public:                                        \
    Options& name(T v) {                       \
        m_##name = v;                          \
        return *this;                          \
    }                                          \
    const T& name() const { return m_##name; } \
                                               \
private:                                       \
    T m_##name = init
#define XGRAD_SIZE_ARG(Options, name, init)        \
public:                                            \
    Options& name(::xgrad::nn::SizeArg v) {        \
        m_##name = v.get(#Options, #name);         \
        return *this;                              \
    }                                              \
    std::size_t name() const { return m_##name; }  \
                                                   \
private:                                           \
    std::size_t m_##name = init
#define XGRAD_BOOL_ARG(Options, name, init)   \
public:                                       \
    Options& name(::xgrad::nn::BoolArg v) {   \
        m_##name = v;                         \
        return *this;                         \
    }                                         \
    bool name() const { return m_##name; }    \
                                              \
private:                                      \
    bool m_##name = init

/// Makes a module callable as torch's `module(args...)`: derive from it beside Module,
///   class MultiHeadAttention : public Module, public Callable<MultiHeadAttention> { ... };
/// and `mha(q, k, v, valid_lens)` calls the forward overload that fits, default arguments
/// included, whatever its signature.
template <class Derived>
class Callable {
public:
    template <class... Args>
    decltype(auto) operator()(Args&&... args) {
        return static_cast<Derived&>(*this).forward(std::forward<Args>(args)...);
    }
};

/// PyTorch's repr: "Name(extra)" for a leaf module, otherwise the extra lines and
/// "(child): ..." lines inside, each nested level indented by two spaces, a shared module
/// printed in each of its places. Written in one pass, in time linear in the output. Levels
/// deeper than max_print_indent_levels are indented no further (torch's indentation alone
/// would make the text of a chain quadratic in its depth); shallower trees print as torch's.
inline constexpr std::size_t max_print_indent_levels = 64;
std::string to_string(const Module& module);
/// Writes the tree to `os` as it goes, without building the whole text first.
std::ostream& operator<<(std::ostream& os, const Module& module);

/// Writes module.state_dict() to an .npz file numpy can read (atomically: temp + rename).
void save(const Module& module, const std::string& path);
/// Reads an .npz file written by save() (or numpy.savez) into the module: load_state_dict,
/// with its dtype conversion and `strict`.
LoadResult load(Module& module, const std::string& path, bool strict = true);

/// How Python prints a float in a repr: 0.5 → "0.5", 0 → "0.0", 1e-5 → "1e-05".
std::string python_float(double v);
inline const char* python_bool(bool v) { return v ? "True" : "False"; }

}  // namespace xgrad::nn

/// fmt::print("{}", module) and fmt::print("{}", shared_ptr_to_module) print the tree.
template <class M>
struct fmt::formatter<M, char, std::enable_if_t<std::is_base_of_v<xgrad::nn::Module, M>>>
    : fmt::formatter<std::string> {
    template <class Ctx>
    auto format(const M& m, Ctx& ctx) const {
        return fmt::formatter<std::string>::format(xgrad::nn::to_string(m), ctx);
    }
};

template <class M>
struct fmt::formatter<std::shared_ptr<M>, char, std::enable_if_t<std::is_base_of_v<xgrad::nn::Module, M>>>
    : fmt::formatter<std::string> {
    template <class Ctx>
    auto format(const std::shared_ptr<M>& m, Ctx& ctx) const {
        return fmt::formatter<std::string>::format(m ? xgrad::nn::to_string(*m) : "None", ctx);
    }
};
