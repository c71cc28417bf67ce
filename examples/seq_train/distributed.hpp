#pragma once
/// The other processes of a data-parallel run, as seq_train's training loop sees them. The
/// base class is a run of one process, where every collective leaves its values as they are;
/// `seq_train --distributed` gets one over MPI (distributed_mpi.cpp, built with
/// xgrad::distributed), so the loop itself knows nothing of MPI.
///
/// How a data-parallel step matches the single-process step on the same global batch of B rows:
/// - every rank draws the whole global batch from (seed, step) and trains on its slice of
///   B/world rows (shard_batch);
/// - the loss is the mean over the N valid target tokens of the global batch,
///   L = (1/N) Σ_tokens ℓ. Each rank knows N (it holds the global batch) and computes
///   L_r = (1/N) Σ_{its tokens} ℓ, so L = Σ_r L_r and ∇L = Σ_r ∇L_r: the gradients are
///   SUMMED over the ranks, not averaged. (Averaging per-rank means would weight a token by
///   1/N_r, wrong whenever the shards hold different numbers of tokens, which they do.)
/// - after the sum every rank holds the same gradients, so clipping sees the global norm and
///   every optimizer takes the same step from the same parameters;
/// - the reported loss is the sum of the ranks' shares, the token accuracy the summed correct
///   tokens over the summed tokens (one small all-reduce); held-out metrics likewise come from
///   counts summed over the ranks, each evaluating its share of the set (train.hpp, evaluate).
/// The mathematics is the single-process step's, but the sums are split and added in another
/// order: the result differs in the last bits from the first step on, and training amplifies
/// that (README, "What is guaranteed"). The same rank count and environment give the same bits. Dropout is not equivalent: each rank draws masks for its own rows from its
/// own per-(seed, step, rank) stream, rank 0 from the single-process stream; so with dropout
/// > 0 the run is a valid data-parallel training with different masks, not the same run.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "nn/module.hpp"

namespace xgrad::examples {

/// What a data-parallel run spent communicating, summed over the steps of the training loop
/// (from the first step on: start-up collectives are left out).
struct SyncStats {
    double blocked_seconds = 0;     ///< blocked waiting in any collective: gradients, stop flag, metrics
    std::int64_t collectives = 0;   ///< collectives of any kind
    double allreduce_seconds = 0;   ///< gradient all-reduce in flight: first bucket's start to last one's end
    double overlapped_seconds = 0;  ///< the part of allreduce_seconds that ran during backward
    double sync_seconds = 0;        ///< inside the gradient sync: start the rest, wait, write back
    std::int64_t buckets = 0, bytes_per_step = 0;
};

/// How the ranks communicate (seq_train's --collective-timeout and --no-overlap).
struct DataParallelSettings {
    double collective_timeout = 300;  ///< seconds any collective may wait before the job ends
    bool overlap = true;              ///< all-reduce gradient buckets during backward
    std::size_t bucket_kb = 25 << 10;  ///< largest gradient bucket (the first is at most 1 MiB)
};

class Replicas {
public:
    virtual ~Replicas() = default;
    /// Starts every rank from rank 0's parameters of `model`, whose gradients sum_gradients()
    /// then sums. Call once the model is built (and loaded from a checkpoint).
    virtual void share(const nn::Module& model) { (void)model; }
    virtual std::size_t rank() const { return 0; }
    virtual std::size_t world_size() const { return 1; }
    /// Sums every parameter's gradient over the ranks, in place, the same on every rank.
    virtual void sum_gradients() {}
    /// Element-wise sum of `values` over the ranks, in place.
    virtual void sum(std::vector<double>& values) { (void)values; }
    /// Every rank's `mine`, indexed by rank, on every rank (any bytes, any length per rank).
    virtual std::vector<std::string> all_gather(const std::string& mine) { return {mine}; }
    virtual SyncStats sync_stats() const { return {}; }
    /// Starts sync_stats() afresh (the training loop calls it before its first step).
    virtual void reset_sync_stats() {}
};

/// `mpirun -np N seq_train --distributed`: starts MPI for the lifetime of the returned object
/// and gives each rank's thread pool its share of the host's cores. Call before the first
/// tensor op (which starts the pool). Throws xgrad::Error when seq_train was built without MPI.
std::unique_ptr<Replicas> start_data_parallel(const DataParallelSettings& settings);

/// For main's catch: when the error came on one rank of a running multi-rank job, prints it
/// with the rank and ends the whole job (the other ranks would wait for this one forever);
/// otherwise returns and the caller reports the error.
void end_job_on_error(const std::string& program, const std::exception& error);

}  // namespace xgrad::examples
