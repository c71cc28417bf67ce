#pragma once
/// Seedable random numbers for initialisation and dropout: a default generator per thread
/// (seeded with manual_seed, as torch.manual_seed) or explicit Generator objects for
/// independent streams. Same seed, same sequence, on every build: the engine is the standard's
/// mt19937_64 (core/mt19937_64.hpp), whose sequence the C++ standard fixes.
///
/// Threads. torch has one default generator behind a mutex, so two threads that draw from it
/// get values that depend on how their draws interleave. xgrad gives every thread its own
/// default generator instead, so a thread's draws depend only on its seed and on its own
/// earlier draws: two models trained on two threads get exactly what they would get trained
/// one after the other, each from the same seed.
///
/// - manual_seed(s) reseeds the calling thread's default generator, and makes s the process
///   seed (initial_seed()).
/// - A thread's default generator starts from the process seed at the thread's first draw
///   (0 if manual_seed was never called). Call manual_seed before starting threads, or on
///   each thread: a manual_seed on one thread does not reach a generator another thread has
///   already drawn from.
/// - Threads that start from the same seed draw the same values. For different streams (say
///   dropout masks per data-parallel replica), seed each thread differently.
/// - Inside a parallel_for chunk (core/runtime/parallel.hpp) default_generator() throws:
///   chunks run on pool threads, each with its own generator, so the values drawn would
///   depend on the thread count. Draw before the loop.
/// - A Generator object is not synchronised: one shared between threads must be guarded by
///   its users (a module built with an explicit Generator draws from it in every forward).
#include <cstdint>

#include "core/mt19937_64.hpp"

namespace xgrad {

class Tensor;

class Generator {
public:
    explicit Generator(std::uint64_t seed = 5489u) : m_engine(seed) {}
    void manual_seed(std::uint64_t seed) { m_engine.seed(seed); }
    /// The engine: std::mt19937_64's sequence, plus a bulk fill() (core/mt19937_64.hpp).
    Mt19937_64& engine() { return m_engine; }
    /// Uniform in [0, 1) with 53 random bits (the same double for float32 and float64
    /// draws, so a seed gives the same values in both precisions up to rounding).
    double next_double() { return static_cast<double>(m_engine() >> 11) * 0x1.0p-53; }
    /// Standard normal (Box-Muller on two uniform draws: portable, unlike
    /// std::normal_distribution, whose algorithm differs between standard libraries).
    double next_normal();

    /// The generator's whole state, as torch's Generator.get_state(): a 1-D int64 tensor (it
    /// goes into a state_dict or an .npz checkpoint like any other entry), holding a format
    /// tag, the engine's state words and a checksum. set_state(get_state()) makes the
    /// generator draw from there exactly the values it drew after get_state(). The words are
    /// the numbers libstdc++ writes for its std::mt19937_64 (Mt19937_64::words()), so a state
    /// moves between builds and machines, as a seed's sequence does.
    Tensor get_state() const;
    /// Restores a get_state(). Refuses (xgrad::Error, before anything changes) anything
    /// get_state() did not make: another dtype or shape, another length, an unknown format
    /// tag, words that do not match the checksum, or a position past the state words.
    void set_state(const Tensor& state);

private:
    Mt19937_64 m_engine;
};

/// The calling thread's default generator, used when no Generator is passed (see above). The
/// reference is valid while the thread runs: keep a pointer to it only on that thread.
Generator& default_generator();
/// Seeds the calling thread's default generator and sets the process seed that threads start
/// from at their first draw.
void manual_seed(std::uint64_t seed);
/// The process seed: the last manual_seed's argument, on any thread (0 before any).
std::uint64_t initial_seed();
/// The calling thread's default generator's state, and its restore (torch.get_rng_state and
/// torch.set_rng_state): default_generator().get_state() / set_state(state). For a resumed
/// run that repeats an uninterrupted one bit for bit, save the state of every generator the
/// run draws from (the default one for dropout, one per data order) beside the weights and
/// restore them before the next draw:
///
///     save_npz(path, {{"rng.default", get_rng_state()}, {"rng.data", data_gen.get_state()}, ...});
///     ... set_rng_state(find("rng.default")); data_gen.set_state(find("rng.data"));
Tensor get_rng_state();
void set_rng_state(const Tensor& state);

}  // namespace xgrad
