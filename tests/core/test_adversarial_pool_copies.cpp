// Hostile tests of the copies split over the pool (copy_runs and permuted in ops_shape.cpp:
// reshape, permute, transpose, split, concat, slice, slice's gradient) and of the unary ops
// that evaluate their xtensor expression run by run over it (expression_map in
// ops_elementwise.cpp): sizes at the split thresholds, empty and rank-0 tensors, every dtype,
// nested and concurrent callers, gradients, and memory.
#include <sys/resource.h>

#include <cstdio>
#include <functional>
#include <thread>

#include "core/runtime/parallel.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

namespace {

// The process's address space now, from /proc/self/status, in bytes.
std::size_t address_space_bytes() {
    std::FILE* f = std::fopen("/proc/self/status", "r");
    REQUIRE(f);
    char line[256];
    std::size_t kib = 0;
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "VmSize: %zu kB", &kib) == 1) break;
    std::fclose(f);
    REQUIRE(kib > 0);
    return kib * 1024;
}

}  // namespace

// --- memory: a unary op needs its result and nothing as large beside it ----------------------

TEST_CASE("child: unary ops with their result's room and little more", "[.pool-unary-memory-child]") {
    // 128 MiB of input, and room for one 128 MiB result and 32 MiB more: each op fits, as it
    // did when it evaluated its expression straight into its result.
    const std::size_t n = std::size_t(1) << 24;
    const Tensor x = full({n}, 0.75, kFloat64);
    (void)num_threads();  // the pool's threads and stacks exist before the limit
    {
        Tensor warm = x * 2.0;  // the result's block, then kept in the allocator's cache
    }
    const std::vector<std::pair<const char*, std::function<Tensor()>>> ops{
        {"log", [&] { return log(x); }},         {"sqrt", [&] { return sqrt(x); }},
        {"sin", [&] { return sin(x); }},         {"mul", [&] { return x * 0.5; }},
        {"neg", [&] { return -x; }},             {"rdiv", [&] { return 1.0 / x; }},
        {"pow", [&] { return pow(x, 1.7); }},    {"pow 2", [&] { return pow(x, 2.0); }},
        {"clamp", [&] { return clamp(x, 0.1, 0.5); }},
    };
    struct rlimit saved {};
    REQUIRE(::getrlimit(RLIMIT_AS, &saved) == 0);
    struct rlimit low = saved;
    low.rlim_cur = address_space_bytes() + (std::size_t(32) << 20);
    REQUIRE(::setrlimit(RLIMIT_AS, &low) == 0);
    for (const auto& [name, f] : ops) {
        try {
            const Tensor y = f();
            std::printf("%s -> ok %zu\n", name, y.numel());
        } catch (const Error& e) {
            std::printf("%s -> xgrad::Error %s\n", name, e.what());
        } catch (const std::exception& e) {
            std::printf("%s -> other exception %s\n", name, e.what());
        }
    }
    REQUIRE(::setrlimit(RLIMIT_AS, &saved) == 0);
}

TEST_CASE("unary ops on the pool make no temporary as large as their result", "[pool-copies][alloc]") {
    for (int threads : {1, 2}) {
        const std::string out =
            run_this_binary("XGRAD_NUM_THREADS=" + std::to_string(threads), "[.pool-unary-memory-child]");
        INFO("threads " << threads << "\n" << out);
        for (const char* op : {"log", "sqrt", "sin", "mul", "neg", "rdiv", "pow", "pow 2", "clamp"})
            CHECK_THAT(out, Catch::Contains(std::string(op) + " -> ok 16777216"));
    }
}
