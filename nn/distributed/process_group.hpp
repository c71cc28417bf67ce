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
/// (MPI's rule). A failing MPI call throws xgrad::Error naming the call and MPI's message.
/// Communicators use MPI_ERRORS_RETURN, so an error reaches the caller instead of MPI aborting.
#include <cstddef>
#include <cstdint>

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
[[noreturn]] void abort(int code);

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

}  // namespace xgrad::distributed
