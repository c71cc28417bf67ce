#include "adam.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/creation.hpp"
#include "core/dispatch.hpp"
#include "core/runtime/kernel_loops.hpp"
#include "core/runtime/parallel.hpp"
#include "parameter_ranges.hpp"

namespace xgrad::optim {

namespace {

// One step's constants, in the parameter's type (see Adam::step).
template <class T> struct AdamScalars {
    T neg_step_size, bc2_sqrt, beta1, keep1, beta2, keep2, eps, wd, decay;
};

// The update of elements [j0, j1) of a parameter p, its gradient g and its state m, v, vmax,
// specialised on the flags so that the loop has no test per element and vectorises (sqrt
// needs -fno-math-errno, set for this file in CMakeLists.txt). The buffers never overlap (the
// gradient and every state tensor own their storage). Every operation is the formula's, in its
// order and in T: the result is the same, bit for bit, as element by element.
template <class T, bool kL2, bool kDecoupled, bool kAmsgrad>
void adam_update(T* __restrict pd, const T* __restrict gd, T* __restrict m, T* __restrict v, T* __restrict vmax,
                 const AdamScalars<T> c, std::size_t j0, std::size_t j1) {
    for (std::size_t j = j0; j < j1; ++j) {
        T gj = gd[j];
        if constexpr (kL2) gj = gj + c.wd * pd[j];
        if constexpr (kDecoupled) pd[j] *= c.decay;
        m[j] = m[j] * c.beta1 + c.keep1 * gj;
        v[j] = v[j] * c.beta2 + c.keep2 * gj * gj;
        T second = v[j];
        if constexpr (kAmsgrad) second = vmax[j] = std::max(vmax[j], v[j]);
        const T denom = std::sqrt(second) / c.bc2_sqrt + c.eps;
        pd[j] += c.neg_step_size * m[j] / denom;
    }
}

// One parameter's update, ready to run: its data, gradient and state, the step's constants.
template <class T> struct AdamJob {
    T* p;
    const T* g;
    T* m;
    T* v;
    T* vmax;
    AdamScalars<T> c;
    std::size_t n;
};
template <class T> using AdamJobs = std::vector<AdamJob<T>>;

template <class T, bool kL2, bool kDecoupled, bool kAmsgrad> void run_jobs(const AdamJobs<T>& jobs) {
    for_parameter_ranges(jobs, [](const AdamJob<T>& job, std::size_t j0, std::size_t j1) {
        adam_update<T, kL2, kDecoupled, kAmsgrad>(job.p, job.g, job.m, job.v, job.vmax, job.c, j0, j1);
    });
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options) : Adam(std::move(params), options, false, "Adam") {}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& o, bool decoupled, std::string name)
    : Optimizer(std::move(params), o.lr(), std::move(name)),
      m_beta1(o.betas().first),
      m_beta2(o.betas().second),
      m_eps(o.eps()),
      m_weight_decay(o.weight_decay()),
      m_amsgrad(o.amsgrad()),
      m_decoupled(decoupled),
      m_step(m_params.size(), 0),
      m_exp_avg(m_params.size()),
      m_exp_avg_sq(m_params.size()),
      m_max_exp_avg_sq(m_params.size()) {
    check(o);
}

void Adam::check(const AdamOptions& o) const {
    require_finite_non_negative("learning rate", o.lr(), "lr >= 0");
    require(o.betas().first >= 0 && o.betas().first < 1, "beta1", o.betas().first, "0 <= beta1 < 1");
    require(o.betas().second >= 0 && o.betas().second < 1, "beta2", o.betas().second, "0 <= beta2 < 1");
    require(std::isfinite(o.eps()), "eps", o.eps(), "a finite number");
    require(o.eps() > 0, "eps", o.eps(), "eps > 0");
    require_finite_non_negative("weight_decay", o.weight_decay(), "weight_decay >= 0");
}

AdamOptions Adam::options() const {
    return AdamOptions(m_lr).betas({m_beta1, m_beta2}).eps(m_eps).weight_decay(m_weight_decay).amsgrad(m_amsgrad);
}

void Adam::step() {
    const std::lock_guard<std::mutex> lock(m_use);
    NoGradGuard no_grad;
    // Before any parameter moves, so that a refused step changes nothing (num_threads() starts
    // the pool, which throws for a bad XGRAD_NUM_THREADS).
    num_threads();
    const std::string op = name() + ".step";
    const std::vector<Tensor> grads = gradients();
    for (std::size_t i = 0; i < m_params.size(); ++i) {
        if (m_step[i] == 0 || !grads[i].defined()) continue;
        fit_state(op, i, m_exp_avg[i], "exp_avg");
        fit_state(op, i, m_exp_avg_sq[i], "exp_avg_sq");
        if (m_amsgrad) fit_state(op, i, m_max_exp_avg_sq[i], "max_exp_avg_sq");
    }
    // A first step's state, all of it before any count or parameter moves: running out of
    // memory here leaves the step undone, not some parameters counted a step they never took.
    for (std::size_t i = 0; i < m_params.size(); ++i) {
        const Tensor& p = m_params[i];
        if (m_step[i] != 0 || !grads[i].defined()) continue;
        m_exp_avg[i] = zeros(p.shape(), p.dtype());
        m_exp_avg_sq[i] = zeros(p.shape(), p.dtype());
        if (m_amsgrad) m_max_exp_avg_sq[i] = zeros(p.shape(), p.dtype());
    }
    AdamJobs<float> jobs_f;
    AdamJobs<double> jobs_d;
    for (std::size_t i = 0; i < m_params.size(); ++i) {
        Tensor& p = m_params[i];
        if (!grads[i].defined()) continue;
        dispatch_floating("Adam.step", p.dtype(), [&](auto tag) {
            using T = typename decltype(tag)::type;
            const auto t = static_cast<double>(m_step[i] + 1);
            // The scalars are worked out in double, as torch does in Python, then used in T.
            const double bias_correction1 = 1 - std::pow(m_beta1, t);
            const double bias_correction2 = 1 - std::pow(m_beta2, t);
            const T neg_step_size = static_cast<T>(-(m_lr / bias_correction1));
            const T bc2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
            const AdamScalars<T> c{neg_step_size,
                                   bc2_sqrt,
                                   static_cast<T>(m_beta1),
                                   static_cast<T>(1 - m_beta1),
                                   static_cast<T>(m_beta2),
                                   static_cast<T>(1 - m_beta2),
                                   static_cast<T>(m_eps),
                                   static_cast<T>(m_weight_decay),
                                   static_cast<T>(1 - m_lr * m_weight_decay)};
            AdamJob<T> job{p.mutable_data_ptr<T>(),
                           grads[i].const_data_ptr<T>(),
                           m_exp_avg[i].mutable_data_ptr<T>(),
                           m_exp_avg_sq[i].mutable_data_ptr<T>(),
                           m_amsgrad ? m_max_exp_avg_sq[i].mutable_data_ptr<T>() : nullptr,
                           c,
                           p.numel()};
            if constexpr (std::is_same_v<T, float>) jobs_f.push_back(job);
            else jobs_d.push_back(job);
        });
    }
    with_flag(!m_decoupled && m_weight_decay != 0, [&](auto l2) {
        with_flag(m_decoupled && m_weight_decay != 0, [&](auto decoupled) {
            with_flag(m_amsgrad, [&](auto amsgrad) {
                run_jobs<float, l2, decoupled, amsgrad>(jobs_f);
                run_jobs<double, l2, decoupled, amsgrad>(jobs_d);
            });
        });
    });
    for (std::size_t i = 0; i < m_params.size(); ++i)
        if (grads[i].defined()) ++m_step[i];
}

Optimizer::HyperParameters Adam::hyper_parameters() const {
    return {{"beta1", m_beta1},
            {"beta2", m_beta2},
            {"eps", m_eps},
            {"weight_decay", m_weight_decay},
            {"amsgrad", m_amsgrad ? 1.0 : 0.0}};
}

void Adam::check_hyper_parameters(const HyperParameters& h) const {
    const double amsgrad = h.at("amsgrad");
    require(amsgrad == 0 || amsgrad == 1, "amsgrad flag", amsgrad, "0 or 1");
    check(AdamOptions(m_lr).betas({h.at("beta1"), h.at("beta2")}).eps(h.at("eps")).weight_decay(h.at("weight_decay")));
}

void Adam::set_hyper_parameters(const HyperParameters& h) {
    m_beta1 = h.at("beta1");
    m_beta2 = h.at("beta2");
    m_eps = h.at("eps");
    m_weight_decay = h.at("weight_decay");
    m_amsgrad = h.at("amsgrad") == 1;
}

std::vector<std::string> Adam::buffer_names(const HyperParameters& h) const {
    if (h.at("amsgrad") == 1) return {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    return {"step", "exp_avg", "exp_avg_sq"};
}

std::vector<Tensor> Adam::get_state(std::size_t i) const {
    if (m_step[i] == 0) return {};
    std::vector<Tensor> state{from_vector(std::vector<std::int64_t>{m_step[i]}, Shape{}), m_exp_avg[i],
                              m_exp_avg_sq[i]};
    if (m_amsgrad) state.push_back(m_max_exp_avg_sq[i]);
    return state;
}

void Adam::set_state(std::size_t i, std::vector<Tensor> state) {
    if (state.empty()) {
        m_step[i] = 0;
        m_exp_avg[i] = m_exp_avg_sq[i] = m_max_exp_avg_sq[i] = Tensor();
        return;
    }
    m_step[i] = state[0].item<std::int64_t>();
    m_exp_avg[i] = std::move(state[1]);
    m_exp_avg_sq[i] = std::move(state[2]);
    m_max_exp_avg_sq[i] = state.size() > 3 ? std::move(state[3]) : Tensor();
}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& o)
    : Adam(std::move(params),
           AdamOptions(o.lr()).betas(o.betas()).eps(o.eps()).weight_decay(o.weight_decay()).amsgrad(o.amsgrad()),
           true, "AdamW") {}

AdamWOptions AdamW::options() const {
    const AdamOptions o = Adam::options();
    return AdamWOptions(o.lr()).betas(o.betas()).eps(o.eps()).weight_decay(o.weight_decay()).amsgrad(o.amsgrad());
}

}  // namespace xgrad::optim
