#pragma once
/// bahdanau's run: the settings that change its numbers, the state a checkpoint holds, and the
/// checkpoint's save and load.
///
/// Randomness: the training pairs come from a Generator of their own (seeded from --seed),
/// dropout (between GRU layers, on the attention weights) from the thread's default generator
/// (seeded from --seed too), and the checkpoint holds both generators' states
/// (Generator::get_state, get_rng_state), so a resumed run draws the pairs and dropout masks the
/// uninterrupted one would have drawn and repeats it bit for bit. The held-out set comes from a
/// generator of its own each run; evaluation and translation run in eval mode and draw nothing.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/checkpoint_file.hpp"
#include "corpus.hpp"
#include "model.hpp"
#include "optim/adam.hpp"

namespace xgrad::examples::bahdanau {

/// What changes a run's numbers: the model, the optimisation, the data and the seed.
struct Config {
    ModelSpec model;  ///< the vocabularies' sizes are the corpus's (the constructor sets them)
    std::int64_t steps = 600;
    std::size_t batch = 64;
    std::size_t num_steps = kLongestSentence;  ///< tokens per sentence
    double lr = 0.005;
    double clip = 1.0;          ///< max gradient norm, 0 for none
    std::size_t held_out = 200; ///< held-out pairs: kept out of training, so the training pairs depend on it
    std::uint64_t seed = 0;
};

/// Every field of `config`, as the checkpoint records them (config.<name>) and metrics.json
/// shows them ("settings").
std::vector<CheckpointSetting> settings(const Config& config);

/// The curves so far; saved in the checkpoint so a resumed run draws and reports the whole run.
struct History {
    std::vector<double> step, loss;                      ///< every training step (loss per target token)
    std::vector<double> eval_step, eval_loss, eval_seconds;  ///< every held-out evaluation, with the
                                                          ///< training seconds spent by then
};

/// A run at step `step`: what a checkpoint holds. The constructor builds the model from the
/// seed, Adam, and the data generator, and seeds the default generator (dropout).
struct RunState {
    explicit RunState(Config config);
    Config config;
    std::shared_ptr<EncoderDecoder> net;
    std::unique_ptr<optim::Adam> optimizer;
    Generator data_gen;
    std::int64_t step = 0;
    double train_seconds = 0;  ///< in training steps over every run so far, evaluations left out
    History history;
};

/// Writes the settings, step, both generators' states, model, Adam's state and history to one
/// .npz, atomically (entries config.*, trainer.*, rng.data, rng.default, model.*, optim.*,
/// history.*).
void save_checkpoint(const std::string& path, const RunState& state);
/// Restores save_checkpoint(). Throws xgrad::Error naming the file: a missing, truncated or
/// corrupt one, a missing or mis-shaped entry, and every setting that differs from this run's
/// by name and flag with both values ("hidden (--hidden): checkpoint 32, this run 64");
/// nothing changes then.
void load_checkpoint(const std::string& path, RunState& state);

}  // namespace xgrad::examples::bahdanau
