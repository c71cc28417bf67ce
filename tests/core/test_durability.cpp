// Nothing lost: a writer killed at any moment leaves the previous checkpoint loadable.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "helpers.hpp"
#include "core/io/npz.hpp"
#include "file_helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
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

// Whether the stopped process `pid` has a file open in `dir` other than `target`: the
// temporary of a write under way (an unnamed O_TMPFILE shows as "<dir>/#<inode> (deleted)").
bool writing_in(pid_t pid, const fs::path& dir, const fs::path& target) {
    for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
        std::error_code ec;
        const fs::path open = fs::read_symlink(e.path(), ec);
        if (!ec && open.parent_path() == dir && open != target) return true;
    }
    return false;
}

std::vector<std::string> entries(const fs::path& dir) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
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
        // The child rewrites the checkpoint forever; only SIGKILL stops it.
        const pid_t child = stopped_rewriter(target, next, std::chrono::milliseconds(delay_ms(rng)));
        int status = 0;
        if (writing_in(child, dir, target)) ++killed_mid_write;
        REQUIRE(::kill(child, SIGKILL) == 0);
        REQUIRE(::waitpid(child, &status, 0) == child);
        REQUIRE(WIFSIGNALED(status));
        CHECK(WTERMSIG(status) == SIGKILL);

        // Whatever moment the kill hit, the checkpoint is one of the two complete states,
        // never a mixture or a truncated file.
        const NamedTensors loaded = load_npz(target);
        INFO("round " << round);
        CHECK((identical(loaded, previous) || identical(loaded, next)));

        // The next writer succeeds, and leaves nothing but the checkpoint behind: the killed
        // writer's temporary was unnamed, or is swept as the litter of a writer that is gone.
        save_npz(target, previous);
        CHECK(identical(load_npz(target), previous));
        CHECK(entries(dir) == std::vector<std::string>{"ckpt.npz"});
    }
    // The test means something only if some kills really interrupted a write.
    CHECK(killed_mid_write > 0);
    fs::remove_all(dir);
}
