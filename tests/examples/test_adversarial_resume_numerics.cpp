// Resume with different numerics: every setting that changes a run's numbers is recorded in the
// checkpoint and in metrics.json, and a --resume that changes one is refused, naming the
// setting, its flag and both values. Flags that do not change the numbers (how often to log,
// evaluate or checkpoint, when to stop, how the ranks communicate with one rank) may change,
// and the resumed run is still the uninterrupted one bit for bit.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/autocast.hpp"
#include "core/io/npz.hpp"
#include "core/runtime/dnnl.hpp"
#include "helpers.hpp"
#include "programs.hpp"
#include "seq_train/train.hpp"
#include "small_config.hpp"

using namespace xgrad;
using namespace xgrad::examples;
using namespace xgrad::test_programs;
namespace fs = std::filesystem;

namespace {

// Ten steps with a warm-up of two: a resume lands inside and after it.
TrainConfig base_config() {
    TrainConfig c = tiny_config(10);
    c.warmup = 2;
    c.held_out = 10;
    return c;
}

// A checkpoint of `c` after 2 steps, at `path`.
void save_after_two_steps(const TrainConfig& c, const std::string& path) {
    TrainState s(c);
    const Batch held = held_out_set(c.task, c.held_out, c.seed);
    const std::unique_ptr<std::FILE, int (*)(std::FILE*)> sink(std::tmpfile(), &std::fclose);
    Progress progress(c.steps, 1, sink.get());
    Replicas one;
    LoopOptions o;
    o.stop_after = 2;
    train(s, one, held, progress, o);
    save_checkpoint(path, s);
}

// For each setting, a change of it alone (with what else must change for the config to stay valid).
const std::map<std::string, std::function<void(TrainConfig&)>>& changes() {
    static const std::map<std::string, std::function<void(TrainConfig&)>> m = {
        {"task", [](TrainConfig& c) { c.task.task = Task::sort; }},
        {"max_len", [](TrainConfig& c) { c.task.max_len = 6; }},
        {"symbols", [](TrainConfig& c) { c.task.num_symbols = 7; }},
        {"hidden", [](TrainConfig& c) { c.model.hidden = 8; }},
        {"heads", [](TrainConfig& c) { c.model.heads = 4; }},
        {"layers", [](TrainConfig& c) { c.model.layers = 2; }},
        {"ffn", [](TrainConfig& c) { c.model.ffn_hidden = 32; }},
        {"dropout", [](TrainConfig& c) { c.model.dropout = 0.1; }},
        {"pos", [](TrainConfig& c) { c.model.pos = PosEncoding::sinusoidal; }},
        {"scale_embeddings", [](TrainConfig& c) { c.model.scale_embeddings = true; }},
        {"optimizer", [](TrainConfig& c) { c.optimizer = "adamw"; }},
        {"steps", [](TrainConfig& c) { c.steps = 11; }},
        {"lr", [](TrainConfig& c) { c.lr = 1e-3; }},
        {"batch", [](TrainConfig& c) { c.batch = 16; }},
        {"warmup", [](TrainConfig& c) { c.warmup = 3; }},
        {"momentum", [](TrainConfig& c) { c.momentum = 0.5; }},
        {"weight_decay", [](TrainConfig& c) { c.weight_decay = 0.02; }},
        {"clip", [](TrainConfig& c) { c.clip = 0.5; }},
        {"seed", [](TrainConfig& c) { c.seed = 4; }},
        {"autocast", [](TrainConfig& c) { c.autocast = "bf16"; }},
        {"held_out", [](TrainConfig& c) { c.held_out = 11; }},
        {"ranks", [](TrainConfig& c) { c.ranks = 3; }},
        {"bucket_kb", [](TrainConfig& c) { c.ranks = 2, c.bucket_kb = 64; }},  // see the bucket test
    };
    return m;
}

std::string shown(const TrainConfig& c, const std::string& name) {
    for (const NumericSetting& s : numeric_settings(c))
        if (s.name == name) return s.shown;
    FAIL("no setting " << name);
    return "";
}

// small_run(out) with `flags` ("--flag value" or "--flag"), a flag it already has given the new value.
std::vector<std::string> run_with(const std::string& out, const std::vector<std::string>& flags) {
    std::vector<std::string> args = small_run(out);
    for (std::size_t i = 0; i < flags.size(); ++i) {
        const bool has_value = i + 1 < flags.size() && flags[i + 1].rfind("--", 0) != 0;
        const auto at = std::find(args.begin(), args.end(), flags[i]);
        if (has_value && at != args.end()) {
            *(at + 1) = flags[++i];
            continue;
        }
        args.push_back(flags[i]);
        if (has_value) args.push_back(flags[++i]);
    }
    return args;
}

}  // namespace

TEST_CASE("resume numerics: a change of any setting that changes the numbers is refused, naming it and both values",
          "[resume-numerics]") {
    const std::string dir = fresh_dir("resume_numerics");
    const std::string path = dir + "/checkpoint.npz";
    TrainConfig base = base_config();
    base.ranks = 2, base.bucket_kb = 32;  // so that bucket_kb is recorded
    save_after_two_steps(base, path);
    // Every setting has a change here: a setting added without one fails this test.
    for (const NumericSetting& s : numeric_settings(base)) {
        INFO(s.name);
        CHECK(changes().count(s.name) == 1);
    }
    CHECK(numeric_settings(base).size() == changes().size());
    for (const auto& [name, change] : changes()) {
        DYNAMIC_SECTION(name) {
            TrainConfig other = base;
            change(other);
            REQUIRE(shown(other, name) != shown(base, name));
            TrainState state(other);
            const auto before = state.model->state_dict().front().second.to_vector<double>();
            std::string flag;
            for (const NumericSetting& s : numeric_settings(base))
                if (s.name == name) flag = s.flag;
            CHECK_THROWS_WITH(load_checkpoint(path, state),
                              Catch::Contains(path) && Catch::Contains("change the numbers") &&
                                  Catch::Contains(fmt::format("{} ({}): checkpoint {}, this run {}", name, flag,
                                                              shown(base, name), shown(other, name))));
            CHECK(state.step == 0);  // nothing was loaded
            CHECK(state.model->state_dict().front().second.to_vector<double>() == before);
        }
    }
    // The same settings load.
    TrainState same(base);
    CHECK_NOTHROW(load_checkpoint(path, same));
    CHECK(same.step == 2);
    fs::remove_all(dir);
}

TEST_CASE("resume numerics: seeds past 2^53 are told apart, and every bit of the largest is kept", "[resume-numerics]") {
    const std::string dir = fresh_dir("resume_seed");
    const std::string path = dir + "/checkpoint.npz";
    // 2^53 and 2^53 + 1 are one double: a checkpoint keeping the seed as a double took one for the other.
    TrainConfig c = base_config();
    c.seed = (std::uint64_t{1} << 53) + 1;
    save_after_two_steps(c, path);
    TrainConfig other = c;
    other.seed = std::uint64_t{1} << 53;
    TrainState s(other);
    CHECK_THROWS_WITH(load_checkpoint(path, s), Catch::Contains("seed (--seed): checkpoint 9007199254740993, this "
                                                                "run 9007199254740992"));
    c.seed = ~std::uint64_t{0};
    save_after_two_steps(c, path);
    TrainState largest(c);
    CHECK_NOTHROW(load_checkpoint(path, largest));
    other.seed = c.seed - 1;
    TrainState near(other);
    CHECK_THROWS_WITH(load_checkpoint(path, near), Catch::Contains("checkpoint 18446744073709551615, this run "
                                                                   "18446744073709551614"));
    fs::remove_all(dir);
}

TEST_CASE("resume numerics: with one rank --bucket-kb changes nothing and may change", "[resume-numerics]") {
    const std::string dir = fresh_dir("resume_bucket");
    const std::string path = dir + "/checkpoint.npz";
    TrainConfig c = base_config();
    c.bucket_kb = 32;
    save_after_two_steps(c, path);
    TrainConfig other = c;
    other.bucket_kb = 1024;
    TrainState s(other);
    CHECK_NOTHROW(load_checkpoint(path, s));
    CHECK(shown(c, "bucket_kb") == "0");
    fs::remove_all(dir);
}

TEST_CASE("resume numerics: a checkpoint from before a setting was recorded is refused, naming the flag",
          "[resume-numerics]") {
    const std::string dir = fresh_dir("resume_old");
    const std::string path = dir + "/checkpoint.npz";
    const TrainConfig c = base_config();
    save_after_two_steps(c, path);
    const NamedTensors entries = load_npz(path);
    for (const auto& [entry, flag] : std::vector<std::pair<std::string, std::string>>{
             {"config.autocast", "--autocast"}, {"config.held_out", "--held-out"},
             {"config.ranks", "mpirun -np"}, {"config.bucket_kb", "--bucket-kb"}, {"config.lr", "--lr"}}) {
        INFO(entry);
        NamedTensors old;
        for (const auto& e : entries)
            if (e.first != entry) old.push_back(e);
        const std::string old_path = dir + "/old.npz";
        save_npz(old_path, old);
        TrainState s(c);
        CHECK_THROWS_WITH(load_checkpoint(old_path, s), Catch::Contains(old_path) && Catch::Contains(entry) &&
                                                            Catch::Contains("missing") && Catch::Contains(flag) &&
                                                            Catch::Contains("--overwrite"));
        CHECK(s.step == 0);
    }
    // The seed as a double, as earlier checkpoints kept it.
    NamedTensors old = entries;
    for (auto& [name, t] : old)
        if (name == "config.seed") t = tensor(3.0, kFloat64);
    save_npz(dir + "/old_seed.npz", old);
    TrainState s(c);
    CHECK_THROWS_WITH(load_checkpoint(dir + "/old_seed.npz", s),
                      Catch::Contains("config.seed") && Catch::Contains("int64") && Catch::Contains("float64"));
    fs::remove_all(dir);
}

TEST_CASE("resume numerics: train() refuses a config.autocast the thread does not run", "[resume-numerics]") {
    TrainConfig c = base_config();
    c.autocast = "bf16";
    TrainState s(c);
    const Batch held = held_out_set(c.task, c.held_out, c.seed);
    const std::unique_ptr<std::FILE, int (*)(std::FILE*)> sink(std::tmpfile(), &std::fclose);
    Progress progress(c.steps, 1, sink.get());
    Replicas one;
    CHECK_THROWS_WITH(train(s, one, held, progress, LoopOptions{}),
                      Catch::Contains("config.autocast is 'bf16'") && Catch::Contains("does not autocast"));
    CHECK(s.step == 0);
    c.autocast = "fp16";
    CHECK_THROWS_WITH(TrainState(c), Catch::Contains("autocast") && Catch::Contains("'fp16'"));
    if (!dnnl::available()) return;
    AutocastOptions emulation_allowed;
    emulation_allowed.allow_emulation = true;
    AutocastGuard guard(kBFloat16, emulation_allowed);
    TrainState plain(base_config());
    CHECK_THROWS_WITH(train(plain, one, held, progress, LoopOptions{}),
                      Catch::Contains("config.autocast is 'none'") && Catch::Contains("autocasts to bfloat16"));
}

// ---- the program ---------------------------------------------------------------------------

TEST_CASE("resume numerics: seq_train records every setting in metrics.json and refuses a resume that changes one",
          "[resume-numerics]") {
    const std::string dir = fresh_dir("resume_program");
    const std::string out = dir + "/out";
    REQUIRE(run(dir, small_run(out, {"--stop-after", "2"})).code == 0);
    const std::string metrics = read_file(out + "/metrics.json", "test");
    CHECK_THAT(metrics, Catch::Contains("\"settings\": {") && Catch::Contains("\"autocast\": \"none\"") &&
                            Catch::Contains("\"held_out\": 10") && Catch::Contains("\"seed\": 0") &&
                            Catch::Contains("\"lr\": 0.006") && Catch::Contains("\"ranks\": 1"));
    for (const NumericSetting& s : numeric_settings(TrainConfig{})) CHECK_THAT(metrics, Catch::Contains("\"" + s.name + "\": "));
    const std::string checkpoint = read_file(out + "/checkpoint.npz", "test");
    // A flag of each kind: a choice, a size, a real, the seed, and the two that were not recorded.
    const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
        {{"--held-out", "11"}, "held_out (--held-out): checkpoint 10, this run 11"},
        {{"--optimizer", "sgd", "--lr", "0.006", "--warmup", "0"}, "optimizer (--optimizer): checkpoint adam, this run sgd"},
        {{"--hidden", "32"}, "hidden (--hidden): checkpoint 16, this run 32"},
        {{"--clip", "0.5"}, "clip (--clip): checkpoint 1, this run 0.5"},
        {{"--seed", "1"}, "seed (--seed): checkpoint 0, this run 1"},
    };
    for (const auto& [flags, says] : refused) {
        std::vector<std::string> more = {"--resume"};
        more.insert(more.end(), flags.begin(), flags.end());
        const Result r = run(dir, run_with(out, more));
        INFO(fmt::format("{}", fmt::join(flags, " ")));
        CHECK(r.code == 1);
        CHECK_THAT(r.err, Catch::Contains(says));
        CHECK(read_file(out + "/checkpoint.npz", "test") == checkpoint);  // nothing written
    }
    // --autocast bf16 on a float32 run, where this machine can run it at all.
    if (dnnl::available()) {
        ::setenv("XGRAD_AUTOCAST_ALLOW_EMULATION", "1", 1);
        const Result r = run(dir, small_run(out, {"--resume", "--autocast", "bf16"}));
        ::unsetenv("XGRAD_AUTOCAST_ALLOW_EMULATION");
        CHECK(r.code == 1);
        CHECK_THAT(r.err, Catch::Contains("autocast (--autocast): checkpoint none, this run bf16"));
        CHECK(read_file(out + "/checkpoint.npz", "test") == checkpoint);
    }
    fs::remove_all(dir);
}

TEST_CASE("resume numerics: flags that do not change the numbers may change, and the result is still exact",
          "[resume-numerics]") {
    const std::string dir = fresh_dir("resume_exact");
    REQUIRE(run(dir, small_run(dir + "/whole")).code == 0);
    REQUIRE(run(dir, small_run(dir + "/parts", {"--stop-after", "3"})).code == 0);
    const Result resumed = run(dir, run_with(dir + "/parts", {"--resume", "--eval-every", "3", "--log-every", "2",
                                                               "--checkpoint-every", "1", "--target-accuracy", "1",
                                                               "--bucket-kb", "7", "--no-overlap",
                                                               "--collective-timeout", "9"}));
    REQUIRE(resumed.code == 0);
    const NamedTensors whole = load_npz(dir + "/whole/checkpoint.npz"), parts = load_npz(dir + "/parts/checkpoint.npz");
    REQUIRE(whole.size() == parts.size());
    for (std::size_t i = 0; i < whole.size(); ++i) {
        const std::string& name = whole[i].first;
        if (name.rfind("history.eval", 0) == 0) continue;  // evaluated at other steps: the only difference
        INFO(name);
        CHECK(parts[i].first == name);
        CHECK(parts[i].second.to_vector<double>() == whole[i].second.to_vector<double>());
    }
    fs::remove_all(dir);
}
