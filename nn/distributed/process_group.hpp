#pragma once
/// A process group over MPI, as torch.distributed: initialisation, rank, world size and the
/// collectives data-parallel training needs (broadcast, all-reduce, barrier).
///
/// Part of the optional library xgrad::distributed (built when CMake finds MPI; link it and the
/// definition XGRAD_WITH_MPI is set). Every process of an `mpirun -np N` job is one rank of
/// MPI_COMM_WORLD; a program started without mpirun is a world of one rank.
///
///   int main(int argc, char** argv) {
///       xgrad::distributed::Environment mpi(argc, argv);   // MPI_Init ... MPI_Finalize
///       std::size_t r = xgrad::distributed::rank();
///       xgrad::distributed::all_reduce(t, xgrad::distributed::ReduceOp::mean);
///   }
///
/// Collectives must be called by every rank in the same order with the same sizes and dtypes
/// (MPI's rule), from the thread that made the Environment. A failing MPI call throws
/// xgrad::Error naming the call and MPI's message. Communicators use MPI_ERRORS_RETURN, so an
/// error reaches the caller instead of MPI aborting.
///
/// Deadlines: every collective is non-blocking MPI (MPI_Iallreduce, MPI_Ibcast, MPI_Ibarrier)
/// completed by a wait loop that tests, sleeps a little (backing off to 1 ms, so a rank left
/// waiting does not burn a core), and gives up after collective_timeout() seconds with an
/// xgrad::Error naming this rank, the collective (kind, sequence number, bytes), how long it
/// waited and the ranks that have not arrived. Past a few seconds a waiting rank tells its
/// peers which collective it waits in (a small point-to-point message on a communicator of its
/// own), so a waiter can name who is missing; past 5 s it prints a line on stderr every 5 s.
/// After a timeout the collective is still pending inside MPI (MPI cannot cancel one), so
/// every later collective of the process throws: end the job with abort().
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor.hpp"

namespace xgrad::distributed {

/// Initialises MPI for its lifetime (MPI_Init_thread, funneled: only the thread that made the
/// Environment calls MPI) and finalises it on destruction. One per process; a second while
/// the first is alive, or one after MPI was finalised, throws xgrad::Error.
///
/// Destroyed while an exception propagates and with more than one rank, it does not call
/// MPI_Finalize (which waits for the other ranks, who may be waiting in a collective for this
/// one): catch the exception, report it, then call abort() so mpirun ends the whole job.
class Environment {
public:
    Environment(int& argc, char**& argv);
    Environment();
    ~Environment();
    Environment(const Environment&) = delete;
    Environment& operator=(const Environment&) = delete;
};

/// Whether MPI is initialised and not yet finalised.
bool is_initialized();
/// This process's rank in [0, world_size()). Throws xgrad::Error when MPI is not initialised.
std::size_t rank();
/// Number of ranks in the job.
std::size_t world_size();
/// Number of ranks on this host (MPI_COMM_TYPE_SHARED): how many processes share its cores.
std::size_t local_world_size();

/// Waits until every rank has called it.
void barrier();
/// Ends every process of the job with `code` (MPI_Abort). Outside MPI: std::exit(code).
/// MPI_Abort itself can block when a peer's host is unreachable: a watchdog ends this
/// process with _exit(code) if it has not returned within 5 s.
[[noreturn]] void abort(int code);

/// The deadline of every collective, in seconds (default 300). Throws xgrad::Error for 0, a
/// negative value, NaN or infinity. Per process; every rank should set the same.
void set_collective_timeout(double seconds);
double collective_timeout();

/// Totals over this process's collectives since MPI started (any group): how many, the bytes
/// they reduced or sent, and the seconds the calling thread spent blocked waiting for them.
struct CollectiveStats {
    std::uint64_t count = 0, bytes = 0;
    double blocked_seconds = 0;
};
CollectiveStats collective_stats();

enum class ReduceOp { sum, mean, min, max };

/// In place, element-wise over the ranks: every rank ends with the reduction of all ranks'
/// `t`. float32, float64 and int64 (mean: floating only). Shapes and dtypes must agree across
/// ranks; the call cannot check that cheaply, so a mismatch is MPI's undefined behaviour.
void all_reduce(Tensor& t, ReduceOp op = ReduceOp::sum);
/// The same over a flat buffer of n values.
void all_reduce(float* data, std::size_t n, ReduceOp op = ReduceOp::sum);
void all_reduce(double* data, std::size_t n, ReduceOp op = ReduceOp::sum);
void all_reduce(std::int64_t* data, std::size_t n, ReduceOp op = ReduceOp::sum);
void all_reduce(std::uint64_t* data, std::size_t n, ReduceOp op = ReduceOp::sum);

/// In place: every rank ends with rank `root`'s values of `t` (any dtype; bool as bytes).
void broadcast(Tensor& t, std::size_t root = 0);
void broadcast(float* data, std::size_t n, std::size_t root = 0);
void broadcast(double* data, std::size_t n, std::size_t root = 0);
void broadcast(std::int64_t* data, std::size_t n, std::size_t root = 0);
void broadcast(std::uint64_t* data, std::size_t n, std::size_t root = 0);

/// A collective started and not yet finished (a non-blocking MPI request). test() lets MPI
/// progress it and says whether it is done; wait() waits for it against the deadline. The
/// buffer it was started on must stay alive and untouched until it is done. Destroyed while
/// unfinished, it waits (errors go to stderr) unless an earlier collective timed out.
class Collective {
public:
    Collective();
    Collective(Collective&&) noexcept;
    Collective& operator=(Collective&&) noexcept;
    ~Collective();
    bool active() const;
    bool test();
    void wait();
    struct State;  // opaque
    explicit Collective(std::unique_ptr<State> state);

private:
    std::unique_ptr<State> m_state;
};

/// A communicator of its own over all ranks (a duplicate of the world). Collectives are
/// matched in order per communicator, so collectives a library starts from a backward hook
/// on its own group cannot pair up with the program's collectives on the world. Making and
/// destroying one are collectives of the world.
class Group {
public:
    /// `name` appears in deadline messages ("data-parallel").
    explicit Group(std::string name);
    ~Group();
    Group(const Group&) = delete;
    Group& operator=(const Group&) = delete;
    /// Starts an in-place sum, min or max over the ranks (not mean); `what` names it in
    /// messages ("gradient bucket 2/3").
    Collective start_all_reduce(float* data, std::size_t n, ReduceOp op, std::string what);
    Collective start_all_reduce(double* data, std::size_t n, ReduceOp op, std::string what);
    struct Impl;  // opaque

private:
    std::unique_ptr<Impl> m_impl;
};

}  // namespace xgrad::distributed
