#pragma once
/// Learning-rate schedules that drive an Optimizer's lr, as torch.optim.lr_scheduler:
///
///   StepLR sched(opt, 30, 0.1);
///   for (...) { ...; opt.step(); sched.step(); }
///
/// A schedule counts its step() calls in last_epoch (0 after construction) and sets
/// lr = lr_at(last_epoch), a closed form of last_epoch and the base lr (the optimizer's lr when
/// the schedule was made), so a restored state gives the same lrs as an uninterrupted run.
/// The optimizer must outlive its schedule (it is held by reference, as in torch).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "optimizer.hpp"

namespace xgrad::optim {

class LRScheduler {
public:
    virtual ~LRScheduler() = default;
    /// Advances one step and sets the optimizer's lr.
    void step();
    /// The lr the last step (or the construction) set.
    double get_last_lr() const { return m_last_lr; }
    std::int64_t last_epoch() const { return m_last_epoch; }
    double base_lr() const { return m_base_lr; }
    /// The lr at step `epoch` (>= 0), unchecked.
    virtual double lr_at(std::int64_t epoch) const = 0;

    /// {"last_epoch": int64 0-d, "base_lr": float64 0-d}: new tensors made from the numbers the
    /// schedule keeps (copies: writing one changes nothing; load_state_dict sets them).
    NamedTensors state_dict() const;
    /// Restores a state_dict() (checked first) and sets the optimizer's lr to match.
    void load_state_dict(const NamedTensors& state);

protected:
    LRScheduler(Optimizer& optimizer, std::string name);
    /// Sets the lr for last_epoch 0; the derived constructor calls it once its fields are set.
    void start();
    /// lr_at(epoch), or throws naming the schedule when epoch < 0 or the lr is not a finite
    /// number >= 0 (a StepLR with gamma > 1 overflows after enough steps).
    double checked_lr_at(std::int64_t epoch) const;

    Optimizer& m_optimizer;
    std::string m_name;
    double m_base_lr;
    std::int64_t m_last_epoch = 0;
    double m_last_lr;
};

/// lr = base_lr · gamma^⌊epoch / step_size⌋ (torch.optim.lr_scheduler.StepLR).
class StepLR : public LRScheduler {
public:
    /// Throws unless step_size >= 1 and gamma > 0.
    StepLR(Optimizer& optimizer, std::int64_t step_size, double gamma = 0.1);
    double lr_at(std::int64_t epoch) const override;

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
    /// 0 <= min_lr <= base_lr.
    WarmupCosineLR(Optimizer& optimizer, std::int64_t warmup_steps, std::int64_t total_steps,
                   double min_lr = 0);
    double lr_at(std::int64_t epoch) const override;

private:
    std::int64_t m_warmup_steps;
    std::int64_t m_total_steps;
    double m_min_lr;
};

}  // namespace xgrad::optim
