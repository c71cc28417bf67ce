#include "core/random.hpp"

#include <atomic>
#include <cmath>
#include <tuple>
#include <vector>

#include "core/creation.hpp"
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

// A state tensor: [tag, n, word_1 .. word_n, checksum], the words being Mt19937_64::words():
// the numbers libstdc++ writes for a std::mt19937_64, so the standard engine's text reads them.
constexpr std::int64_t kStateTag = 0x7867726E67000001;  // "xgrng", format 1
constexpr std::size_t kWords = std::tuple_size_v<Mt19937_64::Words>;

// splitmix64's finaliser folded over the entries: a flipped bit anywhere changes it.
std::uint64_t state_checksum(const std::vector<std::int64_t>& entries) {
    std::uint64_t h = 0;
    for (const std::int64_t e : entries) {
        std::uint64_t z = h ^ (static_cast<std::uint64_t>(e) + 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        h = z ^ (z >> 31);
    }
    return h;
}

}  // namespace

Tensor Generator::get_state() const {
    const Mt19937_64::Words words = m_engine.words();
    std::vector<std::int64_t> entries{kStateTag, static_cast<std::int64_t>(words.size())};
    for (const std::uint64_t w : words) entries.push_back(static_cast<std::int64_t>(w));
    entries.push_back(static_cast<std::int64_t>(state_checksum(entries)));
    const std::size_t n = entries.size();
    return from_vector(std::move(entries), {n});
}

void Generator::set_state(const Tensor& state) {
    constexpr const char* op = "Generator::set_state";
    if (!state.defined()) throw Error(fmt::format("{}: the state is an undefined tensor", op));
    if (state.dtype() != kInt64 || state.dim() != 1)
        throw Error(fmt::format("{}: expected a 1-D int64 tensor as get_state() returns, got a {} tensor of shape {}",
                                op, dtype_name(state.dtype()), shape_str(state.shape())));
    const std::size_t n = kWords;
    if (state.numel() != n + 3)
        throw Error(fmt::format("{}: expected {} entries (a state from get_state()), got {}", op, n + 3, state.numel()));
    std::vector<std::int64_t> entries = state.to_vector<std::int64_t>();
    if (entries[0] != kStateTag || entries[1] != static_cast<std::int64_t>(n))
        throw Error(fmt::format("{}: the state does not start with get_state()'s format tag and length: not a "
                                "generator state, or a corrupted one",
                                op));
    const auto checksum = static_cast<std::uint64_t>(entries.back());
    entries.pop_back();
    if (state_checksum(entries) != checksum)
        throw Error(fmt::format("{}: the state's words do not match its checksum: the state is corrupted", op));
    Mt19937_64::Words words;
    for (std::size_t i = 0; i < n; ++i) words[i] = static_cast<std::uint64_t>(entries[i + 2]);
    if (!m_engine.set_words(words))
        throw Error(fmt::format("{}: the state's position ({}) is past its {} words: not a generator state", op,
                                words[n - 1], n - 1));
}

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

Tensor get_rng_state() { return default_generator().get_state(); }

void set_rng_state(const Tensor& state) { default_generator().set_state(state); }

}  // namespace xgrad
