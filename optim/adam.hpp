#pragma once
/// Adam (Kingma & Ba, 2015) and AdamW (Loshchilov & Hutter, 2019), step for step as
/// torch.optim.Adam / AdamW (torch 1.13, single-tensor implementations). With t the
/// parameter's step count (from 1):
///
///   g ← g + weight_decay·p              (Adam: L2 penalty folded into the gradient)
///   p ← p·(1 − lr·weight_decay)         (AdamW instead: decoupled decay, before the moments)
///   m ← β1·m + (1 − β1)·g
///   v ← β2·v + (1 − β2)·g²
///   v̂ ← max(v̂, v) and use v̂ below      (amsgrad)
///   p ← p − (lr / (1 − β1ᵗ)) · m / (√v / √(1 − β2ᵗ) + eps)
///
/// State per parameter: "step" t, "exp_avg" m, "exp_avg_sq" v and, with amsgrad,
/// "max_exp_avg_sq" v̂. A parameter's state starts at its first step with a gradient, in the
/// parameter's dtype, and follows it when the dtype changes (Optimizer::fit_state).
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "optimizer.hpp"

namespace xgrad::optim {

/// What AdamOptions and AdamWOptions share: the fields and their chainable setters. Each field
/// remembers whether it was set: a group's options override the optimizer's defaults in the
/// fields they set (`AdamWOptions().weight_decay(0)`), as a torch param_groups dict does.
template <class Derived> class AdamOptionsBase {
public:
    Derived& lr(double v) { m_lr = v; return self(); }
    Derived& betas(std::pair<double, double> v) { m_betas = v; return self(); }
    Derived& eps(double v) { m_eps = v; return self(); }
    Derived& weight_decay(double v) { m_weight_decay = v; return self(); }
    Derived& amsgrad(bool on) { m_amsgrad = on; return self(); }
    double lr() const { return m_lr.value_or(1e-3); }
    bool has_lr() const { return true; }  // it has a default
    std::pair<double, double> betas() const { return m_betas.value_or(std::pair<double, double>{0.9, 0.999}); }
    double eps() const { return m_eps.value_or(1e-8); }
    double weight_decay() const { return m_weight_decay.value_or(Derived::kDefaultWeightDecay); }
    bool amsgrad() const { return m_amsgrad.value_or(false); }
    /// These options with each unset field taken from `defaults`.
    Derived merged_over(const Derived& defaults) const {
        Derived out = static_cast<const Derived&>(*this);
        if (!m_lr) out.m_lr = defaults.m_lr;
        if (!m_betas) out.m_betas = defaults.m_betas;
        if (!m_eps) out.m_eps = defaults.m_eps;
        if (!m_weight_decay) out.m_weight_decay = defaults.m_weight_decay;
        if (!m_amsgrad) out.m_amsgrad = defaults.m_amsgrad;
        return out;
    }
    /// Every field at torch's default.
    static Derived class_defaults() {
        Derived d;
        d.lr(1e-3).betas({0.9, 0.999}).eps(1e-8).weight_decay(Derived::kDefaultWeightDecay).amsgrad(false);
        return d;
    }

protected:
    AdamOptionsBase() = default;
    explicit AdamOptionsBase(double lr) : m_lr(lr) {}

private:
    Derived& self() { return static_cast<Derived&>(*this); }

    std::optional<double> m_lr;
    std::optional<std::pair<double, double>> m_betas;
    std::optional<double> m_eps;
    std::optional<double> m_weight_decay;
    std::optional<bool> m_amsgrad;
};

/// Adam's hyper-parameters, chainable as torch::optim::AdamOptions:
/// `Adam(params, AdamOptions(3e-4).betas({0.9, 0.98}).eps(1e-9))`.
class AdamOptions : public AdamOptionsBase<AdamOptions> {
public:
    static constexpr double kDefaultWeightDecay = 0;
    static constexpr bool kDecoupled = false;
    AdamOptions() = default;
    AdamOptions(double lr) : AdamOptionsBase(lr) {}  // NOLINT: implicit, so Adam(params, 1e-3) works
};

/// AdamW's hyper-parameters: as AdamOptions, but weight_decay defaults to 1e-2 (torch).
class AdamWOptions : public AdamOptionsBase<AdamWOptions> {
public:
    static constexpr double kDefaultWeightDecay = 1e-2;
    static constexpr bool kDecoupled = true;
    AdamWOptions() = default;
    AdamWOptions(double lr) : AdamOptionsBase(lr) {}  // NOLINT: implicit, as AdamOptions
};

/// Adam and AdamW, one implementation: Options::kDecoupled chooses the weight decay.
template <class Options> class AdamBase : public OptimizerWithOptions<Options> {
public:
    using Group = OptimizerParamGroup<Options>;
    using HyperParameters = Optimizer::HyperParameters;
    void step() override;

protected:
    AdamBase(std::string name, std::vector<Group> groups, const Options& defaults, bool grouped);

    HyperParameters hyper_parameters(std::size_t group) const override;
    void check_hyper_parameters(const HyperParameters& h) const override;
    void set_hyper_parameters(std::size_t group, const HyperParameters& h) override;
    std::vector<std::string> buffer_names(const HyperParameters& h) const override;
    bool non_negative_buffer(const std::string& name) const override {
        return name == "exp_avg_sq" || name == "max_exp_avg_sq";
    }
    std::vector<Tensor> get_state(std::size_t i) const override;
    void set_state(std::size_t i, std::vector<Tensor> state) override;
    void check_options(const Options& o) const override;
    void grow_state() override;

private:
    // Aligned with m_params; a step count of 0 means "never stepped" (buffers undefined).
    std::vector<std::int64_t> m_step;
    std::vector<Tensor> m_exp_avg;
    std::vector<Tensor> m_exp_avg_sq;
    std::vector<Tensor> m_max_exp_avg_sq;
};

class Adam : public AdamBase<AdamOptions> {
public:
    /// Throws for lr < 0, a beta outside [0, 1), eps <= 0, weight_decay < 0, and for any of
    /// them NaN or infinite.
    Adam(std::vector<Tensor> params, const AdamOptions& options = {});
    /// A braced list of tensors ({} included, which would be ambiguous with the groups' form).
    Adam(std::initializer_list<Tensor> params, const AdamOptions& options = {})
        : Adam(std::vector<Tensor>(params), options) {}
    /// Parameter groups, each group's options over `defaults` (torch's Adam(param_groups, ...)).
    /// Throws as above, naming the group, for an empty group or list, and for a parameter given
    /// twice.
    Adam(std::vector<Group> param_groups, const AdamOptions& defaults = {});
};

/// Adam with decoupled weight decay (see Adam for the update).
class AdamW : public AdamBase<AdamWOptions> {
public:
    AdamW(std::vector<Tensor> params, const AdamWOptions& options = {});
    /// A braced list of tensors ({} included, which would be ambiguous with the groups' form).
    AdamW(std::initializer_list<Tensor> params, const AdamWOptions& options = {})
        : AdamW(std::vector<Tensor>(params), options) {}
    /// Parameter groups, as Adam's; nanoGPT's decay and no-decay groups:
    /// `AdamW({{decay, AdamWOptions().weight_decay(0.1)}, {no_decay, AdamWOptions().weight_decay(0)}},
    ///        AdamWOptions(6e-4).betas({0.9, 0.95}))`.
    AdamW(std::vector<Group> param_groups, const AdamWOptions& defaults = {});
};

extern template class AdamBase<AdamOptions>;
extern template class AdamBase<AdamWOptions>;

}  // namespace xgrad::optim
