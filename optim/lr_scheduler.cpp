#include "lr_scheduler.hpp"

#include <algorithm>
#include <cmath>

#include "core/creation.hpp"

namespace xgrad::optim {

namespace {

std::vector<double> group_lrs(const Optimizer& optimizer) {
    std::vector<double> lrs(optimizer.num_param_groups());
    for (std::size_t g = 0; g < lrs.size(); ++g) lrs[g] = optimizer.lr(g);
    return lrs;
}

}  // namespace

LRScheduler::LRScheduler(Optimizer& optimizer, std::string name)
    : m_optimizer(optimizer), m_name(std::move(name)), m_base_lrs(group_lrs(optimizer)), m_last_lrs(m_base_lrs) {}

void LRScheduler::start() {
    const auto lrs = checked_lrs_at(0, m_base_lrs);
    apply(lrs, "");
    m_last_lrs = lrs;
}

std::vector<double> LRScheduler::checked_lrs_at(std::int64_t epoch, const std::vector<double>& base_lrs) const {
    if (epoch < 0) throw Error(fmt::format("{}: invalid epoch {} (expected epoch >= 0)", m_name, epoch));
    std::vector<double> lrs(base_lrs.size());
    for (std::size_t g = 0; g < lrs.size(); ++g) {
        lrs[g] = lr_at(epoch, base_lrs[g]);
        if (!std::isfinite(lrs[g]) || lrs[g] < 0)
            throw Error(fmt::format("{}: the lr at epoch {} is {} (base_lr {}{}); the schedule has left the finite "
                                    "numbers >= 0",
                                    m_name, epoch, lrs[g], base_lrs[g],
                                    lrs.size() > 1 ? fmt::format(", parameter group {}", g) : ""));
    }
    return lrs;
}

void LRScheduler::apply(const std::vector<double>& lrs, const char* op) {
    if (m_optimizer.num_param_groups() != lrs.size())
        throw Error(fmt::format("{}{}: the optimizer has {} parameter groups, the schedule was made for {} "
                                "(add_param_group after the schedule was made); make the schedule after adding "
                                "every group",
                                m_name, op, m_optimizer.num_param_groups(), lrs.size()));
    for (std::size_t g = 0; g < lrs.size(); ++g) m_optimizer.set_lr(g, lrs[g]);
}

void LRScheduler::step() {
    if (m_last_epoch == INT64_MAX) throw Error(fmt::format("{}: step: the epoch count would overflow", m_name));
    const auto lrs = checked_lrs_at(m_last_epoch + 1, m_base_lrs);
    apply(lrs, ".step");
    ++m_last_epoch;
    m_last_lrs = lrs;
}

NamedTensors LRScheduler::state_dict() const {
    return {{"last_epoch", from_vector(std::vector<std::int64_t>{m_last_epoch}, Shape{})},
            {"base_lr", m_base_lrs.size() == 1 ? tensor(m_base_lrs[0], kFloat64)
                                               : from_vector(m_base_lrs, Shape{m_base_lrs.size()}, kFloat64)}};
}

void LRScheduler::load_state_dict(const NamedTensors& state) {
    const std::string op = m_name + ".load_state_dict";
    Tensor epoch, base;
    for (const auto& [key, t] : state) {
        Tensor* slot = key == "last_epoch" ? &epoch : key == "base_lr" ? &base : nullptr;
        if (!slot) throw Error(fmt::format("{}: unexpected entry '{}' (expected last_epoch and base_lr)", op, key));
        if (slot->defined()) throw Error(fmt::format("{}: entry '{}' appears twice", op, key));
        if (!t.defined()) throw Error(fmt::format("{}: entry '{}' is an undefined tensor", op, key));
        *slot = t;
    }
    if (!epoch.defined() || !base.defined())
        throw Error(fmt::format("{}: missing entry '{}'", op, epoch.defined() ? "base_lr" : "last_epoch"));
    if (epoch.dim() != 0 || epoch.dtype() != kInt64 || epoch.item<std::int64_t>() < 0)
        throw Error(fmt::format("{}: 'last_epoch' must be a 0-d int64 count >= 0, got {}", op, to_string(epoch)));
    const std::size_t groups = m_base_lrs.size();
    if (groups == 1 ? base.dim() != 0 : base.dim() != 1 || static_cast<std::size_t>(base.numel()) != groups)
        throw Error(fmt::format("{}: 'base_lr' holds {} base lr{} (shape {}), the schedule's optimizer has {} "
                                "parameter group{}",
                                op, base.numel(), base.numel() == 1 ? "" : "s", shape_str(base.shape()), groups,
                                groups == 1 ? " (a 0-d base_lr)" : "s (a 1-D base_lr, one per group)"));
    const std::vector<double> bases = base.dtype() == kFloat64 ? base.to_vector<double>() : std::vector<double>{};
    if (base.dtype() != kFloat64 ||
        std::any_of(bases.begin(), bases.end(), [](double b) { return !std::isfinite(b) || b < 0; }))
        throw Error(fmt::format("{}: 'base_lr' must be a 0-d float64, finite and >= 0, got {}", op, to_string(base)));

    const auto lrs = checked_lrs_at(epoch.item<std::int64_t>(), bases);  // changes nothing on failure
    apply(lrs, ".load_state_dict");
    m_base_lrs = bases;
    m_last_epoch = epoch.item<std::int64_t>();
    m_last_lrs = lrs;
}

StepLR::StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma)
    : LRScheduler(optimizer, "StepLR"), m_step_size(step_size), m_gamma(gamma) {
    if (step_size < 1)
        throw Error(fmt::format("StepLR: invalid step_size {} (expected step_size >= 1)", step_size));
    if (!(gamma > 0) || std::isinf(gamma))
        throw Error(fmt::format("StepLR: invalid gamma {} (expected a finite gamma > 0)", gamma));
    start();
}

double StepLR::lr_at(std::int64_t epoch, double base_lr) const {
    if (base_lr == 0) return 0;  // not 0·inf = NaN once gamma^k overflows
    return base_lr * std::pow(m_gamma, static_cast<double>(epoch / m_step_size));
}

WarmupCosineLR::WarmupCosineLR(Optimizer& optimizer, std::int64_t warmup_steps, std::int64_t total_steps,
                               double min_lr)
    : LRScheduler(optimizer, "WarmupCosineLR"),
      m_warmup_steps(warmup_steps),
      m_total_steps(total_steps),
      m_min_lr(min_lr) {
    if (total_steps < 1 || warmup_steps < 0 || warmup_steps > total_steps)
        throw Error(fmt::format("WarmupCosineLR: invalid warmup_steps {} and total_steps {} (expected "
                                "0 <= warmup_steps <= total_steps and total_steps >= 1)",
                                warmup_steps, total_steps));
    const double lowest = *std::min_element(m_base_lrs.begin(), m_base_lrs.end());
    if (!(min_lr >= 0) || min_lr > lowest)
        throw Error(fmt::format("WarmupCosineLR: invalid min_lr {} (expected 0 <= min_lr <= the optimizer's "
                                "lr {}{})",
                                min_lr, lowest, m_base_lrs.size() > 1 ? ", its lowest group's" : ""));
    start();
}

double WarmupCosineLR::lr_at(std::int64_t epoch, double base_lr) const {
    if (epoch < m_warmup_steps)
        return base_lr * static_cast<double>(epoch + 1) / static_cast<double>(m_warmup_steps);
    const double q = m_total_steps == m_warmup_steps
                         ? 1.0
                         : std::min(1.0, static_cast<double>(epoch - m_warmup_steps) /
                                             static_cast<double>(m_total_steps - m_warmup_steps));
    return m_min_lr + (base_lr - m_min_lr) * (1 + std::cos(M_PI * q)) / 2;
}

}  // namespace xgrad::optim
