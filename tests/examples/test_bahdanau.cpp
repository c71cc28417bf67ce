// bahdanau: its corpus and d2l's BLEU, and the program run as a user runs it: the files it
// writes, a held-out loss that falls, d2l's translation lines, the same numbers from the same
// seed, and the flags it refuses.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bahdanau/corpus.hpp"
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
