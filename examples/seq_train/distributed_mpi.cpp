// seq_train --distributed over MPI: the gradients summed in buckets by nn::DistributedDataParallel
// (summed, not averaged: each rank's loss is already its share of the global mean; see
// distributed.hpp). Built only with xgrad::distributed; distributed_off.cpp stands in otherwise.
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "distributed.hpp"
#include <xgrad/nn/distributed/data_parallel.hpp>
#include <xgrad/nn/distributed/process_group.hpp>

namespace xgrad::examples {

namespace {

// With N ranks on a host, each rank's own thread pool gets cores/N threads unless the user set
// XGRAD_NUM_THREADS: N pools of `cores` threads each would fight over the same cores. And never
// more than the CPUs the rank is bound to (mpirun binds each rank to one core for -np <= 2).
// Must run before the first op creates the pool.
void default_threads_per_rank() {
    // A collective: every rank calls it, whatever its environment says.
    const std::size_t local = distributed::local_world_size();
    if (std::getenv("XGRAD_NUM_THREADS")) return;
    const std::size_t cores = std::max(1u, std::thread::hardware_concurrency());
    std::size_t threads = std::max<std::size_t>(1, cores / local);
    cpu_set_t bound;
    if (sched_getaffinity(0, sizeof bound, &bound) == 0)
        threads = std::min<std::size_t>(threads, std::max(1, CPU_COUNT(&bound)));
    setenv("XGRAD_NUM_THREADS", std::to_string(threads).c_str(), 0);
}

// The deadline holds from MPI's first collective on (the Environment's start-up barrier).
const DataParallelSettings& with_timeout(const DataParallelSettings& s) {
    distributed::set_collective_timeout(s.collective_timeout);
    return s;
}

class MpiReplicas : public Replicas {
public:
    explicit MpiReplicas(const DataParallelSettings& settings) : m_settings(with_timeout(settings)) {
        default_threads_per_rank();
    }
    void share(const nn::Module& model) override {
        nn::DataParallelOptions options;
        options.average = false;
        options.overlap = m_settings.overlap;
        options.bucket_bytes = m_settings.bucket_kb << 10;
        m_ddp.emplace(model, options);  // copies rank 0's parameters to every rank
        reset_sync_stats();
    }
    std::size_t rank() const override { return distributed::rank(); }
    std::size_t world_size() const override { return distributed::world_size(); }
    void sum_gradients() override { m_ddp.value().sync_gradients(); }
    void sum(std::vector<double>& values) override { distributed::all_reduce(values.data(), values.size()); }
    std::vector<std::string> all_gather(const std::string& mine) override {
        // One broadcast per rank, on the process group's own collectives: a few small messages,
        // once per run. The length goes first; the bytes travel packed in 64-bit words.
        std::vector<std::string> all(world_size());
        for (std::size_t root = 0; root < all.size(); ++root) {
            std::uint64_t length = root == rank() ? mine.size() : 0;
            distributed::broadcast(&length, 1, root);
            std::vector<std::uint64_t> words((length + 7) / 8, 0);
            if (root == rank()) std::memcpy(words.data(), mine.data(), mine.size());
            distributed::broadcast(words.data(), words.size(), root);
            all[root].assign(reinterpret_cast<const char*>(words.data()), length);
        }
        return all;
    }
    SyncStats sync_stats() const override {
        SyncStats s;
        const distributed::CollectiveStats now = distributed::collective_stats();
        s.blocked_seconds = now.blocked_seconds - m_base.blocked_seconds;
        s.collectives = static_cast<std::int64_t>(now.count - m_base.count);
        if (!m_ddp) return s;
        s.allreduce_seconds = m_ddp->allreduce_seconds();
        s.overlapped_seconds = m_ddp->overlapped_seconds();
        s.sync_seconds = m_ddp->sync_seconds();
        s.buckets = static_cast<std::int64_t>(m_ddp->num_buckets());
        s.bytes_per_step = static_cast<std::int64_t>(m_ddp->bytes_per_sync());
        return s;
    }
    void reset_sync_stats() override {
        m_base = distributed::collective_stats();
        if (m_ddp) m_ddp->reset_timers();
    }

private:
    DataParallelSettings m_settings;
    // Declared before the DistributedDataParallel, so MPI outlives it.
    distributed::Environment m_mpi;
    std::optional<nn::DistributedDataParallel> m_ddp;
    distributed::CollectiveStats m_base;
};

}  // namespace

std::unique_ptr<Replicas> start_data_parallel(const DataParallelSettings& settings) {
    return std::make_unique<MpiReplicas>(settings);
}

void end_job_on_error(const std::string& program, const std::exception& error) {
    // MPI is still up only when the error came with other ranks running (see Environment).
    if (!distributed::is_initialized()) return;
    fmt::print(stderr, "\n{}: error on rank {} of {}: {}\n", program, distributed::rank(), distributed::world_size(),
               error.what());
    std::fflush(stderr);
    distributed::abort(1);
}

}  // namespace xgrad::examples
