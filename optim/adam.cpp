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

template <class Options>
AdamBase<Options>::AdamBase(std::string name, std::vector<Group> groups, const Options& defaults, bool grouped)
    : OptimizerWithOptions<Options>(std::move(name), defaults) {
    this->add_groups(std::move(groups), grouped);
}

template <class Options> void AdamBase<Options>::grow_state() {
    const std::size_t n = this->m_params.size();
    m_step.resize(n, 0);
    m_exp_avg.resize(n);
    m_exp_avg_sq.resize(n);
    m_max_exp_avg_sq.resize(n);
}

template <class Options> void AdamBase<Options>::check_options(const Options& o) const {
    this->require_finite_non_negative("learning rate", o.lr(), "lr >= 0");
    this->require(o.betas().first >= 0 && o.betas().first < 1, "beta1", o.betas().first, "0 <= beta1 < 1");
    this->require(o.betas().second >= 0 && o.betas().second < 1, "beta2", o.betas().second, "0 <= beta2 < 1");
    this->require(std::isfinite(o.eps()), "eps", o.eps(), "a finite number");
    this->require(o.eps() > 0, "eps", o.eps(), "eps > 0");
    this->require_finite_non_negative("weight_decay", o.weight_decay(), "weight_decay >= 0");
}

template <class Options> void AdamBase<Options>::step() {
    const std::lock_guard<std::mutex> lock(this->m_use);
    NoGradGuard no_grad;
    // Before any parameter moves, so that a refused step changes nothing (num_threads() starts
    // the pool, which throws for a bad XGRAD_NUM_THREADS).
    num_threads();
    this->check_all_groups();
    const std::string op = this->name() + ".step";
    auto& params = this->m_params;
    const std::vector<Tensor> grads = this->gradients();
    for (std::size_t i = 0; i < params.size(); ++i) {
        if (m_step[i] == 0 || !grads[i].defined()) continue;
        this->fit_state(op, i, m_exp_avg[i], "exp_avg");
        this->fit_state(op, i, m_exp_avg_sq[i], "exp_avg_sq");
        if (this->group_options(i).amsgrad() && m_max_exp_avg_sq[i].defined())
            this->fit_state(op, i, m_max_exp_avg_sq[i], "max_exp_avg_sq");
    }
    // A first step's state, all of it before any count or parameter moves: running out of
    // memory here leaves the step undone, not some parameters counted a step they never took.
    // A group whose amsgrad was turned on after its first step starts its maxima at 0 here
    // (max(0, v) = v, the value they would hold had they started with the first step's v).
    for (std::size_t i = 0; i < params.size(); ++i) {
        const Tensor& p = params[i];
        if (!grads[i].defined()) continue;
        if (m_step[i] == 0) {
            m_exp_avg[i] = zeros(p.shape(), p.dtype());
            m_exp_avg_sq[i] = zeros(p.shape(), p.dtype());
        }
        if (this->group_options(i).amsgrad() && (m_step[i] == 0 || !m_max_exp_avg_sq[i].defined()))
            m_max_exp_avg_sq[i] = zeros(p.shape(), p.dtype());
    }
    // Jobs binned by the update's flags (L2 or decoupled decay, amsgrad), which groups may set
    // apart; within a bin each job carries its group's scalars.
    AdamJobs<float> jobs_f[2][2];
    AdamJobs<double> jobs_d[2][2];
    for (std::size_t i = 0; i < params.size(); ++i) {
        Tensor& p = params[i];
        if (!grads[i].defined()) continue;
        const Options& o = this->group_options(i);
        const double lr = o.lr(), beta1 = o.betas().first, beta2 = o.betas().second;
        const double weight_decay = o.weight_decay();
        const bool decay = weight_decay != 0, amsgrad = o.amsgrad();
        dispatch_floating(op.c_str(), p.dtype(), [&](auto tag) {
            using T = typename decltype(tag)::type;
            const auto t = static_cast<double>(m_step[i] + 1);
            // The scalars are worked out in double, as torch does in Python, then used in T.
            const double bias_correction1 = 1 - std::pow(beta1, t);
            const double bias_correction2 = 1 - std::pow(beta2, t);
            const T neg_step_size = static_cast<T>(-(lr / bias_correction1));
            const T bc2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
            const AdamScalars<T> c{neg_step_size,
                                   bc2_sqrt,
                                   static_cast<T>(beta1),
                                   static_cast<T>(1 - beta1),
                                   static_cast<T>(beta2),
                                   static_cast<T>(1 - beta2),
                                   static_cast<T>(o.eps()),
                                   static_cast<T>(weight_decay),
                                   static_cast<T>(1 - lr * weight_decay)};
            AdamJob<T> job{p.mutable_data_ptr<T>(),
                           grads[i].const_data_ptr<T>(),
                           m_exp_avg[i].mutable_data_ptr<T>(),
                           m_exp_avg_sq[i].mutable_data_ptr<T>(),
                           amsgrad ? m_max_exp_avg_sq[i].mutable_data_ptr<T>() : nullptr,
                           c,
                           static_cast<std::size_t>(p.numel())};
            if constexpr (std::is_same_v<T, float>) jobs_f[decay][amsgrad].push_back(job);
            else jobs_d[decay][amsgrad].push_back(job);
        });
    }
    constexpr bool kDecoupled = Options::kDecoupled;
    for (int decay = 0; decay < 2; ++decay)
        for (int ams = 0; ams < 2; ++ams) {
            if (jobs_f[decay][ams].empty() && jobs_d[decay][ams].empty()) continue;
            with_flag(decay == 1, [&](auto d) {
                with_flag(ams == 1, [&](auto amsgrad) {
                    constexpr bool l2 = d && !kDecoupled, decoupled = d && kDecoupled;
                    run_jobs<float, l2, decoupled, amsgrad>(jobs_f[decay][ams]);
                    run_jobs<double, l2, decoupled, amsgrad>(jobs_d[decay][ams]);
                });
            });
        }
    for (std::size_t i = 0; i < params.size(); ++i)
        if (grads[i].defined()) ++m_step[i];
}

template <class Options>
Optimizer::HyperParameters AdamBase<Options>::hyper_parameters(std::size_t group) const {
    const Options& o = this->m_groups[group].options();
    return {{"lr", o.lr()},
            {"beta1", o.betas().first},
            {"beta2", o.betas().second},
            {"eps", o.eps()},
            {"weight_decay", o.weight_decay()},
            {"amsgrad", o.amsgrad() ? 1.0 : 0.0}};
}

namespace {

template <class Options> Options adam_options_of(const std::map<std::string, double>& h) {
    Options o(h.at("lr"));
    o.betas({h.at("beta1"), h.at("beta2")}).eps(h.at("eps")).weight_decay(h.at("weight_decay")).amsgrad(
        h.at("amsgrad") == 1);
    return o;
}

}  // namespace

template <class Options> void AdamBase<Options>::check_hyper_parameters(const HyperParameters& h) const {
    const double amsgrad = h.at("amsgrad");
    this->require(amsgrad == 0 || amsgrad == 1, "amsgrad flag", amsgrad, "0 or 1");
    check_options(adam_options_of<Options>(h));
}

template <class Options> void AdamBase<Options>::set_hyper_parameters(std::size_t group, const HyperParameters& h) {
    this->m_groups[group].options() = adam_options_of<Options>(h);
}

template <class Options> std::vector<std::string> AdamBase<Options>::buffer_names(const HyperParameters& h) const {
    if (h.at("amsgrad") == 1) return {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    return {"step", "exp_avg", "exp_avg_sq"};
}

template <class Options> std::vector<Tensor> AdamBase<Options>::get_state(std::size_t i) const {
    if (m_step[i] == 0) return {};
    std::vector<Tensor> state{from_vector(std::vector<std::int64_t>{m_step[i]}, Shape{}), m_exp_avg[i],
                              m_exp_avg_sq[i]};
    if (this->group_options(i).amsgrad())
        // amsgrad turned on since the last step: the maxima the next step would start with
        state.push_back(m_max_exp_avg_sq[i].defined() ? m_max_exp_avg_sq[i]
                                                      : zeros(m_exp_avg_sq[i].shape(), m_exp_avg_sq[i].dtype()));
    return state;
}

template <class Options> void AdamBase<Options>::set_state(std::size_t i, std::vector<Tensor> state) {
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

template class AdamBase<AdamOptions>;
template class AdamBase<AdamWOptions>;

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options)
    : AdamBase("Adam", {Group(std::move(params))}, options, false) {}

Adam::Adam(std::vector<Group> param_groups, const AdamOptions& defaults)
    : AdamBase("Adam", std::move(param_groups), defaults, true) {}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& options)
    : AdamBase("AdamW", {Group(std::move(params))}, options, false) {}

AdamW::AdamW(std::vector<Group> param_groups, const AdamWOptions& defaults)
    : AdamBase("AdamW", std::move(param_groups), defaults, true) {}

}  // namespace xgrad::optim
