#include "data_parallel.hpp"

#include <algorithm>
#include <chrono>
#include <string>

#include "nn/distributed/process_group.hpp"
#include "core/dispatch.hpp"

namespace xgrad::nn {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::size_t elem_bytes(Dtype d) { return d == kFloat64 ? sizeof(double) : sizeof(float); }

template <class T> std::vector<T>& buffer_of(std::vector<float>& f32, std::vector<double>& f64) {
    if constexpr (std::is_same_v<T, float>) return f32; else return f64;
}

// FNV-1a over the parameters' dtypes and shapes: equal on every rank iff the models agree
// (up to a 2^-64 collision).
std::uint64_t fnv(std::uint64_t h, std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
        h ^= (v >> (8 * i)) & 0xff;
        h *= 1099511628211ull;
    }
    return h;
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(const Module& module, DataParallelOptions options)
    : DistributedDataParallel(module.parameters(), options) {}

DistributedDataParallel::DistributedDataParallel(std::vector<Tensor> parameters, DataParallelOptions options)
    : m_params(std::move(parameters)), m_options(options) {
    if (!distributed::is_initialized())
        throw Error("DistributedDataParallel: MPI is not initialised (create a xgrad::distributed::Environment "
                    "first)");
    if (m_options.bucket_bytes == 0) throw Error("DistributedDataParallel: bucket_bytes must be at least 1, got 0");
    // A bad parameter on one rank must stop every rank: the others would wait forever in the
    // collectives below. So the local verdict is shared first, and all ranks throw together.
    std::string bad;
    for (std::size_t i = 0; i < m_params.size() && bad.empty(); ++i) {
        const Tensor& p = m_params[i];
        if (!p.defined())
            bad = fmt::format("DistributedDataParallel: parameter {} is undefined", i);
        else if (p.dtype() != kFloat32 && p.dtype() != kFloat64)
            bad = fmt::format("DistributedDataParallel: parameter {} must be float32 or float64, got {} {}", i,
                              dtype_name(p.dtype()), shape_str(p.shape()));
    }
    std::uint64_t any_bad = bad.empty() ? 0 : 1;
    distributed::all_reduce(&any_bad, 1, distributed::ReduceOp::max);
    if (!bad.empty()) throw Error(bad);
    if (any_bad)
        throw Error(fmt::format("DistributedDataParallel: another rank's parameters are invalid (it reports "
                                "which); rank {}'s are fine",
                                distributed::rank()));
    check_same_parameters();
    plan();
    broadcast_parameters();
}

void DistributedDataParallel::check_same_parameters() const {
    std::uint64_t numel = 0, hash = 14695981039346656037ull;
    for (const Tensor& p : m_params) {
        numel += p.numel();
        hash = fnv(hash, static_cast<std::uint64_t>(p.dtype()));
        hash = fnv(hash, p.dim());
        for (std::size_t s : p.shape()) hash = fnv(hash, s);
    }
    const std::uint64_t mine[3] = {m_params.size(), numel, hash};
    std::uint64_t lo[3] = {mine[0], mine[1], mine[2]}, hi[3] = {mine[0], mine[1], mine[2]};
    distributed::all_reduce(lo, 3, distributed::ReduceOp::min);
    distributed::all_reduce(hi, 3, distributed::ReduceOp::max);
    if (lo[0] != hi[0] || lo[1] != hi[1] || lo[2] != hi[2])
        throw Error(fmt::format("DistributedDataParallel: the ranks hold different parameters: expected the same "
                                "count, sizes and shapes on every rank, got {} parameters of {} elements on rank {} "
                                "(over the ranks: {}..{} parameters, {}..{} elements{})",
                                mine[0], mine[1], distributed::rank(), lo[0], hi[0], lo[1], hi[1],
                                lo[2] != hi[2] ? ", and different shapes or dtypes" : ""));
}

void DistributedDataParallel::plan() {
    for (Dtype d : {kFloat32, kFloat64}) {
        Bucket current{d, {}, {}, 0, {}, {}};
        auto close = [&] {
            if (current.params.empty()) return;
            const std::size_t n = current.numel + current.params.size();
            if (d == kFloat32) current.f32.resize(n); else current.f64.resize(n);
            m_buckets.push_back(std::move(current));
            current = Bucket{d, {}, {}, 0, {}, {}};
        };
        for (std::size_t i = 0; i < m_params.size(); ++i) {
            if (m_params[i].dtype() != d) continue;
            const std::size_t n = m_params[i].numel();
            const std::size_t bytes_after = (current.numel + n + current.params.size() + 1) * elem_bytes(d);
            if (!current.params.empty() && bytes_after > m_options.bucket_bytes) close();
            current.params.push_back(i);
            current.offsets.push_back(current.numel);
            current.numel += n;
        }
        close();
    }
}

std::size_t DistributedDataParallel::bytes_per_sync() const {
    std::size_t b = 0;
    for (const Bucket& k : m_buckets) b += (k.numel + k.params.size()) * elem_bytes(k.dtype);
    return b;
}

void DistributedDataParallel::reset_timers() {
    m_sync_seconds = m_allreduce_seconds = 0;
    m_syncs = 0;
}

void DistributedDataParallel::broadcast_parameters() {
    for (Bucket& k : m_buckets) {
        dispatch_floating("DistributedDataParallel", k.dtype, [&](auto tag) {
            using T = typename decltype(tag)::type;
            std::vector<T>& buf = buffer_of<T>(k.f32, k.f64);
            for (std::size_t j = 0; j < k.params.size(); ++j) {
                const T* src = m_params[k.params[j]].template const_data_ptr<T>();
                std::copy(src, src + m_params[k.params[j]].numel(), buf.begin() + static_cast<long>(k.offsets[j]));
            }
            distributed::broadcast(buf.data(), k.numel, 0);
            for (std::size_t j = 0; j < k.params.size(); ++j) {
                T* dst = m_params[k.params[j]].template mutable_data_ptr<T>();
                const auto first = buf.begin() + static_cast<long>(k.offsets[j]);
                std::copy(first, first + static_cast<long>(m_params[k.params[j]].numel()), dst);
            }
        });
    }
}

void DistributedDataParallel::sync_gradients() {
    const auto t0 = Clock::now();
    const std::size_t world = distributed::world_size();
    for (Bucket& k : m_buckets) {
        dispatch_floating("DistributedDataParallel", k.dtype, [&](auto tag) {
            using T = typename decltype(tag)::type;
            std::vector<T>& buf = buffer_of<T>(k.f32, k.f64);
            const std::size_t np = k.params.size();
            for (std::size_t j = 0; j < np; ++j) {
                const Tensor& p = m_params[k.params[j]];
                const auto first = buf.begin() + static_cast<long>(k.offsets[j]);
                if (const T* g = p.grad_ptr<T>()) {
                    std::copy(g, g + p.numel(), first);
                    buf[k.numel + j] = T(1);
                } else {
                    std::fill(first, first + static_cast<long>(m_params[k.params[j]].numel()), T(0));
                    buf[k.numel + j] = T(0);
                }
            }
            const auto t1 = Clock::now();
            distributed::all_reduce(buf.data(), buf.size(), distributed::ReduceOp::sum);
            m_allreduce_seconds += seconds_since(t1);
            if (m_options.average && world > 1) {
                const T inv = T(1) / static_cast<T>(world);
                for (std::size_t i = 0; i < k.numel; ++i) buf[i] *= inv;
            }
            for (std::size_t j = 0; j < np; ++j) {
                if (buf[k.numel + j] == T(0)) continue;  // no rank had a gradient
                Tensor& p = m_params[k.params[j]];
                const auto first = buf.begin() + static_cast<long>(k.offsets[j]);
                std::copy(first, first + static_cast<long>(p.numel()), p.mutable_grad_ptr<T>());
            }
        });
    }
    m_sync_seconds += seconds_since(t0);
    ++m_syncs;
}

}  // namespace xgrad::nn
