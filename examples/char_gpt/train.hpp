#pragma once
/// char_gpt's training: the configuration, the state a checkpoint holds, evaluation and the loop.
///
/// Randomness: the batches come from a Generator of their own (seeded from --seed), dropout
/// from the thread's default generator (seeded from --seed too), and the checkpoint holds both
/// generators' states (Generator::get_state), so a resumed run draws what the uninterrupted
/// one would have drawn and repeats it bit for bit. Evaluation draws its batches from a fresh
/// generator each time (the same batches at every evaluation) and touches neither.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/checkpoint_file.hpp"
#include "common/progress.hpp"
#include "model.hpp"
#include "optim/adam.hpp"
#include "optim/lr_scheduler.hpp"
#include "text.hpp"

namespace xgrad::examples {

struct GptConfig {
    GptSpec model;                 ///< vocab_size is the text's
    std::int64_t steps = 300;
    std::size_t batch = 32;
    double lr = 2e-3;              ///< peak, after warm-up
    double min_lr = 2e-4;          ///< where the cosine ends
    std::int64_t warmup = 30;
    double weight_decay = 0.1;     ///< for the Linear weights only (decay_split)
    double beta1 = 0.9, beta2 = 0.99;
    double clip = 1.0;             ///< max gradient norm, 0 for none
    std::size_t eval_batches = 8;  ///< batches per split in an evaluation
    double train_fraction = 0.9;
    std::uint64_t seed = 1337;
};

/// A setting that changes a run's numbers, as the checkpoint records it (config.<name>) and
/// metrics.json shows it: a resumed run must have the same ones (load_gpt_checkpoint).
using GptSetting = CheckpointSetting;
/// Every numeric field of `config`, and the text's checksum (the text itself changes the numbers).
std::vector<GptSetting> gpt_settings(const GptConfig& config, std::uint64_t text_checksum);

struct GptHistory {
    std::vector<double> step, loss;                      ///< every training step
    std::vector<double> eval_step, eval_train, eval_val; ///< every evaluation (mean loss per split)
};

/// A run at step `step`: what a checkpoint holds.
struct GptState {
    GptState(GptConfig config, const CharText& text);
    GptConfig config;
    std::uint64_t text_checksum;
    std::shared_ptr<CharGpt> model;
    std::unique_ptr<optim::AdamW> optimizer;  ///< two groups: decay, no decay
    std::unique_ptr<optim::WarmupCosineLR> schedule;
    Generator data_gen;
    std::int64_t step = 0;
    GptHistory history;
};

/// Mean cross-entropy over config.eval_batches batches of `data`, in eval mode without a graph.
double evaluate_loss(GptState& state, const std::vector<std::int64_t>& data);

struct GptLoopOptions {
    std::int64_t eval_every = 50;   ///< evaluate every N steps and at the last (0: last only)
    std::int64_t stop_after = 0;    ///< stop after N steps of this run (0: run to config.steps)
};
struct GptLoopStats {
    std::int64_t steps = 0, tokens = 0;
    double seconds = 0;   ///< in training steps, evaluations left out
    bool interrupted = false;
};

/// Trains to config.steps (or stop_after steps, or a Ctrl-C: examples/common/interrupt),
/// evaluating both splits every eval_every steps. Throws xgrad::Error when the loss stops being
/// finite (the run diverged).
GptLoopStats train_gpt(GptState& state, const Split& split, Progress& progress, const GptLoopOptions& options);

/// Writes the model, optimizer, schedule, both generators, step, history and settings to one
/// .npz, atomically.
void save_gpt_checkpoint(const std::string& path, const GptState& state);
/// Restores save_gpt_checkpoint(). Throws xgrad::Error naming the file and the entry for a
/// missing or mis-shaped entry, and every setting that differs from this run's by name and flag
/// with both values ("d_model (--d-model): checkpoint 128, this run 64"); nothing changes then.
void load_gpt_checkpoint(const std::string& path, GptState& state);

}  // namespace xgrad::examples
