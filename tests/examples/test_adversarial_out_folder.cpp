// Two runs, one --out folder: every program that writes --out holds an exclusive lock on it for
// its whole life, taken before it looks in the folder, so that two runs started at once cannot
// both pass the "never replace an earlier run" check and mix their files. A second run is
// refused at once, naming the folder and the first run's process; a lock whose holder was
// killed blocks nothing. In-process first (the lock itself, forks, hostile lock paths), then
// the programs as child processes (every program with --out, two at once, a SIGKILL).
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/out_folder.hpp"
#include "core/io/npz.hpp"
#include "helpers.hpp"
#include "programs.hpp"

using namespace xgrad;
using namespace xgrad::examples;
using namespace xgrad::test_programs;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kOutputs = {"checkpoint.npz", "metrics.json", "loss.svg", "attention.svg"};

std::string lock_file(const std::string& out) { return out + "/" + kOutLockName; }

// What a refusal because of another run says: the folder as given, and the holder's process.
// A macro: a combined matcher refers to its parts, which must outlive it.
#define IN_USE(out, holder)                                                 \
    (Catch::Contains("--out '" + (out) + "' is in use by another run") && \
     Catch::Contains("process " + std::to_string(holder)))

// Ends a forked child at once, without running this process's exit handlers twice.
[[noreturn]] void child_exit(bool ok) { ::_exit(ok ? 0 : 1); }

int child_status(pid_t pid) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0) REQUIRE(errno == EINTR);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

// ---- in-process ---------------------------------------------------------------------------

TEST_CASE("out lock: a held folder is refused in every mode before anything in it is looked at or removed",
          "[out-lock]") {
    const std::string dir = fresh_dir("lock_modes");
    const std::string out = dir + "/out";
    fs::create_directories(out);
    const OutFolder held = lock_out_folder(out);
    REQUIRE(held.locked());
    REQUIRE(fs::is_regular_file(lock_file(out)));
    // Empty: the first run made the folder and has written nothing yet. Not an earlier run: in use.
    for (Start start : {Start::fresh, Start::overwrite})
        CHECK_THROWS_WITH(static_cast<void>(prepare_out_folder(out, kOutputs, start, "checkpoint.npz")),
                          IN_USE(out, ::getpid()) && !Catch::Contains("earlier run"));
    // Holding a run's files: --overwrite removes none of them, --resume is refused the same way.
    for (const std::string& name : kOutputs) write_text(out + "/" + name, "first run");
    for (Start start : {Start::fresh, Start::resume, Start::overwrite})
        CHECK_THROWS_WITH(static_cast<void>(prepare_out_folder(out, kOutputs, start, "checkpoint.npz")),
                          IN_USE(out, ::getpid()));
    for (const std::string& name : kOutputs) CHECK(read_file(out + "/" + name, "test") == "first run");
    // The same folder by other names: relative, through a symbolic link, with a trailing slash
    // or a dot.
    fs::create_directory_symlink(out, dir + "/link");
    const std::string relative = fs::relative(out, fs::current_path()).string();
    for (const std::string& other : {relative, dir + "/link", out + "/", out + "/.", dir + "/../" +
                                         fs::path(dir).filename().string() + "/out"})
        CHECK_THROWS_WITH(static_cast<void>(prepare_out_folder(other, kOutputs, Start::overwrite, "checkpoint.npz")),
                          IN_USE(other, ::getpid()));
    for (const std::string& name : kOutputs) CHECK(read_file(out + "/" + name, "test") == "first run");
    fs::remove_all(dir);
}

TEST_CASE("out lock: the lock file records the holder, is not an earlier run, and goes with the lock",
          "[out-lock]") {
    const std::string dir = fresh_dir("lock_file");
    // A lock file left by a run that was killed (no process holds it): ignored, taken over.
    write_text(lock_file(dir), "seq_train, process 4194304 on host elsewhere\n");
    {
        const OutFolder folder = prepare_out_folder(dir, kOutputs, Start::fresh, "checkpoint.npz");
        CHECK(folder.locked());
        CHECK_THAT(read_file(lock_file(dir), "test"),
                   Catch::Contains("process " + std::to_string(::getpid())) && !Catch::Contains("4194304"));
        // Only the lock file is there: still not an earlier run for a check that takes no lock.
        CHECK_NOTHROW(check_out_folder(dir, kOutputs, Start::fresh, "checkpoint.npz"));
    }
    CHECK_FALSE(fs::exists(lock_file(dir)));
    CHECK(fs::is_empty(dir));
    // Moved, the lock stays held once and is released once.
    OutFolder a = prepare_out_folder(dir, kOutputs, Start::fresh);
    OutFolder b = std::move(a);
    CHECK_FALSE(a.locked());
    CHECK(b.locked());
    CHECK_THROWS_WITH(lock_out_folder(dir), IN_USE(dir, ::getpid()));
    b = OutFolder();
    CHECK_FALSE(fs::exists(lock_file(dir)));
    CHECK_NOTHROW(static_cast<void>(lock_out_folder(dir)));
    fs::remove_all(dir);
}

TEST_CASE("out lock: a holder killed with SIGKILL blocks no later run", "[out-lock]") {
    const std::string dir = fresh_dir("lock_killed");
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        ::close(ready[0]);
        bool ok = false;
        try {
            const OutFolder folder = prepare_out_folder(dir, kOutputs, Start::fresh, "checkpoint.npz");
            ok = ::write(ready[1], "x", 1) == 1;
            for (;;) ::pause();  // until killed: the destructor never runs
        } catch (...) {
        }
        child_exit(ok);
    }
    ::close(ready[1]);
    char byte = 0;
    REQUIRE(::read(ready[0], &byte, 1) == 1);
    ::close(ready[0]);
    CHECK_THROWS_WITH(static_cast<void>(prepare_out_folder(dir, kOutputs, Start::fresh, "checkpoint.npz")),
                      IN_USE(dir, child));
    REQUIRE(::kill(child, SIGKILL) == 0);
    CHECK(child_status(child) == 128 + SIGKILL);
    CHECK(fs::exists(lock_file(dir)));  // left behind, naming the dead process...
    for (Start start : {Start::fresh, Start::overwrite}) {  // ...and in nobody's way
        const OutFolder folder = prepare_out_folder(dir, kOutputs, start, "checkpoint.npz");
        CHECK(folder.locked());
    }
    fs::remove_all(dir);
}

TEST_CASE("out lock: a forked child shares its parent's lock and leaves it to the parent", "[out-lock]") {
    const std::string dir = fresh_dir("lock_fork");
    OutFolder folder = prepare_out_folder(dir, kOutputs, Start::fresh);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        { const OutFolder mine = std::move(folder); }  // the child lets go of its copy
        child_exit(fs::exists(lock_file(dir)));
    }
    CHECK(child_status(child) == 0);
    CHECK(fs::exists(lock_file(dir)));
    CHECK_THROWS_WITH(lock_out_folder(dir), IN_USE(dir, ::getpid()));
    folder = OutFolder();
    CHECK_NOTHROW(static_cast<void>(lock_out_folder(dir)));
    fs::remove_all(dir);
}

TEST_CASE("out lock: a lock path that is not a regular file is refused, not followed or waited on", "[out-lock]") {
    const std::string dir = fresh_dir("lock_hostile");
    const std::string target = dir + "/elsewhere.txt";
    write_text(target, "not yours");
    struct Case {
        const char* name;
        void (*make)(const std::string& lock, const std::string& target);
        const char* says;
    };
    const Case cases[] = {
        {"folder", [](const std::string& lock, const std::string&) { fs::create_directories(lock + "/inside"); },
         "Is a directory"},
        {"symlink", [](const std::string& lock, const std::string& t) { fs::create_symlink(t, lock); },
         "symbolic link"},
        {"dangling symlink", [](const std::string& lock, const std::string& t) { fs::create_symlink(t + ".no", lock); },
         "symbolic link"},
        {"fifo", [](const std::string& lock, const std::string&) { REQUIRE(::mkfifo(lock.c_str(), 0600) == 0); },
         "not a regular file"},
    };
    for (const Case& c : cases) {
        DYNAMIC_SECTION(c.name) {
            const std::string out = dir + "/" + c.name;
            fs::create_directories(out);
            c.make(lock_file(out), target);
            CHECK_THROWS_WITH(static_cast<void>(prepare_out_folder(out, kOutputs, Start::overwrite)),
                              Catch::Contains("--out '" + out + "'") && Catch::Contains(lock_file(out)) &&
                                  Catch::Contains(c.says));
            CHECK(fs::exists(fs::symlink_status(lock_file(out))));  // left as it was
        }
    }
    CHECK(read_file(target, "test") == "not yours");
    CHECK_FALSE(fs::exists(target + ".no"));
    fs::remove_all(dir);
}

TEST_CASE("out lock: check_out_folder, for processes that do not write, neither locks nor removes", "[out-lock]") {
    const std::string dir = fresh_dir("lock_check_only");
    for (const std::string& name : kOutputs) write_text(dir + "/" + name, "first run");
    const OutFolder held = lock_out_folder(dir);
    // The ranks of one data-parallel run check the folder rank 0 has locked, and each other's.
    CHECK_NOTHROW(check_out_folder(dir, kOutputs, Start::overwrite, "checkpoint.npz"));
    CHECK_NOTHROW(check_out_folder(dir, kOutputs, Start::resume, "checkpoint.npz"));
    for (const std::string& name : kOutputs) CHECK(read_file(dir + "/" + name, "test") == "first run");
    // Its other checks are prepare_out_folder's.
    CHECK_THROWS_WITH(check_out_folder(dir, kOutputs, Start::fresh, "checkpoint.npz"),
                      Catch::Contains("already holds an earlier run"));
    CHECK_THROWS_WITH(check_out_folder(dir + "/none", kOutputs, Start::resume, "checkpoint.npz"),
                      Catch::Contains("found none"));
    CHECK_FALSE(fs::exists(dir + "/none"));
    fs::remove_all(dir);
}

// ---- the programs -------------------------------------------------------------------------

namespace {

// A short run of each program that writes --out, and the files it writes.
struct Program {
    std::vector<std::string> args;  // without --out
    std::vector<std::string> outputs;
};

std::vector<Program> every_program() {
    return {{small_run(""), {"checkpoint.npz", "metrics.json", "loss.svg", "attention.svg"}},
            {{"seq2seq", "--steps", "2", "--batch", "4", "--hidden", "8", "--heads", "2",
                               "--layers", "1", "--held-out", "5"}, {"loss.svg", "attention.svg"}},
            {{"nadaraya_watson", "--epochs", "1"}, {"regression.svg", "attention.svg"}},
            {{"autograd_demo"}, {"tanh.dot", "attention.dot"}}};
}

std::vector<std::string> with_out(std::vector<std::string> args, const std::string& out,
                                  std::vector<std::string> more = {}) {
    // small_run("") holds --out "": replaced.
    for (std::size_t i = 0; i + 1 < args.size(); ++i)
        if (args[i] == "--out") args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i) + 2);
    args.insert(args.end(), {"--out", out});
    args.insert(args.end(), more.begin(), more.end());
    return args;
}

}  // namespace

TEST_CASE("out lock: every program with --out is refused while another run holds it, in every mode",
          "[out-lock]") {
    for (const Program& p : every_program()) {
        const std::string& name = p.args.front();
        INFO(name);
        const std::string dir = fresh_dir("lock_" + name);
        const std::string out = dir + "/out";
        fs::create_directories(out);
        for (const std::string& file : p.outputs) write_text(out + "/" + file, "first run");
        fs::create_directory_symlink(out, dir + "/link");
        {
            const OutFolder held = lock_out_folder(out);  // this test is the other run
            std::vector<std::vector<std::string>> modes = {{}, {"--overwrite"}};
            if (name == "seq_train") modes.push_back({"--resume"});
            for (const auto& mode : modes)
                for (const std::string& path : {out, dir + "/link"}) {
                    INFO(fmt::format("{} {}", path, fmt::join(mode, " ")));
                    const Result r = run(dir, with_out(p.args, path, mode));
                    CHECK_REFUSED(r, "--out '" + path + "' is in use by another run");
                    CHECK_THAT(r.err, Catch::Contains("process " + std::to_string(::getpid())));
                }
            for (const std::string& file : p.outputs) CHECK(read_file(out + "/" + file, "test") == "first run");
        }
        // Released: --overwrite replaces the earlier run, and the program leaves no lock file.
        const Result r = run(dir, with_out(p.args, out, {"--overwrite"}));
        CHECK(r.code == 0);
        CHECK_THAT(r.err, !Catch::Contains("in use"));
        CHECK(read_file(out + "/" + p.outputs.back(), "test") != "first run");
        CHECK_FALSE(fs::exists(lock_file(out)));
        fs::remove_all(dir);
    }
}

TEST_CASE("out lock: two runs started at once into one new folder: one trains, the other is refused naming it",
          "[out-lock]") {
    // Long runs (interrupted below), each writing a checkpoint after every step.
    const std::vector<std::vector<std::string>> long_runs = {
        small_run("", {"--log-every", "1", "--checkpoint-every", "1"}, "1000000"),
        {"seq2seq", "--steps", "1000000", "--hidden", "8", "--heads", "2", "--layers", "1", "--batch", "4",
         "--held-out", "5"},
        {"nadaraya_watson", "--epochs", "1000000000"}};
    for (const auto& args : long_runs) {
        const std::string& name = args.front();
        INFO(name);
        const std::string dir = fresh_dir("lock_race_" + name);
        const std::string out = dir + "/new/out";  // neither run finds it: both create it
        std::vector<std::string> argv = with_out(args, out);
        argv[0] = program(name);
        const pid_t pids[2] = {start(argv, dir + "/out0.txt", dir + "/err0.txt"),
                               start(argv, dir + "/out1.txt", dir + "/err1.txt")};
        // The one refused ends at once; the other trains until killed.
        int loser = -1, code = 0;
        while (loser < 0) {
            for (int i = 0; i < 2 && loser < 0; ++i) {
                int status = 0;
                if (::waitpid(pids[i], &status, WNOHANG) == pids[i])
                    loser = i, code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            }
            const timespec pause{0, 5'000'000};
            ::nanosleep(&pause, nullptr);
        }
        const int winner = 1 - loser;
        CHECK(code == 2);
        CHECK_THAT(read_file(dir + fmt::format("/err{}.txt", loser), "test"),
                   IN_USE(out, pids[winner]) && Catch::EndsWith("(see --help)\n"));
        CHECK_THAT(read_file(dir + fmt::format("/out{}.txt", loser), "test"), !Catch::Contains("step"));
        const std::string started = name == "nadaraya_watson" ? "\nepoch 1," : "\nstep ";
        CHECK(wait_until_printed(pids[winner], dir + fmt::format("/out{}.txt", winner), started));
        // seq_train: until its first checkpoint is there (after a step).
        while (name == "seq_train" && !fs::exists(out + "/checkpoint.npz")) {
            int status = 0;
            REQUIRE(::waitpid(pids[winner], &status, WNOHANG) == 0);
            const timespec pause{0, 5'000'000};
            ::nanosleep(&pause, nullptr);
        }
        // Killed: its lock goes with it, and it left the folder to --resume or --overwrite.
        REQUIRE(::kill(pids[winner], SIGKILL) == 0);
        CHECK(wait_for(pids[winner]) == 128 + SIGKILL);
        CHECK(fs::exists(lock_file(out)));
        if (name == "seq_train") {
            const Result resumed = run(dir, with_out(args, out, {"--resume", "--stop-after", "1"}));
            CHECK(resumed.code == 0);
            CHECK_THAT(resumed.out, Catch::Contains("resumed from"));
            CHECK_REFUSED(run(dir, with_out(args, out)), "already holds an earlier run");
        }
        std::vector<std::string> again = with_out(args, out, {"--overwrite"});
        if (name == "seq_train") again = with_out(small_run(""), out, {"--overwrite"});
        else if (name == "seq2seq") again[2] = "2";
        else again[2] = "1";
        const Result r = run(dir, again);
        CHECK(r.code == 0);
        CHECK_FALSE(fs::exists(lock_file(out)));
        fs::remove_all(dir);
    }
}
