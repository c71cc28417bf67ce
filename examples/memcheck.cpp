// Trains the reverse example for many steps and reports resident memory (RSS) at the start and
// the end: the autograd graph must free itself after every step, so memory stays flat.
//
//   memcheck [--steps 10000] [--warmup 200] [--tolerance 0.05] [--dropout 0.1]
//
// "start" is measured after --warmup steps, once the optimizer state, allocator pools and
// BLAS buffers exist; "end" after the last step. Exits 1 if end > start * (1 + tolerance).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "common/cli.hpp"
#include "common/train.hpp"

using namespace xgrad;
using namespace xgrad::examples;

namespace {

// Resident set size in bytes, from /proc/self/statm (second field, in pages).
double resident_bytes() {
    std::ifstream statm("/proc/self/statm");
    long size = 0, resident = 0;
    statm >> size >> resident;
    return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
    std::int64_t steps = 10000, warmup = 200;
    double tolerance = 0.05, dropout = 0.1;
    std::size_t batch = 64;
    Flags flags("memcheck", "Trains the reverse task and checks that resident memory stays flat.");
    flags.add("steps", steps, "training steps in all");
    flags.add("warmup", warmup, "steps before the start measurement");
    flags.add("tolerance", tolerance, "allowed growth of RSS from start to end (0.05 = 5%)");
    flags.add("dropout", dropout, "dropout of the model");
    flags.add("batch", batch, "sequences per step");
    try {
        if (!flags.parse(argc, argv)) return 0;
        if (warmup < 0 || warmup >= steps)
            throw Error(fmt::format("memcheck: --warmup must be in [0, steps = {}), got {}", steps, warmup));
        TrainConfig config;
        config.task.task = Task::reverse;
        config.model.dropout = dropout;
        config.steps = steps;
        config.batch = batch;
        Trainer trainer(config);
        const double before = resident_bytes();
        double start = before, peak = before;
        StepResult last;
        for (std::int64_t s = 1; s <= steps; ++s) {
            last = trainer.train_step();
            if (s == warmup) start = resident_bytes();
            if (s % 500 == 0 || s == steps) {
                const double now = resident_bytes();
                peak = std::max(peak, now);
                std::printf("step %6lld  loss %.4f  rss %.1f MiB\n", static_cast<long long>(s), last.loss,
                            mib(now));
                std::fflush(stdout);
            }
        }
        const double end = resident_bytes();
        const double growth = (end - start) / start;
        std::printf("memcheck: %lld steps; rss before training %.1f MiB, at step %lld (start) %.1f MiB, "
                    "at the end %.1f MiB, peak %.1f MiB: %+.2f%% (limit %+.2f%%)\n",
                    static_cast<long long>(steps), mib(before), static_cast<long long>(warmup), mib(start),
                    mib(end), mib(peak), 100 * growth, 100 * tolerance);
        if (growth > tolerance) {
            std::printf("memcheck: FAIL: resident memory grew by more than the tolerance\n");
            return 1;
        }
        std::printf("memcheck: OK\n");
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 2;
    }
}
