#include "data.hpp"

#include <algorithm>

#include "core/creation.hpp"
#include "core/error.hpp"
#include "core/ops.hpp"

namespace xgrad::examples {

Task parse_task(const std::string& name) {
    if (name == "copy") return Task::copy;
    if (name == "reverse") return Task::reverse;
    if (name == "sort") return Task::sort;
    throw Error(fmt::format("unknown task '{}' (expected copy, reverse or sort)", name));
}

std::string task_name(Task task) {
    switch (task) {
        case Task::copy: return "copy";
        case Task::reverse: return "reverse";
        case Task::sort: return "sort";
    }
    return "?";
}

std::int64_t Batch::num_tokens() const {
    std::int64_t n = 0;
    for (auto v : valid_lens.to_vector<std::int64_t>()) n += v;
    return n;
}

std::vector<std::int64_t> apply_task(Task task, std::vector<std::int64_t> seq) {
    if (task == Task::reverse) std::reverse(seq.begin(), seq.end());
    if (task == Task::sort) std::sort(seq.begin(), seq.end());
    return seq;
}

namespace {

// Uniform integer in [0, n) from the generator's 53-bit doubles: the same on every standard
// library, unlike std::uniform_int_distribution.
std::size_t draw(Generator& gen, std::size_t n) {
    const auto k = static_cast<std::size_t>(gen.next_double() * static_cast<double>(n));
    return std::min(k, n - 1);
}

}  // namespace

Batch make_batch(const TaskSpec& spec, std::size_t batch, Generator& gen) {
    if (spec.max_len == 0 || spec.num_symbols == 0 || batch == 0)
        throw Error(fmt::format("make_batch: max_len ({}), num_symbols ({}) and batch ({}) must be positive",
                                spec.max_len, spec.num_symbols, batch));
    const std::size_t T = spec.max_len;
    std::vector<std::int64_t> X(batch * T, kPad), Y(batch * T, kPad), lens(batch);
    for (std::size_t b = 0; b < batch; ++b) {
        const std::size_t len = 1 + draw(gen, T);
        std::vector<std::int64_t> seq(len);
        for (auto& s : seq) s = 1 + static_cast<std::int64_t>(draw(gen, spec.num_symbols));
        const auto out = apply_task(spec.task, seq);
        std::copy(seq.begin(), seq.end(), X.begin() + static_cast<long>(b * T));
        std::copy(out.begin(), out.end(), Y.begin() + static_cast<long>(b * T));
        lens[b] = static_cast<std::int64_t>(len);
    }
    return {from_vector(X, {batch, T}), from_vector(Y, {batch, T}), from_vector(lens, {batch})};
}

Batch shard_batch(const Batch& global, std::size_t rank, std::size_t world) {
    const std::size_t B = global.size();
    if (world == 0 || rank >= world)
        throw Error(fmt::format("shard_batch: expected 0 <= rank < world, got rank {} of world {}", rank, world));
    if (B % world != 0)
        throw Error(fmt::format("shard_batch: the global batch of {} sequences does not split evenly over {} ranks "
                                "(use a batch that is a multiple of {})", B, world, world));
    if (world == 1) return global;
    const long per = static_cast<long>(B / world), begin = static_cast<long>(rank) * per;
    return {slice(global.inputs, 0, begin, begin + per), slice(global.targets, 0, begin, begin + per),
            slice(global.valid_lens, 0, begin, begin + per)};
}

Batch held_out_set(const TaskSpec& spec, std::size_t n, std::uint64_t seed) {
    Generator gen(mix_seed(seed, 0x4E1D0u, 0));
    return make_batch(spec, n, gen);
}

std::vector<std::int64_t> row_tokens(const Tensor& ids, const Tensor& valid_lens, std::size_t row) {
    const std::size_t T = ids.size(1);
    const auto all = ids.to_vector<std::int64_t>();
    const auto len = static_cast<std::size_t>(valid_lens.to_vector<std::int64_t>().at(row));
    return {all.begin() + static_cast<long>(row * T), all.begin() + static_cast<long>(row * T + len)};
}

std::string token_str(std::int64_t token) {
    return token == kPad ? std::string("<pad>") : std::to_string(token - 1);
}

std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t stream, std::uint64_t step) {
    std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + stream * 0xD1B54A32D192ED03ull + step;
    for (int i = 0; i < 2; ++i) {
        z += 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
    }
    return z;
}

}  // namespace xgrad::examples
