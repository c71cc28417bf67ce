// 11. bahdanau: d2l's "Bahdanau Attention" seq2seq (a GRU encoder, a GRU decoder that attends
// over the encoder's outputs with additive attention at every step), trained with teacher
// forcing on a toy translation the program generates from --seed (corpus.hpp: word order,
// adjectives and determiners move; every target word stands for one source word). It prints
// progress lines and the held-out loss, then translates held-out sentences greedily and prints
// them with d2l's BLEU, as d2l does (`go . => va !, bleu 1.000`), and writes metrics.json,
// loss.svg, attention_<i>.svg (the decoder's attention over the source words for the first
// --heatmaps held-out sentences) and checkpoint.npz. --resume continues from the checkpoint bit
// for bit; Ctrl-C stops after the step with a checkpoint.
//
// The corpus is corpus.cpp, the model model.cpp, the run's state and its checkpoint state.cpp;
// this file holds the flags, the loop and the reports. tools/bahdanau_twin.py is the same program in PyTorch (the same sentences, drawn from
// the same seed).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <xgrad/xgrad.hpp>

#include "common/flags.hpp"
#include "common/interrupt.hpp"
#include "common/out_folder.hpp"
#include "common/progress.hpp"
#include "core/io/atomic_file.hpp"
#include "core/runtime/alloc.hpp"
#include "corpus.hpp"
#include "model.hpp"
#include "seq_train/data.hpp"  // mix_seed
#include "state.hpp"
#include "streams.hpp"

namespace xgrad::examples::bahdanau {
namespace {

constexpr std::size_t kMaxHeatmaps = 10;

struct Options {
    Config config;
    std::int64_t eval_every = 50;
    std::int64_t log_every = 50;
    std::int64_t checkpoint_every = 0;
    std::int64_t stop_after = 0;
    std::size_t show = 8;
    std::size_t heatmaps = 3;
    std::size_t bleu_k = 2;
    std::string out = "bahdanau_out";
    bool resume = false, overwrite = false;
};

// What a run writes to --out; the checkpoint first, so that --resume finds it by that name.
std::vector<std::string> outputs() {
    std::vector<std::string> names = {"checkpoint.npz", "metrics.json", "loss.svg"};
    for (std::size_t i = 1; i <= kMaxHeatmaps; ++i) names.push_back(fmt::format("attention_{}.svg", i));
    return names;
}

void add_flags(CLI::App& app, Options& o) {
    using flags::kMaxCount, flags::kMaxSize, flags::whole, flags::real;
    Config& c = o.config;
    app.add_option("--steps", c.steps, "training steps")->check(whole(1, kMaxCount));
    app.add_option("--batch", c.batch, "sentence pairs per step")->check(whole(1, kMaxSize));
    app.add_option("--embed", c.model.embed, "embedding size of both languages")->check(whole(1, 4096));
    app.add_option("--hidden", c.model.hidden, "GRU state and attention size")->check(whole(1, 4096));
    app.add_option("--layers", c.model.layers, "GRU layers of the encoder and of the decoder")->check(whole(1, 64));
    app.add_option("--dropout", c.model.dropout, "dropout between GRU layers and on the attention weights")
        ->check(flags::fraction());
    app.add_option("--num-steps", c.num_steps, "tokens per sentence: longer ones are cut, shorter padded (d2l's "
                   "num_steps; the longest sentence has 10 with <eos>)")->check(whole(2, 1000));
    app.add_option("--lr", c.lr, "Adam's learning rate")->check(real(0));
    app.add_option("--clip", c.clip, "clip the gradient norm to this (0: no clipping)")->check(real(0));
    app.add_option("--held-out", c.held_out, "sentence pairs kept out of training, for the held-out loss and BLEU")
        ->check(whole(1, held_out_capacity()));
    app.add_option("--eval-every", o.eval_every, "held-out loss every N steps (0: only at the end)")
        ->check(whole(0, kMaxCount));
    app.add_option("--log-every", o.log_every, "print a progress line every N steps when stdout is not a terminal")
        ->check(whole(1, kMaxCount));
    app.add_option("--show", o.show, "held-out translations to print")->check(whole(0, 1000));
    app.add_option("--heatmaps", o.heatmaps, "held-out sentences to draw the attention of")
        ->check(whole(0, kMaxHeatmaps));
    app.add_option("--bleu-k", o.bleu_k, "longest n-gram BLEU counts (d2l's k)")->check(whole(1, 4));
    app.add_option("--seed", c.seed, "seed for the sentences, the initial weights and dropout")->check(flags::seed());
    app.add_option("--checkpoint-every", o.checkpoint_every, "also write the checkpoint every N steps (0: at the end)")
        ->check(whole(0, kMaxCount));
    app.add_option("--stop-after", o.stop_after, "stop after N steps of this run, with a checkpoint (0: run to "
                   "--steps)")->check(whole(0, kMaxCount));
    app.add_option("--out", o.out, "output folder");
    app.add_flag("--resume", o.resume, "continue from --out/checkpoint.npz (same flags)");
    app.add_flag("--overwrite", o.overwrite,
                 "start afresh in an --out that holds an earlier run, removing its checkpoint and results");
}

// Roughly the bytes a run needs, in double so that no product of sizes overflows: parameters
// with their gradients, Adam's moments and the copies a checkpoint's save or load makes, a training step's activations (each of the T
// decoder steps keeps the attention's (B, T, hidden) features several times over; the GRUs
// keep about ten (B, hidden) rows per layer and step) and the held-out batch's, without a graph.
double estimated_bytes(const Config& o) {
    const double E = static_cast<double>(o.model.embed), H = static_cast<double>(o.model.hidden),
                 L = static_cast<double>(o.model.layers), T = static_cast<double>(o.num_steps), V = 40;
    const double params = 2 * V * E + 2 * L * 3 * (E + 3 * H + 2) * H + 3 * H * H + (H + 1) * V;
    const auto activations = [&](double B) { return T * (8 * B * T * H + 2 * L * 10 * B * H + B * (E + H + V)); };
    return 4 * (6 * params + activations(static_cast<double>(o.batch)) +
                activations(static_cast<double>(o.held_out)) / 4);
}

// The loss as d2l computes it (the masked cross-entropy, a mean over all num_steps positions per
// sentence) and, for reports, per real target token: sum / (real tokens) · num_steps.
struct Loss {
    Tensor per_sentence;  // (B,)
    double per_token;
};
Loss masked_loss(const Tensor& logits, const Batch& b) {
    const Tensor l = nn::masked_softmax_ce_loss(logits, b.label, b.label_valid_len);
    const double tokens = b.label_valid_len.sum().item<double>();
    return {l, l.sum().item<double>() * static_cast<double>(b.label.size(1)) / tokens};
}

// The held-out loss per real target token, teacher forced, in eval mode.
double held_out_loss(EncoderDecoder& net, const Batch& held) {
    NoGradGuard no_grad;
    net.eval();
    const double loss = masked_loss(net(held.src, held.dec_input, held.src_valid_len), held).per_token;
    net.train();
    return loss;
}

// d2l's predict_seq2seq for a whole batch at once: greedy decoding from <bos>, num_steps tokens
// at most, each sentence up to its <eos>. Returns the words and, per sentence, the attention
// of each step it produced (<eos> included) over its source tokens: (steps, source length).
struct Translation {
    Words words;
    Tensor attention;
};
std::vector<Translation> translate(EncoderDecoder& net, const Batch& b, std::size_t num_steps) {
    const Vocab& tv = target_vocab();
    NoGradGuard no_grad;
    net.eval();
    DecoderState state = net.decoder().init_state(net.encoder()(b.src), b.src_valid_len);
    const std::size_t n = b.src.size(0);
    Tensor token = full({n, 1}, static_cast<double>(tv["<bos>"]), kInt64);
    std::vector<Translation> out(n);
    std::vector<std::size_t> produced(n, 0);
    std::vector<bool> done(n, false);
    std::vector<Tensor> weights;  // (n, 1, Ts) per step
    for (std::size_t step = 0; step < num_steps; ++step) {
        auto [logits, next] = net.decoder()(token, state);
        state = next;
        weights.push_back(net.decoder().attention_weights().front());
        token = argmax(logits, 2);  // (n, 1)
        const std::vector<std::int64_t> ids = token.to_vector<std::int64_t>();
        for (std::size_t i = 0; i < n; ++i) {
            if (done[i]) continue;
            ++produced[i];
            if (ids[i] == tv["<eos>"]) done[i] = true;
            else out[i].words.push_back(tv.token(ids[i]));
        }
    }
    const Tensor all = concat(weights, 1);  // (n, steps, Ts)
    const std::vector<std::int64_t> src_len = b.src_valid_len.to_vector<std::int64_t>();
    for (std::size_t i = 0; i < n; ++i)
        out[i].attention = all.select(0, i).narrow(0, 0, produced[i]).narrow(1, 0, src_len[i]);
    net.train();
    return out;
}

void write_loss_plot(const std::string& path, const std::vector<double>& steps, const std::vector<double>& losses,
                     const std::vector<double>& eval_steps, const std::vector<double>& eval_losses,
                     const std::string& title) {
    svg::LinePlotOptions o;
    o.title = title;
    o.xlabel = "step";
    o.ylabel = "cross-entropy per target token (nats)";
    o.log_y = true;
    svg::write_file(path, svg::line_plot({{"training batch", steps, losses, "#9ecae1", "none"},
                                          {"held-out", eval_steps, eval_losses, "#d62728", "6,3"}},
                                         o));
}

void write_attention_plot(const std::string& path, const Pair& pair, const Translation& t, double score) {
    svg::HeatmapOptions o;
    o.title = fmt::format("\"{}\" => \"{}\" (bleu {:.3f})", join(pair.source), join(t.words), score);
    o.xlabel = "source tokens (keys)";
    o.ylabel = "output tokens (queries)";
    o.xticks = pair.source;
    o.xticks.push_back("<eos>");
    o.xticks.resize(t.attention.size(1), "");
    o.yticks = t.words;
    o.yticks.push_back("<eos>");
    o.yticks.resize(t.attention.size(0), "");
    o.vmin = 0.0;
    o.vmax = 1.0;
    svg::write_file(path, svg::heatmaps({{t.attention}}, {{""}}, o));
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

nlohmann::ordered_json settings_json(const Config& c) {
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (const CheckpointSetting& setting : settings(c)) out[setting.name] = nlohmann::ordered_json::parse(setting.shown);
    return out;
}

struct LoopStats {
    std::int64_t steps = 0;  // of this run
    bool interrupted = false;
};

// Trains to --steps (or --stop-after steps of this run, or a Ctrl-C), evaluating the held-out
// loss every --eval-every steps and at the last, and saving the checkpoint every
// --checkpoint-every steps.
LoopStats train(RunState& s, const Options& o, const std::set<std::string>& held_sources, const Batch& held_batch,
                const std::string& checkpoint) {
    const Config& c = s.config;
    History& h = s.history;
    const auto evaluate = [&] {
        h.eval_step.push_back(static_cast<double>(s.step));
        h.eval_loss.push_back(held_out_loss(*s.net, held_batch));
        h.eval_seconds.push_back(s.train_seconds);
    };
    if (s.step == 0) evaluate();  // the curve starts at the initial model
    LoopStats stats;
    Progress progress(c.steps, o.log_every, stdout);
    while (s.step < c.steps && !(o.stop_after > 0 && stats.steps >= o.stop_after)) {
        if (interrupted()) {
            stats.interrupted = true;
            break;
        }
        const Batch b = make_batch(training_pairs(c.batch, held_sources, s.data_gen), c.num_steps);
        const auto start = std::chrono::steady_clock::now();
        const Tensor logits = (*s.net)(b.src, b.dec_input, b.src_valid_len);
        const Loss loss = masked_loss(logits, b);
        if (!std::isfinite(loss.per_token))
            throw Error(fmt::format("bahdanau: the training loss is {} at step {}: the run has diverged (lower --lr)",
                                    loss.per_token, s.step + 1));
        s.optimizer->zero_grad();
        loss.per_sentence.sum().backward();
        if (c.clip > 0) optim::clip_grad_norm(s.net->parameters(), c.clip);
        s.optimizer->step();
        s.train_seconds += seconds_since(start);
        ++s.step;
        ++stats.steps;
        h.step.push_back(static_cast<double>(s.step));
        h.loss.push_back(loss.per_token);
        // Token accuracy over the real target tokens, for the progress line.
        const Tensor real = lt(arange(c.num_steps).unsqueeze(0), b.label_valid_len.unsqueeze(1));
        const double right =
            mul(cast(eq(argmax(logits, 2), b.label), kFloat64), cast(real, kFloat64)).sum().item<double>();
        const double tokens = b.label_valid_len.sum().item<double>();
        progress.update(s.step, loss.per_token, right / tokens, static_cast<std::int64_t>(tokens));
        if ((o.eval_every > 0 && s.step % o.eval_every == 0) || s.step == c.steps) {
            evaluate();
            progress.message(fmt::format("  step {}: held-out loss {:.4f}", s.step, h.eval_loss.back()));
        }
        if (o.checkpoint_every > 0 && s.step % o.checkpoint_every == 0) save_checkpoint(checkpoint, s);
    }
    progress.finish();
    return stats;
}

int run(int argc, char** argv) {
    Options o;
    CLI::App app("Trains d2l's Bahdanau-attention seq2seq (GRU encoder, GRU decoder with additive attention) on a\n"
                 "toy translation it generates, then translates held-out sentences greedily and scores them\n"
                 "with BLEU. Writes metrics.json, loss.svg, attention_<i>.svg and checkpoint.npz to --out.",
                 "bahdanau");
    flags::setup(app);
    add_flags(app, o);
    if (const auto exit_code = flags::parse(app, argc, argv)) return *exit_code;
    const Config& c = o.config;
    if (o.heatmaps > c.held_out)
        return flags::refuse(app, fmt::format("--heatmaps ({}) must be at most --held-out ({})", o.heatmaps,
                                              c.held_out));
    const double memory = physical_memory_bytes();
    if (memory > 0 && estimated_bytes(c) > memory)
        return flags::refuse(app, fmt::format("this run would need about {} of memory, more than the {} this machine "
                                              "has: make --batch, --hidden, --num-steps or --held-out smaller",
                                              format_bytes(estimated_bytes(c)), format_bytes(memory)));
    const std::vector<std::string> names = outputs();
    OutFolder folder;  // locked until the program ends
    try {
        folder = prepare_out_folder(o.out, names, start_from_flags(o.resume, o.overwrite), names.front());
    } catch (const Error& e) {
        return flags::refuse(app, e.what());
    }

    // The corpus: a fixed held-out set, and training batches drawn afresh each step without it.
    const std::vector<Pair> held = held_out_pairs(c.held_out, mix_seed(c.seed, kHeldOut, 0));
    std::set<std::string> held_sources;
    for (const Pair& p : held) held_sources.insert(join(p.source));
    const Batch held_batch = make_batch(held, c.num_steps);

    const std::string checkpoint = o.out + "/" + names.front();
    RunState state(c);
    if (o.resume) {
        load_checkpoint(checkpoint, state);
        fmt::print("resumed from {} at step {}\n", checkpoint, state.step);
    }
    const ModelSpec& m = state.config.model;
    fmt::print("corpus: {} source words, {} target words; {} held-out pairs, e.g. \"{}\" => \"{}\"\n",
               m.src_vocab, m.tgt_vocab, held.size(), join(held[0].source), join(held[0].target));
    fmt::print("model: embed {}, hidden {}, {} GRU layers, dropout {}; {} parameters; Adam lr {}, clip {}, batch {}, "
               "{} steps, {} threads\n", m.embed, m.hidden, m.layers, m.dropout, state.net->num_parameters(), c.lr,
               c.clip, c.batch, c.steps, num_threads());
    std::fflush(stdout);

    stop_on_sigint();
    const LoopStats stats = train(state, o, held_sources, held_batch, checkpoint);
    save_checkpoint(checkpoint, state);
    const std::int64_t step = state.step;
    const bool stopped = step < c.steps;
    // A stopped run reports the held-out loss where it stopped; the checkpoint's history keeps
    // only the evaluations the uninterrupted run makes.
    History h = state.history;
    if (h.eval_step.back() != static_cast<double>(step)) {
        h.eval_step.push_back(static_cast<double>(step));
        h.eval_loss.push_back(held_out_loss(*state.net, held_batch));
        h.eval_seconds.push_back(state.train_seconds);
    }

    // Greedy translations of the held-out sentences, scored with d2l's BLEU.
    const std::vector<Translation> got = translate(*state.net, held_batch, c.num_steps);
    double bleu_sum = 0;
    std::size_t exact = 0;
    std::vector<double> scores;
    for (std::size_t i = 0; i < held.size(); ++i) {
        scores.push_back(bleu(join(got[i].words), join(held[i].target), o.bleu_k));
        bleu_sum += scores.back();
        exact += got[i].words == held[i].target;
    }
    if (o.show > 0) fmt::print("held-out translations (greedy):\n");
    for (std::size_t i = 0; i < std::min(o.show, held.size()); ++i)
        fmt::print("{} => {}, bleu {:.3f}\n", join(held[i].source), join(got[i].words), scores[i]);
    const double ms = step > 0 ? 1e3 * state.train_seconds / static_cast<double>(step) : 0.0;
    fmt::print("step {}: held-out loss {:.4f}, mean BLEU-{} {:.3f}, exact {} of {}; {:.2f} ms per training step\n",
               step, h.eval_loss.back(), o.bleu_k, bleu_sum / static_cast<double>(held.size()), exact, held.size(),
               ms);

    nlohmann::ordered_json translations = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < std::min<std::size_t>(held.size(), 50); ++i)
        translations.push_back({{"source", join(held[i].source)}, {"target", join(held[i].target)},
                                {"prediction", join(got[i].words)}, {"bleu", scores[i]}});
    const nlohmann::ordered_json metrics = {
        {"steps", step},
        {"steps_planned", c.steps},
        {"finished", !stopped},
        {"steps_this_run", stats.steps},
        {"threads", num_threads()},
        {"parameters", state.net->num_parameters()},
        {"train_seconds", state.train_seconds},
        {"ms_per_step", ms},
        {"first_loss", h.loss.empty() ? NAN : h.loss.front()},
        {"final_loss", h.loss.empty() ? NAN : h.loss.back()},
        {"held_out_loss", h.eval_loss.back()},
        {"bleu", bleu_sum / static_cast<double>(held.size())},
        {"bleu_k", o.bleu_k},
        {"exact", exact},
        {"held_out", held.size()},
        {"eval_steps", h.eval_step},
        {"eval_loss", h.eval_loss},
        {"eval_train_seconds", h.eval_seconds},
        {"translations", translations},
        {"settings", settings_json(c)}};
    write_file_atomic(o.out + "/metrics.json", metrics.dump(2) + "\n", "metrics.json");
    write_loss_plot(o.out + "/loss.svg", h.step, h.loss, h.eval_step, h.eval_loss,
                    fmt::format("Bahdanau attention seq2seq{}", stopped ? fmt::format(", stopped at step {}", step)
                                                                        : std::string()));
    for (std::size_t i = 0; i < o.heatmaps; ++i)
        write_attention_plot(fmt::format("{}/attention_{}.svg", o.out, i + 1), held[i], got[i], scores[i]);
    std::string written = fmt::format("{0}/metrics.json, {0}/loss.svg", o.out);
    for (std::size_t i = 1; i <= o.heatmaps; ++i) written += fmt::format(", {}/attention_{}.svg", o.out, i);
    fmt::print("wrote {}, {}\n", written, checkpoint);
    if (stopped) {
        fmt::print("stopped at step {} of {}; checkpoint in {} (continue with --resume)\n", step, c.steps,
                   checkpoint);
        return stats.interrupted ? 130 : 0;
    }
    return 0;
}

}  // namespace
}  // namespace xgrad::examples::bahdanau

int main(int argc, char** argv) {
    return xgrad::examples::flags::run_main("bahdanau", xgrad::examples::bahdanau::run, argc, argv);
}
