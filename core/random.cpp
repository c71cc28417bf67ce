#include "core/random.hpp"

#include <cmath>

namespace xgrad {

double Generator::next_normal() {
    // 1 - u keeps the log argument in (0, 1].
    const double u1 = 1.0 - next_double();
    const double u2 = next_double();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

Generator& default_generator() {
    static Generator gen(0);
    return gen;
}

void manual_seed(std::uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace xgrad
