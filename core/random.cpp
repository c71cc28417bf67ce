#include "core/random.hpp"

#include <atomic>
#include <cmath>

#include "core/error.hpp"
#include "core/runtime/parallel.hpp"

namespace xgrad {

double Generator::next_normal() {
    // 1 - u keeps the log argument in (0, 1].
    const double u1 = 1.0 - next_double();
    const double u2 = next_double();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

namespace {
std::atomic<std::uint64_t> process_seed{0};
}  // namespace

Generator& default_generator() {
    if (in_parallel_chunk())
        throw Error("default_generator: called inside a parallel_for chunk, where the values drawn would "
                    "depend on the thread count; draw before the loop, or pass a Generator per chunk");
    // Made at the thread's first draw, from the process seed of that moment.
    thread_local Generator gen(process_seed.load());
    return gen;
}

void manual_seed(std::uint64_t seed) {
    Generator& gen = default_generator();  // throws inside a chunk before anything changes
    process_seed.store(seed);
    gen.manual_seed(seed);
}

std::uint64_t initial_seed() { return process_seed.load(); }

}  // namespace xgrad
