// The optimizers' element loops (specialised on their flags so that they vectorise) against a
// plain scalar loop written here from the formulas in adam.hpp and sgd.hpp, bit for bit, for
// every flag combination, in float32 and float64.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>

#include "helpers.hpp"
#include "optim/adam.hpp"
#include "optim/sgd.hpp"

using namespace xgrad;
using namespace xgrad::optim;
using namespace xgrad::test;

namespace {

// Sizes around the vector widths and the pool's split (1 << 15 elements per chunk).
const std::vector<std::size_t> kSizes = {1, 3, 4, 5, 8, 13, 70001};

// Values of every kind an update meets: mixed signs and scales, zeros, subnormals.
template <class T> std::vector<T> random_values(std::size_t n, std::mt19937_64& rng) {
    std::normal_distribution<double> normal(0, 1);
    std::uniform_int_distribution<int> kind(0, 19), exponent(-12, 6);
    std::vector<T> v(n);
    for (T& x : v) {
        const int k = kind(rng);
        if (k == 0) x = T(0);
        else if (k == 1) x = std::numeric_limits<T>::denorm_min() * T(1 + k);
        else x = static_cast<T>(normal(rng) * std::ldexp(1.0, exponent(rng)));
    }
    return v;
}

template <class T> Tensor leaf(const std::vector<T>& v) {
    return from_vector(std::vector<double>(v.begin(), v.end()), {v.size()},
                       TensorOptions(std::is_same_v<T, float> ? kFloat32 : kFloat64).requires_grad(true));
}

template <class T> Tensor plain(const std::vector<T>& v) {
    return from_vector(std::vector<double>(v.begin(), v.end()), {v.size()},
                       std::is_same_v<T, float> ? kFloat32 : kFloat64);
}

// Same bits, element by element (so -0 differs from 0), any NaN matching any NaN (its payload
// may follow the operand order the compiler picked); names the first element that differs.
template <class T> void require_same_bits(const Tensor& got, const std::vector<T>& want, const std::string& what) {
    const std::vector<T> g = got.to_vector<T>();
    REQUIRE(g.size() == want.size());
    for (std::size_t j = 0; j < g.size(); ++j) {
        if (std::isnan(g[j]) && std::isnan(want[j])) continue;
        if (std::memcmp(&g[j], &want[j], sizeof(T)) != 0) {
            FAIL(what << ": element " << j << " of " << g.size() << " is " << double(g[j]) << ", the scalar loop gives "
                      << double(want[j]));
        }
    }
}

// Adam's update as adam.hpp writes it, one element at a time, the scalars worked out in double
// then used in T (as torch does).
template <class T> struct AdamReference {
    std::vector<T> p, m, v, vmax;
    std::int64_t t = 0;

    void step(const std::vector<T>& g, double lr, double beta1, double beta2, double eps, double weight_decay,
              bool decoupled, bool amsgrad) {
        if (t == 0) {
            m.assign(p.size(), T(0));
            v.assign(p.size(), T(0));
            if (amsgrad) vmax.assign(p.size(), T(0));
        }
        ++t;
        const double bias_correction1 = 1 - std::pow(beta1, double(t));
        const double bias_correction2 = 1 - std::pow(beta2, double(t));
        const T neg_step_size = static_cast<T>(-(lr / bias_correction1));
        const T bc2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
        const T b1 = static_cast<T>(beta1), k1 = static_cast<T>(1 - beta1);
        const T b2 = static_cast<T>(beta2), k2 = static_cast<T>(1 - beta2);
        const T e = static_cast<T>(eps), wd = static_cast<T>(weight_decay);
        const T decay = static_cast<T>(1 - lr * weight_decay);
        for (std::size_t j = 0; j < p.size(); ++j) {
            T gj = g[j];
            if (!decoupled && weight_decay != 0) gj = g[j] + wd * p[j];
            if (decoupled && weight_decay != 0) p[j] = p[j] * decay;
            m[j] = m[j] * b1 + k1 * gj;
            v[j] = v[j] * b2 + k2 * gj * gj;
            T second = v[j];
            if (amsgrad) {
                vmax[j] = vmax[j] < v[j] ? v[j] : vmax[j];
                second = vmax[j];
            }
            const T denom = std::sqrt(second) / bc2_sqrt + e;
            p[j] = p[j] + neg_step_size * m[j] / denom;
        }
    }
};

template <class T> void adam_matches_scalar_loop(bool decoupled, bool amsgrad, double weight_decay) {
    std::mt19937_64 rng(7);
    const double beta1 = 0.9, beta2 = 0.98, eps = 1e-8;
    std::vector<Tensor> params;
    std::vector<AdamReference<T>> refs;
    for (std::size_t n : kSizes) {
        refs.push_back({random_values<T>(n, rng)});
        params.push_back(leaf(refs.back().p));
    }
    std::unique_ptr<Optimizer> opt;
    if (decoupled)
        opt = std::make_unique<AdamW>(params, AdamWOptions(3e-3).betas({beta1, beta2}).eps(eps).weight_decay(
                                                  weight_decay).amsgrad(amsgrad));
    else
        opt = std::make_unique<Adam>(params, AdamOptions(3e-3).betas({beta1, beta2}).eps(eps).weight_decay(
                                                 weight_decay).amsgrad(amsgrad));
    for (int s = 0; s < 6; ++s) {
        const double lr = s < 3 ? 3e-3 : 1e-1;  // a change of lr mid-run, as a schedule makes
        opt->set_lr(lr);
        for (std::size_t i = 0; i < params.size(); ++i) {
            // Gradients shrink after step 2, so that amsgrad's maximum keeps an older v.
            std::vector<T> g = random_values<T>(params[i].numel(), rng);
            if (s > 2)
                for (T& x : g) x = x / T(64);
            // A NaN at step 4 in element 5: it must spread to that element as in the scalar
            // loop, and amsgrad's maximum keeps the older v there (std::max keeps its first
            // argument against a NaN).
            if (s == 4 && g.size() > 5) g[5] = std::numeric_limits<T>::quiet_NaN();
            params[i].set_grad(plain(g));
            refs[i].step(g, lr, beta1, beta2, eps, weight_decay, decoupled, amsgrad);
        }
        opt->step();
    }
    const NamedTensors state = opt->state_dict();
    for (std::size_t i = 0; i < params.size(); ++i) {
        const std::string at = "parameter " + std::to_string(i) + " (" + std::to_string(kSizes[i]) + " elements)";
        require_same_bits(params[i], refs[i].p, at + ": the parameter");
        const std::string key = "state." + std::to_string(i) + ".";
        require_same_bits(find_entry(state, key + "exp_avg"), refs[i].m, at + ": exp_avg");
        require_same_bits(find_entry(state, key + "exp_avg_sq"), refs[i].v, at + ": exp_avg_sq");
        if (amsgrad) require_same_bits(find_entry(state, key + "max_exp_avg_sq"), refs[i].vmax, at + ": max_exp_avg_sq");
    }
}

// SGD's update as sgd.hpp writes it, one element at a time.
template <class T> struct SGDReference {
    std::vector<T> p, b;
    bool started = false;

    void step(const std::vector<T>& g, double lr_, double momentum_, double dampening, double weight_decay,
              bool nesterov) {
        const T lr = static_cast<T>(lr_), wd = static_cast<T>(weight_decay);
        const T momentum = static_cast<T>(momentum_), keep = static_cast<T>(1 - dampening);
        const bool first = !started;
        if (momentum_ != 0 && first) b.assign(p.size(), T(0));
        started = started || momentum_ != 0;
        for (std::size_t j = 0; j < p.size(); ++j) {
            T d = g[j];
            if (weight_decay != 0) d = g[j] + wd * p[j];
            if (momentum_ != 0) {
                if (first) b[j] = d;
                else b[j] = b[j] * momentum + keep * d;
                if (nesterov) d = d + momentum * b[j];
                else d = b[j];
            }
            p[j] = p[j] + -lr * d;
        }
    }
};

template <class T> void sgd_matches_scalar_loop(double momentum, double dampening, double weight_decay, bool nesterov) {
    std::mt19937_64 rng(11);
    std::vector<Tensor> params;
    std::vector<SGDReference<T>> refs;
    for (std::size_t n : kSizes) {
        refs.push_back({random_values<T>(n, rng)});
        params.push_back(leaf(refs.back().p));
    }
    SGD opt(params, SGDOptions(0.05).momentum(momentum).dampening(dampening).weight_decay(weight_decay).nesterov(
                        nesterov));
    for (int s = 0; s < 4; ++s) {
        for (std::size_t i = 0; i < params.size(); ++i) {
            const std::vector<T> g = random_values<T>(params[i].numel(), rng);
            params[i].set_grad(plain(g));
            refs[i].step(g, 0.05, momentum, dampening, weight_decay, nesterov);
        }
        opt.step();
    }
    const NamedTensors state = opt.state_dict();
    for (std::size_t i = 0; i < params.size(); ++i) {
        const std::string at = "parameter " + std::to_string(i) + " (" + std::to_string(kSizes[i]) + " elements)";
        require_same_bits(params[i], refs[i].p, at + ": the parameter");
        if (momentum != 0)
            require_same_bits(find_entry(state, "state." + std::to_string(i) + ".momentum_buffer"), refs[i].b,
                              at + ": momentum_buffer");
    }
}

}  // namespace

TEST_CASE("Adam and AdamW match a scalar loop bit for bit for every flag combination", "[optim][kernels]") {
    const bool decoupled = GENERATE(false, true);
    const bool amsgrad = GENERATE(false, true);
    const double weight_decay = GENERATE(0.0, 0.05);
    CAPTURE(decoupled, amsgrad, weight_decay);
    SECTION("float32") { adam_matches_scalar_loop<float>(decoupled, amsgrad, weight_decay); }
    SECTION("float64") { adam_matches_scalar_loop<double>(decoupled, amsgrad, weight_decay); }
}

TEST_CASE("SGD matches a scalar loop bit for bit for every flag combination", "[optim][kernels]") {
    struct Flags {
        double momentum, dampening;
        bool nesterov;
    };
    const Flags f = GENERATE(Flags{0, 0, false}, Flags{0.9, 0, false}, Flags{0.9, 0.3, false}, Flags{0.9, 0, true});
    const double weight_decay = GENERATE(0.0, 0.01);
    CAPTURE(f.momentum, f.dampening, f.nesterov, weight_decay);
    SECTION("float32") { sgd_matches_scalar_loop<float>(f.momentum, f.dampening, weight_decay, f.nesterov); }
    SECTION("float64") { sgd_matches_scalar_loop<double>(f.momentum, f.dampening, weight_decay, f.nesterov); }
}

// Parameters whose elements, as one step's range split over the pool, give chunks that end
// inside a parameter and the next one starting there: every third float64, the rest float32,
// each dtype over 2^16 values, one empty. Each has its scalar-loop reference (Ref<T>).
template <template <class> class Ref> struct ManyParameters {
    const std::vector<std::size_t> sizes = {3, 20000, 40000, 9, 15000, 30000, 40000, 33000, 0, 2};
    std::vector<Tensor> params;
    std::vector<Ref<float>> f;
    std::vector<Ref<double>> d;

    explicit ManyParameters(std::mt19937_64& rng) {
        for (std::size_t i = 0; i < sizes.size(); ++i) {
            if (wide(i)) {
                d.push_back({random_values<double>(sizes[i], rng)});
                params.push_back(leaf(d.back().p));
            } else {
                f.push_back({random_values<float>(sizes[i], rng)});
                params.push_back(leaf(f.back().p));
            }
        }
    }
    static bool wide(std::size_t i) { return i % 3 == 2; }
    // Each parameter a random gradient, its reference stepped by step(ref, g); `skip` gets none.
    template <class Step> void gradients(std::mt19937_64& rng, Step step, std::size_t skip = std::size_t(-1)) {
        for (std::size_t i = 0, nf = 0, nd = 0; i < params.size(); ++i) {
            if (i == skip) {
                params[i].set_grad(Tensor());
                (wide(i) ? nd : nf)++;
            } else if (wide(i)) {
                const std::vector<double> g = random_values<double>(sizes[i], rng);
                params[i].set_grad(plain(g));
                step(d[nd++], g);
            } else {
                const std::vector<float> g = random_values<float>(sizes[i], rng);
                params[i].set_grad(plain(g));
                step(f[nf++], g);
            }
        }
    }
    void require_same() const {
        for (std::size_t i = 0, nf = 0, nd = 0; i < params.size(); ++i) {
            const std::string at = "parameter " + std::to_string(i) + " (" + std::to_string(sizes[i]) + " elements)";
            if (wide(i)) require_same_bits(params[i], d[nd++].p, at);
            else require_same_bits(params[i], f[nf++].p, at);
        }
    }
};

// Run by the test below in processes with 1, 2 and 3 threads.
TEST_CASE("Adam child: many parameters of both dtypes against the scalar loop", "[.adam-threads-child]") {
    const bool decoupled = GENERATE(false, true);
    const bool amsgrad = GENERATE(false, true);
    CAPTURE(decoupled, amsgrad);
    std::mt19937_64 rng(9);
    ManyParameters<AdamReference> m(rng);
    std::unique_ptr<Optimizer> opt;
    if (decoupled)
        opt = std::make_unique<AdamW>(m.params, AdamWOptions(3e-3).betas({0.9, 0.98}).eps(1e-8).weight_decay(0.01).amsgrad(amsgrad));
    else
        opt = std::make_unique<Adam>(m.params, AdamOptions(3e-3).betas({0.9, 0.98}).eps(1e-8).weight_decay(0.01).amsgrad(amsgrad));
    for (int s = 0; s < 3; ++s) {
        m.gradients(rng, [&](auto& ref, const auto& g) { ref.step(g, 3e-3, 0.9, 0.98, 1e-8, 0.01, decoupled, amsgrad); });
        opt->step();
    }
    m.require_same();
}

// Run by the test below in processes with 1, 2 and 3 threads.
TEST_CASE("SGD child: many parameters of both dtypes against the scalar loop", "[.sgd-threads-child]") {
    const double momentum = GENERATE(0.0, 0.9);
    const bool nesterov = GENERATE(false, true);
    if (nesterov && momentum == 0) return;  // refused
    CAPTURE(momentum, nesterov);
    std::mt19937_64 rng(10);
    ManyParameters<SGDReference> m(rng);
    const double dampening = nesterov ? 0.0 : 0.1;
    SGD opt(m.params, SGDOptions(0.05).momentum(momentum).dampening(dampening).weight_decay(0.01).nesterov(nesterov));
    for (int s = 0; s < 3; ++s) {
        // parameter 4 has no gradient at step 1: it skips that step, its buffer starting late
        m.gradients(rng, [&](auto& ref, const auto& g) { ref.step(g, 0.05, momentum, dampening, 0.01, nesterov); },
                    s == 1 ? 4 : std::size_t(-1));
        opt.step();
    }
    m.require_same();
}

TEST_CASE("Adam and SGD over many parameters of both dtypes match the scalar loop on 1, 2 and 3 threads", "[optim][kernels]") {
    for (const char* threads : {"XGRAD_NUM_THREADS=1", "XGRAD_NUM_THREADS=2", "XGRAD_NUM_THREADS=3"})
        for (const char* child : {"[.adam-threads-child]", "[.sgd-threads-child]"}) {
        const std::string out = run_this_binary(threads, child);
        INFO(threads << " " << child << "\n" << out);
        CHECK(out.find("All tests passed") != std::string::npos);
        }
}
