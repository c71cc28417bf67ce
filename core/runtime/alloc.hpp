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
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace xgrad {

/// At least `bytes` bytes, 64-byte aligned; never null. When the system has no such block it
/// throws xgrad::Error naming the size (and the op and shape of an AllocContext in force):
/// "zeros: out of memory for a result of shape (1099511627776,): cannot allocate
/// 4398046511104 bytes (4.0 TiB)".
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

/// The machine's physical memory in bytes (not what is free now, which changes), or 0 when it
/// cannot be read: no file loaded or run planned can need more.
std::uint64_t physical_memory_bytes();
/// A byte count for messages: "512 bytes", "1.5 GiB".
std::string format_bytes(double bytes);

/// Throws the out-of-memory xgrad::Error for a request of `count` elements of `size` bytes
/// each whose byte count does not even fit in a size_t.
[[noreturn]] void throw_out_of_memory(std::size_t count, std::size_t size);
/// Throws the out-of-memory xgrad::Error for memory a library could not get for this thread
/// (oneDNN's kernels and buffers): `request` says what it was ("cannot allocate <request>"),
/// and the message names the op as an allocation of the op's own would.
[[noreturn]] void throw_out_of_memory(const std::string& request);

/// While alive, says what this thread's allocations are for, so that running out of memory
/// names the op and the shape it was making ("matmul: out of memory for a result of shape
/// (8, 8)") or, in backward, the op whose gradients it was making and that op's result ("mul
/// backward: out of memory making the gradients of a result of shape (8, 8)"): the autograd
/// engine sets one around every op's backward, and the ops its gradient formula runs keep it.
/// parallel_for hands the caller's to its chunks.
/// Costs a few thread-local stores; nests.
class AllocContext {
public:
    enum class Phase { forward, backward };
    /// What a thread's context holds; `shape` must outlive the context that holds it.
    struct State {
        const char* op = nullptr;
        const std::vector<std::size_t>* shape = nullptr;
        Phase phase = Phase::forward;
    };
    AllocContext(const char* op, const std::vector<std::size_t>& shape, Phase phase = Phase::forward) noexcept;
    /// Another thread's context, taken with current(): a pool thread working for that thread.
    explicit AllocContext(const State& state) noexcept;
    ~AllocContext();
    AllocContext(const AllocContext&) = delete;
    AllocContext& operator=(const AllocContext&) = delete;
    /// The calling thread's context now.
    static State current() noexcept;

private:
    State m_previous;
};

/// A standard allocator over cached_alloc, for xt::xarray's storage.
///
/// One made with aliasing(p) owns nothing: its allocate hands out p and deallocate does
/// nothing. It lets an xarray stand for a contiguous view's elements inside its base's buffer
/// (core/views.hpp), so kernels that read an xarray read a view without a copy. A copy
/// of such an xarray gets an ordinary allocator (select_on_container_copy_construction) and owns
/// its copy. Such an xarray must never be move-assigned to or from: uvector swaps the buffers
/// but not the allocators.
template <class T> struct cache_allocator {
    using value_type = T;
    cache_allocator() noexcept = default;
    template <class U> cache_allocator(const cache_allocator<U>&) noexcept {}
    static cache_allocator aliasing(T* p) noexcept {
        cache_allocator a;
        a.m_alias = p;
        return a;
    }
    T* allocate(std::size_t n) {
        if (m_alias) return m_alias;
        if (n > SIZE_MAX / sizeof(T)) throw_out_of_memory(n, sizeof(T));
        return static_cast<T*>(cached_alloc(n * sizeof(T)));
    }
    void deallocate(T* p, std::size_t n) noexcept {
        if (!m_alias) cached_free(p, n * sizeof(T));
    }
    cache_allocator select_on_container_copy_construction() const noexcept { return {}; }
    template <class U> struct rebind { using other = cache_allocator<U>; };
    friend bool operator==(const cache_allocator& a, const cache_allocator& b) noexcept { return a.m_alias == b.m_alias; }
    friend bool operator!=(const cache_allocator& a, const cache_allocator& b) noexcept { return !(a == b); }

private:
    T* m_alias = nullptr;
};

/// n values of a trivial type in a block from cached_alloc, left uninitialised, returned to the
/// cache when the buffer dies: scratch space and copies that a kernel fills whole. Unlike a
/// std::vector it does not clear the block first (a serial pass over megabytes), and a block of
/// the same size each step comes back already mapped; unlike a thread_local vector it is not
/// held past its use, so the cache's limit and empty_cache() cover it.
template <class T> class CachedBuffer {
    static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>,
                  "CachedBuffer holds plain values: nothing is constructed in it or destroyed");

public:
    explicit CachedBuffer(std::size_t n) : m_size(n), m_data(cache_allocator<T>().allocate(std::max<std::size_t>(n, 1))) {}
    ~CachedBuffer() { cache_allocator<T>().deallocate(m_data, std::max<std::size_t>(m_size, 1)); }
    CachedBuffer(const CachedBuffer&) = delete;
    CachedBuffer& operator=(const CachedBuffer&) = delete;
    T* data() { return m_data; }
    const T* data() const { return m_data; }
    std::size_t size() const { return m_size; }

private:
    std::size_t m_size;
    T* m_data;
};

}  // namespace xgrad
