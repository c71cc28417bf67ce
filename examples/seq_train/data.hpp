#pragma once
/// seq_train's toy sequence tasks: copy, reverse and sort a random sequence of symbols.
///
/// Vocabulary: token 0 is <pad>, tokens 1..num_symbols are the symbols (printed as
/// num_symbols <= 10 ? digits 0..9 : numbers). A sequence has a length drawn uniformly from
/// [1, max_len] and is padded with 0 up to max_len; the target is the task applied to the valid
/// part, padded the same way, so input and target line up position by position.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/random.hpp"
#include "core/tensor.hpp"

namespace xgrad::examples {

enum class Task { copy, reverse, sort };

/// "copy", "reverse", "sort" ↔ Task; parse_task throws xgrad::Error for anything else.
Task parse_task(const std::string& name);
std::string task_name(Task task);

constexpr std::int64_t kPad = 0;

/// A batch of sequences, all padded to the same length T = max_len.
///   inputs, targets  int64 (batch, T): symbols in [1, num_symbols], kPad past the valid length
///   valid_lens       int64 (batch,): each in [1, max_len]
struct Batch {
    Tensor inputs;
    Tensor targets;
    Tensor valid_lens;
    std::size_t size() const { return valid_lens.defined() ? valid_lens.size(0) : 0; }
    /// The number of valid (non-pad) target tokens.
    std::int64_t num_tokens() const;
};

struct TaskSpec {
    Task task = Task::reverse;
    std::size_t max_len = 8;
    std::size_t num_symbols = 10;
    std::size_t vocab_size() const { return num_symbols + 1; }
};

/// The task applied to one valid sequence (no padding).
std::vector<std::int64_t> apply_task(Task task, std::vector<std::int64_t> seq);

/// `batch` random sequences from `gen`: lengths uniform in [1, max_len], symbols uniform.
/// The same generator state gives the same batch.
Batch make_batch(const TaskSpec& spec, std::size_t batch, Generator& gen);

/// The rows one rank of a data-parallel run trains on: rows [rank·B/world, (rank+1)·B/world)
/// of a global batch of B rows, in order, so the shards of ranks 0..world−1 put back together
/// are the global batch. Every rank draws the same global batch (from the same (seed, step))
/// and keeps its slice: no data moves between ranks. world 1 returns the batch itself.
/// Throws xgrad::Error when world is 0, rank >= world, or world does not divide B.
Batch shard_batch(const Batch& global, std::size_t rank, std::size_t world);

/// A fixed held-out set of `n` sequences, a function of (spec, seed) only: drawn from its own
/// generator, so it does not depend on how training draws its batches.
Batch held_out_set(const TaskSpec& spec, std::size_t n, std::uint64_t seed);

/// One row of a batch: the valid part of inputs and targets.
std::vector<std::int64_t> row_tokens(const Tensor& ids, const Tensor& valid_lens, std::size_t row);

/// A token as text: "<pad>" for 0, the symbol index (token − 1) otherwise.
std::string token_str(std::int64_t token);

/// A well-mixed 64-bit value from (seed, stream, step), for per-step generators (splitmix64).
std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t stream, std::uint64_t step);

}  // namespace xgrad::examples
