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

// One parameter's update, ready to run, with its group's hyper-parameters rounded to T;
// `first`: its momentum buffer starts this step.
template <class T> struct SGDJob {
    T* p;
    const T* g;
    T* b;
    std::size_t n;
    bool first;
    T lr, wd, momentum, keep;
};
template <class T> using SGDJobs = std::vector<SGDJob<T>>;

template <class T, bool kDecay, bool kMomentum, bool kNesterov> void run_jobs(const SGDJobs<T>& jobs) {
    for_parameter_ranges(jobs, [&](const SGDJob<T>& job, std::size_t j0, std::size_t j1) {
        const std::size_t n = j1 - j0;
        if constexpr (!kMomentum) {
            sgd_plain<T, kDecay>(job.p + j0, job.g + j0, n, job.lr, job.wd);
        } else if (job.first) {
            sgd_momentum<T, kDecay, true, kNesterov>(job.p + j0, job.g + j0, job.b + j0, n, job.lr, job.wd,
                                                     job.momentum, job.keep);
        } else {
            sgd_momentum<T, kDecay, false, kNesterov>(job.p + j0, job.g + j0, job.b + j0, n, job.lr, job.wd,
                                                      job.momentum, job.keep);
        }
    });
}

}  // namespace

SGDOptions SGDOptions::merged_over(const SGDOptions& d) const {
    SGDOptions out = *this;
    if (!m_lr) out.m_lr = d.m_lr;
    if (!m_momentum) out.m_momentum = d.m_momentum;
    if (!m_dampening) out.m_dampening = d.m_dampening;
    if (!m_weight_decay) out.m_weight_decay = d.m_weight_decay;
    if (!m_nesterov) out.m_nesterov = d.m_nesterov;
    return out;
}

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options)
    : OptimizerWithOptions("SGD", options) {
    add_groups({Group(std::move(params))}, false);
}

SGD::SGD(std::vector<Group> param_groups, const SGDOptions& defaults) : OptimizerWithOptions("SGD", defaults) {
    add_groups(std::move(param_groups), true);
}

void SGD::check_options(const SGDOptions& o) const {
    // torch's words for a group without lr when the defaults have none
    if (!o.has_lr()) throw Error("SGD: parameter group didn't specify a value of required optimization parameter lr");
    require_finite_non_negative("learning rate", o.lr(), "lr >= 0");
    require_finite_non_negative("momentum", o.momentum(), "momentum >= 0");
    require(std::isfinite(o.dampening()), "dampening", o.dampening(), "a finite number");
    require_finite_non_negative("weight_decay", o.weight_decay(), "weight_decay >= 0");
    if (o.nesterov() && (o.momentum() <= 0 || o.dampening() != 0))
        throw Error(fmt::format("SGD: nesterov momentum requires momentum > 0 and dampening = 0, got momentum {} "
                                "and dampening {}",
                                o.momentum(), o.dampening()));
}

void SGD::step() {
    const std::lock_guard<std::mutex> lock(m_use);
    NoGradGuard no_grad;
    const std::vector<Tensor> grads = gradients();
    // Before any parameter moves, so that a refused step changes nothing.
    check_all_groups();
    for (std::size_t i = 0; i < m_params.size(); ++i)
        if (m_momentum_buffer[i].defined() && grads[i].defined() && group_options(i).momentum() != 0)
            fit_state("SGD.step", i, m_momentum_buffer[i], "momentum_buffer");
    // A first step's buffers, all made before anything moves and kept only after the updates: a
    // buffer kept from a step that ran out of memory would mark its parameter as started.
    std::vector<Tensor> started(m_params.size());
    for (std::size_t i = 0; i < m_params.size(); ++i)
        if (group_options(i).momentum() != 0 && !m_momentum_buffer[i].defined() && grads[i].defined())
            started[i] = zeros(m_params[i].shape(), m_params[i].dtype());
    // Jobs binned by the update's flags, which groups may set apart.
    SGDJobs<float> jobs_f[2][2][2];
    SGDJobs<double> jobs_d[2][2][2];
    for (std::size_t i = 0; i < m_params.size(); ++i) {
        Tensor& p = m_params[i];
        if (!grads[i].defined()) continue;
        const SGDOptions& o = group_options(i);
        const bool decay = o.weight_decay() != 0, momentum = o.momentum() != 0, nesterov = o.nesterov();
        dispatch_floating("SGD.step", p.dtype(), [&](auto tag) {
            using T = typename decltype(tag)::type;
            // torch starts the buffer as a plain copy of the (decayed) gradient: no dampening on step 1.
            const bool first = started[i].defined();
            Tensor& buffer = first ? started[i] : m_momentum_buffer[i];
            SGDJob<T> job{p.mutable_data_ptr<T>(),
                          grads[i].const_data_ptr<T>(),
                          momentum ? buffer.mutable_data_ptr<T>() : nullptr,
                          static_cast<std::size_t>(p.numel()),
                          first,
                          static_cast<T>(o.lr()),
                          static_cast<T>(o.weight_decay()),
                          static_cast<T>(o.momentum()),
                          static_cast<T>(1 - o.dampening())};
            if constexpr (std::is_same_v<T, float>) jobs_f[decay][momentum][nesterov].push_back(job);
            else jobs_d[decay][momentum][nesterov].push_back(job);
        });
    }
    for (int d = 0; d < 2; ++d)
        for (int m = 0; m < 2; ++m)
            for (int n = 0; n < 2; ++n) {
                if (jobs_f[d][m][n].empty() && jobs_d[d][m][n].empty()) continue;
                with_flag(d == 1, [&](auto decay) {
                    with_flag(m == 1, [&](auto momentum) {
                        with_flag(n == 1, [&](auto nesterov) {
                            run_jobs<float, decay, momentum, nesterov>(jobs_f[d][m][n]);
                            run_jobs<double, decay, momentum, nesterov>(jobs_d[d][m][n]);
                        });
                    });
                });
            }
    for (std::size_t i = 0; i < m_params.size(); ++i)
        if (started[i].defined()) m_momentum_buffer[i] = std::move(started[i]);
}

Optimizer::HyperParameters SGD::hyper_parameters(std::size_t group) const {
    const SGDOptions& o = m_groups[group].options();
    return {{"lr", o.lr()},
            {"momentum", o.momentum()},
            {"dampening", o.dampening()},
            {"weight_decay", o.weight_decay()},
            {"nesterov", o.nesterov() ? 1.0 : 0.0}};
}

namespace {

SGDOptions sgd_options_of(const std::map<std::string, double>& h) {
    return SGDOptions(h.at("lr")).momentum(h.at("momentum")).dampening(h.at("dampening")).weight_decay(
        h.at("weight_decay")).nesterov(h.at("nesterov") == 1);
}

}  // namespace

void SGD::check_hyper_parameters(const HyperParameters& h) const {
    const double nesterov = h.at("nesterov");
    require(nesterov == 0 || nesterov == 1, "nesterov flag", nesterov, "0 or 1");
    check_options(sgd_options_of(h));
}

void SGD::set_hyper_parameters(std::size_t group, const HyperParameters& h) {
    m_groups[group].options() = sgd_options_of(h);
}

std::vector<std::string> SGD::buffer_names(const HyperParameters& h) const {
    if (h.at("momentum") == 0) return {};
    return {"momentum_buffer"};
}

std::vector<Tensor> SGD::get_state(std::size_t i) const {
    // a group whose momentum was set to 0 keeps its buffers (as torch) but saves none
    if (!m_momentum_buffer[i].defined() || group_options(i).momentum() == 0) return {};
    return {m_momentum_buffer[i]};
}

void SGD::set_state(std::size_t i, std::vector<Tensor> state) {
    m_momentum_buffer[i] = state.empty() ? Tensor() : std::move(state[0]);
}

}  // namespace xgrad::optim
