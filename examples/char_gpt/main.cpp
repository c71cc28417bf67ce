// 10. char_gpt: a nanoGPT-style character model. Learns a real text (by default the GPL that
// every Debian machine has; --text for any other) character by character: token and position
// embeddings, pre-LayerNorm causal self-attention blocks, weight tying, AdamW with decay and
// no-decay groups, warm-up and cosine decay, gradient clipping. Writes metrics.json, loss.svg
// (train and validation loss), attention.svg (one head over a validation sample), sample.txt
// and checkpoint.npz to --out, and ends with a sample drawn at --temperature from the --top-k
// most likely characters. --resume continues from the checkpoint bit for bit.
//
// The model is model.cpp, the loop train.cpp, the checkpoint checkpoint.cpp, the drawing of
// text sample.cpp, the data text.cpp; this file reads the flags, sets the run up and reports.
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>
#include <xgrad/xgrad.hpp>

#include "common/flags.hpp"
#include "common/interrupt.hpp"
#include "common/out_folder.hpp"
#include "common/progress.hpp"
#include "core/io/atomic_file.hpp"
#include "sample.hpp"
#include "seq_train/data.hpp"  // mix_seed
#include "text.hpp"
#include "train.hpp"

using namespace xgrad;
using namespace xgrad::examples;

namespace {

struct Options {
    GptConfig config;
    GptLoopOptions loop;
    std::string text = kDefaultText, out = "char_gpt_out", prompt = "\n";
    std::int64_t log_every = 25;
    std::size_t sample_chars = 400, top_k = 20;
    double temperature = 0.8;
    bool resume = false, overwrite = false;
};

// What a run writes to --out; the checkpoint first, so that --resume finds it by that name.
const std::vector<std::string> kOutputs = {"checkpoint.npz", "metrics.json", "loss.svg", "attention.svg",
                                           "sample.txt"};

void add_flags(CLI::App& app, Options& o) {
    using flags::kMaxCount, flags::kMaxSize, flags::whole, flags::real;
    GptConfig& c = o.config;
    app.add_option("--text", o.text, "the text to learn, read as bytes (one character per byte)");
    app.add_option("--steps", c.steps, "training steps")->check(whole(1, kMaxCount));
    app.add_option("--batch", c.batch, "windows of --block characters per step")->check(whole(1, kMaxSize));
    app.add_option("--block", c.model.block, "context length in characters")->check(whole(1, 4096));
    app.add_option("--d-model", c.model.d_model, "width of the model")->check(whole(1, 8192));
    app.add_option("--heads", c.model.heads, "attention heads (must divide --d-model)")->check(whole(1, 1024));
    app.add_option("--layers", c.model.layers, "Transformer blocks")->check(whole(1, 1024));
    app.add_option("--dropout", c.model.dropout, "dropout probability")->check(flags::fraction());
    app.add_option("--lr", c.lr, "peak learning rate, reached after --warmup")->check(real(0));
    app.add_option("--min-lr", c.min_lr, "learning rate at the end of the cosine decay (at most --lr)")
        ->check(real(0));
    app.add_option("--warmup", c.warmup, "linear warm-up steps (at most --steps)")->check(whole(0, kMaxCount));
    app.add_option("--weight-decay", c.weight_decay, "AdamW weight decay of the Linear weights")->check(real(0));
    app.add_option("--beta1", c.beta1, "AdamW beta1")->check(real(0, 0.999999));
    app.add_option("--beta2", c.beta2, "AdamW beta2")->check(real(0, 0.999999));
    app.add_option("--clip", c.clip, "clip the gradient norm to this (0: no clipping)")->check(real(0));
    app.add_option("--seed", c.seed, "seed for initialisation, batches, dropout and the sample")->check(flags::seed());
    app.add_option("--eval-every", o.loop.eval_every, "evaluate both splits every N steps (0: only at the end)")
        ->check(whole(0, kMaxCount));
    app.add_option("--eval-batches", c.eval_batches, "batches per split in an evaluation")->check(whole(1, 10000));
    app.add_option("--log-every", o.log_every, "print a progress line every N steps when stdout is not a terminal")
        ->check(whole(1, kMaxCount));
    app.add_option("--stop-after", o.loop.stop_after, "stop after N steps of this run, with a checkpoint (0: run to "
                   "--steps)")->check(whole(0, kMaxCount));
    app.add_option("--sample-chars", o.sample_chars, "characters to draw at the end (0: none)")
        ->check(whole(0, 100000));
    app.add_option("--temperature", o.temperature, "divides the logits before sampling (below 1: surer)")
        ->check(real(1e-3, 100));
    app.add_option("--top-k", o.top_k, "sample from the k most likely characters only (0: all)")
        ->check(whole(0, 256));
    app.add_option("--prompt", o.prompt, "text the sample continues (its characters must occur in --text)");
    app.add_option("--out", o.out, "output folder");
    app.add_flag("--resume", o.resume, "continue from --out/checkpoint.npz (same flags and text)");
    app.add_flag("--overwrite", o.overwrite,
                 "start afresh in an --out that holds an earlier run, removing its checkpoint and results");
}

void write_loss_plot(const std::string& path, const GptHistory& h, const std::string& title) {
    std::vector<svg::Series> series{{"training loss (batch)", h.step, h.loss, "#9ecae1", "none"},
                                    {"training split", h.eval_step, h.eval_train, "#1f77b4", "none"},
                                    {"validation split", h.eval_step, h.eval_val, "#d62728", "6,3"}};
    svg::LinePlotOptions o;
    o.title = title;
    o.xlabel = "step";
    o.ylabel = "cross-entropy per character (nats)";
    svg::write_file(path, svg::line_plot(series, o));
}

// One head's causal attention over the first characters of the validation split: row i is
// the character at position i, its weights over positions 0..i.
void write_attention_plot(const std::string& path, CharGpt& model, const CharText& text, const Split& split) {
    const std::size_t n = std::min<std::size_t>({model.spec().block, 40, split.val.size()});
    const std::vector<std::int64_t> ids(split.val.begin(), split.val.begin() + static_cast<long>(n));
    {
        NoGradGuard no_grad;
        model.eval();
        nn::need_attention_weights(model, true);  // the heatmap reads them
        model(from_vector(ids, {1, n}));
        nn::need_attention_weights(model, std::nullopt);
        model.train();
    }
    const std::size_t layer = model.spec().layers - 1;
    const Tensor w = model.attention_weights(layer);  // (1, heads, n, n)
    std::vector<std::string> ticks;
    for (const std::int64_t id : ids) ticks.push_back(visible_char(text.vocab[static_cast<std::size_t>(id)]));
    svg::HeatmapOptions o;
    o.title = fmt::format("layer {}, head 1: causal attention over a validation sample", layer + 1);
    o.xlabel = "keys (earlier characters)";
    o.ylabel = "queries (characters)";
    o.xticks = ticks;
    o.yticks = ticks;
    o.vmin = 0.0;
    o.vmax = 1.0;
    const long len = static_cast<long>(n);
    svg::write_file(path, svg::heatmaps({{slice(w, 1, 0, 1).reshape({len, len})}}, {{""}}, o));
}

nlohmann::ordered_json settings_json(const GptState& s) {
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (const GptSetting& setting : gpt_settings(s.config, s.text_checksum))
        out[setting.name] = nlohmann::ordered_json::parse(setting.shown);
    return out;
}

int run(int argc, char** argv) {
    Options o;
    CLI::App app("Trains a nanoGPT-style character model (token and position embeddings, pre-LayerNorm causal\n"
                 "self-attention blocks, weight tying, AdamW with parameter groups, warm-up and cosine decay)\n"
                 "on a text, then draws a sample from it. Writes metrics.json, loss.svg, attention.svg,\n"
                 "sample.txt and checkpoint.npz to --out.",
                 "char_gpt");
    flags::setup(app);
    add_flags(app, o);
    if (const auto exit_code = flags::parse(app, argc, argv)) return *exit_code;
    GptConfig& c = o.config;
    if (c.warmup > c.steps)
        return flags::refuse(app, fmt::format("--warmup ({}) must be at most --steps ({})", c.warmup, c.steps));
    if (c.model.d_model % c.model.heads != 0)
        return flags::refuse(app, fmt::format("--d-model ({}) must be a multiple of --heads ({})", c.model.d_model,
                                              c.model.heads));
    if (c.min_lr > c.lr)
        return flags::refuse(app, fmt::format("--min-lr ({}) must be at most --lr ({})", c.min_lr, c.lr));
    if (o.prompt.empty()) return flags::refuse(app, "--prompt: expected at least one character, got ''");
    // Both splits need a block and its target: the smaller (validation) one a tenth of the text.
    const std::size_t min_chars = 10 * (c.model.block + 2);
    CharText text;
    OutFolder folder;
    try {
        text = read_text(o.text, min_chars);
        for (const char ch : o.prompt)
            if (text.id_of(static_cast<unsigned char>(ch)) < 0)
                throw Error(fmt::format("--prompt: the character '{}' never occurs in '{}', so the model has no id "
                                        "for it", visible_char(static_cast<unsigned char>(ch)), o.text));
        folder = prepare_out_folder(o.out, kOutputs, start_from_flags(o.resume, o.overwrite), kOutputs.front());
    } catch (const Error& e) {
        return flags::refuse(app, e.what());
    }
    const Split split = split_text(text, c.train_fraction);
    const std::string checkpoint = o.out + "/" + kOutputs.front();
    GptState state(c, text);
    if (o.resume) {
        load_gpt_checkpoint(checkpoint, state);
        fmt::print("resumed from {} at step {}\n", checkpoint, state.step);
    }
    const CharGpt::ParameterSplit groups = state.model->decay_split();
    fmt::print("text {}: {} characters, {} distinct; {} to train on, {} to validate\n", o.text, text.ids.size(),
               text.vocab_size(), split.train.size(), split.val.size());
    fmt::print("model: {} layers, {} heads, d_model {}, block {}; {} parameters (the head shares the token "
               "embedding)\n", c.model.layers, c.model.heads, c.model.d_model, c.model.block,
               state.model->num_parameters());
    fmt::print("AdamW lr {} (warm-up {}, cosine to {}), betas ({}, {}); weight decay {} on {} weight matrices, none "
               "on {} biases, LayerNorm weights and embeddings; clip {}; batch {}, {} steps\n",
               c.lr, c.warmup, c.min_lr, c.beta1, c.beta2, c.weight_decay, groups.decay.size(),
               groups.no_decay.size(), c.clip, c.batch, c.steps);
    std::fflush(stdout);

    stop_on_sigint();
    Progress progress(c.steps, o.log_every, stdout);
    const GptLoopStats stats = train_gpt(state, split, progress, o.loop);
    progress.finish();
    save_gpt_checkpoint(checkpoint, state);

    // The sample: its own generator, so drawing it changes nothing a resumed run would draw.
    Generator sample_gen(mix_seed(c.seed, 15, static_cast<std::uint64_t>(state.step)));
    std::vector<std::int64_t> prompt;
    for (const char ch : o.prompt) prompt.push_back(text.id_of(static_cast<unsigned char>(ch)));
    const std::string sample =
        text.decode(sample_gpt(*state.model, prompt, o.sample_chars, o.temperature, o.top_k, sample_gen));
    write_file_atomic(o.out + "/sample.txt", o.prompt + sample, "sample.txt");

    const GptHistory& h = state.history;
    const double ms = stats.steps > 0 ? 1e3 * stats.seconds / static_cast<double>(stats.steps) : 0.0;
    const double val = h.eval_val.empty() ? NAN : h.eval_val.back();
    nlohmann::ordered_json metrics = {
        {"text", o.text},
        {"characters", text.ids.size()},
        {"vocab_size", text.vocab_size()},
        {"parameters", state.model->num_parameters()},
        {"steps", state.step},
        {"steps_planned", c.steps},
        {"finished", state.step >= c.steps},
        {"steps_this_run", stats.steps},
        {"train_seconds", stats.seconds},
        {"ms_per_step", ms},
        {"tokens_per_second", stats.seconds > 0 ? static_cast<double>(stats.tokens) / stats.seconds : 0.0},
        {"threads", num_threads()},
        {"first_loss", h.loss.empty() ? NAN : h.loss.front()},
        {"final_loss", h.loss.empty() ? NAN : h.loss.back()},
        {"val_loss", val},
        {"train_split_loss", h.eval_train.empty() ? NAN : h.eval_train.back()},
        {"eval_steps", h.eval_step},
        {"eval_train_loss", h.eval_train},
        {"eval_val_loss", h.eval_val},
        {"temperature", o.temperature},
        {"top_k", o.top_k},
        {"sample", o.prompt + sample},
        {"settings", settings_json(state)}};
    write_file_atomic(o.out + "/metrics.json", metrics.dump(2) + "\n", "metrics.json");
    const std::string stopped = state.step < c.steps ? fmt::format(", stopped at step {}", state.step) : "";
    write_loss_plot(o.out + "/loss.svg", h,
                    fmt::format("char_gpt: {} layers, {} heads, d_model {}, block {}{}", c.model.layers,
                                c.model.heads, c.model.d_model, c.model.block, stopped));
    write_attention_plot(o.out + "/attention.svg", *state.model, text, split);

    fmt::print("step {}: validation loss {:.4f} (train split {:.4f}); {} steps this run, {:.1f} ms per step\n",
               state.step, val, h.eval_train.empty() ? NAN : h.eval_train.back(), stats.steps, ms);
    if (o.sample_chars > 0)
        fmt::print("sample (temperature {}, top-k {}):\n{}{}\n", o.temperature, o.top_k, o.prompt, sample);
    fmt::print("wrote {0}/metrics.json, {0}/loss.svg, {0}/attention.svg, {0}/sample.txt, {0}/checkpoint.npz\n",
               o.out);
    if (state.step < c.steps) {
        fmt::print("stopped at step {} of {}; checkpoint in {} (continue with --resume)\n", state.step, c.steps,
                   checkpoint);
        return stats.interrupted ? 130 : 0;
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return flags::run_main("char_gpt", run, argc, argv); }
