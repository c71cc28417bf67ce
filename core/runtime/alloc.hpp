#pragma once
/// Where tensor memory comes from: every xt::xarray in xgrad allocates through
/// cache_allocator (core/xt.hpp makes it xtensor's default), which keeps freed large blocks
/// for reuse, like PyTorch's caching allocator on the GPU.
///
/// Why: a training step frees and reallocates the same large buffers every step. From malloc
/// each comes back as fresh pages from the kernel (glibc maps blocks above its threshold
/// separately and unmaps them on free), and every first write to a page is a page fault that
/// zeroes it; the faults landed inside gemm and cost the large benchmark configuration a
/// quarter to a half of its step (22% and 53% in two side-by-side runs). A reused block is
/// already mapped.
///
/// Blocks of at least 64 KiB are rounded up to a size class (four per power of two, so at
/// most 25% larger; the tail a request never touches is never faulted in) and, when freed,
/// kept on a free list for that class. The cache holds at most a limit of bytes; beyond it
/// the blocks freed longest ago go back to the system. Smaller blocks go straight to malloc,
/// which serves them from its own heap without faults. All blocks are 64-byte aligned.
///
/// Environment: XGRAD_ALLOC_CACHE_MB sets the limit in MiB (default 1024; 0 turns caching
/// off). Under AddressSanitizer the default is 0, so freed memory stays poisoned.
#include <cstddef>
#include <cstdint>
#include <new>

namespace xgrad {

/// At least `bytes` bytes, 64-byte aligned; never null (throws std::bad_alloc).
void* cached_alloc(std::size_t bytes);
/// Returns a block from cached_alloc(bytes), with the same `bytes`.
void cached_free(void* p, std::size_t bytes) noexcept;

struct AllocCacheStats {
    std::uint64_t hits = 0;          ///< large requests served from the cache
    std::uint64_t misses = 0;        ///< large requests that went to the system
    std::size_t cached_bytes = 0;    ///< bytes held in free blocks now
    std::size_t limit_bytes = 0;     ///< the most the cache holds
};
AllocCacheStats alloc_cache_stats();

/// Gives every cached free block back to the system (as torch.cuda.empty_cache does).
void empty_cache();
/// Sets the most bytes the cache holds (0: no caching), releasing blocks beyond it.
void set_alloc_cache_limit(std::size_t bytes);

/// A standard allocator over cached_alloc, for xt::xarray's storage.
template <class T> struct cache_allocator {
    using value_type = T;
    cache_allocator() noexcept = default;
    template <class U> cache_allocator(const cache_allocator<U>&) noexcept {}
    T* allocate(std::size_t n) {
        if (n > SIZE_MAX / sizeof(T)) throw std::bad_array_new_length();
        return static_cast<T*>(cached_alloc(n * sizeof(T)));
    }
    void deallocate(T* p, std::size_t n) noexcept { cached_free(p, n * sizeof(T)); }
    template <class U> struct rebind { using other = cache_allocator<U>; };
    friend bool operator==(const cache_allocator&, const cache_allocator&) noexcept { return true; }
    friend bool operator!=(const cache_allocator&, const cache_allocator&) noexcept { return false; }
};

}  // namespace xgrad
