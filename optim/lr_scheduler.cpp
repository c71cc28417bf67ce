#include "lr_scheduler.hpp"

#include <algorithm>
#include <cmath>

#include "core/creation.hpp"

namespace xgrad::optim {

LRScheduler::LRScheduler(Optimizer& optimizer, std::string name)
    : m_optimizer(optimizer), m_name(std::move(name)), m_base_lr(optimizer.lr()), m_last_lr(optimizer.lr()) {}

void LRScheduler::start() {
    m_last_lr = checked_lr_at(0);
    m_optimizer.set_lr(m_last_lr);
}

double LRScheduler::checked_lr_at(std::int64_t epoch) const {
    if (epoch < 0) throw Error(fmt::format("{}: invalid epoch {} (expected epoch >= 0)", m_name, epoch));
    const double lr = lr_at(epoch);
    if (!std::isfinite(lr) || lr < 0)
        throw Error(fmt::format("{}: the lr at epoch {} is {} (base_lr {}); the schedule has left the finite "
                                "numbers >= 0",
                                m_name, epoch, lr, m_base_lr));
    return lr;
}

void LRScheduler::step() {
    if (m_last_epoch == INT64_MAX) throw Error(fmt::format("{}: step: the epoch count would overflow", m_name));
    const double lr = checked_lr_at(m_last_epoch + 1);
    m_optimizer.set_lr(lr);
    ++m_last_epoch;
    m_last_lr = lr;
}

NamedTensors LRScheduler::state_dict() const {
    return {{"last_epoch", from_vector(std::vector<std::int64_t>{m_last_epoch}, Shape{})},
            {"base_lr", tensor(m_base_lr, kFloat64)}};
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
    if (base.dim() != 0 || base.dtype() != kFloat64 || !std::isfinite(base.item<double>()) ||
        base.item<double>() < 0)
        throw Error(fmt::format("{}: 'base_lr' must be a 0-d float64, finite and >= 0, got {}", op, to_string(base)));

    const double saved_base = m_base_lr;
    m_base_lr = base.item<double>();
    double lr;
    try {
        lr = checked_lr_at(epoch.item<std::int64_t>());
    } catch (...) {
        m_base_lr = saved_base;  // changes nothing on failure
        throw;
    }
    m_last_epoch = epoch.item<std::int64_t>();
    m_last_lr = lr;
    m_optimizer.set_lr(lr);
}

StepLR::StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma)
    : LRScheduler(optimizer, "StepLR"), m_step_size(step_size), m_gamma(gamma) {
    if (step_size < 1)
        throw Error(fmt::format("StepLR: invalid step_size {} (expected step_size >= 1)", step_size));
    if (!(gamma > 0) || std::isinf(gamma))
        throw Error(fmt::format("StepLR: invalid gamma {} (expected a finite gamma > 0)", gamma));
    start();
}

double StepLR::lr_at(std::int64_t epoch) const {
    if (m_base_lr == 0) return 0;  // not 0·inf = NaN once gamma^k overflows
    return m_base_lr * std::pow(m_gamma, static_cast<double>(epoch / m_step_size));
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
    if (!(min_lr >= 0) || min_lr > m_base_lr)
        throw Error(fmt::format("WarmupCosineLR: invalid min_lr {} (expected 0 <= min_lr <= the optimizer's "
                                "lr {})",
                                min_lr, m_base_lr));
    start();
}

double WarmupCosineLR::lr_at(std::int64_t epoch) const {
    if (epoch < m_warmup_steps)
        return m_base_lr * static_cast<double>(epoch + 1) / static_cast<double>(m_warmup_steps);
    const double q = m_total_steps == m_warmup_steps
                         ? 1.0
                         : std::min(1.0, static_cast<double>(epoch - m_warmup_steps) /
                                             static_cast<double>(m_total_steps - m_warmup_steps));
    return m_min_lr + (m_base_lr - m_min_lr) * (1 + std::cos(M_PI * q)) / 2;
}

}  // namespace xgrad::optim
