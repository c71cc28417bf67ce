#pragma once
/// Data-parallel training over MPI, as torch.nn.parallel.DistributedDataParallel: every rank
/// holds a replica of the model, trains on its own slice of the global batch, and after
/// backward the gradients are reduced over the ranks so every replica takes the same step.
///
/// Part of the optional library xgrad::distributed (needs MPI; see nn/distributed/process_group.hpp).
///
///   auto model = std::make_shared<MyNet>(...);
///   nn::DistributedDataParallel ddp(*model);      // rank 0's parameters on every rank
///   for (...) {
///       loss = ...;   // on this rank's rows
///       opt.zero_grad();
///       loss.backward();
///       ddp.sync_gradients();                      // now every rank holds the same gradients
///       opt.step();
///   }
///
/// Buckets: the gradients are flattened into a few contiguous buffers, one dtype per buffer
/// and at most bucket_bytes each (torch's default, 25 MiB; a parameter larger than that gets
/// a bucket of its own), and each bucket is one all-reduce: a few large messages per step, not
/// one per tensor. Buckets are planned in reverse order of the parameters (backward produces
/// the last layers' gradients first).
///
/// Overlap (options.overlap, the default), as torch's DDP: a post-accumulate-grad hook on each
/// parameter notes when backward has finished its gradient; once every gradient of a bucket is
/// in, and every earlier bucket has started, the bucket is flattened and its MPI_Iallreduce
/// starts, while backward goes on with the earlier layers. sync_gradients() starts what is left
/// (buckets holding a parameter that got no gradient this step), waits for all of them with the
/// collective deadline, and writes the sums back. Buckets start in the same order on every rank,
/// on a communicator of their own (so the program's other collectives, run between backward and
/// sync_gradients, cannot pair with them). The sums are the same, bit for bit, as with overlap
/// off: the same buckets reduced by the same MPI call.
///
/// MPI moves a non-blocking collective on only inside MPI calls (no progress thread: MPI is
/// initialised funneled), so each hook also tests the buckets in flight; a long stretch of
/// backward with no parameter gradient leaves the link idle, which bounds how much is hidden.
///
/// A gradient read early must still be the one sync_gradients() would read. When it may not
/// be, sync_gradients() completes the round (starts the rest, waits, discards) and reduces
/// every bucket again from the gradients as they are then: after a second backward before the
/// sync (accumulation over micro-batches), after a backward that threw midway, after
/// set_grad() or zero_grad() replaced a gradient that was read (noticed by its storage address:
/// one freed by zero_grad() and replaced at the very same address goes unnoticed), or when
/// backward ran on a thread other than MPI's (the hook does not call MPI there). Every rank
/// must do the same of these things (as every rank must call backward and sync_gradients the
/// same number of times): each bucket carries a round number, and ranks that fell out of step
/// get an xgrad::Error instead of mixed-up sums.
///
/// A parameter without a gradient on this rank contributes zeros, so every rank makes the
/// same calls with the same sizes. Each bucket carries one extra slot per parameter (1 if the
/// rank had a gradient) reduced with the data: a parameter no rank gave a gradient keeps none,
/// one that some rank did gets the reduced gradient on every rank.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "core/tensor.hpp"
#include "nn/distributed/process_group.hpp"
#include "nn/module.hpp"

namespace xgrad::nn {

struct DataParallelOptions {
    /// Largest bucket in bytes (the parameter slots included).
    std::size_t bucket_bytes = std::size_t{25} << 20;
    /// Largest first bucket (the last parameters, whose gradients come first), as torch's 1 MiB:
    /// small, so that communication starts early in backward.
    std::size_t first_bucket_bytes = std::size_t{1} << 20;
    /// true: the gradients are averaged over the ranks (torch's behaviour, for a loss that is
    /// a mean over each rank's rows with equal rows per rank); false: summed (for a loss each
    /// rank already divided by the global count, as examples/seq_train/train.cpp does).
    bool average = true;
    /// Start each bucket's all-reduce during backward (see above); false: all of them in
    /// sync_gradients(), after backward.
    bool overlap = true;
};

class DistributedDataParallel {
public:
    /// Checks that every rank holds parameters of the same number, dtypes and shapes (two
    /// small all-reduces of a signature; throws xgrad::Error on every rank if not), plans the
    /// buckets, copies rank 0's parameter values to every rank and, with overlap, registers a
    /// hook on each parameter (removed by the destructor). Throws if MPI is not initialised,
    /// for bucket_bytes 0, or for a parameter that is not float32/float64.
    explicit DistributedDataParallel(const Module& module, DataParallelOptions options = {});
    explicit DistributedDataParallel(std::vector<Tensor> parameters, DataParallelOptions options = {});
    /// Waits for the all-reduces still in flight (their buffers are this object's).
    ~DistributedDataParallel();
    DistributedDataParallel(const DistributedDataParallel&) = delete;  // the hooks point at this object
    DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

    /// After backward: every parameter's gradient becomes the sum (or mean) over the ranks.
    void sync_gradients();
    /// Copies rank 0's parameter values to every rank (done by the constructor; call it again
    /// after loading a checkpoint on rank 0 only).
    void broadcast_parameters();

    const std::vector<Tensor>& parameters() const { return m_params; }
    std::size_t num_buckets() const { return m_buckets.size(); }
    /// Bytes one sync_gradients() reduces (the sum of the buckets, their slots included).
    std::size_t bytes_per_sync() const;

    /// Summed over the syncs since construction or reset_timers():
    /// - sync_seconds: time inside sync_gradients() (start, wait, write back);
    /// - blocked_seconds: the part of it spent waiting for all-reduces to finish;
    /// - allreduce_seconds: from the first bucket's start to the last one's end (communication
    ///   in flight, waiting for the slowest rank included), each step;
    /// - overlapped_seconds: the part of allreduce_seconds before sync_gradients() was called,
    ///   i.e. hidden behind backward.
    double sync_seconds() const { return m_sync_seconds; }
    double blocked_seconds() const { return m_blocked_seconds; }
    double allreduce_seconds() const { return m_allreduce_seconds; }
    double overlapped_seconds() const { return m_overlapped_seconds; }
    std::int64_t syncs() const { return m_syncs; }
    /// Buckets whose all-reduce a backward hook started, and syncs that fell back to reducing
    /// every bucket again (see above).
    std::int64_t buckets_started_in_backward() const { return m_started_in_backward; }
    std::int64_t fallbacks() const { return m_fallbacks; }
    void reset_timers();

private:
    struct Bucket;
    void plan();
    void check_same_parameters() const;
    void on_gradient(std::size_t param);
    void start(std::size_t bucket);
    void start_ready_buckets();
    void finish_step();

    std::vector<Tensor> m_params;
    DataParallelOptions m_options;
    std::unique_ptr<distributed::Group> m_group;  // before the buckets: outlives their requests
    std::vector<std::unique_ptr<Bucket>> m_buckets;
    struct ParamState {
        std::size_t bucket = 0;
        bool ready = false;            // its gradient of this step is in (a hook fired)
        const void* read_from = nullptr;  // the gradient storage flattened, to notice a replaced one
    };
    std::vector<ParamState> m_state;
    std::vector<std::pair<std::size_t, std::uint64_t>> m_hooks;  // parameter, hook id
    std::size_t m_next_bucket = 0;  // buckets start in index order
    bool m_stale = false;           // something read early may be out of date: reduce all again
    std::uint64_t m_round = 0;
    std::thread::id m_mpi_thread;
    double m_first_start = -1;      // seconds on the steady clock, this step
    double m_sync_seconds = 0, m_blocked_seconds = 0, m_allreduce_seconds = 0, m_overlapped_seconds = 0;
    std::int64_t m_syncs = 0, m_started_in_backward = 0, m_fallbacks = 0;
};

}  // namespace xgrad::nn
