#pragma once
/// Stochastic gradient descent with optional momentum, dampening, L2 weight decay and Nesterov
/// momentum, step for step as torch.optim.SGD (torch 1.13, single-tensor implementation):
///
///   g ← g + weight_decay·p                                  (if weight_decay ≠ 0)
///   b ← g on the first step, else b ← momentum·b + (1 − dampening)·g   (if momentum ≠ 0)
///   g ← g + momentum·b if nesterov, else g ← b               (if momentum ≠ 0)
///   p ← p − lr·g
///
/// State per parameter: the momentum buffer b (only when momentum ≠ 0), in the parameter's
/// dtype, following it when the dtype changes (Optimizer::fit_state).
#include <initializer_list>
#include <limits>
#include <optional>

#include "optimizer.hpp"

namespace xgrad::optim {

/// SGD's hyper-parameters, chainable as torch::optim::SGDOptions:
/// `SGD(model.parameters(), SGDOptions(0.1).momentum(0.9).nesterov(true))`. Each field remembers
/// whether it was set: a group's options override the optimizer's defaults in the fields they set
/// (`SGDOptions().momentum(0)`), as a torch param_groups dict does. lr has no default (as torch's
/// `required`): the defaults or every group must give one.
class SGDOptions {
public:
    SGDOptions() = default;
    SGDOptions(double lr) : m_lr(lr) {}  // NOLINT: implicit, so SGD(params, 0.1) reads naturally
    SGDOptions& lr(double v) { m_lr = v; return *this; }
    SGDOptions& momentum(double v) { m_momentum = v; return *this; }
    SGDOptions& dampening(double v) { m_dampening = v; return *this; }
    SGDOptions& weight_decay(double v) { m_weight_decay = v; return *this; }
    SGDOptions& nesterov(bool on) { m_nesterov = on; return *this; }
    /// The lr, NaN while unset.
    double lr() const { return m_lr.value_or(std::numeric_limits<double>::quiet_NaN()); }
    bool has_lr() const { return m_lr.has_value(); }
    double momentum() const { return m_momentum.value_or(0); }
    double dampening() const { return m_dampening.value_or(0); }
    double weight_decay() const { return m_weight_decay.value_or(0); }
    bool nesterov() const { return m_nesterov.value_or(false); }
    /// These options with each unset field taken from `defaults`.
    SGDOptions merged_over(const SGDOptions& defaults) const;
    /// Every field at torch's default but lr, which stays unset.
    static SGDOptions class_defaults() { return SGDOptions().momentum(0).dampening(0).weight_decay(0).nesterov(false); }

private:
    std::optional<double> m_lr;
    std::optional<double> m_momentum;
    std::optional<double> m_dampening;
    std::optional<double> m_weight_decay;
    std::optional<bool> m_nesterov;
};

class SGD : public OptimizerWithOptions<SGDOptions> {
public:
    /// Throws for lr < 0, momentum < 0, weight_decay < 0, any of them or dampening NaN or
    /// infinite, and nesterov without momentum or with dampening.
    SGD(std::vector<Tensor> params, const SGDOptions& options);
    /// A braced list of tensors ({} included, which would be ambiguous with the groups' form).
    SGD(std::initializer_list<Tensor> params, const SGDOptions& options)
        : SGD(std::vector<Tensor>(params), options) {}
    /// Parameter groups, each group's options over `defaults` (torch's SGD(param_groups, lr=...)).
    /// Throws as above, naming the group, for an empty group or list, and for a parameter given
    /// twice.
    SGD(std::vector<Group> param_groups, const SGDOptions& defaults);
    void step() override;

protected:
    HyperParameters hyper_parameters(std::size_t group) const override;
    void check_hyper_parameters(const HyperParameters& h) const override;
    void set_hyper_parameters(std::size_t group, const HyperParameters& h) override;
    std::vector<std::string> buffer_names(const HyperParameters& h) const override;
    std::vector<Tensor> get_state(std::size_t i) const override;
    void set_state(std::size_t i, std::vector<Tensor> state) override;
    void check_options(const SGDOptions& o) const override;
    void grow_state() override { m_momentum_buffer.resize(m_params.size()); }

private:
    std::vector<Tensor> m_momentum_buffer;  ///< aligned with m_params; undefined before the first step
};

}  // namespace xgrad::optim
