#include "nn/distributed/process_group.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <string>
#include <thread>
#include <type_traits>
#include <variant>
#include <vector>

#include <mpi.h>

#include "core/dispatch.hpp"

namespace xgrad::distributed {

namespace {

using Clock = std::chrono::steady_clock;

bool g_owned = false;              // an Environment of this process called MPI_Init
std::thread::id g_mpi_thread;      // the thread that initialised MPI (funneled: the only one calling it)
double g_timeout = 300;            // seconds, see set_collective_timeout
std::string g_broken;              // set when a collective timed out: MPI still holds it
CollectiveStats g_stats;
// Status messages: a waiting rank tells its peers (channel, sequence number) of the collective
// it waits in. On a duplicate of the world, so they never match the program's messages.
MPI_Comm g_status = MPI_COMM_NULL;
constexpr int kStatusTag = 7;
int g_next_channel = 1;                                       // 0 is the world
std::map<std::pair<int, int>, std::uint64_t> g_heard;          // (rank, channel) -> latest seq announced
std::uint64_t g_world_seq = 0;                                 // collectives started on the world
struct Announcement {
    MPI_Request request;
    std::uint64_t payload[2];
};
std::vector<std::unique_ptr<Announcement>> g_sends;  // announcements still in flight

void check(int rc, const char* call) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
    throw Error(fmt::format("distributed: {} failed with error {}: {}", call, rc,
                            len > 0 ? std::string(text, static_cast<std::size_t>(len)) : "(no message)"));
}

void require_init(const char* op) {
    if (!is_initialized())
        throw Error(fmt::format("distributed::{}: MPI is not initialised (create a "
                                "xgrad::distributed::Environment first)", op));
}

// Before starting a collective: MPI is up, this is the MPI thread (MPI_THREAD_FUNNELED), and no
// earlier collective was abandoned (a new one would pair with it on the other ranks).
void require_collective(const char* op) {
    require_init(op);
    if (std::this_thread::get_id() != g_mpi_thread)
        throw Error(fmt::format("distributed::{}: called from a thread other than the one that made the "
                                "Environment (MPI is initialised funneled: only that thread may call it)",
                                op));
    if (!g_broken.empty())
        throw Error(fmt::format("distributed::{}: refused, an earlier collective timed out and is still "
                                "pending inside MPI ({}); end the job", op, g_broken));
}

MPI_Op mpi_op(ReduceOp op) {
    switch (op) {
        case ReduceOp::min: return MPI_MIN;
        case ReduceOp::max: return MPI_MAX;
        default: return MPI_SUM;
    }
}

int my_rank() {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

int world() {
    int n = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

std::string format_bytes(std::size_t b) {
    if (b < 10000) return fmt::format("{} bytes", b);
    if (b < 10000000) return fmt::format("{:.1f} kB", static_cast<double>(b) / 1e3);
    return fmt::format("{:.1f} MB", static_cast<double>(b) / 1e6);
}

// Drops finished announcements; reads the peers' announcements that arrived.
void exchange_status() {
    g_sends.erase(std::remove_if(g_sends.begin(), g_sends.end(),
                                 [](const std::unique_ptr<Announcement>& a) {
                                     int done = 0;
                                     MPI_Test(&a->request, &done, MPI_STATUS_IGNORE);
                                     return done != 0;
                                 }),
                  g_sends.end());
    for (;;) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, kStatusTag, g_status, &flag, &st) != MPI_SUCCESS || !flag) return;
        std::uint64_t msg[2] = {0, 0};
        if (MPI_Recv(msg, 2, MPI_UINT64_T, st.MPI_SOURCE, kStatusTag, g_status, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return;
        std::uint64_t& seen = g_heard[{st.MPI_SOURCE, static_cast<int>(msg[0])}];
        seen = std::max(seen, msg[1]);
    }
}

void announce(int channel, std::uint64_t seq) {
    const int me = my_rank(), n = world();
    for (int peer = 0; peer < n; ++peer) {
        if (peer == me) continue;
        auto a = std::make_unique<Announcement>();
        a->payload[0] = static_cast<std::uint64_t>(channel);
        a->payload[1] = seq;
        if (MPI_Isend(a->payload, 2, MPI_UINT64_T, peer, kStatusTag, g_status, &a->request) == MPI_SUCCESS)
            g_sends.push_back(std::move(a));
    }
}

// The ranks that have not said they reached collective `seq` of `channel`.
std::vector<int> laggards(int channel, std::uint64_t seq) {
    std::vector<int> out;
    const int me = my_rank(), n = world();
    for (int peer = 0; peer < n; ++peer) {
        if (peer == me) continue;
        const auto it = g_heard.find({peer, channel});
        if (it == g_heard.end() || it->second < seq) out.push_back(peer);
    }
    return out;
}

std::string ranks_text(const std::vector<int>& ranks) {
    if (ranks.empty()) return "";
    std::string s = ranks.size() == 1 ? "rank " : "ranks ";
    const std::size_t shown = std::min<std::size_t>(ranks.size(), 8);
    for (std::size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
    if (shown < ranks.size()) s += fmt::format(" and {} more", ranks.size() - shown);
    return s;
}

}  // namespace

// One started collective: its requests (one per chunk of at most 2^30 elements) and what
// messages say about it.
struct Collective::State {
    std::vector<MPI_Request> requests;
    int channel = 0;
    std::uint64_t seq = 0;
    const char* kind = "";
    std::size_t bytes = 0;
    std::string what;  // "gradient bucket 2/3", or empty
    std::string group;  // "", or the name of a Group
};

namespace {

std::string describe(const Collective::State& s) {
    std::string d = fmt::format("{} #{}", s.kind, s.seq);
    std::string extra = s.what;
    if (!s.group.empty()) extra = s.group + (extra.empty() ? "" : ": " + extra);
    extra += (extra.empty() ? "" : ", ") + format_bytes(s.bytes);
    return d + " (" + extra + ")";
}

// Waits for `s` to complete against the deadline; see the header.
void wait_state(Collective::State& s) {
    const auto t0 = Clock::now();
    const double announce_after = std::min(2.0, g_timeout / 4);
    double next_progress = 5;
    bool announced = false;
    int spins = 0;
    for (;;) {
        int done = 0;
        check(MPI_Testall(static_cast<int>(s.requests.size()), s.requests.data(), &done, MPI_STATUSES_IGNORE),
              "MPI_Testall");
        const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
        if (done) {
            s.requests.clear();
            g_stats.blocked_seconds += waited;
            return;
        }
        if (!announced && waited >= announce_after && world() > 1) {
            announce(s.channel, s.seq);
            announced = true;
        }
        if (announced) exchange_status();
        if (waited >= g_timeout) {
            g_stats.blocked_seconds += waited;
            const std::vector<int> late = laggards(s.channel, s.seq);
            g_broken = fmt::format("rank {} gave up on {} after {:.1f} s", my_rank(), describe(s), waited);
            throw Error(fmt::format(
                "distributed: rank {} of {} gave up waiting in {} after {:.1f} s (collective timeout {} s){}",
                my_rank(), world(), describe(s), waited, g_timeout,
                late.empty() ? std::string(": every other rank reported reaching it, so the link to them may be "
                                           "down (or this rank was itself stopped)")
                             : fmt::format(": {} did not reach it (stopped, hung, far behind, or unreachable)",
                                           ranks_text(late))));
        }
        if (waited >= next_progress) {
            const std::vector<int> late = laggards(s.channel, s.seq);
            fmt::print(stderr, "rank {}: waiting {:.0f} s in {}{}\n", my_rank(), waited, describe(s),
                       late.empty() ? std::string() : " for " + ranks_text(late));
            std::fflush(stderr);
            next_progress += 5;
        }
        // Spin briefly (a collective on shared memory completes in microseconds), then sleep for
        // a twentieth of the time waited so far, at most 1 ms: the added latency stays small
        // relative to the wait, and a rank left waiting does not hold a core.
        if (spins < 64) {
            ++spins;
            std::this_thread::yield();
        } else {
            const double sleep = std::clamp(waited / 20, 10e-6, 1e-3);
            std::this_thread::sleep_for(std::chrono::duration<double>(sleep));
        }
    }
}

// MPI counts are int: longer buffers go in chunks of at most 2^30 elements.
constexpr std::size_t kChunk = std::size_t{1} << 30;

template <class T>
std::unique_ptr<Collective::State> start_all_reduce(MPI_Comm comm, int channel, std::uint64_t seq, T* data,
                                                    std::size_t n, ReduceOp op, MPI_Datatype type) {
    auto s = std::make_unique<Collective::State>();
    s->channel = channel;
    s->seq = seq;
    s->kind = "all_reduce";
    s->bytes = n * sizeof(T);
    for (std::size_t i = 0; i < n; i += kChunk) {
        const int count = static_cast<int>(std::min(kChunk, n - i));
        MPI_Request r;
        check(MPI_Iallreduce(MPI_IN_PLACE, data + i, count, type, mpi_op(op), comm, &r), "MPI_Iallreduce");
        s->requests.push_back(r);
    }
    ++g_stats.count;
    g_stats.bytes += s->bytes;
    return s;
}

template <class T>
void all_reduce_impl(T* data, std::size_t n, ReduceOp op, MPI_Datatype type) {
    require_collective("all_reduce");
    if constexpr (!std::is_floating_point_v<T>)
        if (op == ReduceOp::mean)  // before the reduce, so the caller's values stay as they were
            throw Error("distributed::all_reduce: mean needs floating-point values, got integers");
    auto s = start_all_reduce(MPI_COMM_WORLD, 0, ++g_world_seq, data, n, op, type);
    wait_state(*s);
    if constexpr (std::is_floating_point_v<T>)
        if (op == ReduceOp::mean) {
            const T inv = T(1) / static_cast<T>(world_size());
            for (std::size_t i = 0; i < n; ++i) data[i] *= inv;
        }
}

void broadcast_bytes(void* data, std::size_t bytes, std::size_t root) {
    require_collective("broadcast");
    if (root >= world_size())
        throw Error(fmt::format("distributed::broadcast: root {} is not a rank (world size {})", root, world_size()));
    Collective::State s;
    s.seq = ++g_world_seq;
    s.kind = "broadcast";
    s.bytes = bytes;
    s.what = fmt::format("from rank {}", root);
    auto* p = static_cast<char*>(data);
    for (std::size_t i = 0; i < bytes; i += kChunk) {
        const int count = static_cast<int>(std::min(kChunk, bytes - i));
        MPI_Request r;
        check(MPI_Ibcast(p + i, count, MPI_BYTE, static_cast<int>(root), MPI_COMM_WORLD, &r), "MPI_Ibcast");
        s.requests.push_back(r);
    }
    ++g_stats.count;
    g_stats.bytes += bytes;
    wait_state(s);
}

void world_barrier(const char* what) {
    Collective::State s;
    s.seq = ++g_world_seq;
    s.kind = "barrier";
    s.what = what;
    MPI_Request r;
    check(MPI_Ibarrier(MPI_COMM_WORLD, &r), "MPI_Ibarrier");
    s.requests.push_back(r);
    ++g_stats.count;
    wait_state(s);
}

void init(int* argc, char*** argv) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) throw Error("distributed::Environment: MPI was already finalised in this process");
    if (is_initialized()) throw Error("distributed::Environment: MPI is already initialised (one Environment per process)");
    int provided = 0;
    check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    g_owned = true;
    g_mpi_thread = std::this_thread::get_id();
    g_broken.clear();
    g_stats = {};
    g_heard.clear();
    g_world_seq = 0;
    check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    // MPI_Comm_dup blocks: a barrier with a deadline first, so a rank that never came is reported.
    world_barrier("start-up");
    check(MPI_Comm_dup(MPI_COMM_WORLD, &g_status), "MPI_Comm_dup");
    check(MPI_Comm_set_errhandler(g_status, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
}

}  // namespace

Collective::Collective() = default;
Collective::Collective(std::unique_ptr<State> state) : m_state(std::move(state)) {}
Collective::Collective(Collective&&) noexcept = default;
Collective& Collective::operator=(Collective&& other) noexcept {
    if (this != &other) {
        Collective old(std::move(*this));  // waits for an unfinished one, as the destructor does
        m_state = std::move(other.m_state);
    }
    return *this;
}

Collective::~Collective() {
    if (!active() || !g_broken.empty() || !is_initialized()) return;
    try {
        wait();
    } catch (const std::exception& e) {
        fmt::print(stderr, "distributed: an unfinished collective was dropped: {}\n", e.what());
    }
}

bool Collective::active() const { return m_state && !m_state->requests.empty(); }

bool Collective::test() {
    if (!active()) return true;
    int done = 0;
    check(MPI_Testall(static_cast<int>(m_state->requests.size()), m_state->requests.data(), &done,
                      MPI_STATUSES_IGNORE),
          "MPI_Testall");
    if (done) {
        m_state->requests.clear();
    }
    return done != 0;
}

void Collective::wait() {
    if (!active()) return;
    if (!g_broken.empty())
        throw Error(fmt::format("distributed: refused to wait for {}: an earlier collective timed out ({}); end "
                                "the job", describe(*m_state), g_broken));
    wait_state(*m_state);
}

struct Group::Impl {
    MPI_Comm comm = MPI_COMM_NULL;
    int channel = 0;
    std::uint64_t seq = 0;
    std::string name;
};

Group::Group(std::string name) : m_impl(std::make_unique<Impl>()) {
    require_collective("Group");
    m_impl->name = std::move(name);
    world_barrier("making a group");
    check(MPI_Comm_dup(MPI_COMM_WORLD, &m_impl->comm), "MPI_Comm_dup");
    check(MPI_Comm_set_errhandler(m_impl->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    m_impl->channel = g_next_channel++;
}

Group::~Group() {
    // MPI_Comm_free does not wait for the other ranks; MPI keeps the communicator until any
    // pending operation on it is done.
    if (m_impl->comm != MPI_COMM_NULL && is_initialized()) MPI_Comm_free(&m_impl->comm);
}

namespace {

template <class T>
Collective start_group_reduce(Group::Impl& g, T* data, std::size_t n, ReduceOp op, std::string what,
                                     MPI_Datatype type) {
    require_collective("Group::start_all_reduce");
    if (op == ReduceOp::mean)
        throw Error("distributed::Group::start_all_reduce: mean is not offered; sum and scale");
    auto s = start_all_reduce(g.comm, g.channel, ++g.seq, data, n, op, type);
    s->what = std::move(what);
    s->group = g.name;
    return Collective(std::move(s));
}

}  // namespace

Collective Group::start_all_reduce(float* data, std::size_t n, ReduceOp op, std::string what) {
    return start_group_reduce(*m_impl, data, n, op, std::move(what), MPI_FLOAT);
}
Collective Group::start_all_reduce(double* data, std::size_t n, ReduceOp op, std::string what) {
    return start_group_reduce(*m_impl, data, n, op, std::move(what), MPI_DOUBLE);
}

Environment::Environment(int& argc, char**& argv) { init(&argc, &argv); }
Environment::Environment() { init(nullptr, nullptr); }

Environment::~Environment() {
    if (!g_owned || !is_initialized()) return;
    // With other ranks possibly blocked in a collective, MPI_Finalize could wait forever.
    if ((std::uncaught_exceptions() > 0 || !g_broken.empty()) && world() > 1) return;
    for (auto& a : g_sends) {
        MPI_Cancel(&a->request);
        MPI_Request_free(&a->request);
    }
    g_sends.clear();
    if (g_status != MPI_COMM_NULL) MPI_Comm_free(&g_status);
    MPI_Finalize();
    g_owned = false;
}

bool is_initialized() {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

std::size_t rank() {
    require_init("rank");
    int r = 0;
    check(MPI_Comm_rank(MPI_COMM_WORLD, &r), "MPI_Comm_rank");
    return static_cast<std::size_t>(r);
}

std::size_t world_size() {
    require_init("world_size");
    int n = 1;
    check(MPI_Comm_size(MPI_COMM_WORLD, &n), "MPI_Comm_size");
    return static_cast<std::size_t>(n);
}

std::size_t local_world_size() {
    require_collective("local_world_size");
    // MPI_Comm_split_type blocks: a barrier with a deadline first.
    world_barrier("local_world_size");
    MPI_Comm local;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local),
          "MPI_Comm_split_type");
    int n = 1;
    const int rc = MPI_Comm_size(local, &n);
    MPI_Comm_free(&local);
    check(rc, "MPI_Comm_size");
    return static_cast<std::size_t>(n);
}

void barrier() {
    require_collective("barrier");
    world_barrier("");
}

void abort(int code) {
    if (is_initialized()) {
        // MPI_Abort asks the launcher to end every rank; with a peer's host unreachable that
        // request can block. The watchdog makes sure this process ends regardless.
        std::thread([code] {
            std::this_thread::sleep_for(std::chrono::seconds(5));
            const char msg[] = "distributed: MPI_Abort did not return within 5 s; exiting this rank\n";
            if (::write(2, msg, sizeof msg - 1) < 0) {}
            ::_exit(code);
        }).detach();
        MPI_Abort(MPI_COMM_WORLD, code);
    }
    std::exit(code);
}

void set_collective_timeout(double seconds) {
    if (!(seconds > 0) || !std::isfinite(seconds))
        throw Error(fmt::format("distributed::set_collective_timeout: expected a positive, finite number of "
                                "seconds, got {}", seconds));
    g_timeout = seconds;
}

double collective_timeout() { return g_timeout; }

CollectiveStats collective_stats() { return g_stats; }

void all_reduce(float* data, std::size_t n, ReduceOp op) { all_reduce_impl(data, n, op, MPI_FLOAT); }
void all_reduce(double* data, std::size_t n, ReduceOp op) { all_reduce_impl(data, n, op, MPI_DOUBLE); }
void all_reduce(std::int64_t* data, std::size_t n, ReduceOp op) { all_reduce_impl(data, n, op, MPI_INT64_T); }
void all_reduce(std::uint64_t* data, std::size_t n, ReduceOp op) { all_reduce_impl(data, n, op, MPI_UINT64_T); }

namespace {
// Whether t is a non-contiguous view, which `communicate` then gets as a contiguous copy whose
// values are written back through the view: what goes over MPI is its values, not its storage.
template <class F> bool through_contiguous_copy(Tensor& t, F&& communicate) {
    if (!t.defined() || t.is_contiguous()) return false;
    NoGradGuard no_grad;
    Tensor c = t.clone();
    communicate(c);
    t.copy_(c);
    return true;
}
}  // namespace

void all_reduce(Tensor& t, ReduceOp op) {
    require_init("all_reduce");
    if (through_contiguous_copy(t, [op](Tensor& c) { all_reduce(c, op); })) return;
    switch (t.dtype()) {
        case kFloat32: return all_reduce(t.mutable_data_ptr<float>(), t.numel(), op);
        case kFloat64: return all_reduce(t.mutable_data_ptr<double>(), t.numel(), op);
        case kInt64: return all_reduce(t.mutable_data_ptr<std::int64_t>(), t.numel(), op);
        default:
            throw Error(fmt::format("distributed::all_reduce: expected a float32, float64 or int64 tensor, got {}",
                                    dtype_name(t.dtype())));
    }
}

void broadcast(float* data, std::size_t n, std::size_t root) { broadcast_bytes(data, n * sizeof *data, root); }
void broadcast(double* data, std::size_t n, std::size_t root) { broadcast_bytes(data, n * sizeof *data, root); }
void broadcast(std::int64_t* data, std::size_t n, std::size_t root) { broadcast_bytes(data, n * sizeof *data, root); }
void broadcast(std::uint64_t* data, std::size_t n, std::size_t root) { broadcast_bytes(data, n * sizeof *data, root); }

void broadcast(Tensor& t, std::size_t root) {
    if (through_contiguous_copy(t, [root](Tensor& c) { broadcast(c, root); })) return;
    dispatch_all(t.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        broadcast_bytes(t.mutable_data_ptr<T>(), t.numel() * sizeof(T), root);
    });
}

}  // namespace xgrad::distributed
