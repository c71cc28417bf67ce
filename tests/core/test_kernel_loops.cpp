// core/runtime/kernel_loops.hpp: lane_sum's order is the documented one, whatever form the
// compiler is given to vectorise it.
#include "core/runtime/kernel_loops.hpp"

#include <cstring>
#include <random>
#include <vector>

#include "helpers.hpp"

using namespace xgrad;

namespace {

// The documented order, written plainly: lane l takes j ≡ l mod 8 in increasing j, pairwise after.
template <class A, class F> A eight_lanes(std::size_t n, F f) {
    A acc[8] = {};
    std::size_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (std::size_t l = 0; l < 8; ++l) acc[l] += f(j + l);
    for (std::size_t l = 0; j < n; ++j, ++l) acc[l] += f(j);
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

template <class A> bool same_bits(A a, A b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST_CASE("lane_sum gives the bits of eight plain lanes, float and double, every tail", "[kernel_loops]") {
    std::mt19937 gen(2);
    std::uniform_real_distribution<float> value(-1e3f, 1e3f);
    std::vector<float> a(1100), b(1100);
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = value(gen), b[i] = value(gen) * 1e-3f;
    std::vector<std::size_t> lengths;
    for (std::size_t n = 0; n <= 70; ++n) lengths.push_back(n);
    lengths.push_back(1024);
    lengths.push_back(1099);
    for (std::size_t n : lengths) {
        INFO("n " << n);
        auto dot = [&](std::size_t j) { return a[j] * b[j]; };
        CHECK(same_bits(lane_sum<float>(n, dot), eight_lanes<float>(n, dot)));
        auto wide = [&](std::size_t j) { return static_cast<double>(a[j]) * b[j]; };
        CHECK(same_bits(lane_sum<double>(n, wide), eight_lanes<double>(n, wide)));
    }
}
