#pragma once
/// A small fixed pool of worker threads for xgrad's kernels (products, row loops).
/// parallel_for(n, f) calls f(begin, end) on contiguous chunks of [0, n), one per thread, the
/// caller taking the first; calls made from inside a chunk run inline, so kernels nest safely.
/// Threads: XGRAD_NUM_THREADS if set, else the CPUs this process may run on, at most 8. OpenBLAS
/// is then kept to 1 thread of its own (core/runtime/blas.cpp) so the two pools never oversubscribe.
/// Between loops the threads poll for XGRAD_POOL_SPIN_US microseconds (default 100, 0 for
/// never) before sleeping, so back-to-back loops do not pay a thread wake-up each.
#include <cstddef>
#include <functional>

namespace xgrad {

/// Threads parallel_for uses (>= 1), the caller included.
std::size_t num_threads();

/// f(begin, end) over [0, n) in up to num_threads() contiguous chunks of at least `grain`
/// items each; inline when there is one chunk or when called from inside a chunk. Returns
/// after every chunk is done. f must not throw.
void parallel_for(std::size_t n, std::size_t grain, const std::function<void(std::size_t, std::size_t)>& f);

}  // namespace xgrad
