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
#include <utility>

#include "optimizer.hpp"

namespace xgrad::optim {

/// Adam's hyper-parameters, chainable as torch::optim::AdamOptions:
/// `Adam(params, AdamOptions(3e-4).betas({0.9, 0.98}).eps(1e-9))`.
class AdamOptions {
public:
    AdamOptions(double lr = 1e-3) : m_lr(lr) {}  // NOLINT: implicit, so Adam(params, 1e-3) works
    AdamOptions& lr(double v) { m_lr = v; return *this; }
    AdamOptions& betas(std::pair<double, double> v) { m_betas = v; return *this; }
    AdamOptions& eps(double v) { m_eps = v; return *this; }
    AdamOptions& weight_decay(double v) { m_weight_decay = v; return *this; }
    AdamOptions& amsgrad(bool on) { m_amsgrad = on; return *this; }
    double lr() const { return m_lr; }
    std::pair<double, double> betas() const { return m_betas; }
    double eps() const { return m_eps; }
    double weight_decay() const { return m_weight_decay; }
    bool amsgrad() const { return m_amsgrad; }

private:
    double m_lr;
    std::pair<double, double> m_betas{0.9, 0.999};
    double m_eps = 1e-8;
    double m_weight_decay = 0;
    bool m_amsgrad = false;
};

/// AdamW's hyper-parameters: as AdamOptions, but weight_decay defaults to 1e-2 (torch).
class AdamWOptions {
public:
    AdamWOptions(double lr = 1e-3) : m_lr(lr) {}  // NOLINT: implicit, as AdamOptions
    AdamWOptions& lr(double v) { m_lr = v; return *this; }
    AdamWOptions& betas(std::pair<double, double> v) { m_betas = v; return *this; }
    AdamWOptions& eps(double v) { m_eps = v; return *this; }
    AdamWOptions& weight_decay(double v) { m_weight_decay = v; return *this; }
    AdamWOptions& amsgrad(bool on) { m_amsgrad = on; return *this; }
    double lr() const { return m_lr; }
    std::pair<double, double> betas() const { return m_betas; }
    double eps() const { return m_eps; }
    double weight_decay() const { return m_weight_decay; }
    bool amsgrad() const { return m_amsgrad; }

private:
    double m_lr;
    std::pair<double, double> m_betas{0.9, 0.999};
    double m_eps = 1e-8;
    double m_weight_decay = 1e-2;
    bool m_amsgrad = false;
};

class Adam : public Optimizer {
public:
    /// Throws for lr < 0, a beta outside [0, 1), eps <= 0, weight_decay < 0, and for any of
    /// them NaN or infinite.
    Adam(std::vector<Tensor> params, const AdamOptions& options = {});
    void step() override;
    /// The current hyper-parameters (lr as set_lr left it).
    AdamOptions options() const;

protected:
    /// For AdamW: `decoupled` switches to decoupled weight decay.
    Adam(std::vector<Tensor> params, const AdamOptions& options, bool decoupled, std::string name);

    HyperParameters hyper_parameters() const override;
    void check_hyper_parameters(const HyperParameters& h) const override;
    void set_hyper_parameters(const HyperParameters& h) override;
    std::vector<std::string> buffer_names(const HyperParameters& h) const override;
    bool non_negative_buffer(const std::string& name) const override {
        return name == "exp_avg_sq" || name == "max_exp_avg_sq";
    }
    std::vector<Tensor> get_state(std::size_t i) const override;
    void set_state(std::size_t i, std::vector<Tensor> state) override;

private:
    void check(const AdamOptions& o) const;

    double m_beta1;
    double m_beta2;
    double m_eps;
    double m_weight_decay;
    bool m_amsgrad;
    bool m_decoupled;
    // Aligned with m_params; a step count of 0 means "never stepped" (buffers undefined).
    std::vector<std::int64_t> m_step;
    std::vector<Tensor> m_exp_avg;
    std::vector<Tensor> m_exp_avg_sq;
    std::vector<Tensor> m_max_exp_avg_sq;
};

/// Adam with decoupled weight decay (see Adam for the update).
class AdamW : public Adam {
public:
    AdamW(std::vector<Tensor> params, const AdamWOptions& options = {});
    AdamWOptions options() const;
};

}  // namespace xgrad::optim
