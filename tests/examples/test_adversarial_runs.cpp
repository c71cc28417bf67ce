// Training runs never destroy earlier runs, and every bad input is refused before any training
// and before --out is touched, naming the flag, file or entry. The second half runs the real
// programs (seq_train, seq2seq, nadaraya_watson) as child processes: the flags, the --out
// folder, --resume, --stop-after and a SIGINT.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/out_folder.hpp"
#include "core/io/atomic_file.hpp"
#include "core/io/npz.hpp"
#include "helpers.hpp"
#include "programs.hpp"
#include "seq_train/train.hpp"
#include "small_config.hpp"

using namespace xgrad;
using namespace xgrad::examples;
using namespace xgrad::test_programs;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kSeqTrainOutputs = {"checkpoint.npz", "metrics.json", "loss.svg", "attention.svg"};

// ---- in-process: the --out folder ----------------------------------------------------------

TEST_CASE("out folder: every kind of unusable path is refused naming --out and the path", "[runs]") {
    const std::string dir = fresh_dir("paths");
    write_text(dir + "/file", "x");
    REQUIRE(::mkfifo((dir + "/fifo").c_str(), 0600) == 0);
    for (Start start : {Start::fresh, Start::overwrite}) {
        CHECK_THROWS_WITH(prepare_out_folder("", kSeqTrainOutputs, start, "checkpoint.npz"),
                          Catch::Contains("--out") && Catch::Contains("expected a folder"));
        CHECK_THROWS_WITH(prepare_out_folder(dir + "/file", kSeqTrainOutputs, start),
                          Catch::Contains("--out '" + dir + "/file'") && Catch::Contains("it is a file"));
        CHECK_THROWS_WITH(prepare_out_folder(dir + "/fifo", kSeqTrainOutputs, start),
                          Catch::Contains("/fifo") && Catch::Contains("a FIFO"));
        CHECK_THROWS_WITH(prepare_out_folder(dir + "/file/sub", kSeqTrainOutputs, start),
                          Catch::Contains("file/sub") && Catch::Contains("cannot create the folder") &&
                              Catch::Contains("Not a directory"));
        // /proc refuses new files and folders even to root, so these hold for any user.
        CHECK_THROWS_WITH(prepare_out_folder("/proc/self", kSeqTrainOutputs, start),
                          Catch::Contains("--out") && Catch::Contains("/proc/self"));
        CHECK_THROWS_WITH(prepare_out_folder("/proc/self/xgrad_out", kSeqTrainOutputs, start),
                          Catch::Contains("--out '/proc/self/xgrad_out'") && Catch::Contains("cannot create"));
    }
    // A read-only folder, where the user is not root (root writes anywhere).
    if (::geteuid() != 0) {
        fs::create_directories(dir + "/ro");
        fs::permissions(dir + "/ro", fs::perms::owner_read | fs::perms::owner_exec);
        CHECK_THROWS_WITH(prepare_out_folder(dir + "/ro", kSeqTrainOutputs, Start::fresh),
                          Catch::Contains("--out") && Catch::Contains("Permission denied"));
        CHECK_THROWS_WITH(prepare_out_folder(dir + "/ro/sub", kSeqTrainOutputs, Start::fresh),
                          Catch::Contains("--out") && Catch::Contains("Permission denied"));
        fs::permissions(dir + "/ro", fs::perms::owner_all);
    }
    // A good path is created with its parents, and nothing is left in it by the check.
    CHECK_NOTHROW(static_cast<void>(prepare_out_folder(dir + "/a/b/c", kSeqTrainOutputs, Start::fresh, "checkpoint.npz")));
    CHECK(fs::is_directory(dir + "/a/b/c"));
    CHECK(fs::is_empty(dir + "/a/b/c"));
    fs::remove_all(dir);
}

TEST_CASE("out folder: an earlier run is refused unless --resume or --overwrite", "[runs]") {
    const std::string dir = fresh_dir("earlier");
    // Any one of the outputs is enough to refuse, and the message names it and both flags.
    for (const std::string& name : kSeqTrainOutputs) {
        DYNAMIC_SECTION(name) {
            const std::string out = dir + "/" + name + "_run";
            fs::create_directories(out);
            write_text(out + "/" + name, "earlier");
            write_text(out + "/notes.txt", "mine");
            CHECK_THROWS_WITH(prepare_out_folder(out, kSeqTrainOutputs, Start::fresh, "checkpoint.npz"),
                              Catch::Contains("already holds an earlier run") && Catch::Contains(name) &&
                                  Catch::Contains("--resume") && Catch::Contains("--overwrite"));
            CHECK(read_file(out + "/" + name, "test") == "earlier");
            // Without a checkpoint to resume from, only --overwrite is offered.
            CHECK_THROWS_WITH(prepare_out_folder(out, kSeqTrainOutputs, Start::fresh),
                              !Catch::Contains("--resume") && Catch::Contains("--overwrite"));
            // --overwrite removes the run's files and nothing else.
            CHECK_NOTHROW(static_cast<void>(prepare_out_folder(out, kSeqTrainOutputs, Start::overwrite, "checkpoint.npz")));
            CHECK_FALSE(fs::exists(out + "/" + name));
            CHECK(read_file(out + "/notes.txt", "test") == "mine");
        }
    }
    fs::remove_all(dir);
}

TEST_CASE("out folder: --resume needs a checkpoint and excludes --overwrite", "[runs]") {
    const std::string dir = fresh_dir("resume");
    CHECK_THROWS_WITH(start_from_flags(true, true), Catch::Contains("--resume") && Catch::Contains("--overwrite"));
    CHECK(start_from_flags(true, false) == Start::resume);
    CHECK(start_from_flags(false, true) == Start::overwrite);
    CHECK(start_from_flags(false, false) == Start::fresh);
    // No checkpoint: refused, and a missing folder is not created for it.
    CHECK_THROWS_WITH(prepare_out_folder(dir + "/none", kSeqTrainOutputs, Start::resume, "checkpoint.npz"),
                      Catch::Contains("--resume") && Catch::Contains(dir + "/none/checkpoint.npz"));
    CHECK_FALSE(fs::exists(dir + "/none"));
    fs::create_directories(dir + "/other");
    write_text(dir + "/other/metrics.json", "{}");
    CHECK_THROWS_WITH(prepare_out_folder(dir + "/other", kSeqTrainOutputs, Start::resume, "checkpoint.npz"),
                      Catch::Contains("found none"));
    CHECK_THROWS_WITH(prepare_out_folder(dir + "/other", {"loss.svg"}, Start::resume),
                      Catch::Contains("--resume") && Catch::Contains("no checkpoint"));
    // With one, the run's other files stay for it to replace.
    write_text(dir + "/other/checkpoint.npz", "x");
    CHECK_NOTHROW(static_cast<void>(prepare_out_folder(dir + "/other", kSeqTrainOutputs, Start::resume, "checkpoint.npz")));
    CHECK(fs::exists(dir + "/other/metrics.json"));
    fs::remove_all(dir);
}

TEST_CASE("out folder: a folder where an output file goes is refused in every mode", "[runs]") {
    const std::string dir = fresh_dir("folder_output");
    write_text(dir + "/checkpoint.npz", "x");
    fs::create_directories(dir + "/metrics.json/inside");
    for (Start start : {Start::fresh, Start::resume, Start::overwrite})
        CHECK_THROWS_WITH(prepare_out_folder(dir, kSeqTrainOutputs, start, "checkpoint.npz"),
                          Catch::Contains(dir + "/metrics.json") && Catch::Contains("a folder"));
    CHECK(fs::exists(dir + "/metrics.json/inside"));
    CHECK(fs::exists(dir + "/checkpoint.npz"));  // --overwrite removed nothing: it refused first
    fs::remove_all(dir);
}

// ---- in-process: sizes, memory, warm-up ------------------------------------------------------

TEST_CASE("memory: a run too large for the machine is refused naming the flags of the largest part", "[runs]") {
    const double budget = 8.0 * (1ull << 30);
    const TrainConfig base;  // seq_train's defaults
    CHECK_NOTHROW(check_memory(base, 1000, budget));
    CHECK(estimate_memory(base, 1000).total() < 1e9);
    constexpr std::size_t big = std::size_t{1} << 20;  // every size flag's maximum
    struct Case {
        const char* name;
        void (*grow)(TrainConfig&, std::size_t&);
        const char* names;
    };
    const Case cases[] = {
        {"batch", [](TrainConfig& c, std::size_t&) { c.batch = big; }, "--batch"},
        {"max_len", [](TrainConfig& c, std::size_t&) { c.task.max_len = big; }, "--max-len"},
        {"held_out", [](TrainConfig&, std::size_t& h) { h = big; }, "--held-out"},
        {"hidden", [](TrainConfig& c, std::size_t&) { c.model.hidden = big, c.model.heads = 1; }, "parameters"},
        {"ffn", [](TrainConfig& c, std::size_t&) { c.model.ffn_hidden = big * 64; }, "--ffn"},
        {"symbols", [](TrainConfig& c, std::size_t&) { c.task.num_symbols = big * 64; }, "--symbols"},
        {"layers", [](TrainConfig& c, std::size_t&) { c.model.layers = big; }, "--layers"},
    };
    for (const Case& k : cases) {
        DYNAMIC_SECTION(k.name) {
            TrainConfig c;
            std::size_t held_out = 1000;
            k.grow(c, held_out);
            const MemoryEstimate m = estimate_memory(c, held_out);
            CHECK(std::isfinite(m.total()));
            CHECK(m.total() > estimate_memory(base, 1000).total());
            CHECK_THROWS_WITH(check_memory(c, held_out, budget),
                              Catch::Contains("memory") && Catch::Contains(k.names) && Catch::Contains("GiB"));
        }
    }
    // Every size at its maximum at once: products of up to five of them, still finite in double.
    TrainConfig all;
    all.batch = all.task.max_len = all.task.num_symbols = all.model.hidden = all.model.ffn_hidden = big;
    all.model.layers = all.model.heads = big;
    CHECK(std::isfinite(estimate_memory(all, big).total()));
    CHECK_THROWS(check_memory(all, big, budget));
    // An unknown amount of memory (0) refuses nothing.
    CHECK_NOTHROW(check_memory(all, big, 0));
}

TEST_CASE("warm-up: the default fits any number of steps", "[runs]") {
    for (std::int64_t steps : {1, 2, 9, 10, 20, 299, 300, 301, 100000}) {
        for (const char* optimizer : {"sgd", "adam", "adamw"}) {
            const std::int64_t w = default_warmup(optimizer, steps);
            CHECK(w >= 0);
            CHECK(w <= steps);
            CHECK(w <= 30);
        }
        CHECK_NOTHROW(TrainState(tiny_config(steps)));
    }
    CHECK(default_warmup("sgd", 300) == 30);
    CHECK(default_warmup("sgd", 20) == 2);
    CHECK(default_warmup("adam", 300) == 0);  // measured: warm-up only delayed Adam here
    CHECK(default_warmup("adamw", 150) == 0);
}

TEST_CASE("TrainState: zero sizes and out-of-range numbers are refused naming the setting", "[runs]") {
    using Set = void (*)(TrainConfig&);
    const std::pair<const char*, Set> bad[] = {
        {"model.hidden", [](TrainConfig& c) { c.model.hidden = 0; }},
        {"model.heads", [](TrainConfig& c) { c.model.heads = 0; }},
        {"model.layers", [](TrainConfig& c) { c.model.layers = 0; }},
        {"model.ffn_hidden", [](TrainConfig& c) { c.model.ffn_hidden = 0; }},
        {"task.max_len", [](TrainConfig& c) { c.task.max_len = 0; }},
        {"task.num_symbols", [](TrainConfig& c) { c.task.num_symbols = 0; }},
        {"lr", [](TrainConfig& c) { c.lr = INFINITY; }},
        {"clip", [](TrainConfig& c) { c.clip = INFINITY; }},
        {"momentum", [](TrainConfig& c) { c.momentum = 1.5; }},
        {"momentum", [](TrainConfig& c) { c.momentum = NAN; }},
        {"weight_decay", [](TrainConfig& c) { c.weight_decay = -1; }},
        {"weight_decay", [](TrainConfig& c) { c.weight_decay = INFINITY; }},
        {"dropout", [](TrainConfig& c) { c.model.dropout = 1; }},
        {"warmup", [](TrainConfig& c) { c.warmup = c.steps + 1; }},
    };
    for (const auto& [name, set] : bad) {
        TrainConfig c = tiny_config(10);
        set(c);
        CHECK_THROWS_WITH(TrainState(c), Catch::Contains(name));
    }
}

// ---- in-process: a diverging run ----------------------------------------------------------

TEST_CASE("train: a diverging loss stops the run with an error naming the step", "[runs]") {
    TrainConfig c = tiny_config(50);
    c.optimizer = "sgd";
    c.lr = 1e30;
    c.clip = 0;
    TrainState state(c);
    const Batch held = held_out_set(c.task, 10, 1);
    const std::unique_ptr<std::FILE, int (*)(std::FILE*)> sink(std::tmpfile(), &std::fclose);
    Progress progress(c.steps, 1, sink.get());
    Replicas one;
    LoopOptions o;
    o.eval_every = 0;
    CHECK_THROWS_WITH(train(state, one, held, progress, o),
                      Catch::Contains("training loss") && Catch::Contains("at step") && Catch::Contains("--lr"));
    CHECK(state.step < c.steps);
    for (double loss : state.history.loss) CHECK(std::isfinite(loss));  // no NaN is recorded
}

// ---- in-process: checkpoints with wrong entries -------------------------------------------

struct SavedRun {
    std::string dir, path;
    TrainConfig config;
    NamedTensors entries;
};

// `steps` training steps of `s`, the progress lines thrown away.
void train_steps(TrainState& s, std::int64_t steps) {
    const Batch held = held_out_set(s.config.task, 10, 1);
    const std::unique_ptr<std::FILE, int (*)(std::FILE*)> sink(std::tmpfile(), &std::fclose);
    Progress progress(s.config.steps, 1, sink.get());
    Replicas one;
    LoopOptions o;
    o.stop_after = steps;
    train(s, one, held, progress, o);
}

SavedRun saved_run(const std::string& name) {
    SavedRun r;
    r.dir = fresh_dir(name);
    r.path = r.dir + "/checkpoint.npz";
    r.config = tiny_config(10);
    TrainState s(r.config);
    train_steps(s, 4);
    save_checkpoint(r.path, s);
    r.entries = load_npz(r.path);
    return r;
}

// The checkpoint with entry `name` replaced by `value`, saved as `file` in the run's folder.
std::string with_entry(const SavedRun& r, const std::string& name, const Tensor& value, const std::string& file) {
    NamedTensors e = r.entries;
    bool found = false;
    for (auto& [n, t] : e)
        if (n == name) t = value, found = true;
    REQUIRE(found);
    const std::string path = r.dir + "/" + file;
    save_npz(path, e);
    return path;
}

TEST_CASE("checkpoint: an entry of the wrong shape is refused naming the file and the entry", "[runs]") {
    const SavedRun r = saved_run("entries");
    TrainState fresh(r.config);
    const auto weights = fresh.model->state_dict().front().second.to_vector<double>();
    // Every scalar of the configuration and the step, given a curve instead of one number.
    int n = 0;
    for (const auto& [name, t] : r.entries) {
        if (name.rfind("config.", 0) != 0 && name != "trainer.step") continue;
        const std::string file = fmt::format("scalar{}.npz", n++);
        const std::string path = with_entry(r, name, zeros({3}, kFloat64), file);
        CHECK_THROWS_WITH(load_checkpoint(path, fresh), Catch::Contains(file) && Catch::Contains("'" + name + "'") &&
                                                            Catch::Contains("one number") && Catch::Contains("(3,)"));
    }
    CHECK(n == 24);  // 23 settings and the step
    // Non-finite, fractional, negative or too large a step.
    for (double step : {std::nan(""), 2.5, -1.0, 11.0}) {
        const std::string path = with_entry(r, "trainer.step", tensor(step, kFloat64), "step.npz");
        CHECK_THROWS_WITH(load_checkpoint(path, fresh), Catch::Contains("step.npz") && Catch::Contains("trainer.step"));
    }
    // A curve of the wrong shape or length.
    CHECK_THROWS_WITH(load_checkpoint(with_entry(r, "history.loss", zeros({2, 2}, kFloat64), "h1.npz"), fresh),
                      Catch::Contains("h1.npz") && Catch::Contains("'history.loss'") && Catch::Contains("1-D"));
    CHECK_THROWS_WITH(load_checkpoint(with_entry(r, "history.token_acc", zeros({3}, kFloat64), "h2.npz"), fresh),
                      Catch::Contains("h2.npz") && Catch::Contains("history.token_acc") &&
                          Catch::Contains("expected 4 values"));
    CHECK_THROWS_WITH(load_checkpoint(with_entry(r, "history.eval_seq_acc", zeros({7}, kFloat64), "h3.npz"), fresh),
                      Catch::Contains("history.eval_seq_acc") && Catch::Contains("one per evaluation"));
    // A weight of the wrong shape: the entry named, with both shapes.
    std::string weight;
    for (const auto& [name, t] : r.entries)
        if (weight.empty() && name.rfind("model.", 0) == 0) weight = name;
    REQUIRE_FALSE(weight.empty());
    CHECK_THROWS_WITH(load_checkpoint(with_entry(r, weight, zeros({1, 1}), "w.npz"), fresh),
                      Catch::Contains("w.npz") && Catch::Contains(weight.substr(6)) && Catch::Contains("(1, 1)"));
    // None of these changed the state.
    CHECK(fresh.step == 0);
    CHECK(fresh.model->state_dict().front().second.to_vector<double>() == weights);
    // And the untouched checkpoint still loads.
    CHECK_NOTHROW(load_checkpoint(r.path, fresh));
    CHECK(fresh.step == 4);
    fs::remove_all(r.dir);
}

TEST_CASE("checkpoint: a schedule refused after the model and optimizer loaded puts both back as they were",
          "[runs]") {
    const SavedRun r = saved_run("rollback");
    TrainState fresh(r.config);
    train_steps(fresh, 1);  // Adam with moments of its own, unlike the checkpoint's
    using test::state_values;
    const auto model = state_values(fresh.model->state_dict()), optimizer = state_values(fresh.optimizer->state_dict()),
               schedule = state_values(fresh.schedule->state_dict());
    REQUIRE(state_values(sub_entries(r.entries, "model")) != model);
    REQUIRE(state_values(sub_entries(r.entries, "optim")) != optimizer);
    // The schedule loads last; one base lr too many for the optimizer's one group is refused.
    const std::string path = with_entry(r, "sched.base_lr", zeros({3}, kFloat64), "sched.npz");
    CHECK_THROWS_WITH(load_checkpoint(path, fresh), Catch::Contains("sched.npz"));
    CHECK(state_values(fresh.model->state_dict()) == model);
    CHECK(state_values(fresh.optimizer->state_dict()) == optimizer);  // its lr too, which the schedule sets
    CHECK(state_values(fresh.schedule->state_dict()) == schedule);
    CHECK(fresh.step == 1);
    fs::remove_all(r.dir);
}

TEST_CASE("checkpoint: a different task or encoding or optimizer is named and not numbered", "[runs]") {
    const SavedRun r = saved_run("names");
    TrainConfig other = r.config;
    other.task.task = Task::sort;
    other.model.pos = PosEncoding::sinusoidal;
    other.optimizer = "adamw";
    other.model.scale_embeddings = true;
    TrainState s(other);
    CHECK_THROWS_WITH(load_checkpoint(r.path, s),
                      Catch::Contains("task (--task): checkpoint reverse, this run sort") &&
                          Catch::Contains("pos (--pos): checkpoint learned, this run sinusoidal") &&
                          Catch::Contains("optimizer (--optimizer): checkpoint adam, this run adamw") &&
                          Catch::Contains("scale_embeddings (--scale-embeddings): checkpoint off, this run on"));
    // A code no program writes is shown as such.
    TrainState same(r.config);
    CHECK_THROWS_WITH(load_checkpoint(with_entry(r, "config.task", tensor(7.0, kFloat64), "code.npz"), same),
                      Catch::Contains("task (--task): checkpoint unknown (7), this run reverse"));
    fs::remove_all(r.dir);
}

}  // namespace

// ---- the programs themselves ---------------------------------------------------------------

namespace {

struct FlagCase {
    std::string flag;
    std::vector<std::string> bad;
};

// Every value refused by every numeric flag: not numbers, not finite, negative, hexadecimal,
// with a space or trailing text, or empty.
const std::vector<std::string> kAlwaysBad = {"nan", "inf", "-inf", "-1", "3abc", "", " 5", "0x10", "1e3x", "--"};
// Refused by every whole-number flag: fractions, exponents and numbers past the flag's range:
// 2^53 + 1 (no longer exact as a double, which the checkpoint stores), 2^62 (once made
// --eval-every overflow into a SIGFPE at the last step), 2^63 and 2^64 (past int64 and uint64).
const std::vector<std::string> kNotWhole = {"1.5", "1e3", "1e300", "9007199254740993", "4611686018427387904",
                                            "9223372036854775808", "18446744073709551616"};

std::vector<FlagCase> numeric_flags(const std::vector<std::string>& whole_from_1,
                                    const std::vector<std::string>& whole_from_0, const std::vector<FlagCase>& reals) {
    std::vector<FlagCase> cases;
    for (const auto& f : whole_from_1) {
        FlagCase c{f, kAlwaysBad};
        c.bad.insert(c.bad.end(), kNotWhole.begin(), kNotWhole.end());
        c.bad.push_back("0");
        cases.push_back(c);
    }
    for (const auto& f : whole_from_0) {
        FlagCase c{f, kAlwaysBad};
        c.bad.insert(c.bad.end(), kNotWhole.begin(), kNotWhole.end());
        cases.push_back(c);
    }
    for (FlagCase c : reals) {
        c.bad.insert(c.bad.end(), kAlwaysBad.begin(), kAlwaysBad.end());
        cases.push_back(c);
    }
    return cases;
}

void check_flags_refused(const std::string& name, const std::vector<FlagCase>& cases) {
    const std::string dir = fresh_dir("flags_" + name);
    const std::string out = dir + "/out";
    for (const FlagCase& c : cases)
        for (const std::string& value : c.bad) {
            INFO(name << " " << c.flag << " '" << value << "'");
            const Result r = run(dir, {name, c.flag, value, "--out", out});
            CHECK_REFUSED(r, name + ": " + c.flag);
            CHECK_FALSE(fs::exists(out));  // refused before --out was touched
        }
    fs::remove_all(dir);
}

}  // namespace

TEST_CASE("seq_train: every numeric flag refuses every bad value before touching --out", "[runs]") {
    check_flags_refused(
        "seq_train",
        numeric_flags({"--steps", "--batch", "--hidden", "--heads", "--layers", "--ffn", "--max-len", "--symbols",
                       "--held-out", "--log-every"},
                      {"--warmup", "--eval-every", "--checkpoint-every", "--stop-after"},
                      {{"--lr", {}}, {"--weight-decay", {}}, {"--clip", {}},
                       {"--dropout", {"1", "1.5", "1e300"}}, {"--momentum", {"1.5", "1e300"}},
                       {"--seed", {"1.5", "1e3", "18446744073709551616"}},
                       {"--target-accuracy", {"1.5", "1.0001", "1e300"}}}));
}

TEST_CASE("seq2seq and nadaraya_watson: every numeric flag refuses every bad value before touching --out",
          "[runs]") {
    check_flags_refused("seq2seq", numeric_flags({"--steps", "--batch", "--hidden", "--heads", "--layers", "--digits",
                                                  "--held-out"},
                                                 {}, {{"--lr", {}}, {"--dropout", {"1"}}, {"--seed", {"1.5"}}}));
    check_flags_refused("nadaraya_watson", numeric_flags({}, {"--epochs"}, {{"--lr", {}}, {"--seed", {"-5"}}}));
}

TEST_CASE("seq_train: flags that clash or need more memory than there is are refused before touching --out",
          "[runs]") {
    const std::string dir = fresh_dir("combinations");
    const std::string out = dir + "/out";
    const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
        {{"--batch", "1048576", "--max-len", "1048576"}, "--batch"},
        {{"--held-out", "1048576", "--max-len", "1048576"}, "--held-out"},
        {{"--hidden", "1048576", "--heads", "1"}, "--hidden"},
        {{"--hidden", "4096", "--heads", "1", "--ffn", "1048576"}, "--ffn"},
        {{"--symbols", "1048576", "--hidden", "65536", "--heads", "1"}, "--symbols"},
        {{"--layers", "1048576"}, "--layers"},
        {{"--hidden", "6", "--heads", "4"}, "--heads"},
        {{"--steps", "20", "--warmup", "30"}, "--warmup"},
        {{"--resume", "--overwrite"}, "--overwrite"},
        {{"--resume"}, "--resume"},
    };
    for (const auto& [flags, named] : cases) {
        std::vector<std::string> args = {"seq_train", "--out", out};
        args.insert(args.end(), flags.begin(), flags.end());
        INFO(fmt::format("{}", fmt::join(flags, " ")));
        const Result r = run(dir, args);
        CHECK_REFUSED(r, named);
        CHECK_FALSE(fs::exists(out));
    }
    // seq2seq: held-out numbers the digits cannot provide, and a model too large.
    CHECK_REFUSED(run(dir, {"seq2seq", "--digits", "1", "--held-out", "3", "--out", out}), "--held-out");
    CHECK_REFUSED(run(dir, {"seq2seq", "--hidden", "1048576", "--heads", "1", "--out", out}), "--hidden");
    CHECK_FALSE(fs::exists(out));
    fs::remove_all(dir);
}

TEST_CASE("seq_train: an unusable --out is refused before training", "[runs]") {
    const std::string dir = fresh_dir("bad_out");
    write_text(dir + "/file", "x");
    REQUIRE(::mkfifo((dir + "/fifo").c_str(), 0600) == 0);
    for (const std::string& out : {dir + "/file", dir + "/fifo", dir + "/file/sub", std::string("/proc/self"),
                                   std::string("/proc/self/sub"), std::string()}) {
        INFO(out);
        for (const std::string& name : {"seq_train", "seq2seq", "nadaraya_watson"})
            CHECK_REFUSED(run(dir, {name, "--out", out}), "--out");
    }
    CHECK(read_file(dir + "/file", "test") == "x");
    fs::remove_all(dir);
}

TEST_CASE("seq_train: a fresh run never replaces an earlier one", "[runs]") {
    const std::string dir = fresh_dir("rerun");
    const std::string out = dir + "/out";
    REQUIRE(run(dir, small_run(out)).code == 0);
    for (const std::string& name : kSeqTrainOutputs) CHECK(fs::is_regular_file(out + "/" + name));
    const std::string checkpoint = read_file(out + "/checkpoint.npz", "test");
    const std::string metrics = read_file(out + "/metrics.json", "test");

    // Again without a flag, with other flags, or with both --resume and --overwrite: refused,
    // and the earlier run's files are as they were.
    for (const auto& more : std::vector<std::vector<std::string>>{{}, {"--seed", "8"}, {"--resume", "--overwrite"}}) {
        const Result r = run(dir, small_run(out, more));
        CHECK_REFUSED(r, "--overwrite");
        CHECK(read_file(out + "/checkpoint.npz", "test") == checkpoint);
        CHECK(read_file(out + "/metrics.json", "test") == metrics);
    }
    const Result again = run(dir, small_run(out));
    CHECK_THAT(again.err, Catch::Contains("--resume to continue it"));

    // --resume of a finished run trains nothing and keeps its step; --overwrite starts over.
    const Result resumed = run(dir, small_run(out, {"--resume"}));
    CHECK(resumed.code == 0);
    CHECK_THAT(resumed.out, Catch::Contains("resumed from") && Catch::Contains("at step 6"));
    CHECK(run(dir, small_run(out, {"--overwrite", "--warmup", "1"}, "4")).code == 0);
    CHECK_THAT(read_file(out + "/metrics.json", "test"), Catch::Contains("\"steps\": 4,"));

    // A resume with other flags says which, by name.
    const Result other = run(dir, small_run(out, {"--resume", "--warmup", "1", "--task", "copy"}, "4"));
    CHECK(other.code == 1);
    CHECK_THAT(other.err, Catch::Contains("checkpoint.npz") && Catch::Contains("task (--task): checkpoint reverse, this run copy"));

    // seq2seq and nadaraya_watson: the same for their pictures, with --overwrite only.
    const std::vector<std::string> s2s = {"seq2seq", "--steps", "2", "--batch", "4", "--hidden", "8", "--heads",
                                          "2", "--layers", "1", "--held-out", "5", "--out", dir + "/s2s"};
    const std::vector<std::string> nw = {"nadaraya_watson", "--epochs", "1", "--out", dir + "/nw"};
    for (const auto& args : {s2s, nw}) {
        REQUIRE(run(dir, args).code == 0);
        const std::string picture = read_file(args.back() + "/attention.svg", "test");
        const Result r = run(dir, args);
        CHECK_REFUSED(r, "--overwrite");
        CHECK_THAT(r.err, !Catch::Contains("--resume"));
        CHECK(read_file(args.back() + "/attention.svg", "test") == picture);
        std::vector<std::string> overwrite = args;
        overwrite.push_back("--overwrite");
        CHECK(run(dir, overwrite).code == 0);
    }
    fs::remove_all(dir);
}

TEST_CASE("seq_train: --steps 20 with the default warm-up runs", "[runs]") {
    const std::string dir = fresh_dir("steps20");
    const Result r = run(dir, {"seq_train", "--steps", "20", "--batch", "8", "--hidden", "16", "--heads", "2",
                               "--layers", "1", "--ffn", "16", "--held-out", "10", "--out", dir + "/out"});
    CHECK(r.code == 0);
    CHECK_THAT(read_file(dir + "/out/metrics.json", "test"), Catch::Contains("\"finished\": true"));
    fs::remove_all(dir);
}

TEST_CASE("seq_train: --stop-after leaves metrics and plots of the partial run", "[runs]") {
    const std::string dir = fresh_dir("stop_after");
    const std::string out = dir + "/out";
    const Result r = run(dir, small_run(out, {"--stop-after", "2"}));
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("stopped at step 2 of 6"));
    const std::string metrics = read_file(out + "/metrics.json", "test");
    CHECK_THAT(metrics, Catch::Contains("\"steps\": 2,") && Catch::Contains("\"steps_planned\": 6,") &&
                            Catch::Contains("\"finished\": false"));
    CHECK_THAT(read_file(out + "/loss.svg", "test"), Catch::Contains("stopped at step 2 of 6"));
    CHECK_THAT(read_file(out + "/attention.svg", "test"), Catch::Contains("<svg"));
    // Continued, the same files describe the whole run.
    CHECK(run(dir, small_run(out, {"--resume"})).code == 0);
    CHECK_THAT(read_file(out + "/metrics.json", "test"),
               Catch::Contains("\"steps\": 6,") && Catch::Contains("\"finished\": true"));
    CHECK_THAT(read_file(out + "/loss.svg", "test"), !Catch::Contains("stopped at step"));
    fs::remove_all(dir);
}

TEST_CASE("seq_train: --target-accuracy reports where it was reached or that it was not", "[runs]") {
    const std::string dir = fresh_dir("target");
    const std::string out = dir + "/out";
    // 100% of held-out tokens after 6 steps of a tiny model: not reached, and the run goes to its end.
    Result r = run(dir, small_run(out, {"--target-accuracy", "1"}));
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("target: 100.00% held-out token accuracy not reached in 6 steps"));
    std::string metrics = read_file(out + "/metrics.json", "test");
    CHECK_THAT(metrics, Catch::Contains("\"target_step\": null") && Catch::Contains("\"finished\": true"));
    // A target the untrained model already meets: reached at the step-0 evaluation, no step run.
    r = run(dir, small_run(out, {"--target-accuracy", "1e-9", "--overwrite"}));
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("reached at step 0 after 0.000 s"));
    CHECK_THAT(r.out, Catch::Contains("stopped at step 0 of 6: --target-accuracy reached"));
    metrics = read_file(out + "/metrics.json", "test");
    CHECK_THAT(metrics, Catch::Contains("\"target_step\": 0,") && Catch::Contains("\"finished\": false") &&
                            Catch::Contains("\"eval_steps\": [") );
    fs::remove_all(dir);
}

TEST_CASE("seq_train: a SIGINT leaves the checkpoint and the metrics and plots of the partial run", "[runs]") {
    const std::string dir = fresh_dir("sigint");
    const std::string out = dir + "/out";
    std::vector<std::string> args = small_run(out, {"--log-every", "1"}, "1000000");
    args[0] = program("seq_train");
    const std::string stdout_file = dir + "/stdout.txt";
    const pid_t pid = start(args, stdout_file, dir + "/stderr.txt");
    // Wait for the first progress line (the handler is installed before the first step), then
    // interrupt. The program flushes each line, so it shows up in the file.
    REQUIRE(wait_until_printed(pid, stdout_file, "\nstep "));
    REQUIRE(::kill(pid, SIGINT) == 0);
    const int code = wait_for(pid);
    CHECK(code == 130);
    const std::string printed = read_file(stdout_file, "test");
    CHECK_THAT(printed, Catch::Contains("stopped at step") && Catch::Contains("continue with --resume"));
    for (const std::string& name : kSeqTrainOutputs) CHECK(fs::is_regular_file(out + "/" + name));
    const std::string metrics = read_file(out + "/metrics.json", "test");
    CHECK_THAT(metrics, Catch::Contains("\"steps_planned\": 1000000,") && Catch::Contains("\"finished\": false"));
    CHECK_THAT(read_file(out + "/loss.svg", "test"), Catch::Contains("stopped at step"));
    // The checkpoint it left resumes (to a run of the same flags).
    TrainConfig c = tiny_config(1000000);
    c.task = TaskSpec{Task::reverse, 5, 10};
    c.seed = TrainConfig().seed;
    c.held_out = 10;
    TrainState state(c);
    CHECK_NOTHROW(load_checkpoint(out + "/checkpoint.npz", state));
    CHECK(state.step >= 1);
    CHECK_THAT(metrics, Catch::Contains(fmt::format("\"steps\": {},", state.step)));
    fs::remove_all(dir);
}

TEST_CASE("seq2seq and nadaraya_watson: a SIGINT still writes the pictures of the partial run", "[runs]") {
    struct Case {
        std::vector<std::string> args;
        const char* started;  // printed once training is under way (the handler is installed)
        std::vector<std::string> outputs;
    };
    const std::string dir = fresh_dir("sigint-others");
    const std::vector<Case> cases = {
        {{"seq2seq", "--steps", "1000000", "--hidden", "16", "--heads", "2", "--layers", "1", "--batch", "8",
          "--held-out", "10", "--out", dir + "/s2s"},
         "\nstep ", {"loss.svg", "attention.svg"}},
        {{"nadaraya_watson", "--epochs", "1000000000", "--out", dir + "/nw"}, "\nepoch 1,",
         {"regression.svg", "attention.svg"}},
    };
    for (const Case& c : cases) {
        INFO(c.args[0]);
        std::vector<std::string> args = c.args;
        args[0] = program(args[0]);
        const std::string stdout_file = dir + "/stdout.txt";
        const pid_t pid = start(args, stdout_file, dir + "/stderr.txt");
        REQUIRE(wait_until_printed(pid, stdout_file, c.started));
        REQUIRE(::kill(pid, SIGINT) == 0);
        CHECK(wait_for(pid) == 130);
        CHECK_THAT(read_file(stdout_file, "test"), Catch::Contains("interrupted: stopped"));
        const std::string out = c.args.back();
        for (const std::string& name : c.outputs) CHECK(fs::is_regular_file(out + "/" + name));
    }
    fs::remove_all(dir);
}
