// The examples' flag checks (examples/common/flags): every kind of bad value is refused before
// anything runs, with a message naming the flag and the value.
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/flags.hpp"
#include "helpers.hpp"

using namespace xgrad::examples;

namespace {

struct Values {
    std::int64_t steps = 600, eval_every = 25;
    std::size_t batch = 64;
    double lr = 0.001, dropout = 0.0;
    std::uint64_t seed = 0;
    std::string task = "reverse";
    bool resume = false;
};

// Flags like seq_train's, bound to `v`.
void add_flags(CLI::App& app, Values& v) {
    flags::setup(app);
    app.add_option("--steps", v.steps, "steps")->check(flags::whole(1, flags::kMaxCount));
    app.add_option("--eval-every", v.eval_every, "eval every")->check(flags::whole(0, flags::kMaxCount));
    app.add_option("--batch", v.batch, "batch")->check(flags::whole(1, flags::kMaxSize));
    app.add_option("--lr", v.lr, "learning rate")->check(flags::real(0));
    app.add_option("--dropout", v.dropout, "dropout")->check(flags::fraction());
    app.add_option("--seed", v.seed, "seed")->check(flags::seed());
    app.add_option("--task", v.task, "the task")->check(CLI::IsMember({"copy", "reverse", "sort"}));
    app.add_flag("--resume", v.resume, "resume");
}

// What `run` writes to the file descriptor `fd` (1: stdout, 2: stderr).
std::string capture(int fd, const std::function<void()>& run) {
    std::FILE* file = std::tmpfile();
    REQUIRE(file);
    std::fflush(nullptr);
    const int saved = dup(fd);
    dup2(fileno(file), fd);
    run();
    std::fflush(nullptr);
    dup2(saved, fd);
    close(saved);
    std::rewind(file);
    std::string text;
    char buf[512];
    while (std::fgets(buf, sizeof buf, file)) text += buf;
    std::fclose(file);
    return text;
}

struct Outcome {
    std::optional<int> exit_code;
    std::string err;  // what parse() printed on stderr
};

// Parses `args` with fresh flags bound to `v`.
Outcome parse(std::vector<const char*> args, Values& v) {
    CLI::App app("does things", "prog");
    add_flags(app, v);
    args.insert(args.begin(), "prog");
    Outcome out;
    out.err = capture(2, [&] { out.exit_code = flags::parse(app, static_cast<int>(args.size()), args.data()); });
    return out;
}

}  // namespace

TEST_CASE("flags: values in range are taken, as `--name value` and `--name=value`") {
    Values v;
    const Outcome out = parse({"--steps=10", "--lr", "3e-3", "--dropout", "0.5", "--seed", "18446744073709551615",
                               "--task", "sort", "--resume", "--eval-every", "9007199254740992"},
                              v);
    CHECK_FALSE(out.exit_code);
    CHECK(out.err.empty());
    CHECK(v.steps == 10);
    CHECK(v.lr == 3e-3);
    CHECK(v.dropout == 0.5);
    CHECK(v.seed == 18446744073709551615u);
    CHECK(v.task == "sort");
    CHECK(v.resume);
    CHECK(v.eval_every == 9007199254740992);
    CHECK(v.batch == 64);  // not given: the default stays
}

TEST_CASE("flags: --help shows each flag with its default and range") {
    Values v;
    CLI::App app("does things", "prog");
    add_flags(app, v);
    const std::string help = app.help();
    CHECK_THAT(help, Catch::Contains("--steps") && Catch::Contains("[1, 9007199254740992]=600") &&
                         Catch::Contains("{copy,reverse,sort}=reverse") && Catch::Contains("[0, 1)") &&
                         Catch::Contains("--help"));
}

TEST_CASE("flags: each kind of bad value is refused, naming the flag and the value") {
    const std::vector<std::pair<const char*, const char*>> bad = {
        {"--steps", "ten"},                    // not a number
        {"--steps", "5x"},                     // trailing text
        {"--steps", "1e3"},                    // a count written as a real number
        {"--steps", "0x10"},                   // hexadecimal
        {"--steps", "0"},                      // zero where a count must be positive
        {"--batch", "-4"},                     // negative (an unsigned flag would wrap it)
        {"--seed", "-1"},                      // likewise for a seed
        {"--steps", "9223372036854775807"},    // past kMaxCount: steps kept as float64 would round
        {"--eval-every", "4611686018427387904"},  // eval_every * 4 would overflow int64
        {"--seed", "18446744073709551616"},    // past 2^64 - 1
        {"--batch", "1048577"},                // past kMaxSize
        {"--lr", "nan"},                       // NaN passes CLI::Range; not here
        {"--lr", "inf"},
        {"--lr", "-0.1"},                      // negative real
        {"--dropout", "1"},                    // a probability that would drop everything
        {"--task", "rotate"},                  // not one of the choices
    };
    for (const auto& [flag, value] : bad) {
        INFO(flag << " " << value);
        Values v;
        const Values defaults;
        const Outcome out = parse({flag, value}, v);
        CHECK(out.exit_code == 2);
        CHECK_THAT(out.err, Catch::StartsWith(std::string("prog: ") + flag + ": ") &&
                                Catch::Contains(value) && Catch::EndsWith("(see --help)\n"));
        CHECK(v.steps == defaults.steps);
        CHECK(v.batch == defaults.batch);
        CHECK(v.seed == defaults.seed);
    }
}

TEST_CASE("flags: unknown flags, missing values and stray words are refused") {
    Values v;
    Outcome out = parse({"--stpes", "3"}, v);
    CHECK(out.exit_code == 2);
    CHECK_THAT(out.err, Catch::Contains("--stpes"));
    out = parse({"--steps"}, v);
    CHECK(out.exit_code == 2);
    CHECK_THAT(out.err, Catch::Contains("--steps"));
    out = parse({"reverse"}, v);
    CHECK(out.exit_code == 2);
    CHECK_THAT(out.err, Catch::Contains("reverse"));
}

TEST_CASE("flags: --help prints the help on stdout and exits with 0") {
    Values v;
    Outcome out;
    const std::string help = capture(1, [&] { out = parse({"--help"}, v); });
    CHECK(out.exit_code == 0);
    CHECK(out.err.empty());
    CHECK_THAT(help, Catch::Contains("does things") && Catch::Contains("--eval-every"));
}
