// 6. Trains a small Transformer encoder on a toy sequence task (copy, reverse or sort), shows its
// progress, evaluates on a fixed held-out set and writes metrics.json, loss.svg, attention.svg
// and a checkpoint to --out. --resume continues from the checkpoint bit for bit.
// 7. --distributed trains data-parallel over MPI: `mpirun -np 2 seq_train --distributed`
// (distributed.hpp says how the ranks share a step).
//
// The training loop is train() in train.cpp; this file reads the flags, sets the run up and
// reports on it.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>

#include <nlohmann/json.hpp>
#include <xgrad/xgrad.hpp>

#include "common/flags.hpp"
#include "common/out_folder.hpp"
#include <optional>

#include "common/progress.hpp"
#include "core/io/atomic_file.hpp"
#include "core/runtime/alloc.hpp"
#include "agreement.hpp"
#include "data.hpp"
#include "distributed.hpp"
#include "model.hpp"
#include "train.hpp"

using namespace xgrad;
using namespace xgrad::examples;

namespace {

// The first Ctrl-C stops the run after the step, with its checkpoint and results; a second one
// ends the program at once (the files are written atomically, so none is left half-written).
extern "C" void on_sigint(int) {
    g_interrupted = 1;
    std::signal(SIGINT, SIG_DFL);
}

struct Options {
    TrainConfig config;
    LoopOptions loop;
    std::string task = "reverse", pos = "learned", out = "seq_train_out";
    std::int64_t log_every = 50;
    bool resume = false, overwrite = false, distributed = false;
    DataParallelSettings parallel;
};

// What a run writes to --out; the checkpoint first, so that --resume finds it by that name.
const std::vector<std::string> kOutputs = {"checkpoint.npz", "metrics.json", "loss.svg", "attention.svg"};

void add_flags(CLI::App& app, Options& o) {
    using flags::kMaxCount, flags::kMaxSize, flags::whole, flags::real;
    TrainConfig& c = o.config;
    app.add_option("--task", o.task, "copy, reverse or sort")->check(CLI::IsMember({"copy", "reverse", "sort"}));
    app.add_option("--optimizer", c.optimizer, "sgd (with momentum), adam or adamw")
        ->check(CLI::IsMember({"sgd", "adam", "adamw"}));
    app.add_option("--steps", c.steps, "training steps")->check(whole(1, kMaxCount));
    app.add_option("--lr", c.lr, "peak learning rate after warm-up; 0: 6e-3 for adam/adamw, 0.1 for sgd")
        ->check(real(0));
    app.add_option("--batch", c.batch, "sequences per step")->check(whole(1, kMaxSize));
    app.add_option("--hidden", c.model.hidden, "model width d")->check(whole(1, kMaxSize));
    app.add_option("--heads", c.model.heads, "attention heads (must divide --hidden)")->check(whole(1, kMaxSize));
    app.add_option("--layers", c.model.layers, "encoder blocks")->check(whole(1, kMaxSize));
    app.add_option("--ffn", c.model.ffn_hidden, "hidden width of the position-wise FFN")->check(whole(1, kMaxSize));
    app.add_option("--max-len", c.task.max_len, "longest sequence (lengths are uniform in 1..max-len)")
        ->check(whole(1, kMaxSize));
    app.add_option("--symbols", c.task.num_symbols, "number of distinct symbols")->check(whole(1, kMaxSize));
    app.add_option("--pos", o.pos, "positional encoding: learned or sinusoidal (d2l's fixed table)")
        ->check(CLI::IsMember({"learned", "sinusoidal"}));
    app.add_flag("--scale-embeddings", c.model.scale_embeddings,
                 "multiply the token embeddings by sqrt(hidden) as d2l does (stalls near 40% here)");
    app.add_option("--dropout", c.model.dropout, "dropout probability")->check(flags::fraction());
    app.add_option("--warmup", c.warmup, "linear warm-up steps before the cosine decay (at most --steps)")
        ->check(whole(0, kMaxCount))
        ->default_str("0 for adam/adamw; sgd: a tenth of --steps, at most 30");
    app.add_option("--momentum", c.momentum, "momentum for sgd")->check(real(0, 1));
    app.add_option("--weight-decay", c.weight_decay, "decoupled weight decay for adamw")->check(real(0));
    app.add_option("--clip", c.clip, "clip the gradient norm to this (0: no clipping)")->check(real(0));
    app.add_option("--seed", c.seed, "seed for initialisation, batches, dropout and the held-out set")
        ->check(flags::seed());
    app.add_option("--held-out", c.held_out, "held-out sequences")->check(whole(1, kMaxSize));
    app.add_option("--eval-every", o.loop.eval_every, "evaluate on the held-out set every N steps (0: only at the end)")
        ->check(whole(0, kMaxCount));
    app.add_option("--log-every", o.log_every, "print a progress line every N steps when stdout is not a terminal")
        ->check(whole(1, kMaxCount));
    app.add_option("--checkpoint-every", o.loop.checkpoint_every,
                   "also write the checkpoint every N steps (0: at the end)")->check(whole(0, kMaxCount));
    app.add_option("--stop-after", o.loop.stop_after,
                   "stop after N steps of this run, with a checkpoint (0: run to --steps)")->check(whole(0, kMaxCount));
    app.add_option("--target-accuracy", o.loop.target_accuracy,
                   "stop at the first held-out evaluation with this token accuracy or more, and report the "
                   "seconds of training steps and the step it took (0: run to --steps)")->check(real(0, 1));
    app.add_option("--autocast", c.autocast,
                   "none, or bf16: the products in bfloat16 on oneDNN (as torch.autocast); refused on a CPU "
                   "without bfloat16 instructions unless XGRAD_AUTOCAST_ALLOW_EMULATION=1")
        ->check(CLI::IsMember({"none", "bf16"}));
    app.add_option("--out", o.out, "output folder");
    app.add_flag("--resume", o.resume, "continue from --out/checkpoint.npz (same flags)");
    app.add_flag("--overwrite", o.overwrite,
                 "start afresh in an --out that holds an earlier run, removing its checkpoint and results");
    app.add_flag("--distributed", o.distributed,
                 "data-parallel over MPI: run under mpirun -np N; --batch is the global batch (a multiple of N)");
    app.add_option("--collective-timeout", o.parallel.collective_timeout,
                   "with --distributed: seconds a rank waits in a collective (for the other ranks) before the "
                   "job ends with an error naming the rank, the collective and whom it waited for")
        ->check(real(0.1, 7 * 86400));
    app.add_flag_function("--no-overlap", [&o](std::int64_t) { o.parallel.overlap = false; },
                 "with --distributed: all-reduce the gradients after backward instead of during it");
    app.add_option("--bucket-kb", o.parallel.bucket_kb,
                   "with --distributed: largest gradient bucket in KiB (the first, holding the last layers, is at "
                   "most 1024)")->check(whole(1, kMaxSize));
}

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
        nn::need_attention_weights(model, true);  // the heatmap reads them
        logits = model(one.inputs, one.valid_lens);
        nn::need_attention_weights(model, std::nullopt);
        model.train();
    }
    const auto input = row_tokens(one.inputs, one.valid_lens, 0);
    const auto truth = row_tokens(one.targets, one.valid_lens, 0);
    const auto pred = row_tokens(argmax(logits, 2), one.valid_lens, 0);

    std::vector<std::string> ticks;
    for (auto t : input) ticks.push_back(token_str(t));
    std::vector<std::vector<Tensor>> panels;
    std::vector<std::vector<std::string>> titles;
    const auto weights = model.attention_weights_copy();
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

nlohmann::ordered_json settings_json(const TrainConfig& c) {
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (const NumericSetting& s : numeric_settings(c))
        out[s.name] = s.choice ? nlohmann::ordered_json(s.shown) : nlohmann::ordered_json::parse(s.shown);
    return out;
}

// The summary of a run, finished or stopped early: held-out results, speed, and where the
// files are. A stopped run gets the same files, describing it as far as it went.
void report(const Options& o, TrainState& state, const Replicas& replicas, const Batch& held, const EvalResult& e,
            const LoopStats& run, double wall) {
    const TrainConfig& c = state.config;
    const double tps = run.seconds > 0 ? static_cast<double>(run.tokens) / run.seconds : 0;
    const SyncStats sync = replicas.sync_stats();
    const History& h = state.history;
    nlohmann::ordered_json metrics = {
        {"task", o.task},
        {"ranks", replicas.world_size()},
        {"threads_per_rank", num_threads()},
        {"allreduce_seconds", sync.allreduce_seconds},
        {"allreduce_overlapped_seconds", sync.overlapped_seconds},
        {"collective_blocked_seconds", sync.blocked_seconds},
        {"gradient_sync_seconds", sync.sync_seconds},
        {"optimizer", c.optimizer},
        {"pos", o.pos},
        {"scale_embeddings", c.model.scale_embeddings ? 1 : 0},
        {"steps", state.step},
        {"steps_planned", c.steps},
        {"finished", state.step >= c.steps},
        {"steps_this_run", run.steps},
        {"final_loss", h.loss.empty() ? NAN : h.loss.back()},  // NaN is written as null
        {"held_out_loss", e.loss},
        {"held_out_token_accuracy", e.token_acc},
        {"held_out_sequence_accuracy", e.seq_acc},
        {"held_out_size", c.held_out},
        {"seconds", wall},
        {"train_seconds", run.seconds},
        {"tokens_per_second", tps},
        {"target_accuracy", o.loop.target_accuracy},
        // null when no target was set or it was not reached; seconds of this run's training steps
        {"target_step", run.target_reached() ? nlohmann::ordered_json(run.target_step) : nullptr},
        {"target_train_seconds", run.target_reached() ? nlohmann::ordered_json(run.target_seconds) : nullptr},
        {"eval_steps", h.eval_step},
        {"eval_token_accuracy", h.eval_token_acc},
        {"parameters", state.model->num_parameters()},
        // Every setting that changes the numbers, as the checkpoint records them.
        {"settings", settings_json(c)}};
    write_file_atomic(o.out + "/metrics.json", metrics.dump(2) + "\n", "metrics.json");
    const std::string stopped =
        state.step < c.steps ? fmt::format(", stopped at step {} of {}", state.step, c.steps) : "";
    write_loss_plot(o.out + "/loss.svg", h,
                    fmt::format("{} task, {} ({} pos{}), d {}, {} heads, {} layers{}", o.task, c.optimizer, o.pos,
                                c.model.scale_embeddings ? ", scaled" : "", c.model.hidden, c.model.heads,
                                c.model.layers, stopped));
    const std::string example = write_attention_plot(o.out + "/attention.svg", *state.model, held);

    fmt::print("held-out ({} sequences): token accuracy {:.2f}%, sequence accuracy {:.2f}%, loss {:.4f}\n",
               c.held_out, 100 * e.token_acc, 100 * e.seq_acc, e.loss);
    fmt::print("{} steps this run in {:.1f} s ({:.1f} s in training steps, {:.0f} tokens/s)\n", run.steps, wall,
               run.seconds, tps);
    if (o.distributed && run.steps > 0) {
        // Per step, every collective included (stop flag, metrics, gradients). compute: the step
        // less the time blocked in collectives; allreduce: the gradient buckets in flight, of
        // which the overlapped part ran during backward.
        const double per_step = 1e3 / static_cast<double>(run.steps);
        const double blocked = per_step * sync.blocked_seconds, step_ms = per_step * run.seconds;
        const double allreduce = per_step * sync.allreduce_seconds, overlapped = per_step * sync.overlapped_seconds;
        fmt::print("{} ranks: {:.2f} ms per step, of which {:.3f} ms ({:.1f}%) blocked in {} collectives; gradient "
                   "all-reduce in flight {:.3f} ms, {:.3f} ms of it during backward ({:.0f}%); {} bucket(s), {} "
                   "bytes per step\n",
                   replicas.world_size(), step_ms, blocked, 100 * sync.blocked_seconds / run.seconds,
                   static_cast<double>(sync.collectives) / static_cast<double>(run.steps), allreduce, overlapped,
                   allreduce > 0 ? 100 * overlapped / allreduce : 0.0, sync.buckets, sync.bytes_per_step);
        fmt::print("ddp: compute_ms={:.3f} grad_bytes={} allreduce_ms={:.3f} blocked_ms={:.3f} buckets={} "
                   "overlapped_ms={:.3f} step_ms={:.3f}\n",
                   step_ms - blocked, sync.bytes_per_step, allreduce, blocked, sync.buckets, overlapped, step_ms);
    }
    if (o.loop.target_accuracy > 0)
        fmt::print(run.target_reached()
                       ? fmt::format("target: {:.2f}% held-out token accuracy reached at step {} after {:.3f} s of "
                                     "training steps ({:.2f} ms per step)\n",
                                     100 * o.loop.target_accuracy, run.target_step, run.target_seconds,
                                     run.steps > 0 ? 1e3 * run.seconds / static_cast<double>(run.steps) : 0.0)
                       : fmt::format("target: {:.2f}% held-out token accuracy not reached in {} steps\n",
                                     100 * o.loop.target_accuracy, state.step));
    fmt::print("example: {}\n", example);
    fmt::print("wrote {0}/metrics.json, {0}/loss.svg, {0}/attention.svg, {0}/checkpoint.npz\n", o.out);
}

// What this rank must agree on with the others before training (agreement.hpp): the world, the
// state it starts from, every flag but the per-rank ones, and the settings that change numerics.
Settings rank_settings(const CLI::App& app, const Options& o, const TrainState& state, const Replicas& replicas,
                       const std::string& load_error) {
    Settings s;
    if (!load_error.empty()) s.emplace_back(kRankError, load_error);
    s.emplace_back("world size", std::to_string(replicas.world_size()));
    s.emplace_back("start", o.resume ? fmt::format("checkpoint at step {}", state.step) : "fresh");
    s.emplace_back("start state hash", fmt::format("{:016x}", state_hash(state)));
    // --out and --overwrite are where a rank writes: they may differ (the state hash covers
    // what was read from --out).
    for (const CLI::Option* opt : app.get_options()) {
        const std::string name = opt->get_name();
        if (name == "--help" || name == "--out" || name == "--overwrite") continue;
        std::string value = "default";
        if (opt->count() > 0) {
            value.clear();
            for (const std::string& r : opt->results()) value += (value.empty() ? "" : " ") + r;
        }
        s.emplace_back("flag " + name, value);
    }
    for (auto& entry : numerics_settings()) s.push_back(std::move(entry));
    return s;
}

int run(int argc, const char* const* argv) {
    Options o;
    CLI::App app("Trains a small Transformer encoder (embedding, positional encoding, N encoder blocks of\n"
                 "multi-head attention with AddNorm and FFN, a linear head) to copy, reverse or sort\n"
                 "sequences of symbols, then evaluates it on a fixed held-out set and writes\n"
                 "metrics.json, loss.svg, attention.svg and checkpoint.npz to --out.",
                 "seq_train");
    flags::setup(app);
    add_flags(app, o);
    if (const auto exit_code = flags::parse(app, argc, argv)) return *exit_code;
    TrainConfig& c = o.config;
    if (app.count("--warmup") == 0) c.warmup = default_warmup(c.optimizer, c.steps);
    if (c.warmup > c.steps)
        return flags::refuse(app, fmt::format("--warmup ({}) must be at most --steps ({})", c.warmup, c.steps));
    if (c.model.hidden % c.model.heads != 0)
        return flags::refuse(app, fmt::format("--hidden ({}) must be a multiple of --heads ({})", c.model.hidden,
                                              c.model.heads));
    c.task.task = parse_task(o.task);
    c.model.pos = parse_pos(o.pos);
    // Training and evaluation run on this thread, inside the guard; it refuses (an Error, exit
    // status 1) before anything is written when the CPU or the build cannot run it.
    std::optional<AutocastGuard> autocast;
    if (c.autocast == "bf16") autocast.emplace(kBFloat16);
    // The last checks before anything runs: whether the run fits in memory, and whether --out
    // can take it. Every rank makes them (before MPI starts), so all refuse alike. One process
    // locks --out now, for its whole life, before looking in it; the ranks of a data-parallel
    // run leave that to rank 0, which writes --out, once they know which of them it is.
    OutFolder folder;
    Start start = Start::fresh;
    try {
        check_memory(c, c.held_out, physical_memory_bytes());
        start = start_from_flags(o.resume, o.overwrite);
        if (o.distributed) check_out_folder(o.out, kOutputs, start, kOutputs.front());
        else folder = prepare_out_folder(o.out, kOutputs, start, kOutputs.front());
    } catch (const Error& e) {
        return flags::refuse(app, e.what());
    }

    // Data-parallel: MPI from here to the end of run(). Only rank 0 prints and writes files.
    const std::unique_ptr<Replicas> replicas = o.distributed ? start_data_parallel(o.parallel) : std::make_unique<Replicas>();
    const bool main_rank = replicas->rank() == 0;
    c.ranks = replicas->world_size();  // recorded with the other settings that change the numbers
    c.bucket_kb = o.parallel.bucket_kb;
    // These matrices are tiny (64 × 64): a second OpenBLAS thread costs more in hand-off than it
    // saves, and on a loaded machine its spin-waiting can triple a run's time.
    if (!std::getenv("OPENBLAS_NUM_THREADS")) blas_set_num_threads(1);
    const std::string checkpoint = o.out + "/" + kOutputs.front();
    o.loop.checkpoint = checkpoint;
    TrainState state(c);
    // Rank 0 of a data-parallel run locks --out (another run there stops the whole job, at the
    // agreement check below, before anything is read or written) and checks it again under the lock.
    std::string load_error;
    if (o.distributed && main_rank) {
        try {
            folder = prepare_out_folder(o.out, kOutputs, start, kOutputs.front());
        } catch (const Error& e) {
            load_error = e.what();
        }
    }
    // Every rank reads the checkpoint: on several hosts --out must be on a shared filesystem.
    if (o.resume && load_error.empty()) {
        try {
            load_checkpoint(checkpoint, state);
        } catch (const Error& e) {
            if (!o.distributed) throw;
            load_error = e.what();  // every rank learns of it in the agreement check, and stops
        }
    }
    if (o.distributed) {
        // Before the first collective that needs the ranks alike (share() broadcasts rank 0's
        // parameters into every rank's model): all go on or all stop, each with the message.
        try {
            check_agreement(*replicas, rank_settings(app, o, state, *replicas, load_error));
        } catch (const Disagreement& e) {
            fmt::print(stderr, "\nseq_train: error on rank {} of {}: {}\n", replicas->rank(), replicas->world_size(),
                       e.what());
            return 1;  // every rank returns here, so MPI ends normally: no rank is left waiting
        }
    }
    if (o.resume && main_rank) fmt::print("resumed from {} at step {}\n", checkpoint, state.step);
    replicas->share(*state.model);
    const Batch held = held_out_set(c.task, c.held_out, c.seed);
    if (main_rank) {
        fmt::print("task {}: lengths 1..{} over {} symbols; {} parameters; optimizer {}, lr {}, batch {}, {} steps\n",
                   o.task, c.task.max_len, c.task.num_symbols, state.model->num_parameters(), c.optimizer,
                   c.lr > 0 ? c.lr : default_lr(c.optimizer), c.batch, c.steps);
        if (o.distributed)
            fmt::print("data-parallel over {} ranks: {} sequences per rank, {} thread(s) per rank\n",
                       replicas->world_size(), c.batch / replicas->world_size(), num_threads());
        std::fflush(stdout);
    }

    std::signal(SIGINT, on_sigint);
    Progress progress(c.steps, o.log_every, stdout, /*redraw=*/!o.distributed);
    const LoopStats stats = train(state, *replicas, held, progress, o.loop);
    const EvalResult held_result = evaluate(*state.model, held, *replicas);  // every rank its share
    if (!main_rank) return 0;
    progress.finish();
    const double wall = progress.elapsed();
    save_checkpoint(checkpoint, state);
    report(o, state, *replicas, held, held_result, stats, wall);
    if (state.step < c.steps && stats.target_reached()) {
        fmt::print("stopped at step {} of {}: --target-accuracy reached; checkpoint in {} (continue with --resume)\n",
                   state.step, c.steps, checkpoint);
    } else if (state.step < c.steps) {
        fmt::print("stopped at step {} of {}; checkpoint in {} (continue with --resume)\n", state.step, c.steps,
                   checkpoint);
        return stats.interrupted ? 130 : 0;
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::bad_alloc& e) {
        // check_memory() refuses runs that clearly do not fit; this is for the ones near the edge.
        std::fflush(stdout);
        end_job_on_error("seq_train", e);
        fmt::print(stderr, "\nseq_train: error: out of memory (std::bad_alloc): make --batch, --held-out, "
                           "--max-len, --hidden or --ffn smaller\n");
        return 1;
    } catch (const std::exception& e) {
        std::fflush(stdout);
        end_job_on_error("seq_train", e);
        fmt::print(stderr, "\nseq_train: error: {}\n", e.what());
        return 1;
    }
}
