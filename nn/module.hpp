#pragma once
/// Module: the base of every layer, as torch.nn.Module. It owns named parameters and named
/// child modules, both in registration order, and gives the recursive services every layer
/// needs: parameter lists with dotted names, train/eval mode, zero_grad, dtype conversion,
/// state_dict save/load (.npz) and PyTorch's printed tree.
///
/// Users hold layers as std::shared_ptr (`auto mha = std::make_shared<MultiHeadAttention>(...)`);
/// a layer keeps its children as typed shared_ptr members and registers the same pointers.
///
/// The registry is the one place a parameter handle lives: layers read their parameters back
/// with parameter("weight") rather than keeping a second copy of the handle, so that
/// set_parameter() (a functional call, as torch.func.functional_call) is seen by forward().
#include <cstddef>
#include <iosfwd>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/io/npz.hpp"
#include "core/tensor.hpp"

namespace xgrad::nn {

using xgrad::NamedTensors;

class Module {
public:
    /// `name` is what the printed tree calls the class ("Linear", "MultiHeadAttention").
    explicit Module(std::string name);
    virtual ~Module() = default;
    // Copies would alias the parameters; hold modules by shared_ptr instead.
    Module(const Module&) = delete;
    Module& operator=(const Module&) = delete;

    const std::string& name() const { return m_name; }

    // --- parameters and children -----------------------------------------------------------
    /// Own parameters first, then each child's, depth first (torch's order); names dotted
    /// from the path: "W_q.weight", "addnorm1.ln.bias". A tensor shared by two modules (tied
    /// weights) is listed once, under its first name, as torch does.
    std::vector<std::pair<std::string, Tensor>> named_parameters() const;
    std::vector<Tensor> parameters() const;
    /// The direct children, in registration order.
    std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
    std::vector<std::shared_ptr<Module>> children() const;
    /// Total number of parameter elements (weights and biases of every descendant).
    std::size_t num_parameters() const;

    /// One of this module's own parameters by its local name; throws if there is none.
    const Tensor& parameter(const std::string& name) const;
    /// Replaces the handle registered under a dotted name with `value` (same shape and dtype).
    /// The module computes with `value` from then on; an optimizer built earlier still holds
    /// the old handle. For functional calls (gradient checks w.r.t. parameters); to change
    /// values while keeping handles, use load_state_dict.
    void set_parameter(const std::string& dotted_name, const Tensor& value);

    // --- modes ----------------------------------------------------------------------------
    /// Sets training mode on this module and every descendant (Dropout reads it).
    void train(bool on = true);
    void eval() { train(false); }
    bool is_training() const { return m_training; }

    /// Drops every parameter's gradient (PyTorch's zero_grad(set_to_none=True)).
    void zero_grad();

    /// Converts every parameter to `dtype` (float32 or float64) in place: the handles stay the
    /// same, so optimizers built earlier see the new values (their own state, built for the
    /// old dtype, must be rebuilt). Gradients are dropped. Returns *this.
    Module& to(Dtype dtype);

    // --- state ----------------------------------------------------------------------------
    /// Copies of every parameter's values by dotted name, in named_parameters() order; a shared
    /// tensor appears under each of its names (as in torch).
    NamedTensors state_dict() const;
    /// Copies values into the existing parameter handles. First checks every entry: a name
    /// the module lacks, a parameter with no entry, a repeated name, or a shape or dtype that
    /// differs is collected; if anything is wrong it throws one Error listing all of it and
    /// the module is unchanged.
    void load_state_dict(const NamedTensors& state);

    // --- printing -------------------------------------------------------------------------
    /// The text between the parentheses of this module's line: "in_features=3, ...".
    virtual std::string extra_repr() const { return {}; }

protected:
    /// Registers a parameter, which must be a leaf; requires_grad is switched on for floating ones.
    /// Returns the registered handle (a copy of it: handles alias).
    Tensor register_parameter(const std::string& name, Tensor value);
    /// Registers a child module; returns the same pointer, typed, for the layer's member.
    template <class M>
    std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> child) {
        add_child(name, child);
        return child;
    }

private:
    void add_child(const std::string& name, std::shared_ptr<Module> child);
    void collect_parameters(const std::string& prefix,
                            std::vector<std::pair<std::string, Tensor>>& out) const;
    Module& owner_of(const std::string& dotted_name, std::string& local_name);

    std::string m_name;
    bool m_training = true;
    std::vector<std::pair<std::string, Tensor>> m_parameters;
    std::vector<std::pair<std::string, std::shared_ptr<Module>>> m_children;
};

/// PyTorch's repr: "Name(extra)" for a leaf module, otherwise the extra lines and
/// "(child): ..." lines inside, each nested level indented by two spaces.
std::string to_string(const Module& module);
std::ostream& operator<<(std::ostream& os, const Module& module);

/// Writes module.state_dict() to an .npz file numpy can read (atomically: temp + rename).
void save(const Module& module, const std::string& path);
/// Reads an .npz file written by save() (or numpy.savez) into the module: load_state_dict.
void load(Module& module, const std::string& path);

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
