// Runs seq_train's training loop on the reverse task for many steps and reports resident memory
// (RSS) at the start and the end: the autograd graph must free itself after every step, so
// memory stays flat.
//
//   memcheck [--steps 10000] [--warmup 200] [--tolerance 0.05] [--dropout 0.1] [--batch 64]
//
// "start" is measured after --warmup steps, once the optimizer state, allocator pools and
// BLAS buffers exist; "end" after the last step. Exits 1 if end > start * (1 + tolerance).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "common/flags.hpp"
#include "seq_train/train.hpp"

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
    CLI::App app("Trains the reverse task with seq_train's loop and checks that resident memory stays flat.",
                 "memcheck");
    flags::setup(app);
    app.add_option("--steps", steps, "training steps in all")->check(flags::whole(2, flags::kMaxCount));
    app.add_option("--warmup", warmup, "steps before the start measurement (fewer than --steps)")
        ->check(flags::whole(0, flags::kMaxCount));
    app.add_option("--tolerance", tolerance, "allowed growth of RSS from start to end (0.05 = 5%)")
        ->check(flags::real(0));
    app.add_option("--dropout", dropout, "dropout of the model")->check(flags::fraction());
    app.add_option("--batch", batch, "sequences per step")->check(flags::whole(1, flags::kMaxSize));
    if (const auto exit_code = flags::parse(app, argc, argv)) return *exit_code;
    if (warmup >= steps)
        return flags::refuse(app, fmt::format("--warmup ({}) must be less than --steps ({})", warmup, steps));
    try {
        TrainConfig config;
        config.task.task = Task::reverse;
        config.model.dropout = dropout;
        config.steps = steps;
        config.batch = batch;
        TrainState state(config);
        Replicas one_process;
        const Batch held_out = held_out_set(config.task, 1, config.seed);  // evaluated once, at the last step
        std::FILE* quiet = std::fopen("/dev/null", "w");
        Progress progress(steps, steps, quiet ? quiet : stdout);
        LoopOptions loop;
        loop.eval_every = 0;
        const double before = resident_bytes();
        double start = before, peak = before;
        while (state.step < steps) {
            // Stop at the warm-up, at every 500th step and at the last to measure.
            const std::int64_t next = std::min({state.step < warmup ? warmup : steps, (state.step / 500 + 1) * 500, steps});
            loop.stop_after = next - state.step;
            train(state, one_process, held_out, progress, loop);
            const double now = resident_bytes();
            if (state.step == warmup) start = now;
            if (state.step % 500 != 0 && state.step != steps) continue;
            peak = std::max(peak, now);
            std::printf("step %6lld  loss %.4f  rss %.1f MiB\n", static_cast<long long>(state.step),
                        state.history.loss.back(), mib(now));
            std::fflush(stdout);
        }
        if (quiet) std::fclose(quiet);
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
        std::fprintf(stderr, "memcheck: error: %s\n", e.what());
        return 2;
    }
}
