#include "optimizer.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/creation.hpp"

namespace xgrad::optim {

Optimizer::Optimizer(std::vector<Tensor> params, double lr, std::string name)
    : m_params(std::move(params)), m_lr(lr), m_name(std::move(name)) {
    if (m_params.empty()) throw Error(fmt::format("{}: got an empty parameter list", m_name));
    for (std::size_t i = 0; i < m_params.size(); ++i) {
        const Tensor& p = m_params[i];
        if (!p.defined()) throw Error(fmt::format("{}: parameter {} is an undefined tensor", m_name, i));
        if (p.dtype() != kFloat32 && p.dtype() != kFloat64)
            throw Error(fmt::format("{}: parameter {} is {}; only float32 and float64 tensors can be optimized{}",
                                    m_name, i, dtype_name(p.dtype()),
                                    p.dtype() == kBFloat16 ? " (parameters, gradients and optimizer state stay float32, "
                                                             "as under torch's autocast: keep the parameter float32 "
                                                             "and convert where it is used, with .to(kBFloat16) or "
                                                             "under AutocastGuard)"
                                                           : ""));
        if (!p.is_leaf())
            throw Error(fmt::format("{}: parameter {} is not a leaf (made by '{}'); optimize the leaf it came "
                                    "from, or detach() it",
                                    m_name, i, p.op_name()));
        for (std::size_t j = 0; j < i; ++j)
            if (p.is_same(m_params[j]))
                throw Error(fmt::format("{}: parameters {} and {} are the same tensor; pass each parameter once",
                                        m_name, j, i));
    }
    require_finite_non_negative("learning rate", lr, "lr >= 0");
}

void Optimizer::require(bool ok, const char* what, double value, const char* rule) const {
    if (!ok) throw Error(fmt::format("{}: invalid {} {} (expected {})", m_name, what, value, rule));
}

void Optimizer::require_finite_non_negative(const char* what, double value, const char* rule) const {
    require(std::isfinite(value), what, value, "a finite number");
    require(value >= 0, what, value, rule);
}

void Optimizer::fit_state(const std::string& op, std::size_t i, Tensor& buffer, const char* buffer_name) const {
    const Tensor& p = m_params[i];
    if (buffer.shape() != p.shape())
        throw Error(fmt::format("{}: parameter {} now has shape {}, but its state '{}' was made for shape {}: the "
                                "parameter changed shape since its last step (set_data or load_state_dict with "
                                "another shape); make a new optimizer for it",
                                op, i, shape_str(p.shape()), buffer_name, shape_str(buffer.shape())));
    if (buffer.dtype() != p.dtype()) buffer = buffer.detach().to(p.dtype());
}

std::vector<Tensor> Optimizer::gradients() const {
    std::vector<Tensor> grads;
    grads.reserve(m_params.size());
    for (const Tensor& p : m_params) grads.push_back(p.grad());
    return grads;
}

void Optimizer::zero_grad() {
    const std::lock_guard<std::mutex> lock(m_use);
    for (Tensor& p : m_params) p.zero_grad();
}

void Optimizer::set_lr(double lr) {
    require_finite_non_negative("learning rate", lr, "lr >= 0");
    m_lr = lr;
}

namespace {

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
}

std::string state_key(std::size_t i, const std::string& buffer) { return fmt::format("state.{}.{}", i, buffer); }

Tensor int64_scalar(std::int64_t v) { return from_vector(std::vector<std::int64_t>{v}, Shape{}); }

}  // namespace

NamedTensors Optimizer::state_dict() const {
    const std::lock_guard<std::mutex> lock(m_use);
    const std::string kind = lower(m_name);
    NamedTensors out;
    out.emplace_back(kind + ".num_params", int64_scalar(static_cast<std::int64_t>(m_params.size())));
    out.emplace_back(kind + ".lr", tensor(m_lr, kFloat64));
    const HyperParameters hyper = hyper_parameters();
    for (const auto& [name, value] : hyper) out.emplace_back(kind + "." + name, tensor(value, kFloat64));
    const auto names = buffer_names(hyper);
    for (std::size_t i = 0; i < m_params.size(); ++i) {
        const auto buffers = get_state(i);
        for (std::size_t j = 0; j < buffers.size(); ++j) out.emplace_back(state_key(i, names[j]), buffers[j]);
    }
    return out;
}

void Optimizer::load_state_dict(const NamedTensors& state) {
    const std::lock_guard<std::mutex> lock(m_use);
    const std::string op = m_name + ".load_state_dict";
    const std::string kind = lower(m_name);

    std::map<std::string, Tensor> entries;
    for (const auto& [key, t] : state) {
        if (!t.defined()) throw Error(fmt::format("{}: entry '{}' is an undefined tensor", op, key));
        if (!entries.emplace(key, t).second) throw Error(fmt::format("{}: entry '{}' appears twice", op, key));
    }
    auto take = [&](const std::string& key) {
        auto it = entries.find(key);
        if (it == entries.end()) {
            std::string hint;
            for (const auto& [other, t] : entries)
                if (other.size() > 11 && other.compare(other.size() - 11, 11, ".num_params") == 0 &&
                    other != kind + ".num_params")
                    hint = fmt::format(" (found '{}': this state was saved by another optimizer)", other);
            throw Error(fmt::format("{}: missing entry '{}'{}", op, key, hint));
        }
        Tensor t = it->second;
        entries.erase(it);
        return t;
    };
    auto scalar_of = [&](const std::string& key, Dtype dtype) {
        Tensor t = take(key);
        if (t.dim() != 0 || t.dtype() != dtype)
            throw Error(fmt::format("{}: entry '{}' must be a 0-d {} tensor, got {} of shape {}", op, key,
                                    dtype_name(dtype), dtype_name(t.dtype()), shape_str(t.shape())));
        return t;
    };

    const auto count = scalar_of(kind + ".num_params", kInt64).item<std::int64_t>();
    if (count != static_cast<std::int64_t>(m_params.size()))
        throw Error(fmt::format("{}: the state is for {} parameters, this optimizer has {}", op, count,
                                m_params.size()));
    const double lr = scalar_of(kind + ".lr", kFloat64).item<double>();
    require_finite_non_negative("learning rate", lr, "lr >= 0");
    HyperParameters hyper = hyper_parameters();
    for (auto& [name, value] : hyper) value = scalar_of(kind + "." + name, kFloat64).item<double>();
    check_hyper_parameters(hyper);

    const auto names = buffer_names(hyper);
    std::vector<std::vector<Tensor>> buffers(m_params.size());
    for (std::size_t i = 0; i < m_params.size(); ++i) {
        const Tensor& p = m_params[i];
        const std::size_t present = std::count_if(names.begin(), names.end(), [&](const std::string& n) {
            return entries.count(state_key(i, n)) > 0;
        });
        if (present == 0) continue;  // parameter i was never stepped
        for (const auto& name : names) {
            const std::string key = state_key(i, name);
            if (!entries.count(key))
                throw Error(fmt::format("{}: missing entry '{}' (other buffers of parameter {} are present)", op,
                                        key, i));
            Tensor t = take(key);
            if (name == "step") {
                // At most 2^53: the next step adds one and uses it as a double (INT64_MAX overflowed).
                constexpr std::int64_t kMaxStep = std::int64_t{1} << 53;
                if (t.dim() != 0 || t.dtype() != kInt64 || t.item<std::int64_t>() < 1 ||
                    t.item<std::int64_t>() > kMaxStep)
                    throw Error(fmt::format("{}: entry '{}' must be a 0-d int64 count in [1, 2^53], got {}", op, key,
                                            to_string(t)));
            } else if (t.shape() != p.shape() || !is_floating(t.dtype())) {
                throw Error(fmt::format("{}: entry '{}' is {} {}, but parameter {} is {} {}", op, key,
                                        dtype_name(t.dtype()), shape_str(t.shape()), i, dtype_name(p.dtype()),
                                        shape_str(p.shape())));
            } else {
                // A state from a healthy run is finite (and >= 0 where the buffer is a square): one
                // that is not would turn every weight into NaN at the next step without a word.
                const std::vector<double> v = t.to_vector<double>();
                const auto bad = std::find_if(v.begin(), v.end(), [&](double x) {
                    return !std::isfinite(x) || (x < 0 && non_negative_buffer(name));
                });
                if (bad != v.end())
                    throw Error(fmt::format("{}: entry '{}' holds {} at flat index {}; expected finite values{}", op,
                                            key, *bad, bad - v.begin(),
                                            non_negative_buffer(name) ? " >= 0" : ""));
                if (t.dtype() != p.dtype())
                    t = t.detach().to(p.dtype());  // as torch: a float32 run's state resumes a float64 model
            }
            buffers[i].push_back(t.detach());  // a copy: later steps must not write into the caller's tensors
        }
    }
    if (!entries.empty())
        throw Error(fmt::format("{}: unexpected entry '{}' ({} has {} parameters with buffers named {})", op,
                                entries.begin()->first, m_name, m_params.size(), fmt::join(names, ", ")));

    // Everything checked: from here on nothing throws.
    m_lr = lr;
    set_hyper_parameters(hyper);
    for (std::size_t i = 0; i < m_params.size(); ++i) set_state(i, std::move(buffers[i]));
}

}  // namespace xgrad::optim
