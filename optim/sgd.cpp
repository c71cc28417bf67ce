#include "sgd.hpp"

#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/creation.hpp"
#include "core/dispatch.hpp"
#include "core/runtime/kernel_loops.hpp"
#include "parameter_ranges.hpp"

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

// One parameter's update, ready to run; `first`: its momentum buffer starts this step.
template <class T> struct SGDJob {
    T* p;
    const T* g;
    T* b;
    std::size_t n;
    bool first;
};
template <class T> using SGDJobs = std::vector<SGDJob<T>>;

// The step's hyper-parameters, rounded to each parameter's type where used.
struct SGDScalars {
    double lr, wd, momentum, keep;
};

template <class T, bool kDecay, bool kMomentum, bool kNesterov> void run_jobs(const SGDJobs<T>& jobs, const SGDScalars& s) {
    const T lr = static_cast<T>(s.lr), wd = static_cast<T>(s.wd);
    const T momentum = static_cast<T>(s.momentum), keep = static_cast<T>(s.keep);
    for_parameter_ranges(jobs, [&](const SGDJob<T>& job, std::size_t j0, std::size_t j1) {
        const std::size_t n = j1 - j0;
        if constexpr (!kMomentum) {
            sgd_plain<T, kDecay>(job.p + j0, job.g + j0, n, lr, wd);
        } else if (job.first) {
            sgd_momentum<T, kDecay, true, kNesterov>(job.p + j0, job.g + j0, job.b + j0, n, lr, wd, momentum, keep);
        } else {
            sgd_momentum<T, kDecay, false, kNesterov>(job.p + j0, job.g + j0, job.b + j0, n, lr, wd, momentum, keep);
        }
    });
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
    const std::lock_guard<std::mutex> lock(m_use);
    NoGradGuard no_grad;
    const std::vector<Tensor> grads = gradients();
    // Before any parameter moves, so that a refused step changes nothing.
    for (std::size_t i = 0; i < m_params.size(); ++i)
        if (m_momentum_buffer[i].defined() && grads[i].defined())
            fit_state("SGD.step", i, m_momentum_buffer[i], "momentum_buffer");
    // A first step's buffers, all made before anything moves and kept only after the updates: a
    // buffer kept from a step that ran out of memory would mark its parameter as started.
    std::vector<Tensor> started(m_params.size());
    if (m_momentum != 0)
        for (std::size_t i = 0; i < m_params.size(); ++i)
            if (!m_momentum_buffer[i].defined() && grads[i].defined())
                started[i] = zeros(m_params[i].shape(), m_params[i].dtype());
    SGDJobs<float> jobs_f;
    SGDJobs<double> jobs_d;
    for (std::size_t i = 0; i < m_params.size(); ++i) {
        Tensor& p = m_params[i];
        if (!grads[i].defined()) continue;
        dispatch_floating("SGD.step", p.dtype(), [&](auto tag) {
            using T = typename decltype(tag)::type;
            // torch starts the buffer as a plain copy of the (decayed) gradient: no dampening on step 1.
            const bool first = started[i].defined();
            Tensor& buffer = first ? started[i] : m_momentum_buffer[i];
            SGDJob<T> job{p.mutable_data_ptr<T>(), grads[i].const_data_ptr<T>(),
                          m_momentum != 0 ? buffer.mutable_data_ptr<T>() : nullptr, p.numel(), first};
            if constexpr (std::is_same_v<T, float>) jobs_f.push_back(job);
            else jobs_d.push_back(job);
        });
    }
    const SGDScalars c{m_lr, m_weight_decay, m_momentum, 1 - m_dampening};
    with_flag(m_weight_decay != 0, [&](auto decay) {
        with_flag(m_momentum != 0, [&](auto momentum) {
            with_flag(m_nesterov, [&](auto nesterov) {
                run_jobs<float, decay, momentum, nesterov>(jobs_f, c);
                run_jobs<double, decay, momentum, nesterov>(jobs_d, c);
            });
        });
    });
    for (std::size_t i = 0; i < m_params.size(); ++i)
        if (started[i].defined()) m_momentum_buffer[i] = std::move(started[i]);
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
