#include "nn/distributed/process_group.hpp"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <string>
#include <type_traits>
#include <variant>

#include <mpi.h>

#include "core/dispatch.hpp"

namespace xgrad::distributed {

namespace {

bool g_owned = false;  // an Environment of this process called MPI_Init

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

MPI_Op mpi_op(ReduceOp op) {
    switch (op) {
        case ReduceOp::min: return MPI_MIN;
        case ReduceOp::max: return MPI_MAX;
        default: return MPI_SUM;
    }
}

// MPI counts are int: longer buffers go in chunks of at most 2^30 elements.
constexpr std::size_t kChunk = std::size_t{1} << 30;

template <class T>
void all_reduce_impl(T* data, std::size_t n, ReduceOp op, MPI_Datatype type) {
    require_init("all_reduce");
    if constexpr (!std::is_floating_point_v<T>)
        if (op == ReduceOp::mean)  // before the reduce, so the caller's values stay as they were
            throw Error("distributed::all_reduce: mean needs floating-point values, got integers");
    for (std::size_t i = 0; i < n; i += kChunk) {
        const int count = static_cast<int>(std::min(kChunk, n - i));
        check(MPI_Allreduce(MPI_IN_PLACE, data + i, count, type, mpi_op(op), MPI_COMM_WORLD), "MPI_Allreduce");
    }
    if constexpr (std::is_floating_point_v<T>)
        if (op == ReduceOp::mean) {
            const T inv = T(1) / static_cast<T>(world_size());
            for (std::size_t i = 0; i < n; ++i) data[i] *= inv;
        }
}

void broadcast_bytes(void* data, std::size_t bytes, std::size_t root) {
    require_init("broadcast");
    if (root >= world_size())
        throw Error(fmt::format("distributed::broadcast: root {} is not a rank (world size {})", root, world_size()));
    auto* p = static_cast<char*>(data);
    for (std::size_t i = 0; i < bytes; i += kChunk) {
        const int count = static_cast<int>(std::min(kChunk, bytes - i));
        check(MPI_Bcast(p + i, count, MPI_BYTE, static_cast<int>(root), MPI_COMM_WORLD), "MPI_Bcast");
    }
}

}  // namespace

namespace {

void init(int* argc, char*** argv) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) throw Error("distributed::Environment: MPI was already finalised in this process");
    if (is_initialized()) throw Error("distributed::Environment: MPI is already initialised (one Environment per process)");
    int provided = 0;
    check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    g_owned = true;
    check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
}

}  // namespace

Environment::Environment(int& argc, char**& argv) { init(&argc, &argv); }
Environment::Environment() { init(nullptr, nullptr); }

Environment::~Environment() {
    if (!g_owned || !is_initialized()) return;
    // With other ranks possibly blocked in a collective, MPI_Finalize could wait forever.
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (std::uncaught_exceptions() > 0 && size > 1) return;
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
    require_init("local_world_size");
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
    require_init("barrier");
    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

void abort(int code) {
    if (is_initialized()) MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code);
}

void all_reduce(float* data, std::size_t n, ReduceOp op) { all_reduce_impl(data, n, op, MPI_FLOAT); }
void all_reduce(double* data, std::size_t n, ReduceOp op) { all_reduce_impl(data, n, op, MPI_DOUBLE); }
void all_reduce(std::int64_t* data, std::size_t n, ReduceOp op) { all_reduce_impl(data, n, op, MPI_INT64_T); }
void all_reduce(std::uint64_t* data, std::size_t n, ReduceOp op) { all_reduce_impl(data, n, op, MPI_UINT64_T); }

void all_reduce(Tensor& t, ReduceOp op) {
    require_init("all_reduce");
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
    dispatch_all(t.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        broadcast_bytes(t.mutable_data_ptr<T>(), t.numel() * sizeof(T), root);
    });
}

}  // namespace xgrad::distributed
