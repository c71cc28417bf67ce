#include "core/runtime/alloc.hpp"

#include <malloc.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"

namespace xgrad {

namespace {

constexpr std::size_t kAlign = 64;
constexpr std::size_t kSmall = std::size_t(64) << 10;  // below this, plain malloc

#if defined(__SANITIZE_ADDRESS__)
constexpr std::size_t kDefaultLimitMb = 0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr std::size_t kDefaultLimitMb = 0;
#else
constexpr std::size_t kDefaultLimitMb = 1024;
#endif
#else
constexpr std::size_t kDefaultLimitMb = 1024;
#endif

// Four classes per power of two: 64K, 80K, 96K, 112K, 128K, 160K, ...
std::size_t size_class(std::size_t bytes) {
    std::size_t p = kSmall;
    while (p <= bytes / 2) p *= 2;
    const std::size_t step = p / 4;
    return (bytes + step - 1) / step * step;
}

void* system_alloc(std::size_t bytes) {
    // aligned_alloc wants a multiple of the alignment.
    void* p = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
    if (!p) throw std::bad_alloc();
    return p;
}

struct Block {
    void* ptr;
    std::size_t bytes;  // its size class
};

class Cache;
Cache& cache();

// Free blocks: `order` from most to least recently freed; `by_class` the same blocks per size
// class, oldest first, so both the newest of a class (to reuse) and the oldest overall (to
// release) are found without a search.
class Cache {
public:
    Cache() {
        std::size_t mb = kDefaultLimitMb;
        if (const char* env = std::getenv("XGRAD_ALLOC_CACHE_MB")) {
            char* end = nullptr;
            const unsigned long long v = std::strtoull(env, &end, 10);
            if (end != env && *end == '\0') mb = static_cast<std::size_t>(std::min<unsigned long long>(v, SIZE_MAX >> 20));
        }
        m_limit = mb << 20;
        // fork() copies the lists with whatever lock another thread held at that moment, and
        // the child, which has only the forking thread, would wait for it forever: the lock is
        // held across the fork, so that both copies start unlocked and consistent.
        pthread_atfork([] { cache().m_mutex.lock(); }, [] { cache().m_mutex.unlock(); },
                       [] { cache().m_mutex.unlock(); });
#ifdef __GLIBC__
        // Blocks under kSmall, and the graph's nodes, go to malloc, and a training step frees
        // and asks for the same ones every step. glibc hands its heap top back to the system
        // when the free space there passes its (sliding) trim threshold, and the next step
        // faults those pages in again: an eighth of bench_mha tiny's step was in the kernel.
        // Slack kept at the top stops the churn, at the cost of at most this much memory.
        mallopt(M_TOP_PAD, 16 << 20);
#endif
    }

    void* alloc(std::size_t bytes) {
        if (bytes < kSmall) return system_alloc(bytes == 0 ? 1 : bytes);
        // Past this the size-class arithmetic would wrap, and no system has the memory.
        if (bytes > static_cast<std::size_t>(PTRDIFF_MAX)) throw std::bad_alloc();
        const std::size_t cls = size_class(bytes);
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            auto it = m_by_class.find(cls);
            if (it != m_by_class.end() && !it->second.empty()) {
                const auto node = it->second.back();
                it->second.pop_back();
                void* p = node->ptr;
                m_cached -= cls;
                m_order.erase(node);
                ++m_hits;
                return p;
            }
            ++m_misses;
        }
        try {
            return system_alloc(cls);
        } catch (const std::bad_alloc&) {
            empty();  // the idle cached blocks may be what stands in the way: retry once without them
            return system_alloc(cls);
        }
    }

    void free(void* p, std::size_t bytes) noexcept {
        if (!p) return;
        if (bytes < kSmall) {
            std::free(p);
            return;
        }
        const std::size_t cls = size_class(bytes);
        std::list<Block> release;
        void* uncached = nullptr;
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            if (cls > m_limit || !insert(p, cls))
                uncached = p;
            else
                trim(m_limit, release);
        }
        std::free(uncached);
        release_all(release);
    }

    void set_limit(std::size_t bytes) {
        std::list<Block> release;
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            m_limit = bytes;
            trim(m_limit, release);
        }
        release_all(release);
    }

    void empty() {
        std::list<Block> release;
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            trim(0, release);
        }
        release_all(release);
    }

    AllocCacheStats stats() {
        std::lock_guard<std::mutex> lock(m_mutex);
        return {m_hits, m_misses, m_cached, m_limit};
    }

private:
    // Puts p on the free lists; false, with nothing changed, when the bookkeeping itself could
    // not get memory. Called with the lock held.
    bool insert(void* p, std::size_t cls) noexcept {
        try {
            auto& list = m_by_class[cls];
            list.reserve(list.size() + 1);
            m_order.push_front(Block{p, cls});
            list.push_back(m_order.begin());  // cannot throw after the reserve
        } catch (...) {
            if (!m_order.empty() && m_order.front().ptr == p) m_order.pop_front();
            return false;
        }
        m_cached += cls;
        return true;
    }

    // Moves the least recently freed blocks to `release` until at most `keep` bytes are cached,
    // without allocating (list nodes are spliced); the caller frees them after unlocking.
    void trim(std::size_t keep, std::list<Block>& release) noexcept {
        while (m_cached > keep) {
            const auto oldest = std::prev(m_order.end());
            auto& list = m_by_class.find(oldest->bytes)->second;  // exists: the block is on it
            list.erase(list.begin());  // the class's oldest is the overall oldest of its class
            m_cached -= oldest->bytes;
            release.splice(release.begin(), m_order, oldest);
        }
    }

    static void release_all(std::list<Block>& blocks) noexcept {
        for (const Block& b : blocks) std::free(b.ptr);
    }

    std::mutex m_mutex;
    std::list<Block> m_order;
    std::unordered_map<std::size_t, std::vector<std::list<Block>::iterator>> m_by_class;
    std::size_t m_cached = 0, m_limit = 0;
    std::uint64_t m_hits = 0, m_misses = 0;
};

// Never destroyed: tensors held by other static objects may be freed after main returns.
Cache& cache() {
    static Cache* c = new Cache;
    return *c;
}

// Made before main, while the process has one thread: a fork() while another thread was making
// it on first use would leave the child waiting forever on the half-done initialisation.
[[maybe_unused]] const Cache& g_cache_made_before_main = cache();

// What the allocations of this thread are for (AllocContext), read only when one fails.
thread_local AllocContext::State t_context;

[[noreturn]] void out_of_memory(const std::string& request) {
    const AllocContext::State& c = t_context;
    if (c.op && c.shape && c.phase == AllocContext::Phase::backward)
        throw Error(fmt::format("{} backward: out of memory making the gradients of a result of shape {}: cannot "
                                "allocate {}",
                                c.op, shape_str(*c.shape), request));
    if (c.op && c.shape)
        throw Error(fmt::format("{}: out of memory for a result of shape {}: cannot allocate {}", c.op,
                                shape_str(*c.shape), request));
    throw Error(fmt::format("allocator: out of memory: cannot allocate {}", request));
}

}  // namespace

std::uint64_t physical_memory_bytes() {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page <= 0) return 0;
    return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
}

std::string format_bytes(double bytes) {
    const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB"};
    std::size_t u = 0;
    while (bytes >= 1024 && u + 1 < std::size(units)) {
        bytes /= 1024;
        ++u;
    }
    return u == 0 ? fmt::format("{:.0f} bytes", bytes) : fmt::format("{:.1f} {}", bytes, units[u]);
}

void* cached_alloc(std::size_t bytes) {
    try {
        return cache().alloc(bytes);
    } catch (const std::bad_alloc&) {
        out_of_memory(fmt::format("{} bytes ({})", bytes, format_bytes(static_cast<double>(bytes))));
    }
}

void throw_out_of_memory(std::size_t count, std::size_t size) {
    out_of_memory(fmt::format("{} elements of {} bytes ({})", count, size,
                              format_bytes(static_cast<double>(count) * static_cast<double>(size))));
}

void throw_out_of_memory(const std::string& request) { out_of_memory(request); }

AllocContext::AllocContext(const char* op, const std::vector<std::size_t>& shape, Phase phase) noexcept
    : m_previous(t_context) {
    // The ops a gradient formula runs allocate for the backward that runs it: running out of
    // memory names that op's backward, not the mul or sum it is made of.
    if (phase == Phase::forward && t_context.phase == Phase::backward && t_context.op) return;
    t_context = State{op, &shape, phase};
}

AllocContext::AllocContext(const State& state) noexcept : m_previous(t_context) { t_context = state; }

AllocContext::~AllocContext() { t_context = m_previous; }

AllocContext::State AllocContext::current() noexcept { return t_context; }

void cached_free(void* p, std::size_t bytes) noexcept { cache().free(p, bytes); }
AllocCacheStats alloc_cache_stats() { return cache().stats(); }
void empty_cache() { cache().empty(); }
void set_alloc_cache_limit(std::size_t bytes) { cache().set_limit(bytes); }

}  // namespace xgrad
