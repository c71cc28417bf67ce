#include "sgd.hpp"

#include <cmath>

#include "core/creation.hpp"
#include "core/dispatch.hpp"
#include "core/runtime/kernel_loops.hpp"

namespace xgrad::optim {

namespace {

// The updates, specialised on the flags so that the loops have no test per element and
// vectorise; the parameter, its gradient and its momentum buffer own separate storage. Each
// operation is the formula's, in its order and in T (see sgd.hpp).
template <class T, bool kDecay>
void sgd_plain(T* __restrict pd, const T* __restrict gd, std::size_t n, const T lr, const T wd) {
    for (std::size_t j = 0; j < n; ++j) {
        T d = gd[j];
        if constexpr (kDecay) d = d + wd * pd[j];
        pd[j] += -lr * d;
    }
}

template <class T, bool kDecay, bool kFirst, bool kNesterov>
void sgd_momentum(T* __restrict pd, const T* __restrict gd, T* __restrict bd, std::size_t n, const T lr, const T wd,
                  const T momentum, const T keep) {
    for (std::size_t j = 0; j < n; ++j) {
        T d = gd[j];
        if constexpr (kDecay) d = d + wd * pd[j];
        if constexpr (kFirst) bd[j] = d;
        else bd[j] = bd[j] * momentum + keep * d;
        T update = bd[j];
        if constexpr (kNesterov) update = d + momentum * bd[j];
        pd[j] += -lr * update;
    }
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options)
    : Optimizer(std::move(params), options.lr(), "SGD"),
      m_momentum(options.momentum()),
      m_dampening(options.dampening()),
      m_weight_decay(options.weight_decay()),
      m_nesterov(options.nesterov()),
      m_momentum_buffer(m_params.size()) {
    check(options);
}

void SGD::check(const SGDOptions& o) const {
    require_finite_non_negative("learning rate", o.lr(), "lr >= 0");
    require_finite_non_negative("momentum", o.momentum(), "momentum >= 0");
    require(std::isfinite(o.dampening()), "dampening", o.dampening(), "a finite number");
    require_finite_non_negative("weight_decay", o.weight_decay(), "weight_decay >= 0");
    if (o.nesterov() && (o.momentum() <= 0 || o.dampening() != 0))
        throw Error(fmt::format("SGD: nesterov momentum requires momentum > 0 and dampening = 0, got momentum {} "
                                "and dampening {}",
                                o.momentum(), o.dampening()));
}

SGDOptions SGD::options() const {
    return SGDOptions(m_lr).momentum(m_momentum).dampening(m_dampening).weight_decay(m_weight_decay).nesterov(
        m_nesterov);
}

void SGD::step() {
    NoGradGuard no_grad;
    // Before any parameter moves, so that a refused step changes nothing.
    for (std::size_t i = 0; i < m_params.size(); ++i)
        if (m_momentum_buffer[i].defined() && m_params[i].has_grad())
            fit_state("SGD.step", i, m_momentum_buffer[i], "momentum_buffer");
    for (std::size_t i = 0; i < m_params.size(); ++i) {
        Tensor& p = m_params[i];
        if (!p.has_grad()) continue;
        dispatch_floating("SGD.step", p.dtype(), [&](auto tag) {
            using T = typename decltype(tag)::type;
            T* pd = p.mutable_data_ptr<T>();
            const T* gd = p.grad_ptr<T>();
            const std::size_t n = p.numel();
            const T lr = static_cast<T>(m_lr);
            const T wd = static_cast<T>(m_weight_decay);
            if (m_momentum == 0) {
                with_flag(m_weight_decay != 0, [&](auto decay) { sgd_plain<T, decay>(pd, gd, n, lr, wd); });
                return;
            }
            // torch starts the buffer as a plain copy of the (decayed) gradient: no dampening on step 1.
            const bool first = !m_momentum_buffer[i].defined();
            if (first) m_momentum_buffer[i] = zeros(p.shape(), p.dtype());
            T* bd = m_momentum_buffer[i].mutable_data_ptr<T>();
            const T momentum = static_cast<T>(m_momentum);
            const T keep = static_cast<T>(1 - m_dampening);
            with_flag(m_weight_decay != 0, [&](auto decay) {
                with_flag(first, [&](auto first_step) {
                    with_flag(m_nesterov, [&](auto nesterov) {
                        sgd_momentum<T, decay, first_step, nesterov>(pd, gd, bd, n, lr, wd, momentum, keep);
                    });
                });
            });
        });
    }
}

Optimizer::HyperParameters SGD::hyper_parameters() const {
    return {{"momentum", m_momentum},
            {"dampening", m_dampening},
            {"weight_decay", m_weight_decay},
            {"nesterov", m_nesterov ? 1.0 : 0.0}};
}

void SGD::check_hyper_parameters(const HyperParameters& h) const {
    const double nesterov = h.at("nesterov");
    require(nesterov == 0 || nesterov == 1, "nesterov flag", nesterov, "0 or 1");
    check(SGDOptions(m_lr).momentum(h.at("momentum")).dampening(h.at("dampening")).weight_decay(
        h.at("weight_decay")).nesterov(nesterov == 1));
}

void SGD::set_hyper_parameters(const HyperParameters& h) {
    m_momentum = h.at("momentum");
    m_dampening = h.at("dampening");
    m_weight_decay = h.at("weight_decay");
    m_nesterov = h.at("nesterov") == 1;
}

std::vector<std::string> SGD::buffer_names(const HyperParameters& h) const {
    if (h.at("momentum") == 0) return {};
    return {"momentum_buffer"};
}

std::vector<Tensor> SGD::get_state(std::size_t i) const {
    if (!m_momentum_buffer[i].defined()) return {};
    return {m_momentum_buffer[i]};
}

void SGD::set_state(std::size_t i, std::vector<Tensor> state) {
    m_momentum_buffer[i] = state.empty() ? Tensor() : std::move(state[0]);
}

}  // namespace xgrad::optim
