#pragma once
/// seq_train's training: the configuration, the state a checkpoint holds, and the loop.
///
/// Every source of randomness is a function of (seed, step): the batch of step s is drawn from a
/// Generator seeded with mix_seed(seed, 1, s) and dropout masks from the default generator
/// re-seeded with mix_seed(seed, 2, s) before the step. So a checkpoint needs no generator
/// state: model parameters, optimizer state, schedule and step count are the whole story, and a
/// resumed run repeats the uninterrupted one bit for bit.
#include <csignal>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/progress.hpp"
#include "data.hpp"
#include "distributed.hpp"
#include "model.hpp"
#include "optim/lr_scheduler.hpp"
#include "optim/optimizer.hpp"

namespace xgrad::examples {

struct TrainConfig {
    TaskSpec task;
    ModelSpec model;      ///< vocab_size and max_len are taken from `task`
    std::string optimizer = "adam";  ///< adam, adamw or sgd
    std::int64_t steps = 150;  ///< with lr 6e-3: 99% held-out token accuracy by step 70-85 (tools/sweep_seq_defaults)
    double lr = 0;        ///< 0: the optimizer's default (default_lr)
    std::size_t batch = 64;
    std::int64_t warmup = 30;   ///< seq_train's default is default_warmup(optimizer, steps)
    double momentum = 0.9;      ///< sgd
    double weight_decay = 0.01; ///< adamw (adam and sgd use none)
    double clip = 1.0;          ///< max gradient norm, 0 for none
    std::uint64_t seed = 0;
    /// What the products compute in: "none" (float32) or "bf16" (torch.autocast's bfloat16).
    /// train() does not enter the AutocastGuard (seq_train does, around training and
    /// evaluation); it refuses to run when the thread's autocast state is not this one.
    std::string autocast = "none";
    std::size_t held_out = 1000;  ///< held-out sequences: every evaluation's numbers depend on them
    /// Processes of a data-parallel run, and its largest gradient bucket in KiB: the gradients'
    /// sums are split and added in an order that depends on them (distributed.hpp). One process
    /// has no buckets: bucket_kb is recorded as 0 then, whatever --bucket-kb says.
    std::size_t ranks = 1;
    std::size_t bucket_kb = 0;
};

/// A setting of TrainConfig that changes a run's numbers, as a checkpoint records it and
/// metrics.json shows it ("settings"). Every field of TrainConfig but model.vocab_size and
/// model.max_len (taken from the task) is one.
struct NumericSetting {
    std::string name;   ///< in the checkpoint (config.<name>) and metrics.json: "max_len"
    std::string flag;   ///< seq_train's flag that sets it: "--max-len"
    std::string shown;  ///< the value as a user types it: "bf16", "0.006", "18446744073709551615"
    bool choice;        ///< one of a few names (task, pos, optimizer, autocast, scale_embeddings)
};
/// The settings of `config`, in the order the checkpoint holds them. `lr` and `warmup` are the
/// values the run uses (default_lr, default_warmup), not 0 for "default".
std::vector<NumericSetting> numeric_settings(const TrainConfig& config);

/// The learning rate used when TrainConfig::lr is 0, chosen by measurement on the reverse task
/// (tools/sweep_seq_defaults: the fewest steps to 99% held-out token accuracy over seeds 0-2,
/// away from the lr where some seed stalls; tools/bench_results.md has the table).
double default_lr(const std::string& optimizer);

/// seq_train's warm-up when --warmup is not given. Adam and AdamW: none; at their default lr,
/// warm-up only delayed 99% on the reverse task (10 seeds: 15 steps of warm-up at 5e-3 needed
/// 80-95 steps, none at 6e-3 70-85). SGD: a tenth of the steps, at most 30, so that a short
/// run (--steps 20) gets a warm-up that fits in it.
std::int64_t default_warmup(const std::string& optimizer, std::int64_t steps);

/// A run's memory, roughly, in bytes: what it holds for the whole run (parameters, gradients,
/// optimizer state and the copies a checkpoint makes), a training step's activations and their
/// gradients, and one held-out evaluation (the whole set goes through the model at once).
struct MemoryEstimate {
    double parameters = 0, step = 0, evaluation = 0;
    double total() const { return parameters + step + evaluation; }
};
MemoryEstimate estimate_memory(const TrainConfig& config, std::size_t held_out);

/// Throws xgrad::Error when estimate_memory() exceeds `available` bytes, naming the flags of
/// the largest part, so that a run too large for the machine stops before it starts instead of
/// failing with std::bad_alloc (or being killed) part-way. The estimate is computed in double:
/// no product of sizes can overflow.
void check_memory(const TrainConfig& config, std::size_t held_out, double available);

struct EvalResult {
    double loss = 0, token_acc = 0, seq_acc = 0;
};

/// What the loss picture needs; saved in the checkpoint so a resumed run draws the whole curve.
struct History {
    std::vector<double> step, loss, token_acc;                  ///< every training step
    std::vector<double> eval_step, eval_token_acc, eval_seq_acc; ///< every held-out evaluation
};

/// A run at step `step`: model, optimizer, schedule and the curve so far, all that a checkpoint
/// holds. The constructor builds the model (parameters from the seed), the optimizer and the
/// warm-up + cosine schedule; it throws xgrad::Error for an unknown optimizer or bad sizes.
struct TrainState {
    explicit TrainState(TrainConfig config);
    TrainConfig config;
    std::shared_ptr<SeqEncoder> model;
    std::unique_ptr<optim::Optimizer> optimizer;
    std::unique_ptr<optim::LRScheduler> schedule;
    std::int64_t step = 0;
    History history;
};

/// What an evaluation counts on one rank's rows; summed over the ranks, the whole set's.
struct EvalCounts {
    double loss_sum = 0;  ///< cross-entropy summed over the valid target tokens
    std::int64_t tokens = 0, correct_tokens = 0, sequences = 0, correct_sequences = 0;
};
/// The metrics from counts summed over every rank: ratios of sums, never sums of ratios, so an
/// accuracy is at most 1 whatever the ranks held. An empty set gives zeros.
EvalResult eval_result(const EvalCounts& global);

/// Runs the model on a batch in eval mode without a graph: loss, token and sequence accuracy.
EvalResult evaluate(SeqEncoder& model, const Batch& data);
/// The same over the ranks of `replicas` (a collective: every rank calls it): each runs its
/// share of the rows of `data` (rows [r·n/world, (r+1)·n/world)), and the counts are summed
/// before any ratio is taken. Accuracies equal evaluate()'s exactly; the loss differs in the
/// last bits (summed in another order).
EvalResult evaluate(SeqEncoder& model, const Batch& data, Replicas& replicas);
/// evaluate() over the ranks at the state's step, recorded in its history.
EvalResult evaluate_held_out(TrainState& state, const Batch& held_out, Replicas& replicas);
EvalResult evaluate_held_out(TrainState& state, const Batch& held_out);

struct LoopOptions {
    std::int64_t eval_every = 25;       ///< held-out evaluation every N steps and at the last (0: last only)
    std::int64_t checkpoint_every = 0;  ///< also save the checkpoint every N steps (0: never)
    std::int64_t stop_after = 0;        ///< return after N steps of this call (0: run to config.steps)
    /// Return at the first held-out evaluation (step 0's included) whose token accuracy is at
    /// least this (0: never): how long a configuration takes to learn the task.
    double target_accuracy = 0;
    std::string checkpoint;             ///< where checkpoint_every saves
};

struct LoopStats {
    std::int64_t steps = 0, tokens = 0;  ///< of this call
    double seconds = 0;                  ///< in training steps, evaluations and checkpoints left out
    bool interrupted = false;            ///< stopped by SIGINT (see g_interrupted)
    /// The first evaluation of this call at or above LoopOptions::target_accuracy: its step, and
    /// the seconds of training steps of this call up to it. target_step is -1 when none was.
    std::int64_t target_step = -1;
    double target_seconds = 0;
    bool target_reached() const { return target_step >= 0; }
};

/// Set from a SIGINT handler: the loop stops after the step, every rank after the same one.
extern volatile std::sig_atomic_t g_interrupted;

/// Trains `state` to config.steps, or for stop_after steps, or until interrupted, or until a
/// held-out evaluation reaches target_accuracy. Every rank
/// evaluates its share of `held_out` (the counts are summed); rank 0 reports each step to
/// `progress` and saves checkpoints. The training accuracy, too, is summed correct tokens over
/// summed tokens. Throws xgrad::Error when the global batch does not split
/// evenly over the ranks, and when the training loss is not finite (the run has diverged:
/// nothing is saved after that, so the last checkpoint holds the last finite state).
LoopStats train(TrainState& state, Replicas& replicas, const Batch& held_out, Progress& progress,
                const LoopOptions& options);

/// Writes model, optimizer, schedule, step, history and the configuration to one .npz,
/// atomically (a temporary file renamed over `path`).
void save_checkpoint(const std::string& path, const TrainState& state);
/// A 64-bit hash (FNV-1a) of everything save_checkpoint() writes: equal states hash alike on
/// every host, so the ranks of a data-parallel run can check they start from the same state.
std::uint64_t state_hash(const TrainState& state);
/// Restores a save_checkpoint(). Throws xgrad::Error (naming the file, the entry, what was
/// expected and what came) for an unreadable or truncated file, missing entries, entries of the
/// wrong shape (a curve where one number belongs), or a checkpoint written with a different
/// configuration: each numeric_settings() difference by name and flag, with both values
/// ("autocast (--autocast): checkpoint none, this run bf16"). A checkpoint from before a setting
/// was recorded (no config.autocast, config.held_out, config.ranks or config.bucket_kb, or a
/// float64 config.seed) is refused as such: what it was trained with is unknown, so its numbers
/// could not be continued exactly. On any failure the state is left as it was.
void load_checkpoint(const std::string& path, TrainState& state);

}  // namespace xgrad::examples
