#pragma once
// What the file tests share: whole-file reads and writes, and a writer caught mid-save.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "core/io/npz.hpp"

namespace xgrad::test {

inline std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void spit(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

/// While alive, writes past `bytes` fail with EFBIG: a file-size limit (which binds root too)
/// stands in for a full disk, with SIGXFSZ ignored so the write returns instead of killing us.
class FileSizeLimit {
public:
    explicit FileSizeLimit(rlim_t bytes) {
        REQUIRE(::getrlimit(RLIMIT_FSIZE, &m_saved) == 0);
        m_handler = std::signal(SIGXFSZ, SIG_IGN);
        struct rlimit low = m_saved;
        low.rlim_cur = bytes;
        REQUIRE(::setrlimit(RLIMIT_FSIZE, &low) == 0);
    }
    ~FileSizeLimit() {
        ::setrlimit(RLIMIT_FSIZE, &m_saved);
        std::signal(SIGXFSZ, m_handler);
    }
    FileSizeLimit(const FileSizeLimit&) = delete;
    FileSizeLimit& operator=(const FileSizeLimit&) = delete;

private:
    struct rlimit m_saved {};
    void (*m_handler)(int) = SIG_DFL;
};

/// Forks a child that saves `arrays` to `target` over and over, lets it run for `delay`, and
/// stops it (SIGSTOP), so what it has open is the state a kill would land on. The caller kills
/// and reaps it. The child _exits on any error, never running the parent's test framework.
inline pid_t stopped_rewriter(const std::string& target, const NamedTensors& arrays,
                              std::chrono::milliseconds delay) {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        try {
            for (;;) save_npz(target, arrays);
        } catch (...) {
        }
        ::_exit(3);
    }
    std::this_thread::sleep_for(delay);
    REQUIRE(::kill(child, SIGSTOP) == 0);
    int status = 0;
    REQUIRE(::waitpid(child, &status, WUNTRACED) == child);
    REQUIRE(WIFSTOPPED(status));
    return child;
}

}  // namespace xgrad::test
