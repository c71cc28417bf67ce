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
#include "optimizer.hpp"

namespace xgrad::optim {

/// SGD's hyper-parameters, chainable as torch::optim::SGDOptions:
/// `SGD(model.parameters(), SGDOptions(0.1).momentum(0.9).nesterov(true))`.
class SGDOptions {
public:
    SGDOptions(double lr) : m_lr(lr) {}  // NOLINT: implicit, so SGD(params, 0.1) reads naturally
    SGDOptions& lr(double v) { m_lr = v; return *this; }
    SGDOptions& momentum(double v) { m_momentum = v; return *this; }
    SGDOptions& dampening(double v) { m_dampening = v; return *this; }
    SGDOptions& weight_decay(double v) { m_weight_decay = v; return *this; }
    SGDOptions& nesterov(bool on) { m_nesterov = on; return *this; }
    double lr() const { return m_lr; }
    double momentum() const { return m_momentum; }
    double dampening() const { return m_dampening; }
    double weight_decay() const { return m_weight_decay; }
    bool nesterov() const { return m_nesterov; }

private:
    double m_lr;
    double m_momentum = 0;
    double m_dampening = 0;
    double m_weight_decay = 0;
    bool m_nesterov = false;
};

class SGD : public Optimizer {
public:
    /// Throws for lr < 0, momentum < 0, weight_decay < 0, any of them or dampening NaN or
    /// infinite, and nesterov without momentum or with dampening.
    SGD(std::vector<Tensor> params, const SGDOptions& options);
    void step() override;
    /// The current hyper-parameters (lr as set_lr left it).
    SGDOptions options() const;

protected:
    HyperParameters hyper_parameters() const override;
    void check_hyper_parameters(const HyperParameters& h) const override;
    void set_hyper_parameters(const HyperParameters& h) override;
    std::vector<std::string> buffer_names(const HyperParameters& h) const override;
    std::vector<Tensor> get_state(std::size_t i) const override;
    void set_state(std::size_t i, std::vector<Tensor> state) override;

private:
    void check(const SGDOptions& o) const;

    double m_momentum;
    double m_dampening;
    double m_weight_decay;
    bool m_nesterov;
    std::vector<Tensor> m_momentum_buffer;  ///< aligned with m_params; undefined before the first step
};

}  // namespace xgrad::optim
