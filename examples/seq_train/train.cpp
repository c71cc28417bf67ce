#include "train.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "common/out_folder.hpp"
#include "core/autocast.hpp"
#include "core/creation.hpp"
#include "core/runtime/alloc.hpp"
#include "core/ops.hpp"
#include "nn/loss.hpp"
#include "optim/adam.hpp"
#include "optim/clip_grad.hpp"
#include "optim/sgd.hpp"

namespace xgrad::examples {

volatile std::sig_atomic_t g_interrupted = 0;

double default_lr(const std::string& optimizer) {
    if (optimizer == "sgd") return 0.1;
    return 6e-3;  // 8e-3 already lets a seed in ten need 95 steps; 1e-2 stalls some below 99%
}

std::int64_t default_warmup(const std::string& optimizer, std::int64_t steps) {
    if (optimizer != "sgd") return 0;
    return std::clamp<std::int64_t>(steps / 10, 0, 30);
}

MemoryEstimate estimate_memory(const TrainConfig& c, std::size_t held_out) {
    // float32 parameters and activations; counts of values, each term an upper bound of what
    // the modules save for backward (projections, layer norms, the FFN, the attention weights).
    const double V = static_cast<double>(c.task.vocab_size()), T = static_cast<double>(c.task.max_len),
                 d = static_cast<double>(c.model.hidden), f = static_cast<double>(c.model.ffn_hidden),
                 L = static_cast<double>(c.model.layers), h = static_cast<double>(c.model.heads),
                 B = static_cast<double>(c.batch), H = static_cast<double>(held_out);
    const double per_block = 4 * (d * d + d) + 2 * d * f + f + d + 4 * d;
    const double params = V * d + (c.model.pos == PosEncoding::learned ? T * d : 0) + L * per_block + d * V + V;
    // Parameter, gradient, two moments, and the copies a checkpoint save or load makes.
    MemoryEstimate m;
    m.parameters = 4 * 8 * params;
    const auto activations = [&](double rows, double layers) {
        const double tokens = rows * T;
        return layers * (20 * tokens * d + 2 * tokens * f + 4 * rows * h * T * T) + 3 * tokens * d + 3 * tokens * V;
    };
    // The factors are measured (maximum resident size of runs of 2-20 GiB), rounded up a little:
    // the estimate is for refusing runs that cannot fit, not for refusing runs that might.
    m.step = 6 * activations(B, L);  // 4-byte values and part of them again as gradients
    // No graph: one block's temporaries at a time, but every block keeps its attention weights,
    // and the batch is held as int64 tensors and vectors.
    m.evaluation = 2 * (activations(H, 1) + L * H * h * T * T) + 8 * 6 * H * T;
    return m;
}

void check_memory(const TrainConfig& c, std::size_t held_out, double available) {
    const MemoryEstimate m = estimate_memory(c, held_out);
    if (!(available > 0) || m.total() <= available) return;
    const char* part =
        m.parameters >= m.step && m.parameters >= m.evaluation
            ? "the parameters and optimizer state (--hidden x (--hidden, --ffn) x --layers, and --hidden x "
              "--symbols)"
        : m.step >= m.evaluation
            ? "a training step's activations (--batch x --max-len x (--hidden, --ffn) x --layers, --batch x "
              "--max-len x --symbols, and --batch x --heads x --max-len^2 x --layers)"
            : "the held-out evaluation (--held-out x --max-len x (--hidden, --ffn, --symbols), and --held-out x "
              "--heads x --max-len^2 x --layers)";
    throw Error(fmt::format("this run would need about {} of memory, more than the {} this machine has; most "
                            "of it is {}: make those flags smaller",
                            format_bytes(m.total()), format_bytes(available), part));
}

namespace {

// Targets for cross_entropy: padding positions become the ignore index.
constexpr std::int64_t kIgnore = -1;

// The token loss as torch writes it for a sequence model: (B, T, V) logits flattened to
// (B·T, V) rows, the classes last and so on torch's axis 1; (B, T) targets to (B·T,), with
// padding ignored.
Tensor token_loss(const Tensor& logits, const Batch& b, nn::Reduction reduction) {
    auto t = b.targets.to_vector<std::int64_t>();
    for (auto& v : t)
        if (v == kPad) v = kIgnore;
    const Tensor targets = from_vector(t, {static_cast<std::size_t>(t.size())});
    return nn::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets, reduction, kIgnore);
}

struct Correct {
    std::int64_t tokens = 0, sequences = 0;
};

// Correct valid tokens and fully correct sequences of `logits` against the batch.
Correct count_correct(const Tensor& logits, const Batch& b) {
    const auto pred = argmax(logits, 2).to_vector<std::int64_t>();
    const auto truth = b.targets.to_vector<std::int64_t>();
    const auto lens = b.valid_lens.to_vector<std::int64_t>();
    const std::size_t T = b.targets.size(1);
    Correct c;
    for (std::size_t r = 0; r < lens.size(); ++r) {
        bool all = true;
        for (std::size_t t = 0; t < static_cast<std::size_t>(lens[r]); ++t) {
            const bool ok = pred[r * T + t] == truth[r * T + t];
            c.tokens += ok;
            all = all && ok;
        }
        c.sequences += all;
    }
    return c;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, std::vector<Tensor> params) {
    const double lr = c.lr > 0 ? c.lr : default_lr(c.optimizer);
    if (c.optimizer == "adam") return std::make_unique<optim::Adam>(std::move(params), optim::AdamOptions(lr));
    if (c.optimizer == "adamw")
        return std::make_unique<optim::AdamW>(std::move(params),
                                              optim::AdamWOptions(lr).weight_decay(c.weight_decay));
    if (c.optimizer == "sgd")
        return std::make_unique<optim::SGD>(std::move(params), optim::SGDOptions(lr).momentum(c.momentum));
    throw Error(fmt::format("unknown optimizer '{}' (expected sgd, adam or adamw)", c.optimizer));
}

TrainConfig checked(TrainConfig c) {
    c.model.vocab_size = c.task.vocab_size();
    c.model.max_len = c.task.max_len;
    if (c.steps < 1 || c.batch < 1 || c.warmup < 0 || c.warmup > c.steps)
        throw Error(fmt::format("train: need steps >= 1, batch >= 1 and 0 <= warmup <= steps (got steps {}, "
                                "batch {}, warmup {})", c.steps, c.batch, c.warmup));
    // lr and clip use 0 for "default" and "none": a negative or NaN value must not fall into that.
    if (!(c.lr >= 0 && std::isfinite(c.lr)) || !(c.clip >= 0 && std::isfinite(c.clip)))
        throw Error(fmt::format("train: need a finite lr >= 0 (0: the optimizer's default) and a finite clip >= 0 "
                                "(0: none), got lr {} and clip {}", c.lr, c.clip));
    if (!(c.momentum >= 0 && c.momentum <= 1) || !(c.weight_decay >= 0 && std::isfinite(c.weight_decay)) ||
        !(c.model.dropout >= 0 && c.model.dropout < 1))
        throw Error(fmt::format("train: need momentum in [0, 1], a finite weight_decay >= 0 and dropout in [0, 1), "
                                "got momentum {}, weight_decay {} and dropout {}", c.momentum, c.weight_decay,
                                c.model.dropout));
    // Zero sizes reach the layers as "Embedding: ... got 11 and 0": say which size it was here.
    const std::pair<const char*, std::size_t> sizes[] = {
        {"task.max_len", c.task.max_len}, {"task.num_symbols", c.task.num_symbols},
        {"model.hidden", c.model.hidden}, {"model.heads", c.model.heads},
        {"model.layers", c.model.layers}, {"model.ffn_hidden", c.model.ffn_hidden}};
    for (const auto& [name, value] : sizes)
        if (value < 1) throw Error(fmt::format("train: need {} >= 1, got {}", name, value));
    if (c.autocast != "none" && c.autocast != "bf16")
        throw Error(fmt::format("train: autocast must be 'none' or 'bf16', got '{}'", c.autocast));
    return c;
}

// Ranks must stop at the same step (a rank that left would leave the others waiting in a
// collective): a SIGINT seen by any rank stops all of them.
bool any_rank_interrupted(Replicas& replicas) {
    std::vector<double> flag{g_interrupted ? 1.0 : 0.0};
    replicas.sum(flag);
    return flag[0] > 0;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TrainState::TrainState(TrainConfig c) : config(checked(std::move(c))) {
    Generator init(mix_seed(config.seed, 3, 0));
    model = std::make_shared<SeqEncoder>(config.model, init);
    optimizer = make_optimizer(config, model->parameters());
    schedule = std::make_unique<optim::WarmupCosineLR>(*optimizer, config.warmup, config.steps);
}

EvalResult eval_result(const EvalCounts& g) {
    const auto ratio = [](double num, double den) { return den > 0 ? num / den : 0.0; };
    return {ratio(g.loss_sum, static_cast<double>(g.tokens)),
            ratio(static_cast<double>(g.correct_tokens), static_cast<double>(g.tokens)),
            ratio(static_cast<double>(g.correct_sequences), static_cast<double>(g.sequences))};
}

namespace {

EvalCounts count_eval(SeqEncoder& model, const Batch& data) {
    EvalCounts n;
    if (data.size() == 0) return n;
    NoGradGuard no_grad;
    const bool was_training = model.is_training();
    model.eval();
    const Tensor logits = model(data.inputs, data.valid_lens);
    model.train(was_training);
    n.loss_sum = token_loss(logits, data, nn::Reduction::sum).item<double>();
    const Correct c = count_correct(logits, data);
    n.tokens = data.num_tokens();
    n.correct_tokens = c.tokens;
    n.sequences = static_cast<std::int64_t>(data.size());
    n.correct_sequences = c.sequences;
    return n;
}

}  // namespace

EvalResult evaluate(SeqEncoder& model, const Batch& data) { return eval_result(count_eval(model, data)); }

EvalResult evaluate(SeqEncoder& model, const Batch& data, Replicas& replicas) {
    const std::size_t n = data.size(), rank = replicas.rank(), world = replicas.world_size();
    const long begin = static_cast<long>(rank * n / world), end = static_cast<long>((rank + 1) * n / world);
    const Batch mine = world == 1 ? data
                                  : Batch{slice(data.inputs, 0, begin, end), slice(data.targets, 0, begin, end),
                                          slice(data.valid_lens, 0, begin, end)};
    const EvalCounts local = count_eval(model, mine);
    // Counts are whole numbers far below 2^53: exact as doubles, and exactly summed.
    std::vector<double> sums{local.loss_sum, static_cast<double>(local.tokens),
                             static_cast<double>(local.correct_tokens), static_cast<double>(local.sequences),
                             static_cast<double>(local.correct_sequences)};
    replicas.sum(sums);
    EvalCounts global;
    global.loss_sum = sums[0];
    global.tokens = static_cast<std::int64_t>(sums[1]);
    global.correct_tokens = static_cast<std::int64_t>(sums[2]);
    global.sequences = static_cast<std::int64_t>(sums[3]);
    global.correct_sequences = static_cast<std::int64_t>(sums[4]);
    return eval_result(global);
}

EvalResult evaluate_held_out(TrainState& state, const Batch& held_out, Replicas& replicas) {
    const EvalResult r = evaluate(*state.model, held_out, replicas);
    state.history.eval_step.push_back(static_cast<double>(state.step));
    state.history.eval_token_acc.push_back(r.token_acc);
    state.history.eval_seq_acc.push_back(r.seq_acc);
    return r;
}

EvalResult evaluate_held_out(TrainState& state, const Batch& held_out) {
    Replicas one_process;
    return evaluate_held_out(state, held_out, one_process);
}

LoopStats train(TrainState& s, Replicas& replicas, const Batch& held_out, Progress& progress, const LoopOptions& o) {
    const TrainConfig& c = s.config;
    const std::size_t rank = replicas.rank(), world = replicas.world_size();
    if (c.batch % world != 0)
        throw Error(fmt::format("--batch {} does not split evenly over {} ranks (expected a multiple of {})", c.batch,
                                world, world));
    if (!(o.target_accuracy >= 0 && o.target_accuracy <= 1))
        throw Error(fmt::format("train: target_accuracy must be in [0, 1] (0: none), got {}", o.target_accuracy));
    // The checkpoint records config.autocast as how the run was trained: it must be true.
    if (is_autocast_enabled() != (c.autocast == "bf16"))
        throw Error(fmt::format("train: config.autocast is '{}', but this thread {} (enter an AutocastGuard(kBFloat16) "
                                "exactly when it is 'bf16')", c.autocast,
                                is_autocast_enabled() ? "autocasts to bfloat16" : "does not autocast"));
    LoopStats stats;
    // Every rank sees the same summed accuracy, so all stop at the same evaluation.
    const auto reached = [&](const EvalResult& e) {
        if (o.target_accuracy > 0 && !stats.target_reached() && e.token_acc >= o.target_accuracy) {
            stats.target_step = s.step;
            stats.target_seconds = stats.seconds;
        }
        return stats.target_reached();
    };
    if (s.step == 0 && o.eval_every > 0) reached(evaluate_held_out(s, held_out, replicas));  // the curve starts at 0
    replicas.reset_sync_stats();
    while (s.step < c.steps && !(o.stop_after > 0 && stats.steps >= o.stop_after) && !stats.target_reached()) {
        // The step's time includes every collective, the stop flag's too.
        const auto start = std::chrono::steady_clock::now();
        if (any_rank_interrupted(replicas)) {
            stats.interrupted = true;
            break;
        }
        // Batch: every rank draws the step's global batch and keeps its own rows. Rank 0 draws the
        // single-process dropout masks, the others streams of their own.
        const auto step = static_cast<std::uint64_t>(s.step);
        Generator data(mix_seed(c.seed, 1, step));
        const Batch global = make_batch(c.task, c.batch, data);
        const Batch batch = shard_batch(global, rank, world);
        manual_seed(rank == 0 ? mix_seed(c.seed, 2, step) : mix_seed(c.seed, 100 + rank, step));
        // Forward and loss: this rank's share of the mean over the global batch's valid tokens.
        s.model->train();
        const Tensor logits = (*s.model)(batch.inputs, batch.valid_lens);
        const double tokens = static_cast<double>(global.num_tokens());
        const Tensor loss = token_loss(logits, batch, nn::Reduction::sum) / tokens;
        // A diverged run (too high a learning rate) would otherwise train on NaN to the end and
        // save NaN weights over the last good checkpoint. Each rank checks its own share; an
        // error on one rank ends the whole job (end_job_on_error).
        const double local_loss = loss.item<double>();
        if (!std::isfinite(local_loss))
            throw Error(fmt::format("train: the training loss is {} at step {}: the run has diverged (lower --lr{}); "
                                    "checkpoints saved before this step are kept", local_loss, s.step + 1,
                                    c.clip > 0 ? "" : ", or clip the gradient norm with --clip"));
        // Backward; summed over the ranks the gradients are those of the mean. Clip, step, schedule.
        s.optimizer->zero_grad();
        loss.backward();
        replicas.sum_gradients();
        if (c.clip > 0) optim::clip_grad_norm(s.optimizer->parameters(), c.clip);
        s.optimizer->step();
        s.schedule->step();
        ++s.step;
        // Correct tokens over the tokens the ranks actually held, both summed: never above 1.
        std::vector<double> sums{local_loss, static_cast<double>(count_correct(logits, batch).tokens),
                                 static_cast<double>(batch.num_tokens())};
        replicas.sum(sums);
        const double mean_loss = sums[0], token_acc = sums[2] > 0 ? sums[1] / sums[2] : 0.0;
        s.history.step.push_back(static_cast<double>(s.step));
        s.history.loss.push_back(mean_loss);
        s.history.token_acc.push_back(token_acc);
        stats.seconds += seconds_since(start);
        stats.tokens += global.num_tokens();
        ++stats.steps;
        // Held-out evaluation: a collective, every rank its share. Progress and checkpoint: rank 0.
        const bool eval_now = (o.eval_every > 0 && s.step % o.eval_every == 0) || s.step == c.steps;
        const EvalResult e = eval_now ? evaluate_held_out(s, held_out, replicas) : EvalResult{};
        if (eval_now) reached(e);
        if (rank != 0) continue;
        progress.update(s.step, mean_loss, token_acc, global.num_tokens());
        if (eval_now && (s.step % (o.eval_every > 0 ? 4 * o.eval_every : 1) == 0 || s.step == c.steps ||
                         stats.target_step == s.step))
            progress.message(fmt::format("  held-out at step {}: loss {:.4f}, token accuracy {:.2f}%, "
                                         "sequence accuracy {:.2f}%", s.step, e.loss, 100 * e.token_acc,
                                         100 * e.seq_acc));
        if (o.checkpoint_every > 0 && s.step % o.checkpoint_every == 0) save_checkpoint(o.checkpoint, s);
    }
    return stats;
}

}  // namespace xgrad::examples
