#include "optimizer.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/arguments.hpp"
#include "core/creation.hpp"

namespace xgrad::optim {

Optimizer::Optimizer(std::string name) : m_name(std::move(name)) {}

void Optimizer::add_group_parameters(const std::string& op, const std::vector<Tensor>& params, bool grouped) {
    const std::size_t g = num_param_groups();
    // "parameter 3", or with groups "parameter 1 of group 2", j counting within the group
    const auto which = [&](std::size_t j) {
        return grouped ? fmt::format("parameter {} of group {}", j, g) : fmt::format("parameter {}", j);
    };
    if (params.empty())
        throw Error(grouped ? fmt::format("{}: parameter group {} is empty", op, g)
                            : fmt::format("{}: got an empty parameter list", op));
    for (std::size_t j = 0; j < params.size(); ++j) {
        const Tensor& p = params[j];
        if (!p.defined()) throw Error(fmt::format("{}: {} is an undefined tensor", op, which(j)));
        if (p.dtype() != kFloat32 && p.dtype() != kFloat64)
            throw Error(fmt::format("{}: {} is {}; only float32 and float64 tensors can be optimized{}", op, which(j),
                                    dtype_name(p.dtype()),
                                    p.dtype() == kBFloat16 ? " (parameters, gradients and optimizer state stay float32, "
                                                             "as under torch's autocast: keep the parameter float32 "
                                                             "and convert where it is used, with .to(kBFloat16) or "
                                                             "under AutocastGuard)"
                                                           : ""));
        if (!p.is_leaf())
            throw Error(fmt::format("{}: {} is not a leaf (made by '{}'); optimize the leaf it came from, or "
                                    "detach() it",
                                    op, which(j), p.op_name()));
        for (std::size_t k = 0; k < j; ++k)
            if (p.is_same(params[k]))
                throw Error(grouped ? fmt::format("{}: parameters {} and {} of group {} are the same tensor; pass "
                                                  "each parameter once",
                                                  op, k, j, g)
                                    : fmt::format("{}: parameters {} and {} are the same tensor; pass each "
                                                  "parameter once",
                                                  op, k, j));
        for (std::size_t i = 0; i < m_params.size(); ++i)
            if (p.is_same(m_params[i])) {
                const std::size_t other = m_group_of[i];
                throw Error(fmt::format("{}: {} is already in parameter group {} (its parameter {}): some "
                                        "parameters appear in more than one parameter group",
                                        op, which(j), other, i - m_group_start[other]));
            }
    }
    m_params.insert(m_params.end(), params.begin(), params.end());
    m_group_of.insert(m_group_of.end(), params.size(), g);
    m_group_start.push_back(m_params.size());
}

void Optimizer::require(bool ok, const char* what, double value, const char* rule) const {
    check_argument(ok, m_name.c_str(), what, value, rule);
}

void Optimizer::require_finite_non_negative(const char* what, double value, const char* rule) const {
    check_finite_argument(m_name.c_str(), what, value);
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
    for (std::size_t i = 0; i < m_params.size(); ++i) {
        const Tensor& p = m_params[i];
        Tensor g = p.grad();
        // The steps run over each parameter's and gradient's elements in row-major order, in
        // their own storage: a gradient set to a view is read as its values, and a parameter
        // that is a non-contiguous view (its elements apart, or several at one place) is refused.
        if (g.defined() && !g.is_contiguous()) g = g.contiguous();
        if (g.defined() && !p.is_contiguous())
            throw Error(fmt::format("{}.step: parameter {} (of shape {}) is a non-contiguous view of another tensor "
                                    "(strides ({})), which the step cannot update in place; register a contiguous "
                                    "tensor (p.contiguous() or a clone) as the parameter",
                                    m_name, i, shape_str(p.shape()), fmt::join(p.strides(), ", ")));
        grads.push_back(std::move(g));
    }
    return grads;
}

void Optimizer::zero_grad() {
    const std::lock_guard<std::mutex> lock(m_use);
    for (Tensor& p : m_params) p.zero_grad();
}

double Optimizer::lr() const {
    for (std::size_t g = 1; g < num_param_groups(); ++g)
        if (group_lr(g) != group_lr(0))
            throw Error(fmt::format("{}.lr: parameter groups 0 and {} have different learning rates ({} and {}); "
                                    "read lr(group)",
                                    m_name, g, group_lr(0), group_lr(g)));
    return group_lr(0);
}

void Optimizer::set_lr(double lr) {
    require_finite_non_negative("learning rate", lr, "lr >= 0");
    for (std::size_t g = 0; g < num_param_groups(); ++g) store_group_lr(g, lr);
}

double Optimizer::lr(std::size_t group) const {
    if (group >= num_param_groups())
        throw Error(fmt::format("{}.lr: there is no parameter group {} (the optimizer has {})", m_name, group,
                                num_param_groups()));
    return group_lr(group);
}

void Optimizer::set_lr(std::size_t group, double lr) {
    if (group >= num_param_groups())
        throw Error(fmt::format("{}.set_lr: there is no parameter group {} (the optimizer has {})", m_name, group,
                                num_param_groups()));
    require_finite_non_negative("learning rate", lr, "lr >= 0");
    store_group_lr(group, lr);
}

namespace {

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
}

std::string state_key(std::size_t i, const std::string& buffer) { return fmt::format("state.{}.{}", i, buffer); }

std::string group_prefix(const std::string& kind, std::size_t g) {
    return fmt::format("{}.param_groups.{}.", kind, g);
}

Tensor int64_scalar(std::int64_t v) { return from_vector(std::vector<std::int64_t>{v}, Shape{}); }

}  // namespace

NamedTensors Optimizer::state_dict() const {
    const std::lock_guard<std::mutex> lock(m_use);
    const std::string kind = lower(m_name);
    const std::size_t groups = num_param_groups();
    NamedTensors out;
    out.emplace_back(kind + ".num_params", int64_scalar(static_cast<std::int64_t>(m_params.size())));
    std::vector<HyperParameters> hyper;
    for (std::size_t g = 0; g < groups; ++g) hyper.push_back(hyper_parameters(g));
    if (groups == 1) {
        out.emplace_back(kind + ".lr", tensor(hyper[0].at("lr"), kFloat64));
        for (const auto& [name, value] : hyper[0])
            if (name != "lr") out.emplace_back(kind + "." + name, tensor(value, kFloat64));
    } else {
        out.emplace_back(kind + ".num_groups", int64_scalar(static_cast<std::int64_t>(groups)));
        for (std::size_t g = 0; g < groups; ++g) {
            const std::string prefix = group_prefix(kind, g);
            out.emplace_back(prefix + "lr", tensor(hyper[g].at("lr"), kFloat64));
            for (const auto& [name, value] : hyper[g])
                if (name != "lr") out.emplace_back(prefix + name, tensor(value, kFloat64));
            std::vector<std::int64_t> indices(m_group_start[g + 1] - m_group_start[g]);
            for (std::size_t j = 0; j < indices.size(); ++j)
                indices[j] = static_cast<std::int64_t>(m_group_start[g] + j);
            out.emplace_back(prefix + "params", from_vector(indices, Shape{indices.size()}));
        }
    }
    for (std::size_t i = 0; i < m_params.size(); ++i) {
        const auto names = buffer_names(hyper[m_group_of[i]]);
        const auto buffers = get_state(i);
        for (std::size_t j = 0; j < buffers.size(); ++j) out.emplace_back(state_key(i, names[j]), buffers[j]);
    }
    return out;
}

void Optimizer::load_state_dict(const NamedTensors& state) {
    const std::lock_guard<std::mutex> lock(m_use);
    const std::string op = m_name + ".load_state_dict";
    const std::string kind = lower(m_name);
    const std::size_t groups = num_param_groups();

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
    // A state of one group has no num_groups (the layout from before groups, still written for one).
    std::int64_t saved_groups = 1;
    if (entries.count(kind + ".num_groups")) saved_groups = scalar_of(kind + ".num_groups", kInt64).item<std::int64_t>();
    if (saved_groups != static_cast<std::int64_t>(groups))
        throw Error(fmt::format("{}: the state has {} parameter group{}, this optimizer has {}", op, saved_groups,
                                saved_groups == 1 ? "" : "s", groups));
    std::vector<HyperParameters> hyper(groups);
    for (std::size_t g = 0; g < groups; ++g) {
        const std::string prefix = groups == 1 ? kind + "." : group_prefix(kind, g);
        hyper[g] = hyper_parameters(g);
        for (auto& [name, value] : hyper[g]) value = scalar_of(prefix + name, kFloat64).item<double>();
        if (groups == 1) {
            check_hyper_parameters(hyper[g]);
            continue;
        }
        try {
            check_hyper_parameters(hyper[g]);
        } catch (const Error& e) {
            throw Error(fmt::format("{} (in the state's parameter group {})", e.what(), g));
        }
        const std::size_t size = m_group_start[g + 1] - m_group_start[g];
        const Tensor indices = take(prefix + "params");
        if (indices.dim() != 1 || indices.dtype() != kInt64)
            throw Error(fmt::format("{}: entry '{}params' must be a 1-D int64 tensor, got {} of shape {}", op, prefix,
                                    dtype_name(indices.dtype()), shape_str(indices.shape())));
        if (static_cast<std::size_t>(indices.numel()) != size)
            throw Error(fmt::format("{}: parameter group {} has {} parameters in the state, {} in this optimizer", op,
                                    g, indices.numel(), size));
        const auto v = indices.to_vector<std::int64_t>();
        for (std::size_t j = 0; j < size; ++j)
            if (v[j] != static_cast<std::int64_t>(m_group_start[g] + j))
                throw Error(fmt::format("{}: parameter group {} lists parameter {} as its parameter {}, expected {} "
                                        "(parameters are numbered group after group)",
                                        op, g, v[j], j, m_group_start[g] + j));
    }

    std::vector<std::vector<Tensor>> buffers(m_params.size());
    for (std::size_t i = 0; i < m_params.size(); ++i) {
        const Tensor& p = m_params[i];
        const auto names = buffer_names(hyper[m_group_of[i]]);
        const std::string where =
            groups == 1 ? fmt::format("parameter {}", i)
                        : fmt::format("parameter {} (group {}'s parameter {})", i, m_group_of[i],
                                      i - m_group_start[m_group_of[i]]);
        const std::size_t present = std::count_if(names.begin(), names.end(), [&](const std::string& n) {
            return entries.count(state_key(i, n)) > 0;
        });
        if (present == 0) continue;  // parameter i was never stepped
        for (const auto& name : names) {
            const std::string key = state_key(i, name);
            if (!entries.count(key))
                throw Error(fmt::format("{}: missing entry '{}' (other buffers of {} are present)", op, key, where));
            Tensor t = take(key);
            if (name == "step") {
                // At most 2^53: the next step adds one and uses it as a double (INT64_MAX overflowed).
                constexpr std::int64_t kMaxStep = std::int64_t{1} << 53;
                if (t.dim() != 0 || t.dtype() != kInt64 || t.item<std::int64_t>() < 1 ||
                    t.item<std::int64_t>() > kMaxStep)
                    throw Error(fmt::format("{}: entry '{}' must be a 0-d int64 count in [1, 2^53], got {}", op, key,
                                            to_string(t)));
            } else if (t.shape() != p.shape() || !is_floating(t.dtype())) {
                throw Error(fmt::format("{}: entry '{}' is {} {}, but {} is {} {}", op, key, dtype_name(t.dtype()),
                                        shape_str(t.shape()), where, dtype_name(p.dtype()), shape_str(p.shape())));
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
            // A copy (detach alone shares storage): later steps must not write into the caller's tensors.
            buffers[i].push_back(t.detach().clone());
        }
    }
    if (!entries.empty())
        throw Error(fmt::format("{}: unexpected entry '{}' ({} has {} parameters in {} group{} with buffers named {})",
                                op, entries.begin()->first, m_name, m_params.size(), groups, groups == 1 ? "" : "s",
                                fmt::join(buffer_names(hyper[0]), ", ")));

    // Everything checked: from here on nothing throws.
    for (std::size_t g = 0; g < groups; ++g) set_hyper_parameters(g, hyper[g]);
    for (std::size_t i = 0; i < m_params.size(); ++i) set_state(i, std::move(buffers[i]));
}

}  // namespace xgrad::optim
