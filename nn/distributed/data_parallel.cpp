#include "data_parallel.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <string>
#include <thread>

#include "nn/distributed/process_group.hpp"
#include "core/dispatch.hpp"

namespace xgrad::nn {

namespace {

using Clock = std::chrono::steady_clock;

double now() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

// Each bucket's last slot: the round (sync) number modulo 4096, plus 1. Summed over the ranks it
// must be world × that: any other value means the ranks' buckets paired up across rounds.
constexpr std::uint64_t kRounds = 4096;

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

struct DistributedDataParallel::Bucket {
    Dtype dtype;
    std::vector<std::size_t> params;   // indices into m_params
    std::vector<std::size_t> offsets;  // start of each parameter in the buffer
    std::size_t numel = 0;             // data elements; one flag per parameter and the round come after
    std::size_t pending = 0;           // parameters whose gradient of this step is not in yet
    std::vector<float> f32;            // the buffer of the bucket's dtype
    std::vector<double> f64;
    distributed::Collective request;   // after the buffers: destroyed (waited for) first
    std::size_t slots() const { return numel + params.size() + 1; }
};

DistributedDataParallel::DistributedDataParallel(const Module& module, DataParallelOptions options)
    : DistributedDataParallel(module.parameters(), options) {}

DistributedDataParallel::DistributedDataParallel(std::vector<Tensor> parameters, DataParallelOptions options)
    : m_params(std::move(parameters)), m_options(options) {
    if (!distributed::is_initialized())
        throw Error("DistributedDataParallel: MPI is not initialised (create a xgrad::distributed::Environment "
                    "first)");
    if (m_options.bucket_bytes == 0) throw Error("DistributedDataParallel: bucket_bytes must be at least 1, got 0");
    if (m_options.first_bucket_bytes == 0)
        throw Error("DistributedDataParallel: first_bucket_bytes must be at least 1, got 0");
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
    m_group = std::make_unique<distributed::Group>("data-parallel");
    plan();
    broadcast_parameters();
    m_mpi_thread = std::this_thread::get_id();
    // A parameter that is not a leaf requiring grad gets no hook; its bucket starts at the sync.
    if (m_options.overlap)
        for (std::size_t i = 0; i < m_params.size(); ++i)
            if (m_params[i].requires_grad() && m_params[i].is_leaf())
                m_hooks.emplace_back(
                    i, m_params[i].register_post_accumulate_grad_hook([this, i](Tensor&) { on_gradient(i); }));
}

DistributedDataParallel::~DistributedDataParallel() {
    // Unwinding from an error with all-reduces in flight (a backward that threw): the other
    // ranks may never finish them, and waiting would hold the error up to the deadline. The
    // buckets are kept, not freed, since MPI may still write into them.
    if (std::uncaught_exceptions() > 0)
        for (auto& b : m_buckets)
            if (b->request.active()) (void)b.release();
    for (const auto& [param, id] : m_hooks) m_params[param].remove_post_accumulate_grad_hook(id);
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
    // Reverse order of the parameters, one open bucket per dtype; the buckets are numbered in
    // the order they close, which is the order they are started in.
    std::unique_ptr<Bucket> open[2];
    auto close = [&](std::unique_ptr<Bucket>& b) {
        if (!b) return;
        if (b->dtype == kFloat32) b->f32.resize(b->slots()); else b->f64.resize(b->slots());
        b->pending = b->params.size();
        for (std::size_t p : b->params) m_state[p].bucket = m_buckets.size();
        m_buckets.push_back(std::move(b));
    };
    m_state.assign(m_params.size(), ParamState{});
    for (std::size_t i = m_params.size(); i-- > 0;) {
        const Dtype d = m_params[i].dtype();
        std::unique_ptr<Bucket>& b = open[d == kFloat64 ? 1 : 0];
        const std::size_t n = m_params[i].numel();
        const std::size_t limit = m_buckets.empty() ? std::min(m_options.first_bucket_bytes, m_options.bucket_bytes)
                                                    : m_options.bucket_bytes;
        if (b && (b->slots() + n + 1) * elem_bytes(d) > limit) close(b);
        if (!b) {
            b = std::make_unique<Bucket>();
            b->dtype = d;
        }
        b->params.push_back(i);
        b->offsets.push_back(b->numel);
        b->numel += n;
    }
    close(open[0]);
    close(open[1]);
}

std::size_t DistributedDataParallel::bytes_per_sync() const {
    std::size_t b = 0;
    for (const auto& k : m_buckets) b += k->slots() * elem_bytes(k->dtype);
    return b;
}

void DistributedDataParallel::reset_timers() {
    m_sync_seconds = m_blocked_seconds = m_allreduce_seconds = m_overlapped_seconds = 0;
    m_syncs = m_started_in_backward = m_fallbacks = 0;
}

void DistributedDataParallel::broadcast_parameters() {
    for (auto& kp : m_buckets) {
        Bucket& k = *kp;
        k.request.wait();  // the buffer may still be in an all-reduce
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

// The hook: parameter `param`'s gradient of this backward is complete.
void DistributedDataParallel::on_gradient(std::size_t param) {
    if (m_stale) return;
    ParamState& st = m_state[param];
    // A second gradient before the sync (another backward), or one left from a backward that
    // threw: what was started may be out of date. Off MPI's thread the hook must not call MPI.
    if (st.ready || std::this_thread::get_id() != m_mpi_thread) {
        m_stale = true;
        return;
    }
    st.ready = true;
    if (--m_buckets[st.bucket]->pending == 0) start_ready_buckets();
    // MPI progresses a non-blocking collective only inside MPI calls: test the ones in flight.
    for (std::size_t b = 0; b < m_next_bucket; ++b) m_buckets[b]->request.test();
}

void DistributedDataParallel::start_ready_buckets() {
    while (m_next_bucket < m_buckets.size() && m_buckets[m_next_bucket]->pending == 0) {
        start(m_next_bucket++);
        ++m_started_in_backward;
    }
}

// Flattens bucket b's gradients (zeros and a 0 flag for a parameter without one) and starts
// its all-reduce.
void DistributedDataParallel::start(std::size_t b) {
    Bucket& k = *m_buckets[b];
    if (m_first_start < 0) m_first_start = now();
    dispatch_floating("DistributedDataParallel", k.dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        std::vector<T>& buf = buffer_of<T>(k.f32, k.f64);
        const std::size_t np = k.params.size();
        for (std::size_t j = 0; j < np; ++j) {
            Tensor& p = m_params[k.params[j]];
            const auto first = buf.begin() + static_cast<long>(k.offsets[j]);
            const T* g = p.grad_ptr<T>();
            m_state[k.params[j]].read_from = g;
            if (g) {
                std::copy(g, g + p.numel(), first);
                buf[k.numel + j] = T(1);
            } else {
                std::fill(first, first + static_cast<long>(p.numel()), T(0));
                buf[k.numel + j] = T(0);
            }
        }
        buf[k.numel + np] = static_cast<T>(m_round % kRounds + 1);
        k.request = m_group->start_all_reduce(buf.data(), buf.size(), distributed::ReduceOp::sum,
                                              fmt::format("gradient bucket {}/{}", b + 1, m_buckets.size()));
    });
}

void DistributedDataParallel::sync_gradients() {
    const double t0 = now();
    const std::size_t world = distributed::world_size();
    if (std::this_thread::get_id() != m_mpi_thread)
        throw Error("DistributedDataParallel::sync_gradients: called from a thread other than the one that made it "
                    "(MPI is initialised funneled)");
    // A gradient flattened early and since replaced (set_grad, zero_grad) must be read again.
    auto grad_address = [this](std::size_t p) {
        return dispatch_floating("DistributedDataParallel", m_params[p].dtype(), [&](auto tag) {
            using T = typename decltype(tag)::type;
            return static_cast<const void*>(m_params[p].template grad_ptr<T>());
        });
    };
    for (std::size_t b = 0; b < m_next_bucket && !m_stale; ++b)
        for (std::size_t p : m_buckets[b]->params)
            if (m_state[p].read_from != grad_address(p)) m_stale = true;
    double blocked = 0;
    if (m_stale) {
        // Every rank is in the same case (see the header), but which buckets it started in
        // backward depends on its own gradients: first complete the round (start the rest,
        // wait for all, discard), so every rank has made the same calls; then reduce every
        // bucket again from the gradients as they are now.
        while (m_next_bucket < m_buckets.size()) start(m_next_bucket++);
        const double w0 = now();
        for (auto& k : m_buckets) k->request.wait();
        blocked += now() - w0;
        m_next_bucket = 0;
        ++m_fallbacks;
    }
    const double first_start = m_first_start >= 0 && !m_stale ? m_first_start : t0;
    m_first_start = -1;
    while (m_next_bucket < m_buckets.size()) start(m_next_bucket++);
    const double w0 = now();
    try {
        for (auto& k : m_buckets) k->request.wait();
    } catch (...) {
        finish_step();
        throw;
    }
    const double done = now();
    blocked += done - w0;
    m_allreduce_seconds += done - first_start;
    m_overlapped_seconds += std::max(0.0, t0 - first_start);
    m_blocked_seconds += blocked;
    // Every bucket's round mark first: out of step, no gradient is touched.
    const std::uint64_t expect_round = world * (m_round % kRounds + 1);
    for (std::size_t b = 0; b < m_buckets.size(); ++b) {
        const Bucket& k = *m_buckets[b];
        const double mark = k.dtype == kFloat32 ? k.f32.back() : k.f64.back();
        if (mark != static_cast<double>(expect_round)) {
            finish_step();
            throw Error(fmt::format(
                "DistributedDataParallel::sync_gradients: the ranks are out of step: bucket {} of sync {} "
                "carries round marks summing to {}, expected {}. They did not call backward and "
                "sync_gradients alike (the same number of backward calls; set_grad or zero_grad between "
                "backward and the sync on all ranks or none); rank {}'s gradients were left as they were",
                b + 1, m_round, mark, expect_round, distributed::rank()));
        }
    }
    for (auto& kp : m_buckets) {
        Bucket& k = *kp;
        dispatch_floating("DistributedDataParallel", k.dtype, [&](auto tag) {
            using T = typename decltype(tag)::type;
            std::vector<T>& buf = buffer_of<T>(k.f32, k.f64);
            const std::size_t np = k.params.size();
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
    finish_step();
    ++m_round;
    m_sync_seconds += now() - t0;
    ++m_syncs;
}

void DistributedDataParallel::finish_step() {
    for (ParamState& st : m_state) {
        st.ready = false;
        st.read_from = nullptr;
    }
    for (auto& k : m_buckets) {
        k->pending = k->params.size();
    }
    m_next_bucket = 0;
    m_stale = false;
    m_first_start = -1;
}

}  // namespace xgrad::nn
