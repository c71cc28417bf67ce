// 5. An encoder-decoder Transformer (d2l 11.7) that learns to write numbers given in words as
// digits: "three hundred twelve thousand five" => 312005.
//
// The encoder reads the words (self-attention limited to the real words by valid lengths); the
// decoder writes digits with masked self-attention (each step sees itself and earlier steps)
// and cross-attention from its steps (queries) to the source words (keys), two different
// lengths. Training uses teacher forcing: the decoder reads <bos> and the true digits shifted
// right and predicts each next token. Held-out numbers, never seen in training, are then
// decoded greedily, one token at a time, reusing each decoder block's cache of earlier steps.
//
//   seq2seq [--steps 1000] [--lr 0.003] [--batch 64] [--hidden 64] [--heads 4] [--layers 2]
//           [--digits 6] [--seed 0] [--out out/seq2seq] [--overwrite]
//
// Next: seq_train, a training program with progress, checkpoints and data-parallel runs.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include <xgrad/xgrad.hpp>

#include "common/flags.hpp"
#include "common/interrupt.hpp"
#include "common/out_folder.hpp"
#include "core/runtime/alloc.hpp"
#include "number_words.hpp"

using namespace xgrad;
namespace flags = xgrad::examples::flags;
using number_words::Batch;
using xgrad::examples::prepare_out_folder, xgrad::examples::start_from_flags;

namespace {

struct Config {
    std::int64_t steps = 1000;
    double lr = 3e-3;
    std::size_t batch = 64;
    std::size_t hidden = 64;
    std::size_t heads = 4;
    std::size_t layers = 2;
    int digits = 6;
    double dropout = 0.0;
    std::size_t held_out = 500;  // numbers kept out of training, decoded to measure accuracy
    std::int64_t log_every = 100;
    std::uint64_t seed = 0;
    std::string out = "out/seq2seq";
    bool overwrite = false;
};

const std::vector<std::string> kOutputs = {"loss.svg", "attention.svg"};

// How many numbers of 1 to `digits` digits held_out_numbers() may hold back: a fifth of each length.
std::size_t held_out_capacity(int digits) {
    std::size_t total = 0, of_length = 10;
    for (int len = 1; len <= digits; ++len, of_length = (len == 2 ? 90 : of_length * 10)) total += of_length / 5;
    return total;
}

// Roughly the bytes a run needs, in double so that no product of sizes overflows: parameters
// with their gradients, Adam's moments and copies, and a training step's activations (source
// of at most 16 words, target of digits + 1 tokens; the FFN is 2 x hidden wide). Held-out
// decoding goes in chunks of 250 and needs far less.
double estimated_bytes(const Config& c) {
    const double d = static_cast<double>(c.hidden), f = 2 * d, L = static_cast<double>(c.layers),
                 h = static_cast<double>(c.heads), B = static_cast<double>(c.batch), S = 16,
                 T = static_cast<double>(c.digits) + 1;
    const double params = 64 * d + L * (12 * (d * d + d) + 4 * d * f);
    const double tokens = B * (S + 2 * T);
    const double step = L * (tokens * (20 * d + 2 * f) + 4 * B * h * (S * S + T * T + T * S));
    return 32 * params + 6 * step;
}

/// d2l's EncoderDecoder of a TransformerEncoder and a TransformerDecoder: token embeddings
/// scaled by √hidden plus sinusoidal positions, `layers` blocks each, a Linear head on the decoder.
class Seq2SeqTransformer : public nn::Module {
public:
    Seq2SeqTransformer(std::size_t src_vocab, std::size_t tgt_vocab, const Config& c, Generator& gen)
        : nn::Module("Seq2SeqTransformer") {
        auto options = [&](std::size_t vocab) {
            return nn::TransformerOptions(vocab, c.hidden, 2 * c.hidden, c.heads, c.layers).dropout(c.dropout);
        };
        m_encoder = register_module("encoder", std::make_shared<nn::TransformerEncoder>(options(src_vocab), gen));
        m_decoder = register_module("decoder", std::make_shared<nn::TransformerDecoder>(options(tgt_vocab), gen));
    }

    /// src (B, Ts) int64, src_valid_len (B,) → the decoder's state for it.
    nn::TransformerDecoderState encode(const Tensor& src, const Tensor& src_valid_len) {
        return m_decoder->init_state(m_encoder->forward(src, src_valid_len), src_valid_len);
    }

    /// Teacher forcing: dec_input (B, T) int64 → logits (B, T, tgt_vocab). Each step sees
    /// itself and the earlier ones in train and eval mode alike.
    Tensor decode(const Tensor& dec_input, nn::TransformerDecoderState state) {
        return m_decoder->forward(dec_input, state, AttentionMask::causal()).first;
    }

    /// One decoding step: token (B, 1) → logits (B, 1, tgt_vocab); `state` keeps the steps so far.
    Tensor decode_step(const Tensor& token, nn::TransformerDecoderState& state) {
        return m_decoder->forward(token, state).first;
    }

    std::size_t layers() const { return m_decoder->num_layers(); }
    const nn::TransformerDecoder& decoder() const { return *m_decoder; }

private:
    std::shared_ptr<nn::TransformerEncoder> m_encoder;
    std::shared_ptr<nn::TransformerDecoder> m_decoder;
};

/// Greedy decoding of a batch, `max_steps` tokens at most: the digit strings produced (up to
/// <eos>). The whole batch steps together; a finished row keeps decoding but is not read.
std::vector<std::string> greedy_decode(Seq2SeqTransformer& net, const Batch& b, std::size_t max_steps) {
    const auto& tv = number_words::target_vocab();
    NoGradGuard no_grad;
    nn::TransformerDecoderState state = net.encode(b.src, b.src_valid_len);
    const std::size_t n = b.src.size(0);
    Tensor token = full({n, 1}, double(tv["<bos>"]), kInt64);
    std::vector<std::string> out(n);
    std::vector<bool> done(n, false);
    for (std::size_t step = 0; step < max_steps; ++step) {
        token = argmax(net.decode_step(token, state), -1);  // (n, 1)
        const std::vector<std::int64_t> ids = token.to_vector<std::int64_t>();
        bool all_done = true;
        for (std::size_t i = 0; i < n; ++i) {
            if (ids[i] == tv["<eos>"] || ids[i] == tv["<pad>"] || ids[i] == tv["<bos>"]) done[i] = true;
            if (!done[i]) out[i] += tv.token(ids[i]);
            all_done = all_done && done[i];
        }
        if (all_done) break;
    }
    return out;
}

/// Exact-match accuracy over the held-out numbers, decoded in chunks.
double exact_match(Seq2SeqTransformer& net, const std::vector<std::int64_t>& numbers, int digits,
                   std::vector<std::string>* predictions = nullptr) {
    net.eval();
    std::size_t correct = 0;
    for (std::size_t at = 0; at < numbers.size(); at += 250) {
        const std::vector<std::int64_t> chunk(numbers.begin() + at,
                                              numbers.begin() + std::min(numbers.size(), at + 250));
        const auto got = greedy_decode(net, number_words::make_batch(chunk), std::size_t(digits) + 1);
        for (std::size_t i = 0; i < chunk.size(); ++i) {
            correct += got[i] == std::to_string(chunk[i]);
            if (predictions) predictions->push_back(got[i]);
        }
    }
    net.train();
    return double(correct) / double(numbers.size());
}

void add_flags(CLI::App& app, Config& c) {
    using flags::kMaxCount, flags::kMaxSize, flags::whole;
    app.add_option("--steps", c.steps, "training steps")->check(whole(1, kMaxCount));
    app.add_option("--lr", c.lr, "peak learning rate of Adam, with warm-up and cosine decay")->check(flags::real(0));
    app.add_option("--batch", c.batch, "sequences per step")->check(whole(1, kMaxSize));
    app.add_option("--hidden", c.hidden, "model width")->check(whole(1, kMaxSize));
    app.add_option("--heads", c.heads, "attention heads (must divide --hidden)")->check(whole(1, kMaxSize));
    app.add_option("--layers", c.layers, "encoder and decoder blocks each")->check(whole(1, kMaxSize));
    app.add_option("--digits", c.digits, "numbers have 1 to N digits")->check(whole(1, 6));
    app.add_option("--dropout", c.dropout, "dropout probability")->check(flags::fraction());
    app.add_option("--held-out", c.held_out, "numbers kept out of training and decoded at each report")
        ->check(whole(1, kMaxSize));
    app.add_option("--seed", c.seed, "seed for the initial weights and the training samples")->check(flags::seed());
    app.add_option("--out", c.out, "where loss.svg and attention.svg go");
    app.add_flag("--overwrite", c.overwrite, "replace the loss.svg and attention.svg of an earlier run in --out");
}

int run(int argc, char** argv) {
    Config c;
    CLI::App app("Trains an encoder-decoder Transformer to turn number words into digits\n"
                 "(\"three hundred twelve thousand five\" => 312005), then decodes held-out numbers greedily.",
                 "seq2seq");
    flags::setup(app);
    add_flags(app, c);
    if (const auto exit_code = flags::parse(app, argc, argv)) return *exit_code;
    if (c.hidden % c.heads != 0)
        return flags::refuse(app, fmt::format("--hidden ({}) must be a multiple of --heads ({})", c.hidden, c.heads));
    if (c.held_out > held_out_capacity(c.digits))
        return flags::refuse(app, fmt::format("--held-out {}: numbers of 1 to {} digits (--digits) leave room for at "
                                              "most {} held-out numbers, a fifth of each length", c.held_out,
                                              c.digits, held_out_capacity(c.digits)));
    const double memory = physical_memory_bytes();
    if (memory > 0 && estimated_bytes(c) > memory)
        return flags::refuse(app, fmt::format("this run would need about {} of memory, more than the {} this machine "
                                              "has: make --batch, --hidden or --layers smaller",
                                              format_bytes(estimated_bytes(c)), format_bytes(memory)));
    examples::OutFolder folder;  // locked until the program ends
    try {
        folder = prepare_out_folder(c.out, kOutputs, start_from_flags(false, c.overwrite));
    } catch (const Error& e) {
        return flags::refuse(app, e.what());
    }
    const auto& sv = number_words::source_vocab();
    const auto& tv = number_words::target_vocab();
    manual_seed(c.seed);  // dropout masks
    Generator gen(c.seed);

    // A fixed held-out set, never used for training (at most a fifth of the numbers of each length).
    const std::vector<std::int64_t> held_out = number_words::held_out_numbers(c.held_out, c.digits, 12345);
    const std::set<std::int64_t> held_out_set(held_out.begin(), held_out.end());
    auto training_batch = [&] {
        std::vector<std::int64_t> numbers;
        while (numbers.size() < c.batch) {
            const std::int64_t n = number_words::sample_number(gen, c.digits);
            if (!held_out_set.count(n)) numbers.push_back(n);
        }
        return number_words::make_batch(numbers);
    };

    Seq2SeqTransformer net(sv.size(), tv.size(), c, gen);
    optim::Adam opt(net.parameters(), c.lr);
    optim::WarmupCosineLR schedule(opt, std::min<std::int64_t>(100, c.steps / 10), c.steps, c.lr / 20);
    fmt::print("numbers of 1 to {} digits; {} held out; {} parameters\n", c.digits, held_out.size(),
               net.num_parameters());

    std::vector<double> steps_logged, losses, accs_at, accs;
    std::vector<std::string> predictions;  // of the held-out numbers, at the last evaluation
    double loss_sum = 0, tokens_right = 0, tokens_seen = 0, eval_seconds = 0;
    double plot_loss_sum = 0;  // the loss curve averages over 20 steps, finer than the reports
    int plot_loss_n = 0;
    const auto start = std::chrono::steady_clock::now();
    auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
    examples::stop_on_sigint();
    std::int64_t stopped_at = 0;  // the step Ctrl-C stopped the run after, 0 if it ran to the end
    for (std::int64_t step = 1; step <= c.steps; ++step) {
        const Batch b = training_batch();
        const Tensor logits = net.decode(b.dec_input, net.encode(b.src, b.src_valid_len));
        // Mean over the real target tokens: padding is ignored. The classes go on axis 1, as torch
        // wants them: (B, T, V) → (B, V, T).
        const Tensor loss = nn::cross_entropy(logits.permute({0, 2, 1}), b.label, nn::Reduction::mean, tv["<pad>"]);
        if (!std::isfinite(loss.item<double>()))
            throw Error(fmt::format("the training loss is {} at step {}: the run has diverged (lower --lr)",
                                    loss.item<double>(), step));
        opt.zero_grad();
        loss.backward();
        opt.step();
        schedule.step();

        loss_sum += loss.item<double>();
        plot_loss_sum += loss.item<double>();
        // A Ctrl-C ends the run after this step, which is then reported and evaluated as a last one.
        const bool last = step == c.steps || examples::interrupted();
        if (++plot_loss_n == 20 || last) {
            steps_logged.push_back(step);
            losses.push_back(plot_loss_sum / plot_loss_n);
            plot_loss_sum = plot_loss_n = 0;
        }
        const auto predicted = argmax(logits, -1).to_vector<std::int64_t>();
        const auto labels = b.label.to_vector<std::int64_t>();
        for (std::size_t i = 0; i < labels.size(); ++i) {
            if (labels[i] == tv["<pad>"]) continue;
            tokens_seen += 1;
            tokens_right += predicted[i] == labels[i];
        }
        if (step % c.log_every == 0 || last) {
            const std::int64_t n = step % c.log_every == 0 ? c.log_every : step % c.log_every;
            predictions.clear();
            const double eval_start = seconds();
            const double acc = exact_match(net, held_out, c.digits, &predictions);
            const double t = seconds();
            eval_seconds += t - eval_start;
            fmt::print("step {:5d}/{}  loss {:.4f}  token acc {:5.1f}%  held-out exact {:5.1f}%  {:.1f} s\n", step,
                       c.steps, loss_sum / n, 100 * tokens_right / tokens_seen, 100 * acc, t);
            std::fflush(stdout);
            accs_at.push_back(step);
            accs.push_back(acc);
            loss_sum = tokens_right = tokens_seen = 0;
        }
        if (last && step != c.steps) {
            stopped_at = step;
            fmt::print("interrupted: stopped at step {} of {}; writing the results so far\n", step, c.steps);
            break;
        }
    }
    const double train_seconds = seconds() - eval_seconds;

    const double acc = accs.back();
    // The first 12 held-out numbers, then up to 5 of the later mistakes.
    std::vector<std::size_t> rows, mistakes;
    for (std::size_t i = 0; i < held_out.size(); ++i) {
        if (i < 12) rows.push_back(i);
        else if (mistakes.size() < 5 && predictions[i] != std::to_string(held_out[i])) mistakes.push_back(i);
    }
    std::size_t width = 0;
    for (const auto& list : {rows, mistakes})
        for (std::size_t i : list) width = std::max(width, number_words::join(number_words::spell(held_out[i])).size());
    auto show = [&](std::size_t i) {
        const std::string truth = std::to_string(held_out[i]);
        fmt::print("  {:<{}} => {:<7} truth {:<7} [{}]\n", number_words::join(number_words::spell(held_out[i])), width,
                   predictions[i], truth, predictions[i] == truth ? "ok" : "wrong");
    };
    fmt::print("\nheld-out examples (greedy decoding):\n");
    for (std::size_t i : rows) show(i);
    if (!mistakes.empty()) fmt::print("some of the mistakes:\n");
    for (std::size_t i : mistakes) show(i);
    fmt::print("exact-match accuracy {:.1f}% ({} of {} held-out numbers); {:.1f} s of training, {:.1f} s of "
               "held-out decoding\n",
               100 * acc, static_cast<std::size_t>(std::lround(acc * double(held_out.size()))), held_out.size(),
               train_seconds, eval_seconds);

    // Pictures: the training curve, and the cross-attention of one held-out example.
    svg::LinePlotOptions plot;
    plot.title = stopped_at ? fmt::format("Number words to digits (stopped at step {} of {})", stopped_at, c.steps)
                            : std::string("Number words to digits");
    plot.xlabel = "step";
    plot.ylabel = "training loss";
    plot.y2label = "held-out exact match";
    plot.log_y = true;
    plot.y2lim = {{0, 1}};
    svg::Series acc_series{"held-out exact match", accs_at, accs};
    acc_series.right_axis = true;
    svg::write_file(c.out + "/loss.svg", svg::line_plot({{"training loss", steps_logged, losses}, acc_series}, plot));

    // Teacher-force the model's own output for one example, to read every step's cross-attention.
    // The example with the most words among the first 20 held-out numbers.
    std::size_t pick = 0;
    for (std::size_t i = 1; i < std::min<std::size_t>(20, held_out.size()); ++i)
        if (number_words::spell(held_out[i]).size() > number_words::spell(held_out[pick]).size()) pick = i;
    const std::int64_t number = held_out[pick];
    const Batch one = number_words::make_batch({number});
    std::vector<std::string> words = number_words::spell(number), out_tokens;
    words.push_back("<eos>");
    {
        NoGradGuard no_grad;
        net.eval();
        std::vector<std::int64_t> dec = {tv["<bos>"]};
        for (char ch : predictions[pick]) dec.push_back(tv[std::string(1, ch)]), out_tokens.push_back(std::string(1, ch));
        out_tokens.push_back("<eos>");
        nn::need_attention_weights(net, true);  // the heatmap reads them
        net.decode(from_vector(dec, {1, dec.size()}), net.encode(one.src, one.src_valid_len));
    }
    std::vector<std::vector<Tensor>> panels;
    std::vector<std::vector<std::string>> titles;
    for (std::size_t l = 0; l < net.layers(); ++l) {
        const Tensor w = net.decoder().block(l).attention2()->attention_weights_copy();  // (1, heads, T, Ts)
        panels.emplace_back();
        titles.emplace_back();
        for (long h = 0; h < w.size(1); ++h) {
            panels.back().push_back(squeeze(slice(w, 1, h, h + 1), 1).squeeze(0));
            titles.back().push_back(fmt::format("layer {} head {}", l + 1, h + 1));
        }
    }
    svg::HeatmapOptions heat;
    heat.title = fmt::format("Cross-attention: \"{}\" => {}", number_words::join(number_words::spell(number)),
                             predictions[pick]);
    heat.xlabel = "source words";
    heat.ylabel = "output";
    heat.xticks = words;
    heat.yticks = out_tokens;
    svg::write_file(c.out + "/attention.svg", svg::heatmaps(panels, titles, heat));
    fmt::print("wrote {0}/loss.svg and {0}/attention.svg\n", c.out);
    return stopped_at ? 130 : EXIT_SUCCESS;
}

}  // namespace

int main(int argc, char** argv) { return xgrad::examples::flags::run_main("seq2seq", run, argc, argv); }
