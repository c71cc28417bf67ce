#pragma once
/// A small fixed pool of worker threads for xgrad's kernels (products, row loops).
/// parallel_for(n, f) calls f(begin, end) on contiguous chunks of [0, n), as many as threads;
/// the caller and the pool's threads each claim the next chunk left until none is, so a loop
/// never waits for a thread that has not started (asleep, or held off its core by another
/// process). Calls made from inside a chunk run inline, so kernels nest safely.
/// Threads: XGRAD_NUM_THREADS if set, else the CPUs this process may run on, at most 8. OpenBLAS
/// is then kept to 1 thread of its own (core/runtime/blas.cpp) so the two pools never oversubscribe.
/// Between loops the threads poll for XGRAD_POOL_SPIN_US microseconds (default 100, 0 for
/// never) before sleeping, so back-to-back loops do not pay a thread wake-up each.
///
/// Any number of threads may call parallel_for at once. The pool runs one loop at a time; a
/// loop that finds it busy runs its chunks one after another on its own thread. The chunks are
/// the same either way (they depend only on n, grain and num_threads()), so a result does not
/// depend on which thread got the pool.
#include <cstddef>
#include <functional>
#include <string>

namespace xgrad {

/// Threads parallel_for uses (>= 1), the caller included. The pool starts at the first call
/// of this or of parallel_for; a bad XGRAD_NUM_THREADS or XGRAD_POOL_SPIN_US makes every such
/// call throw xgrad::Error (see parse_num_threads).
std::size_t num_threads();

/// f(begin, end) over [0, n) in up to num_threads() contiguous chunks of at least `grain`
/// items each; inline when there is one chunk or when called from inside a chunk. Returns
/// after every chunk is done. If a chunk throws, the first exception is rethrown once no chunk
/// of the loop is running any more (the other chunks may or may not have run).
void parallel_for(std::size_t n, std::size_t grain, const std::function<void(std::size_t, std::size_t)>& f);

/// Whether the calling thread is running a parallel_for chunk (a pool thread, or a caller in
/// its own chunks): code whose result must not depend on the thread count checks it.
bool in_parallel_chunk();

/// The most threads XGRAD_NUM_THREADS can ask for.
constexpr std::size_t kMaxThreads = 64;

/// A thread count read from XGRAD_NUM_THREADS: `capped` when the value asked for more than
/// kMaxThreads (the pool then says so once on stderr).
struct ThreadCount {
    std::size_t threads;
    bool capped;
};

/// Parses a value of XGRAD_NUM_THREADS: decimal digits only, at least 1; no sign, space,
/// exponent or trailing text. Above kMaxThreads (however many digits) gives kMaxThreads,
/// capped. Anything else throws xgrad::Error naming the variable and the value.
ThreadCount parse_num_threads(const std::string& value);

}  // namespace xgrad
