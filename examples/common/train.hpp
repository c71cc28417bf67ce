#pragma once
/// Training a SeqEncoder on a toy task, with checkpoints that resume bit for bit.
///
/// Every source of randomness is a function of (seed, step): the batch of step s is drawn from a
/// Generator seeded with mix_seed(seed, 1, s) and dropout masks from the default generator
/// re-seeded with mix_seed(seed, 2, s) before the step. So a checkpoint needs no generator
/// state: model parameters, optimizer state, schedule and step count are the whole story.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data.hpp"
#include "model.hpp"
#include "optim/lr_scheduler.hpp"
#include "optim/optimizer.hpp"

namespace xgrad::examples {

struct TrainConfig {
    TaskSpec task;
    ModelSpec model;      ///< vocab_size and max_len are taken from `task`
    std::string optimizer = "adam";  ///< adam, adamw or sgd
    std::int64_t steps = 300;
    double lr = 0;        ///< 0: the optimizer's default (default_lr)
    std::size_t batch = 64;
    std::int64_t warmup = 30;
    double momentum = 0.9;      ///< sgd
    double weight_decay = 0.01; ///< adamw (adam and sgd use none)
    double clip = 1.0;          ///< max gradient norm, 0 for none
    std::uint64_t seed = 0;
};

/// The learning rate used when TrainConfig::lr is 0, chosen by measurement on the reverse task.
double default_lr(const std::string& optimizer);

struct StepResult {
    double loss = 0;        ///< mean cross-entropy over the valid target tokens
    double token_acc = 0;   ///< fraction of valid target tokens predicted right
    std::int64_t tokens = 0;
    double lr = 0;          ///< the learning rate the step used
};

struct EvalResult {
    double loss = 0, token_acc = 0, seq_acc = 0;
};

/// What the loss picture needs; saved in the checkpoint so a resumed run draws the whole curve.
struct History {
    std::vector<double> step, loss, token_acc;                  ///< every training step
    std::vector<double> eval_step, eval_token_acc, eval_seq_acc; ///< every held-out evaluation
};

/// Runs the model on a batch in eval mode without a graph: loss, token and sequence accuracy.
EvalResult evaluate(SeqEncoder& model, const Batch& data);

/// The collectives a data-parallel run needs, as the trainer sees them. seq_train --distributed
/// implements them over MPI with nn::DistributedDataParallel (nn/distributed/data_parallel.hpp); the
/// trainer itself knows nothing of MPI, so this library builds without it.
///
/// How a step matches the single-process step on the same global batch of B rows:
/// - every rank draws the whole global batch from (seed, step) and trains on its slice of
///   B/world rows (shard_batch);
/// - the single-process loss is the mean over the N valid target tokens of the global batch,
///   L = (1/N) Σ_tokens ℓ. Each rank knows N (it holds the global batch) and computes
///   L_r = (1/N) Σ_{its tokens} ℓ, so L = Σ_r L_r and ∇L = Σ_r ∇L_r: the gradients are
///   SUMMED over the ranks, not averaged. (Averaging per-rank means would weight a token by
///   1/N_r, wrong whenever the shards hold different numbers of tokens, which they do.)
/// - after the sum every rank holds the same gradients, so clipping sees the global norm and
///   every optimizer takes the same step from the same parameters;
/// - the reported loss and token accuracy are sums over the ranks (one small all-reduce).
/// The result equals the single-process run up to float rounding (the sums are split
/// differently). Dropout is not equivalent: each rank draws masks for its own rows from its
/// own per-(seed, step, rank) stream, rank 0 from the single-process stream; so with dropout
/// > 0 the run is a valid data-parallel training with different masks, not the same run.
class ReplicaGroup {
public:
    virtual ~ReplicaGroup() = default;
    virtual std::size_t rank() const = 0;
    virtual std::size_t world_size() const = 0;
    /// Sums every model parameter's gradient over the ranks, in place, the same on every rank.
    virtual void sum_gradients() = 0;
    /// Element-wise sum of `values` over the ranks, in place.
    virtual void sum(std::vector<double>& values) = 0;
};

class Trainer {
public:
    /// Builds the model (parameters from the seed), the optimizer and the warm-up + cosine
    /// schedule. Throws xgrad::Error for an unknown optimizer or bad sizes.
    explicit Trainer(TrainConfig config);
    ~Trainer();

    /// One optimisation step on the batch of step `step()`; advances step() by one.
    StepResult train_step();
    /// Held-out evaluation, recorded in history().
    EvalResult evaluate_held_out(const Batch& data);

    /// Writes model, optimizer, schedule, step, history and the configuration to one .npz,
    /// atomically (a temporary file renamed over `path`).
    void save(const std::string& path) const;
    /// Restores a save(). Throws xgrad::Error (naming the file and what is wrong) for an
    /// unreadable or truncated file, missing entries, or a checkpoint written with a different
    /// configuration; on any failure the trainer is left as it was.
    void load(const std::string& path);

    /// Makes the following steps data-parallel over `group` (see ReplicaGroup); nullptr goes back
    /// to single-process steps. Throws xgrad::Error when the batch does not split evenly.
    void set_replicas(std::shared_ptr<ReplicaGroup> group);

    std::int64_t step() const { return m_step; }
    const TrainConfig& config() const { return m_config; }
    SeqEncoder& model() { return *m_model; }
    optim::Optimizer& optimizer() { return *m_optimizer; }
    const History& history() const { return m_history; }

private:
    TrainConfig m_config;
    std::shared_ptr<SeqEncoder> m_model;
    std::unique_ptr<optim::Optimizer> m_optimizer;
    std::unique_ptr<optim::LRScheduler> m_scheduler;
    std::shared_ptr<ReplicaGroup> m_replicas;
    std::int64_t m_step = 0;
    History m_history;
};

}  // namespace xgrad::examples
