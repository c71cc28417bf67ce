#pragma once
/// Learning-rate schedules that drive an Optimizer's lr, as torch.optim.lr_scheduler:
///
///   StepLR sched(opt, 30, 0.1);
///   for (...) { ...; opt.step(); sched.step(); }
///
/// A schedule counts its step() calls in last_epoch (0 after construction) and sets each
/// parameter group's lr = lr_at(last_epoch, base lr), a closed form of last_epoch and the
/// group's base lr (its lr when the schedule was made: torch's `initial_lr` per group), so a
/// restored state gives the same lrs as an uninterrupted run. The optimizer must outlive its
/// schedule (it is held by reference, as in torch) and have all its groups when the schedule is
/// made: step() refuses an optimizer whose group count changed since (torch would skip the new
/// group without a word).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "optimizer.hpp"

namespace xgrad::optim {

class LRScheduler {
public:
    virtual ~LRScheduler() = default;
    /// Advances one step and sets every group's lr.
    void step();
    /// The lr the last step (or the construction) set in group 0; get_last_lrs() for each group.
    double get_last_lr() const { return m_last_lrs[0]; }
    /// The lrs the last step (or the construction) set, one per group (torch's get_last_lr()).
    const std::vector<double>& get_last_lrs() const { return m_last_lrs; }
    std::int64_t last_epoch() const { return m_last_epoch; }
    /// Group 0's base lr; base_lrs() for each group.
    double base_lr() const { return m_base_lrs[0]; }
    const std::vector<double>& base_lrs() const { return m_base_lrs; }
    /// The lr at step `epoch` (>= 0) of a group whose base lr is `base_lr`, unchecked.
    virtual double lr_at(std::int64_t epoch, double base_lr) const = 0;
    /// Group 0's lr at step `epoch`.
    double lr_at(std::int64_t epoch) const { return lr_at(epoch, m_base_lrs[0]); }

    /// {"last_epoch": int64 0-d, "base_lr": float64}: new tensors made from the numbers the
    /// schedule keeps (copies: writing one changes nothing; load_state_dict sets them). base_lr
    /// is 0-d for an optimizer of one group, else 1-D with one base lr per group.
    NamedTensors state_dict() const;
    /// Restores a state_dict() (checked first, the number of base lrs against the optimizer's
    /// groups) and sets the optimizer's lrs to match.
    void load_state_dict(const NamedTensors& state);

protected:
    LRScheduler(Optimizer& optimizer, std::string name);
    /// Sets the lr for last_epoch 0; the derived constructor calls it once its fields are set.
    void start();
    /// lr_at(epoch, base) for each base lr, or throws naming the schedule when epoch < 0 or an
    /// lr is not a finite number >= 0 (a StepLR with gamma > 1 overflows after enough steps).
    std::vector<double> checked_lrs_at(std::int64_t epoch, const std::vector<double>& base_lrs) const;
    /// Sets each group's lr; throws first if the optimizer's group count changed.
    void apply(const std::vector<double>& lrs, const char* op);

    Optimizer& m_optimizer;
    std::string m_name;
    std::vector<double> m_base_lrs;
    std::int64_t m_last_epoch = 0;
    std::vector<double> m_last_lrs;
};

/// lr = base_lr · gamma^⌊epoch / step_size⌋ (torch.optim.lr_scheduler.StepLR).
class StepLR : public LRScheduler {
public:
    /// Throws unless step_size >= 1 and gamma > 0.
    StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma = 0.1);
    using LRScheduler::lr_at;
    double lr_at(std::int64_t epoch, double base_lr) const override;

private:
    std::int64_t m_step_size;
    double m_gamma;
};

/// Linear warm-up, then cosine decay to min_lr (as the Transformer recipes use):
///
///   epoch < warmup:  lr = base_lr · (epoch + 1) / warmup_steps
///   otherwise:       lr = min_lr + (base_lr − min_lr) · (1 + cos(π·q)) / 2,
///                    q = min(1, (epoch − warmup_steps) / (total_steps − warmup_steps))
///
/// so the first step already trains at base_lr / warmup_steps, steps warmup_steps − 1 and
/// warmup_steps run at base_lr, and from total_steps on the lr stays at min_lr.
class WarmupCosineLR : public LRScheduler {
public:
    /// Throws unless 0 <= warmup_steps <= total_steps, total_steps >= 1 and
    /// 0 <= min_lr <= every group's base_lr. With groups, every group decays to the same min_lr.
    WarmupCosineLR(Optimizer& optimizer, std::int64_t warmup_steps, std::int64_t total_steps,
                   double min_lr = 0);
    using LRScheduler::lr_at;
    double lr_at(std::int64_t epoch, double base_lr) const override;

private:
    std::int64_t m_warmup_steps;
    std::int64_t m_total_steps;
    double m_min_lr;
};

}  // namespace xgrad::optim
