// Nothing lost: a writer killed at any moment leaves the previous checkpoint loadable.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

#include "helpers.hpp"
#include "core/io/npz.hpp"

using namespace xgrad;
namespace fs = std::filesystem;

namespace {

bool identical(const NamedTensors& a, const NamedTensors& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (a[i].first != b[i].first || a[i].second.shape() != b[i].second.shape() ||
            a[i].second.to_vector<float>() != b[i].second.to_vector<float>())
            return false;
    return true;
}

std::size_t temporaries_in(const fs::path& dir) {
    std::size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.path().filename().string().find(".tmp-") != std::string::npos) ++n;
    return n;
}

}  // namespace

TEST_CASE("a save_npz killed mid-write leaves the previous checkpoint whole", "[durability]") {
    const fs::path dir = fs::temp_directory_path() /
                         ("xgrad-kill-" + std::to_string(::getpid()) + "-" +
                          std::to_string(std::random_device{}()));
    fs::create_directories(dir);
    const std::string target = (dir / "ckpt.npz").string();

    // Two distinguishable checkpoints of 16 MB each, so a write takes long enough to be hit.
    Generator gen(3);
    const NamedTensors previous = {{"w", randn({1 << 22}, kFloat32, gen)}, {"step", tensor({1.0})}};
    const NamedTensors next = {{"w", randn({1 << 22}, kFloat32, gen)}, {"step", tensor({2.0})}};
    save_npz(target, previous);

    std::mt19937 rng(std::random_device{}());
    std::uniform_int_distribution<int> delay_ms(5, 120);
    int killed_mid_write = 0;
    const int rounds = 6;
    for (int round = 0; round < rounds; ++round) {
        const pid_t child = ::fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            // The child rewrites the checkpoint forever; only SIGKILL stops it. _exit on any
            // error so the child never runs the parent's test framework.
            try {
                for (;;) save_npz(target, next);
            } catch (...) {
            }
            ::_exit(3);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
        REQUIRE(::kill(child, SIGKILL) == 0);
        int status = 0;
        REQUIRE(::waitpid(child, &status, 0) == child);
        REQUIRE(WIFSIGNALED(status));
        CHECK(WTERMSIG(status) == SIGKILL);
        // The killed writer's temporary is still there when the kill landed mid-write.
        if (temporaries_in(dir) > 0) ++killed_mid_write;

        // Whatever moment the kill hit, the checkpoint is one of the two complete states,
        // never a mixture or a truncated file.
        const NamedTensors loaded = load_npz(target);
        INFO("round " << round);
        CHECK((identical(loaded, previous) || identical(loaded, next)));

        // Nothing can clean up after SIGKILL: the temporary stays until someone removes it.
        // Remove it, and start the next round from the previous state again.
        for (const auto& e : fs::directory_iterator(dir))
            if (e.path().filename().string().find(".tmp-") != std::string::npos) fs::remove(e.path());
        save_npz(target, previous);
        CHECK(identical(load_npz(target), previous));
    }
    // The test means something only if some kills really interrupted a write.
    CHECK(killed_mid_write > 0);
    fs::remove_all(dir);
}
