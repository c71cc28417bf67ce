// Trains a small Transformer encoder on a toy sequence task (copy, reverse or sort), shows its
// progress, evaluates on a fixed held-out set and writes metrics.json, loss.svg, attention.svg
// and a checkpoint to --out. --resume continues from the checkpoint bit for bit.
// --distributed trains data-parallel over MPI: `mpirun -np 2 seq_train --distributed`.
#include <sched.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>

#include <xgrad/xgrad.hpp>

#include "core/runtime/parallel.hpp"

#include "common/cli.hpp"
#include "common/data.hpp"
#include "common/model.hpp"
#include "common/train.hpp"

#ifdef XGRAD_WITH_MPI
#include "nn/distributed/process_group.hpp"
#include "nn/distributed/data_parallel.hpp"
#endif

using namespace xgrad;
using namespace xgrad::examples;

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_sigint(int) { g_interrupted = 1; }

std::string join_tokens(const std::vector<std::int64_t>& v) {
    std::string s;
    for (auto t : v) s += (s.empty() ? "" : " ") + token_str(t);
    return s;
}

void write_loss_plot(const std::string& path, const History& h, const std::string& title) {
    std::vector<svg::Series> series;
    series.push_back({"training loss", h.step, h.loss, "#1f77b4", "none"});
    if (!h.eval_step.empty()) {
        series.push_back({"held-out token accuracy", h.eval_step, h.eval_token_acc, "#d62728", "none", true});
        series.push_back({"held-out sequence accuracy", h.eval_step, h.eval_seq_acc, "#2ca02c", "6,3", true});
    }
    svg::LinePlotOptions o;
    o.title = title;
    o.xlabel = "step";
    o.ylabel = "cross-entropy loss (log scale)";
    o.log_y = true;
    o.y2label = "held-out accuracy";
    o.y2lim = std::pair{0.0, 1.0};
    o.markers = false;
    svg::write_file(path, svg::line_plot(series, o));
}

// One held-out example of full length through the model; one panel per layer and head.
std::string write_attention_plot(const std::string& path, SeqEncoder& model, const Batch& held) {
    const auto lens = held.valid_lens.to_vector<std::int64_t>();
    const std::size_t T = held.inputs.size(1);
    std::size_t row = 0;
    for (std::size_t r = 0; r < lens.size(); ++r)
        if (static_cast<std::size_t>(lens[r]) == T) { row = r; break; }
    const long r = static_cast<long>(row), len = lens[row];
    const Batch one{slice(held.inputs, 0, r, r + 1), slice(held.targets, 0, r, r + 1),
                    slice(held.valid_lens, 0, r, r + 1)};
    Tensor logits;
    {
        NoGradGuard no_grad;
        model.eval();
        logits = model(one.inputs, one.valid_lens);
        model.train();
    }
    const auto input = row_tokens(one.inputs, one.valid_lens, 0);
    const auto truth = row_tokens(one.targets, one.valid_lens, 0);
    const auto pred = row_tokens(argmax(logits, 2), one.valid_lens, 0);

    std::vector<std::string> ticks;
    for (auto t : input) ticks.push_back(token_str(t));
    std::vector<std::vector<Tensor>> panels;
    std::vector<std::vector<std::string>> titles;
    const auto weights = model.attention_weights();
    for (std::size_t l = 0; l < weights.size(); ++l) {
        panels.emplace_back();
        titles.emplace_back();
        const std::size_t heads = weights[l].size(1);
        for (std::size_t h = 0; h < heads; ++h) {
            const long hh = static_cast<long>(h);
            Tensor w = slice(slice(weights[l], 1, hh, hh + 1), 2, 0, len);
            w = slice(w, 3, 0, len).reshape({len, len});
            panels.back().push_back(w);
            titles.back().push_back(fmt::format("layer {}, head {}", l + 1, h + 1));
        }
    }
    svg::HeatmapOptions o;
    o.title = fmt::format("input {}  =>  {} (truth {})", join_tokens(input), join_tokens(pred), join_tokens(truth));
    o.xlabel = "keys (input tokens)";
    o.ylabel = "queries (input tokens)";
    o.xticks = ticks;
    o.yticks = ticks;
    o.vmin = 0.0;
    o.vmax = 1.0;
    svg::write_file(path, svg::heatmaps(panels, titles, o));
    return fmt::format("{} => {}   (truth {})", join_tokens(input), join_tokens(pred), join_tokens(truth));
}

#ifdef XGRAD_WITH_MPI
// The trainer's collectives over MPI: gradients summed in buckets by DistributedDataParallel
// (summed, not averaged: each rank's loss is already its share of the global mean).
class MpiReplicas : public ReplicaGroup {
public:
    explicit MpiReplicas(const nn::Module& model) : m_ddp(model, make_options()) {}
    std::size_t rank() const override { return distributed::rank(); }
    std::size_t world_size() const override { return distributed::world_size(); }
    void sum_gradients() override { m_ddp.sync_gradients(); }
    void sum(std::vector<double>& values) override { distributed::all_reduce(values.data(), values.size()); }
    const nn::DistributedDataParallel& ddp() const { return m_ddp; }

private:
    static nn::DataParallelOptions make_options() {
        nn::DataParallelOptions o;
        o.average = false;
        return o;
    }
    nn::DistributedDataParallel m_ddp;
};

// With N ranks on a host, each rank's own thread pool gets cores/N threads unless the user set
// XGRAD_NUM_THREADS: N pools of `cores` threads each would fight over the same cores. And never
// more than the CPUs the rank is bound to (mpirun binds each rank to one core for -np <= 2).
// Must run before the first op creates the pool.
void default_threads_per_rank() {
    // A collective: every rank calls it, whatever its environment says.
    const std::size_t local = distributed::local_world_size();
    if (std::getenv("XGRAD_NUM_THREADS")) return;
    const std::size_t cores = std::max(1u, std::thread::hardware_concurrency());
    std::size_t threads = std::max<std::size_t>(1, cores / local);
    cpu_set_t bound;
    if (sched_getaffinity(0, sizeof bound, &bound) == 0)
        threads = std::min<std::size_t>(threads, std::max(1, CPU_COUNT(&bound)));
    setenv("XGRAD_NUM_THREADS", std::to_string(threads).c_str(), 0);
}
#endif

int run(int argc, const char* const* argv) {
    TrainConfig c;
    std::string task = "reverse", pos = pos_name(c.model.pos), out = "seq_train_out";
    std::size_t seed = 0;
    std::size_t held_out = 1000;
    std::int64_t eval_every = 25, log_every = 50, checkpoint_every = 0, stop_after = 0;
    bool resume = false, distributed = false;

    Flags flags("seq_train",
                "Trains a small Transformer encoder (embedding, positional encoding, N encoder blocks of\n"
                "multi-head attention with AddNorm and FFN, a linear head) to copy, reverse or sort\n"
                "sequences of symbols, then evaluates it on a fixed held-out set and writes\n"
                "metrics.json, loss.svg, attention.svg and checkpoint.npz to --out.");
    flags.add("task", task, "copy, reverse or sort");
    flags.add("optimizer", c.optimizer, "sgd (with momentum), adam or adamw");
    flags.add("steps", c.steps, "training steps");
    flags.add("lr", c.lr, "peak learning rate after warm-up; 0: 3e-3 for adam/adamw, 0.1 for sgd");
    flags.add("batch", c.batch, "sequences per step");
    flags.add("hidden", c.model.hidden, "model width d");
    flags.add("heads", c.model.heads, "attention heads (must divide --hidden)");
    flags.add("layers", c.model.layers, "encoder blocks");
    flags.add("ffn", c.model.ffn_hidden, "hidden width of the position-wise FFN");
    flags.add("max-len", c.task.max_len, "longest sequence (lengths are uniform in 1..max-len)");
    flags.add("symbols", c.task.num_symbols, "number of distinct symbols");
    flags.add("pos", pos, "positional encoding: learned or sinusoidal (d2l's fixed table)");
    flags.add("scale-embeddings", c.model.scale_embeddings,
              "multiply the token embeddings by sqrt(hidden) as d2l does (stalls near 40% here)");
    flags.add("dropout", c.model.dropout, "dropout probability");
    flags.add("warmup", c.warmup, "linear warm-up steps before the cosine decay");
    flags.add("momentum", c.momentum, "momentum for sgd");
    flags.add("weight-decay", c.weight_decay, "decoupled weight decay for adamw");
    flags.add("clip", c.clip, "clip the gradient norm to this (0: no clipping)");
    flags.add("seed", seed, "seed for initialisation, batches, dropout and the held-out set");
    flags.add("held-out", held_out, "held-out sequences");
    flags.add("eval-every", eval_every, "evaluate on the held-out set every N steps (0: only at the end)");
    flags.add("log-every", log_every, "print a progress line every N steps when stdout is not a terminal");
    flags.add("checkpoint-every", checkpoint_every, "also write the checkpoint every N steps (0: at the end)");
    flags.add("stop-after", stop_after, "stop after N steps of this run, with a checkpoint (0: run to --steps)");
    flags.add("out", out, "output folder");
    flags.add("resume", resume, "continue from --out/checkpoint.npz (same flags)");
    flags.add("distributed", distributed,
              "data-parallel over MPI: run under mpirun -np N; --batch is the global batch (a multiple of N)");
    if (!flags.parse(argc, argv)) return 0;
    c.task.task = parse_task(task);
    c.model.pos = parse_pos(pos);
    c.seed = seed;
    if (held_out == 0) throw Error("--held-out must be at least 1");

    // Data-parallel: MPI from here to the end of run(). Only rank 0 prints and writes files.
#ifdef XGRAD_WITH_MPI
    std::unique_ptr<distributed::Environment> mpi;
    std::shared_ptr<MpiReplicas> replicas;
    if (distributed) {
        mpi = std::make_unique<distributed::Environment>();
        default_threads_per_rank();
    }
    const bool main_rank = !distributed || distributed::rank() == 0;
#else
    if (distributed)
        throw Error("--distributed needs MPI, and this seq_train was built without it (install libopenmpi-dev "
                    "and reconfigure with -DXGRAD_WITH_MPI=ON)");
    const bool main_rank = true;
#endif
    default_blas_threads(1);
    if (main_rank) std::filesystem::create_directories(out);
    const std::string ckpt = out + "/checkpoint.npz";
    Trainer trainer(c);
    // Every rank reads the checkpoint: on several hosts --out must be on a shared filesystem.
    if (resume) {
        trainer.load(ckpt);
        if (main_rank) fmt::print("resumed from {} at step {}\n", ckpt, trainer.step());
    }
#ifdef XGRAD_WITH_MPI
    if (distributed) {
        replicas = std::make_shared<MpiReplicas>(trainer.model());  // rank 0's parameters everywhere
        trainer.set_replicas(replicas);
    }
#endif
    std::size_t world = 1;
#ifdef XGRAD_WITH_MPI
    if (distributed) world = distributed::world_size();
#endif
    const Batch held = held_out_set(c.task, held_out, c.seed);
    if (main_rank) {
        fmt::print("task {}: lengths 1..{} over {} symbols; {} parameters; optimizer {}, lr {}, batch {}, {} steps\n",
                   task, c.task.max_len, c.task.num_symbols, trainer.model().num_parameters(), c.optimizer,
                   trainer.config().lr > 0 ? trainer.config().lr : default_lr(c.optimizer), c.batch, c.steps);
        if (distributed)
            fmt::print("data-parallel over {} ranks: {} sequences per rank, {} thread(s) per rank\n", world,
                       c.batch / world, num_threads());
        std::fflush(stdout);
    }

    // Evaluation runs on rank 0 only (it needs no other rank); the others go on to the next step.
    if (main_rank && trainer.step() == 0 && eval_every > 0) trainer.evaluate_held_out(held);  // the curve starts at 0
    std::signal(SIGINT, on_sigint);
    Progress progress(c.steps, log_every, stdout, /*redraw=*/!distributed);
    double train_seconds = 0;
    std::int64_t train_tokens = 0, run_steps = 0;
    // Ranks must stop at the same step (a rank that left would leave the others waiting in a
    // collective): a Ctrl-C seen by any rank stops all of them after the step.
    bool stop_signal = false;
    auto interrupted = [&] {
        std::vector<double> flag{g_interrupted ? 1.0 : 0.0};
#ifdef XGRAD_WITH_MPI
        if (replicas) replicas->sum(flag);
#endif
        stop_signal = flag[0] > 0;
        return stop_signal;
    };
    while (trainer.step() < c.steps && !interrupted() && !(stop_after > 0 && run_steps >= stop_after)) {
        const auto t0 = std::chrono::steady_clock::now();
        const StepResult r = trainer.train_step();
        train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        train_tokens += r.tokens;
        ++run_steps;
        const std::int64_t s = trainer.step();
        if (!main_rank) continue;
        progress.update(s, r.loss, r.token_acc, r.tokens);
        if ((eval_every > 0 && s % eval_every == 0) || s == c.steps) {
            const EvalResult e = trainer.evaluate_held_out(held);
            if (s % (eval_every > 0 ? eval_every * 4 : 1) == 0 || s == c.steps)
                progress.message(fmt::format("  held-out at step {}: loss {:.4f}, token accuracy {:.2f}%, "
                                             "sequence accuracy {:.2f}%", s, e.loss, 100 * e.token_acc,
                                             100 * e.seq_acc));
        }
        if (checkpoint_every > 0 && s % checkpoint_every == 0) trainer.save(ckpt);
    }
    if (!main_rank) return 0;
    progress.finish();
    const double wall = progress.elapsed();
    trainer.save(ckpt);
    if (trainer.step() < c.steps) {
        fmt::print("stopped at step {} of {}; checkpoint in {} (continue with --resume)\n", trainer.step(), c.steps,
                   ckpt);
        return stop_signal ? 130 : 0;
    }

    const EvalResult e = evaluate(trainer.model(), held);
    const double tps = train_seconds > 0 ? static_cast<double>(train_tokens) / train_seconds : 0;
    const auto& h = trainer.history();
    // Distributed: the time in the gradient all-reduce (rank 0's view, waiting for the other
    // ranks included) and in the whole gradient sync (flatten, all-reduce, write back).
    double allreduce_seconds = 0, sync_seconds = 0;
    std::int64_t buckets = 0, sync_bytes = 0;
#ifdef XGRAD_WITH_MPI
    if (replicas) {
        allreduce_seconds = replicas->ddp().allreduce_seconds();
        sync_seconds = replicas->ddp().sync_seconds();
        buckets = static_cast<std::int64_t>(replicas->ddp().num_buckets());
        sync_bytes = static_cast<std::int64_t>(replicas->ddp().bytes_per_sync());
    }
#endif
    write_json(out + "/metrics.json",
               {{"task", task},
                {"ranks", static_cast<std::int64_t>(world)},
                {"threads_per_rank", static_cast<std::int64_t>(num_threads())},
                {"allreduce_seconds", allreduce_seconds},
                {"gradient_sync_seconds", sync_seconds},
                {"optimizer", c.optimizer},
                {"pos", pos},
                {"scale_embeddings", std::int64_t{c.model.scale_embeddings}},
                {"steps", trainer.step()},
                {"steps_this_run", run_steps},
                {"final_loss", h.loss.empty() ? NAN : h.loss.back()},
                {"held_out_loss", e.loss},
                {"held_out_token_accuracy", e.token_acc},
                {"held_out_sequence_accuracy", e.seq_acc},
                {"held_out_size", static_cast<std::int64_t>(held_out)},
                {"seconds", wall},
                {"train_seconds", train_seconds},
                {"tokens_per_second", tps},
                {"parameters", static_cast<std::int64_t>(trainer.model().num_parameters())}});
    write_loss_plot(out + "/loss.svg", h,
                    fmt::format("{} task, {} ({} pos{}), d {}, {} heads, {} layers", task, c.optimizer, pos,
                                c.model.scale_embeddings ? ", scaled" : "", c.model.hidden, c.model.heads, c.model.layers));
    const std::string example = write_attention_plot(out + "/attention.svg", trainer.model(), held);

    fmt::print("held-out ({} sequences): token accuracy {:.2f}%, sequence accuracy {:.2f}%, loss {:.4f}\n",
               held_out, 100 * e.token_acc, 100 * e.seq_acc, e.loss);
    fmt::print("{} steps this run in {:.1f} s ({:.1f} s in training steps, {:.0f} tokens/s)\n", run_steps, wall,
               train_seconds, tps);
    if (distributed && run_steps > 0)
        fmt::print("{} ranks: {:.2f} ms per step, of which gradient all-reduce {:.3f} ms ({:.1f}%; whole sync "
                   "{:.3f} ms), {} bucket(s), {} bytes per step\n", world, 1e3 * train_seconds / run_steps,
                   1e3 * allreduce_seconds / run_steps, 100 * allreduce_seconds / train_seconds,
                   1e3 * sync_seconds / run_steps, buckets, sync_bytes);
    fmt::print("example: {}\n", example);
    fmt::print("wrote {0}/metrics.json, {0}/loss.svg, {0}/attention.svg, {0}/checkpoint.npz\n", out);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fflush(stdout);
#ifdef XGRAD_WITH_MPI
        // MPI is still up only when the error came with other ranks running (see Environment):
        // name the rank and end the whole job rather than leave the others waiting.
        if (distributed::is_initialized()) {
            fmt::print(stderr, "\nseq_train: error on rank {} of {}: {}\n", distributed::rank(),
                       distributed::world_size(), e.what());
            std::fflush(stderr);
            distributed::abort(1);
        }
#endif
        fmt::print(stderr, "\nseq_train: error: {}\n", e.what());
        return 1;
    }
}
