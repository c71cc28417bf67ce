#include "core/runtime/parallel.hpp"

#include "core/runtime/alloc.hpp"

#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace xgrad {

namespace {

thread_local bool inside_chunk = false;

// Set in a child process made by fork() after the pool started: the pool's threads stayed in
// the parent (and its locks may be held by threads the child does not have), so a loop handed
// to it would wait for them forever. The child runs every loop's chunks itself instead.
std::atomic<bool> forked_child{false};

// Marks the calling thread as inside a chunk while it lives, restoring the flag on unwind.
class ChunkScope {
public:
    ChunkScope() : m_saved(inside_chunk) { inside_chunk = true; }
    ~ChunkScope() { inside_chunk = m_saved; }
    ChunkScope(const ChunkScope&) = delete;
    ChunkScope& operator=(const ChunkScope&) = delete;

private:
    bool m_saved;
};

// A whole decimal count from environment variable `var`: digits only (strtol would read " 3"
// and "3abc" as 3 and "1e3" as 1), at least `min`; above `cap`, however many digits, `cap`.
struct Count {
    std::size_t value;
    bool capped;
};
Count parse_count(const char* var, const std::string& v, std::size_t min, std::size_t cap, const char* expected) {
    const bool digits =
        !v.empty() && std::all_of(v.begin(), v.end(), [](unsigned char c) { return c >= '0' && c <= '9'; });
    if (digits) {
        std::size_t n = 0;
        for (const char c : v) {
            n = n * 10 + static_cast<std::size_t>(c - '0');
            if (n > cap) return {cap, true};  // long before n * 10 could wrap
        }
        if (n >= min) return {n, false};
    }
    throw Error(fmt::format("{}: invalid value '{}' (expected {})", var, v, expected));
}

std::size_t threads_wanted() {
    if (const char* v = std::getenv("XGRAD_NUM_THREADS")) {
        const ThreadCount count = parse_num_threads(v);
        if (count.capped)
            std::fprintf(stderr, "xgrad: XGRAD_NUM_THREADS=%s is more than the %zu threads xgrad uses at most; using %zu\n",
                         v, kMaxThreads, count.threads);
        return count.threads;
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return std::clamp<std::size_t>(CPU_COUNT(&set), 1, 8);
    return std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 8);
}

// XGRAD_POOL_SPIN_US: how long an idle thread polls before sleeping (default 100; 0: never).
std::chrono::microseconds spin_wanted() {
    constexpr std::size_t cap = 100000;
    if (const char* v = std::getenv("XGRAD_POOL_SPIN_US")) {
        const Count c = parse_count("XGRAD_POOL_SPIN_US", v, 0, cap,
                                    "a whole number of microseconds >= 0, digits only; unset it for the default 100");
        if (c.capped) std::fprintf(stderr, "xgrad: XGRAD_POOL_SPIN_US=%s is more than %zu; using %zu\n", v, cap, cap);
        return std::chrono::microseconds(c.value);
    }
    return std::chrono::microseconds(100);
}

// Thread i (the caller is 0) claims chunk i of a loop first, then any chunk still unclaimed,
// and the caller then waits for the count of finished chunks. Keeping chunk i on thread i
// keeps each half of a tensor in the same core's cache from one loop to the next; claiming the
// rest means a worker that has not yet woken, or that another process holds off its core,
// delays nothing: the caller runs its chunk (with a fixed chunk per worker, a descheduled one
// held every loop up until its next time slice). Which thread runs a chunk never changes what
// it computes. Both sides spin for a short while (m_spin) before sleeping on a condition
// variable: in a training step one parallel loop follows another within microseconds, and
// waking a sleeping thread costs tens of microseconds in a VM, more than a small loop's whole
// chunk.
class Pool {
public:
    explicit Pool(std::size_t threads, std::chrono::microseconds spin) : m_spin(spin) {
        for (std::size_t i = 1; i < threads; ++i) m_workers.emplace_back([this, i] { work(i); });
        pthread_atfork(nullptr, nullptr, [] { forked_child.store(true); });
    }
    ~Pool() {
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            m_stop = true;
            m_stop_flag.store(true);
        }
        m_wake.notify_all();
        for (auto& t : m_workers) t.join();
    }
    std::size_t size() const { return m_workers.size() + 1; }

    // Runs a loop on the pool; false, having run nothing, when another thread's loop has it.
    bool try_run(std::size_t chunks, const std::function<void(std::size_t)>& chunk) {
        std::unique_lock<std::mutex> one_loop(m_loop_mutex, std::try_to_lock);
        if (!one_loop.owns_lock()) return false;
        std::uint64_t generation;
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            m_chunk = &chunk;
            m_chunks = chunks;
            m_error = nullptr;
            m_done.store(0);
            generation = m_generation.load() + 1;
            m_generation.store(generation);
        }
        m_wake.notify_all();
        {
            ChunkScope scope;
            run_claimed(0, generation, chunks, chunk);
        }
        // Also after a failed chunk: the workers may still be running theirs.
        if (!spin_until([&] { return m_done.load() == chunks; })) {
            std::unique_lock<std::mutex> lock(m_mutex);
            m_finished.wait(lock, [&] { return m_done.load() == chunks; });
        }
        std::exception_ptr error;
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            m_chunk = nullptr;
            error = std::exchange(m_error, nullptr);
        }
        if (error) std::rethrow_exception(error);
        return true;
    }

private:
    // Chunk i of loop `generation`, if no thread has claimed it yet. m_claimed[i] holds the
    // latest loop whose chunk i was claimed: loops are numbered upwards and every chunk of a
    // loop is claimed before the next loop starts, so a thread still holding an earlier loop's
    // `chunk` can never take a chunk of a later one.
    bool claim(std::size_t i, std::uint64_t generation) {
        std::uint64_t seen = m_claimed[i].load();
        while (seen < generation)
            if (m_claimed[i].compare_exchange_weak(seen, generation)) return true;
        return false;
    }

    // Runs chunk `own` of loop `generation` if it is still unclaimed, then every other chunk
    // still unclaimed, counting each one done. chunk(index) keeps the loop's first exception
    // for the caller: one escaping a worker would end the process, one escaping the caller
    // early would leave the workers running a destroyed `chunk`.
    void run_claimed(std::size_t own, std::uint64_t generation, std::size_t chunks,
                     const std::function<void(std::size_t)>& chunk) {
        for (std::size_t k = 0; k < chunks; ++k) {
            const std::size_t index = (own + k) % chunks;
            if (!claim(index, generation)) continue;
            try {
                chunk(index);
            } catch (...) {
                std::lock_guard<std::mutex> lock(m_mutex);
                if (!m_error) m_error = std::current_exception();
            }
            {
                std::lock_guard<std::mutex> lock(m_mutex);
                m_done.fetch_add(1);
            }
            m_finished.notify_one();
        }
    }

    // Polls `ready` for up to m_spin; true as soon as it holds.
    template <class F> bool spin_until(F&& ready) const {
        if (ready()) return true;
        if (m_spin.count() == 0) return false;
        const auto deadline = std::chrono::steady_clock::now() + m_spin;
        for (unsigned i = 1;; ++i) {
            if (ready()) return true;
            if (i % 16 == 0 && std::chrono::steady_clock::now() > deadline) return false;
            // Yielding, not a bare pause loop: on a busy machine the thread we wait for may
            // need this very core.
            sched_yield();
        }
    }

    void work(std::size_t index) {
        inside_chunk = true;
        std::uint64_t seen = 0;
        for (;;) {
            const std::function<void(std::size_t)>* chunk;
            std::size_t chunks;
            spin_until([&] { return m_generation.load() != seen || m_stop_flag.load(); });
            {
                std::unique_lock<std::mutex> lock(m_mutex);
                m_wake.wait(lock, [&] { return m_stop || m_generation.load() != seen; });
                if (m_stop) return;
                seen = m_generation.load();
                chunk = m_chunk;
                chunks = m_chunks;
            }
            // null: the loop ended before this thread woke, its chunks all run by others
            if (chunk && index < chunks) run_claimed(index, seen, chunks, *chunk);
        }
    }

    std::vector<std::thread> m_workers;
    std::mutex m_loop_mutex, m_mutex;
    std::condition_variable m_wake, m_finished;
    const std::function<void(std::size_t)>* m_chunk = nullptr;
    std::size_t m_chunks = 0;
    std::exception_ptr m_error;  // the loop's first exception; guarded by m_mutex
    std::atomic<std::size_t> m_done{0};
    std::atomic<std::uint64_t> m_generation{0};
    std::atomic<std::uint64_t> m_claimed[kMaxThreads] = {};
    bool m_stop = false;
    std::atomic<bool> m_stop_flag{false};
    const std::chrono::microseconds m_spin;
};

// A bad setting throws from here on every call (a static whose initialiser throws is tried
// again next time), so no loop ever runs on a pool the user did not ask for.
Pool& pool() {
    // A forked child leaves the pool alone at exit too: its threads, and the waiters its
    // condition variables would wait for, are the parent's.
    struct Owner {
        Pool* pool;
        ~Owner() {
            if (!forked_child.load()) delete pool;
        }
    };
    static Owner p{new Pool(threads_wanted(), spin_wanted())};
    return *p.pool;
}

}  // namespace

ThreadCount parse_num_threads(const std::string& value) {
    const Count c = parse_count("XGRAD_NUM_THREADS", value, 1, kMaxThreads,
                                "a whole number of threads >= 1, digits only; unset it for the default, the CPUs "
                                "this process may use, at most 8");
    return {c.value, c.capped};
}

bool in_parallel_chunk() { return inside_chunk; }

std::size_t num_threads() { return pool().size(); }

void parallel_for(std::size_t n, std::size_t grain, const std::function<void(std::size_t, std::size_t)>& f) {
    if (n == 0) return;
    const std::size_t chunks =
        inside_chunk ? 1 : std::min(pool().size(), std::max<std::size_t>(1, n / std::max<std::size_t>(grain, 1)));
    if (chunks <= 1) {
        // Marked as a chunk too, so that what a chunk may not do fails on one thread as on many.
        ChunkScope scope;
        return f(0, n);
    }
    // Each chunk allocates under the caller's AllocContext: running out of memory on a pool
    // thread names the op as on the caller.
    const AllocContext::State context = AllocContext::current();
    const std::function<void(std::size_t)> chunk = [&](std::size_t i) {
        const AllocContext caller(context);
        f(n * i / chunks, n * (i + 1) / chunks);
    };
    if (!forked_child.load() && pool().try_run(chunks, chunk)) return;
    // Another thread's loop has the pool, or it is a parent's: the same chunks, one after
    // another, on this thread. Waiting for the pool instead would stall, or deadlock on a lock
    // the caller holds.
    ChunkScope scope;
    for (std::size_t i = 0; i < chunks; ++i) chunk(i);
}

}  // namespace xgrad
