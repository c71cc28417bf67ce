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
/// a bucket of its own), and each bucket is one MPI_Allreduce: a few large messages per step,
/// not one per tensor. Unlike torch the reduction runs after backward, not overlapped with it.
///
/// A parameter without a gradient on this rank contributes zeros, so every rank makes the
/// same calls with the same sizes. Each bucket carries one extra slot per parameter (1 if the
/// rank had a gradient) reduced with the data: a parameter no rank gave a gradient keeps none,
/// one that some rank did gets the reduced gradient on every rank.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.hpp"
#include "nn/module.hpp"

namespace xgrad::nn {

struct DataParallelOptions {
    /// Largest bucket in bytes (the parameter slots included).
    std::size_t bucket_bytes = std::size_t{25} << 20;
    /// true: the gradients are averaged over the ranks (torch's behaviour, for a loss that is
    /// a mean over each rank's rows with equal rows per rank); false: summed (for a loss each
    /// rank already divided by the global count, as examples/seq_train/train.cpp does).
    bool average = true;
};

class DistributedDataParallel {
public:
    /// Checks that every rank holds parameters of the same number, dtypes and shapes (two
    /// small all-reduces of a signature; throws xgrad::Error on every rank if not), plans the
    /// buckets and copies rank 0's parameter values to every rank. Throws if MPI is not
    /// initialised, for bucket_bytes 0, or for a parameter that is not float32/float64.
    explicit DistributedDataParallel(const Module& module, DataParallelOptions options = {});
    explicit DistributedDataParallel(std::vector<Tensor> parameters, DataParallelOptions options = {});

    /// After backward: every parameter's gradient becomes the sum (or mean) over the ranks.
    void sync_gradients();
    /// Copies rank 0's parameter values to every rank (done by the constructor; call it again
    /// after loading a checkpoint on rank 0 only).
    void broadcast_parameters();

    const std::vector<Tensor>& parameters() const { return m_params; }
    std::size_t num_buckets() const { return m_buckets.size(); }
    /// Bytes one sync_gradients() sends through MPI_Allreduce (the sum of the buckets).
    std::size_t bytes_per_sync() const;

    /// Time spent in sync_gradients() (flatten, all-reduce, write back) and inside the
    /// MPI_Allreduce calls alone, summed over the calls since construction or reset_timers().
    /// The all-reduce time includes waiting for the slowest rank to arrive.
    double sync_seconds() const { return m_sync_seconds; }
    double allreduce_seconds() const { return m_allreduce_seconds; }
    std::int64_t syncs() const { return m_syncs; }
    void reset_timers();

private:
    struct Bucket {
        Dtype dtype;
        std::vector<std::size_t> params;   // indices into m_params
        std::vector<std::size_t> offsets;  // start of each parameter in the buffer
        std::size_t numel = 0;             // data elements, the flags come after them
        std::vector<float> f32;            // the buffer of the bucket's dtype: numel + params.size()
        std::vector<double> f64;
    };
    void plan();
    void check_same_parameters() const;

    std::vector<Tensor> m_params;
    DataParallelOptions m_options;
    std::vector<Bucket> m_buckets;
    double m_sync_seconds = 0, m_allreduce_seconds = 0;
    std::int64_t m_syncs = 0;
};

}  // namespace xgrad::nn
