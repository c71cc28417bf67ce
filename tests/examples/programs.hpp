#pragma once
// Running the example programs from a test: each as a child process with its stdout and stderr
// in files, and a fresh folder per test for their --out.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/io/atomic_file.hpp"
#include "core/io/npz.hpp"
#include "helpers.hpp"

extern char** environ;

namespace xgrad::test_programs {

namespace fs = std::filesystem;

// An empty folder of its own for a test, under the temporary directory.
inline std::string fresh_dir(const std::string& name) {
    const fs::path dir = fs::temp_directory_path() / fmt::format("xgrad_test_runs_{}_{}", name, ::getpid());
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir.string();
}

inline void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

inline std::string program(const std::string& name) { return std::string(XGRAD_EXAMPLES_BIN_DIR) + "/" + name; }

// Starts `args` (args[0] is the program) with stdout and stderr going to files.
inline pid_t start(const std::vector<std::string>& args, const std::string& out_file, const std::string& err_file) {
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&files, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&files, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    // SIGINT as the program would get it from a terminal, even if this test runs with it ignored.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t defaults, none;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGINT);
    sigemptyset(&none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int rc = ::posix_spawn(&pid, argv[0], &files, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&files);
    posix_spawnattr_destroy(&attr);
    REQUIRE(rc == 0);
    return pid;
}

// Waits until the running program has printed `marker` to `stdout_file` (it flushes each line):
// true then, false if it ended first.
inline bool wait_until_printed(pid_t pid, const std::string& stdout_file, const std::string& marker) {
    for (;;) {
        if (read_file(stdout_file, "test").find(marker) != std::string::npos) return true;
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG) == pid) return false;
        const timespec pause{0, 10'000'000};
        ::nanosleep(&pause, nullptr);
    }
}

// The exit code, or 128 + the signal that ended it (as a shell reports it).
inline int wait_for(pid_t pid) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0) REQUIRE(errno == EINTR);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct Result {
    int code;
    std::string out, err;
};

// Runs a program to its end in `dir` (its output files go there too).
inline Result run(const std::string& dir, std::vector<std::string> args) {
    args[0] = program(args[0]);
    const std::string out = dir + "/stdout.txt", err = dir + "/stderr.txt";
    const int code = wait_for(start(args, out, err));
    return {code, read_file(out, "test"), read_file(err, "test")};
}

// A seq_train run that takes well under a second.
inline std::vector<std::string> small_run(const std::string& out, std::vector<std::string> more = {},
                                   const std::string& steps = "6") {
    std::vector<std::string> args = {"seq_train", "--steps", steps, "--batch", "8", "--hidden", "16", "--heads", "2",
                                     "--layers", "1", "--ffn", "16", "--max-len", "5", "--held-out", "10",
                                     "--eval-every", "2", "--out", out};
    args.insert(args.end(), more.begin(), more.end());
    return args;
}

#define CHECK_REFUSED(result, flag)                                                                   \
    do {                                                                                              \
        const Result& r_ = (result);                                                                  \
        CHECK(r_.code == 2);                                                                          \
        CHECK_THAT(r_.err, Catch::Contains(flag));                                                    \
        CHECK_THAT(r_.err, Catch::EndsWith("(see --help)\n"));                                        \
        CHECK_THAT(r_.out, !Catch::Contains("step"));                                                 \
    } while (false)

}  // namespace xgrad::test_programs
