#pragma once
/// Seedable random numbers for initialisation and dropout. A global default generator (seeded
/// with manual_seed, as torch.manual_seed) or explicit Generator objects for independent
/// streams. Same seed, same sequence, on one standard library build.
#include <cstdint>
#include <random>

namespace xgrad {

class Generator {
public:
    explicit Generator(std::uint64_t seed = 5489u) : m_engine(seed) {}
    void manual_seed(std::uint64_t seed) { m_engine.seed(seed); }
    std::mt19937_64& engine() { return m_engine; }
    /// Uniform in [0, 1) with 53 random bits (the same double for float32 and float64
    /// draws, so a seed gives the same values in both precisions up to rounding).
    double next_double() { return static_cast<double>(m_engine() >> 11) * 0x1.0p-53; }
    /// Standard normal (Box-Muller on two uniform draws: portable, unlike
    /// std::normal_distribution, whose algorithm differs between standard libraries).
    double next_normal();

private:
    std::mt19937_64 m_engine;
};

/// The process-wide generator used when none is passed.
Generator& default_generator();
/// Seeds the default generator.
void manual_seed(std::uint64_t seed);

}  // namespace xgrad
