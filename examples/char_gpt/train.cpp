#include "train.hpp"

#include <chrono>
#include <cmath>

#include "common/interrupt.hpp"
#include "core/error.hpp"
#include "core/ops.hpp"
#include "optim/clip_grad.hpp"
#include "seq_train/data.hpp"  // mix_seed

namespace xgrad::examples {

namespace {

// Streams of random numbers drawn from --seed, one per use.
enum Stream : std::uint64_t { kInit = 11, kData = 12, kDropout = 13, kEval = 14 };

GptSpec with_vocab(GptSpec spec, const CharText& text) {
    spec.vocab_size = text.vocab_size();
    return spec;
}

std::shared_ptr<CharGpt> build_model(const GptConfig& c, const CharText& text) {
    Generator init(mix_seed(c.seed, kInit, 0));
    return std::make_shared<CharGpt>(with_vocab(c.model, text), init);
}

std::unique_ptr<optim::AdamW> build_optimizer(const GptConfig& c, const CharGpt& model) {
    const CharGpt::ParameterSplit split = model.decay_split();
    // nanoGPT's configure_optimizers: one group decays, the other not; both at the schedule's lr.
    std::vector<optim::AdamW::Group> groups{{split.decay, optim::AdamWOptions().weight_decay(c.weight_decay)},
                                            {split.no_decay, optim::AdamWOptions().weight_decay(0.0)}};
    return std::make_unique<optim::AdamW>(groups, optim::AdamWOptions(c.lr).betas({c.beta1, c.beta2}));
}

// Mean cross-entropy of the next character: (B, T, V) logits as (B·T, V) rows.
Tensor next_char_loss(const Tensor& logits, const Tensor& targets) {
    return cross_entropy(logits.reshape({-1, logits.size(2)}), targets.reshape({-1}));
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

GptState::GptState(GptConfig c, const CharText& text)
    : config(c), text_checksum(text.checksum), model(build_model(c, text)), optimizer(build_optimizer(c, *model)),
      schedule(std::make_unique<optim::WarmupCosineLR>(*optimizer, c.warmup, c.steps, c.min_lr)),
      data_gen(mix_seed(c.seed, kData, 0)) {
    manual_seed(mix_seed(c.seed, kDropout, 0));  // dropout; its state goes into the checkpoint
}

double evaluate_loss(GptState& s, const std::vector<std::int64_t>& data) {
    NoGradGuard no_grad;
    s.model->eval();
    Generator eval_gen(mix_seed(s.config.seed, kEval, 0));
    double total = 0;
    for (std::size_t i = 0; i < s.config.eval_batches; ++i) {
        const CharBatch b = draw_batch(data, s.config.batch, s.config.model.block, eval_gen);
        total += next_char_loss((*s.model)(b.inputs), b.targets).item<double>();
    }
    s.model->train();
    return total / static_cast<double>(s.config.eval_batches);
}

namespace {

void record_evaluation(GptState& s, const Split& split) {
    s.history.eval_step.push_back(static_cast<double>(s.step));
    s.history.eval_train.push_back(evaluate_loss(s, split.train));
    s.history.eval_val.push_back(evaluate_loss(s, split.val));
}

}  // namespace

GptLoopStats train_gpt(GptState& s, const Split& split, Progress& progress, const GptLoopOptions& o) {
    const GptConfig& c = s.config;
    GptLoopStats stats;
    if (s.step == 0) record_evaluation(s, split);  // the curves start at the initial model
    s.model->train();
    while (s.step < c.steps && !(o.stop_after > 0 && stats.steps >= o.stop_after)) {
        if (interrupted()) {
            stats.interrupted = true;
            break;
        }
        const auto start = std::chrono::steady_clock::now();
        const CharBatch b = draw_batch(split.train, c.batch, c.model.block, s.data_gen);
        const Tensor logits = (*s.model)(b.inputs);
        const Tensor loss = next_char_loss(logits, b.targets);
        const double value = loss.item<double>();
        if (!std::isfinite(value))
            throw Error(fmt::format("char_gpt: the training loss is {} at step {}: the run has diverged (lower --lr)",
                                    value, s.step + 1));
        s.optimizer->zero_grad();
        loss.backward();
        if (c.clip > 0) optim::clip_grad_norm(s.optimizer->parameters(), c.clip);
        s.optimizer->step();
        s.schedule->step();
        ++s.step;
        stats.seconds += seconds_since(start);
        const auto tokens = static_cast<std::int64_t>(c.batch * c.model.block);
        stats.tokens += tokens;
        ++stats.steps;
        s.history.step.push_back(static_cast<double>(s.step));
        s.history.loss.push_back(value);
        const double acc = mean(cast(eq(argmax(logits, 2), b.targets), kFloat64)).item<double>();
        progress.update(s.step, value, acc, tokens);
        if ((o.eval_every > 0 && s.step % o.eval_every == 0) || s.step == c.steps) {
            record_evaluation(s, split);
            progress.message(fmt::format("  step {}: train loss {:.4f}, val loss {:.4f}", s.step,
                                         s.history.eval_train.back(), s.history.eval_val.back()));
        }
    }
    return stats;
}

}  // namespace xgrad::examples
