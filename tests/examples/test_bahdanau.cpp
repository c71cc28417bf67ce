// bahdanau: its corpus and d2l's BLEU, and the program run as a user runs it: the files it
// writes, a held-out loss that falls, d2l's translation lines, the same numbers from the same
// seed, a resume that repeats the uninterrupted run bit for bit, and the flags and checkpoints
// it refuses.
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bahdanau/corpus.hpp"
#include "core/io/npz.hpp"
#include "helpers.hpp"
#include "programs.hpp"
#include "seq_train/data.hpp"  // mix_seed

using namespace xgrad;
using namespace xgrad::test_programs;
namespace bah = xgrad::examples::bahdanau;

namespace {

// A bahdanau run of a second or two: a small model, few steps.
std::vector<std::string> tiny_run(const std::string& out, std::vector<std::string> more = {}) {
    std::vector<std::string> args = {"bahdanau", "--steps", "30", "--batch", "16", "--embed", "8", "--hidden", "16",
                                     "--held-out", "20", "--eval-every", "15", "--show", "3", "--heatmaps", "2",
                                     "--lr", "0.01", "--out", out};
    // A flag in `more` replaces the tiny run's own value (CLI11 refuses a flag given twice).
    for (std::size_t m = 0; m < more.size(); ++m) {
        const auto it = std::find(args.begin(), args.end(), more[m]);
        if (it != args.end() && m + 1 < more.size() && more[m + 1].rfind("--", 0) != 0) *(it + 1) = more[++m];
        else args.push_back(more[m]);
    }
    return args;
}

std::string bytes_of(const std::string& path) { return read_file(path, "test"); }

}  // namespace

TEST_CASE("bahdanau's BLEU is d2l's bleu(pred, label, k)", "[bahdanau]") {
    // Values from d2l's bleu in Python (tools/bahdanau_twin.py holds it verbatim).
    CHECK(bah::bleu("va !", "va !", 2) == 1.0);
    CHECK(bah::bleu("il est malade .", "il est calme .", 2) == Approx(0.6580370064762462).epsilon(1e-14));
    CHECK(bah::bleu("je suis chez moi <unk> .", "je suis chez moi .", 2) == Approx(0.8034284189446518).epsilon(1e-14));
    CHECK(bah::bleu("a b c", "a b c d e", 2) == Approx(0.513417119032592).epsilon(1e-14));
    // Where d2l divides by zero (fewer predicted tokens than n), the score is 0.
    CHECK(bah::bleu("", "a b", 2) == 0.0);
    CHECK(bah::bleu("x", "x y", 2) == 0.0);
}

TEST_CASE("bahdanau's corpus: the same pairs as the PyTorch twin, each target word one source word", "[bahdanau]") {
    // tools/bahdanau_twin.py draws these from its own mt19937_64 with the same seeds.
    const std::vector<bah::Pair> held = bah::held_out_pairs(3, examples::mix_seed(0, 21, 0));
    REQUIRE(held.size() == 3);
    CHECK(bah::join(held[0].source) == "the quiet girl finds a big teacher often .");
    CHECK(bah::join(held[0].target) == "spes nia semo ka lomi ona mi trova .");
    CHECK(bah::join(held[1].source) == "a dog calls the red child .");
    CHECK(bah::join(held[1].target) == "taku mi reba ruba ka voka .");
    Generator gen(7);
    for (int i = 0; i < 200; ++i) {
        const bah::Pair p = bah::sample_pair(gen);
        CHECK(p.source.size() == p.target.size());
        CHECK(p.source.size() + 1 <= bah::kLongestSentence);
        CHECK(p.source.back() == ".");
        CHECK(p.target.back() == ".");
    }
    CHECK_THROWS_WITH(bah::held_out_pairs(bah::held_out_capacity() + 1, 0), Catch::Contains("--held-out"));
}

TEST_CASE("bahdanau's batches are d2l's: <eos>, padding, teacher forcing, valid lengths", "[bahdanau]") {
    const bah::Pair p{{"a", "cat", "sees", "the", "dog", "."}, {"miro", "mi", "taku", "ka", "mira", "."}};
    const bah::Batch b = bah::make_batch({p}, 10);
    const bah::Vocab &sv = bah::source_vocab(), &tv = bah::target_vocab();
    CHECK(b.src.shape() == Shape{1, 10});
    CHECK(b.src_valid_len.to_vector<std::int64_t>() == std::vector<std::int64_t>{7});
    CHECK(b.label_valid_len.to_vector<std::int64_t>() == std::vector<std::int64_t>{7});
    const auto src = b.src.to_vector<std::int64_t>(), label = b.label.to_vector<std::int64_t>(),
               dec = b.dec_input.to_vector<std::int64_t>();
    CHECK(sv.token(src[0]) == "a");
    CHECK(sv.token(src[6]) == "<eos>");
    CHECK(sv.token(src[7]) == "<pad>");
    CHECK(tv.token(dec[0]) == "<bos>");
    for (std::size_t j = 1; j < 10; ++j) CHECK(dec[j] == label[j - 1]);
    // Cut at num_steps, <eos> included in what is cut.
    const bah::Batch cut = bah::make_batch({p}, 4);
    CHECK(cut.src_valid_len.to_vector<std::int64_t>() == std::vector<std::int64_t>{4});
    CHECK(sv.token(cut.src.to_vector<std::int64_t>()[3]) == "the");
}

TEST_CASE("bahdanau trains, translates held-out sentences with BLEU and draws the attention", "[bahdanau]") {
    const std::string dir = fresh_dir("bahdanau_files");
    const Result r = run(dir, tiny_run(dir + "/out"));
    INFO(r.err);
    REQUIRE(r.code == 0);
    for (const char* f : {"metrics.json", "loss.svg", "attention_1.svg", "attention_2.svg"})
        CHECK(fs::file_size(dir + "/out/" + f) > 0);
    CHECK(!fs::exists(dir + "/out/attention_3.svg"));
    // d2l's lines: `go . => va !, bleu 1.000`.
    CHECK_THAT(r.out, Catch::Matches("(.|\n)*held-out translations \\(greedy\\):\nthe quiet girl finds a big teacher "
                                     "often \\. => [^\n]*, bleu [01]\\.[0-9]{3}\n(.|\n)*"));
    CHECK_THAT(r.out, Catch::Contains("step 30: held-out loss"));
    const auto m = nlohmann::json::parse(read_file(dir + "/out/metrics.json", "test"));
    const std::vector<double> loss = m["eval_loss"];
    REQUIRE(loss.size() == 3);  // steps 0, 15 and 30
    CHECK(loss.back() < loss.front() - 0.5);
    CHECK(m["steps"] == 30);
    CHECK(m["bleu"].get<double>() >= 0.0);
    CHECK(m["bleu"].get<double>() <= 1.0);
    // The heatmap's columns are the source tokens, its title the translation.
    const std::string svg = read_file(dir + "/out/attention_1.svg", "test");
    CHECK_THAT(svg, Catch::Contains("teacher") && Catch::Contains("&lt;eos&gt;") && Catch::Contains("bleu"));
    CHECK_THAT(read_file(dir + "/out/loss.svg", "test"), Catch::Contains("held-out"));
    fs::remove_all(dir);
}

TEST_CASE("bahdanau gives the same numbers from the same seed, others from another", "[bahdanau]") {
    const std::string dir = fresh_dir("bahdanau_seed");
    const auto losses = [&](const std::string& out, const std::string& seed) {
        const Result r = run(dir, tiny_run(dir + "/" + out, {"--seed", seed, "--steps", "10", "--eval-every", "5"}));
        REQUIRE(r.code == 0);
        return nlohmann::json::parse(read_file(dir + "/" + out + "/metrics.json", "test"))["eval_loss"]
            .get<std::vector<double>>();
    };
    const std::vector<double> a = losses("a", "3"), b = losses("b", "3"), c = losses("c", "4");
    CHECK(a == b);
    CHECK(a != c);
    fs::remove_all(dir);
}

TEST_CASE("bahdanau refuses bad flags before it trains, naming them", "[bahdanau]") {
    const std::string dir = fresh_dir("bahdanau_flags");
    const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
        {{"--batch", "0"}, "--batch: "},
        {{"--dropout", "1"}, "--dropout: "},
        {{"--num-steps", "1"}, "--num-steps: "},
        {{"--held-out", "99999999"}, "--held-out: "},
        {{"--heatmaps", "11"}, "--heatmaps: "},
        {{"--bleu-k", "0"}, "--bleu-k: "},
        {{"--lr", "nan"}, "--lr: "},
        {{"--steps", "5x"}, "--steps: "},
        {{"--batch", "1048576", "--hidden", "4096", "--num-steps", "1000"}, "of memory, more than the"}};
    for (const auto& [flags, named] : cases) {
        INFO(flags[0] << " " << flags[1]);
        std::vector<std::string> args = {"bahdanau"};
        args.insert(args.end(), flags.begin(), flags.end());
        args.insert(args.end(), {"--out", dir + "/out"});
        CHECK_REFUSED(run(dir, args), named);
    }
    const Result more_maps = run(dir, {"bahdanau", "--held-out", "2", "--heatmaps", "3", "--out", dir + "/out"});
    CHECK_REFUSED(more_maps, "--heatmaps (3) must be at most --held-out (2)");
    // A finished run's folder is not replaced without --overwrite.
    REQUIRE(run(dir, tiny_run(dir + "/done", {"--steps", "2"})).code == 0);
    const Result again = run(dir, tiny_run(dir + "/done", {"--steps", "2"}));
    CHECK(again.code == 2);
    CHECK_THAT(again.err, Catch::Contains("--overwrite"));
    CHECK(run(dir, tiny_run(dir + "/done", {"--steps", "2", "--overwrite"})).code == 0);
    fs::remove_all(dir);
}

TEST_CASE("bahdanau stopped and resumed repeats the uninterrupted run bit for bit", "[bahdanau]") {
    const std::string dir = fresh_dir("bahdanau_resume");
    // Dropout on (between the GRU layers and on the attention weights): the default generator's
    // state must travel in the checkpoint, as the training pairs' generator's does.
    const std::vector<std::string> flags = {"--dropout", "0.2"};
    REQUIRE(run(dir, tiny_run(dir + "/whole", flags)).code == 0);
    // 30 steps in three runs: stopped at 7 (between two evaluations: the report evaluates there,
    // the checkpoint's history does not keep it), at 15 (an evaluation step), then to the end.
    auto part = [&](std::vector<std::string> more) {
        more.insert(more.begin(), flags.begin(), flags.end());
        const Result r = run(dir, tiny_run(dir + "/parts", more));
        INFO(r.err);
        REQUIRE(r.code == 0);
        return r;
    };
    CHECK_THAT(part({"--stop-after", "7"}).out, Catch::Contains("stopped at step 7 of 30") &&
                                                    Catch::Contains("continue with --resume"));
    CHECK_THAT(part({"--resume", "--stop-after", "8"}).out,
               Catch::Contains("resumed from " + dir + "/parts/checkpoint.npz at step 7"));
    CHECK_THAT(part({"--resume"}).out, Catch::Contains("resumed from " + dir + "/parts/checkpoint.npz at step 15"));

    const NamedTensors whole = load_npz(dir + "/whole/checkpoint.npz"), parts = load_npz(dir + "/parts/checkpoint.npz");
    REQUIRE(whole.size() == parts.size());
    for (std::size_t i = 0; i < whole.size(); ++i) {
        const std::string& name = whole[i].first;
        INFO(name);
        REQUIRE(parts[i].first == name);
        if (name == "trainer.train_seconds" || name == "history.eval_seconds") continue;  // wall-clock time
        if (whole[i].second.dtype() == kInt64)
            CHECK(parts[i].second.to_vector<std::int64_t>() == whole[i].second.to_vector<std::int64_t>());
        else
            CHECK(parts[i].second.to_vector<double>() == whole[i].second.to_vector<double>());
    }
    // What it holds: every training step's loss, the evaluations, both generators, the model, Adam.
    CHECK(find_entry(whole, "trainer.step").item<std::int64_t>() == 30);
    CHECK(find_entry(whole, "history.loss").numel() == 30);
    CHECK(find_entry(whole, "history.eval_step").to_vector<double>() == std::vector<double>{0, 15, 30});
    for (const char* name : {"rng.data", "rng.default", "model.decoder.rnn.weight_hh_l1", "config.seed"})
        CHECK_NOTHROW(find_entry(whole, name));
    CHECK(std::any_of(whole.begin(), whole.end(), [](const auto& e) { return e.first.rfind("optim.", 0) == 0; }));
    const auto m = [&](const std::string& out) {
        return nlohmann::json::parse(read_file(dir + "/" + out + "/metrics.json", "test"));
    };
    CHECK(m("parts")["eval_loss"] == m("whole")["eval_loss"]);
    CHECK(m("parts")["translations"] == m("whole")["translations"]);
    CHECK(m("parts")["steps_this_run"] == 15);
    fs::remove_all(dir);
}

TEST_CASE("bahdanau refuses to resume with a setting that changes the numbers, naming it", "[bahdanau]") {
    const std::string dir = fresh_dir("bahdanau_settings");
    REQUIRE(run(dir, tiny_run(dir + "/out", {"--stop-after", "2"})).code == 0);
    const std::string before = bytes_of(dir + "/out/checkpoint.npz");
    const Result r = run(dir, tiny_run(dir + "/out", {"--resume", "--lr", "0.02", "--hidden", "32"}));
    CHECK(r.code == 1);
    CHECK_THAT(r.err, Catch::Contains("lr (--lr): checkpoint 0.01, this run 0.02"));
    CHECK_THAT(r.err, Catch::Contains("hidden (--hidden): checkpoint 16, this run 32"));
    // The held-out set decides which pairs train, and the seed every draw.
    const Result held = run(dir, tiny_run(dir + "/out", {"--resume", "--held-out", "21", "--seed", "18446744073709551615"}));
    CHECK(held.code == 1);
    CHECK_THAT(held.err, Catch::Contains("held_out (--held-out): checkpoint 20, this run 21") &&
                             Catch::Contains("seed (--seed): checkpoint 0, this run 18446744073709551615"));
    CHECK(bytes_of(dir + "/out/checkpoint.npz") == before);
    // The flags that change nothing the training computes may change.
    CHECK(run(dir, tiny_run(dir + "/out", {"--resume", "--stop-after", "1", "--eval-every", "7", "--show", "0"})).code ==
          0);
    fs::remove_all(dir);
}

TEST_CASE("bahdanau refuses a truncated, corrupt or missing checkpoint, naming the file", "[bahdanau]") {
    const std::string dir = fresh_dir("bahdanau_bad_checkpoint");
    const std::string out = dir + "/out", checkpoint = out + "/checkpoint.npz";
    REQUIRE(run(dir, tiny_run(out, {"--stop-after", "2"})).code == 0);
    const std::string good = bytes_of(checkpoint);
    const auto resume_refused = [&](const std::string& bytes, const std::string& why) {
        write_text(checkpoint, bytes);
        const Result r = run(dir, tiny_run(out, {"--resume"}));
        CHECK(r.code != 0);
        CHECK(r.code != 130);
        CHECK_THAT(r.err, Catch::Contains(checkpoint) && Catch::Contains(why));
        CHECK(bytes_of(checkpoint) == bytes);  // left as it was
    };
    SECTION("truncated") { resume_refused(good.substr(0, good.size() / 2), "truncated or corrupt"); }
    SECTION("a byte flipped in the weights") {
        std::string bad = good;
        bad[bad.size() / 2] = static_cast<char>(bad[bad.size() / 2] ^ 0x40);
        resume_refused(bad, "checkpoint.npz");
    }
    SECTION("an entry missing") {
        NamedTensors all = load_npz(checkpoint);
        all.erase(std::remove_if(all.begin(), all.end(), [](const auto& e) { return e.first == "rng.default"; }),
                  all.end());
        save_npz(checkpoint, all);
        resume_refused(bytes_of(checkpoint), "entry 'rng.default' is missing (not a bahdanau checkpoint");
    }
    SECTION("a generator state that is not one") {
        NamedTensors all = load_npz(checkpoint);
        for (auto& [name, t] : all)
            if (name == "rng.data") t = zeros_like(t);
        save_npz(checkpoint, all);
        resume_refused(bytes_of(checkpoint), "load checkpoint '" + checkpoint + "'");
    }
    SECTION("none there") {
        fs::remove(checkpoint);
        const Result r = run(dir, tiny_run(out, {"--resume"}));
        CHECK(r.code == 2);
        CHECK_THAT(r.err, Catch::Contains("--resume") && Catch::Contains("checkpoint.npz"));
    }
    fs::remove_all(dir);
}

TEST_CASE("bahdanau: Ctrl-C writes the checkpoint and the results so far, and the run resumes", "[bahdanau]") {
    const std::string dir = fresh_dir("bahdanau_sigint");
    const std::string out = dir + "/out";
    std::vector<std::string> args = tiny_run(out, {"--steps", "1000000", "--log-every", "1", "--eval-every", "0"});
    args[0] = program("bahdanau");
    const std::string stdout_file = dir + "/stdout.txt";
    const pid_t pid = start(args, stdout_file, dir + "/stderr.txt");
    REQUIRE(wait_until_printed(pid, stdout_file, "\nstep "));
    REQUIRE(::kill(pid, SIGINT) == 0);
    CHECK(wait_for(pid) == 130);
    CHECK_THAT(read_file(stdout_file, "test"), Catch::Contains("stopped at step") &&
                                                   Catch::Contains("continue with --resume"));
    const std::int64_t step = find_entry(load_npz(out + "/checkpoint.npz"), "trainer.step").item<std::int64_t>();
    CHECK(step >= 1);
    const auto m = nlohmann::json::parse(read_file(out + "/metrics.json", "test"));
    CHECK(m["finished"] == false);
    CHECK(m["steps"] == step);
    const Result resumed =
        run(dir, tiny_run(out, {"--steps", "1000000", "--eval-every", "0", "--resume", "--stop-after", "1"}));
    INFO(resumed.err);
    CHECK(resumed.code == 0);
    CHECK_THAT(resumed.out, Catch::Contains(fmt::format("at step {}", step)));
    fs::remove_all(dir);
}
