#include "core/runtime/parallel.hpp"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace xgrad {

namespace {

thread_local bool inside_chunk = false;

std::size_t threads_wanted() {
    if (const char* v = std::getenv("XGRAD_NUM_THREADS")) {
        const long n = std::strtol(v, nullptr, 10);
        if (n >= 1) return static_cast<std::size_t>(std::min(n, 64L));
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return std::clamp<std::size_t>(CPU_COUNT(&set), 1, 8);
    return std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 8);
}

// A job hands chunk i to worker i - 1 and the caller runs chunk 0, then waits for the count of
// finished chunks. Both sides spin for a short while (m_spin) before sleeping on a
// condition variable: in a training step one parallel loop follows another within
// microseconds, and waking a sleeping thread costs tens of microseconds in a VM, more than
// a small loop's whole chunk.
class Pool {
public:
    explicit Pool(std::size_t threads, std::chrono::microseconds spin) : m_spin(spin) {
        for (std::size_t i = 1; i < threads; ++i) m_workers.emplace_back([this, i] { work(i); });
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

    void run(std::size_t chunks, const std::function<void(std::size_t)>& chunk) {
        std::lock_guard<std::mutex> one_job(m_job_mutex);  // concurrent callers take turns
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            m_chunk = &chunk;
            m_chunks = chunks;
            m_done.store(1);
            m_generation.fetch_add(1);
        }
        m_wake.notify_all();
        inside_chunk = true;
        chunk(0);
        inside_chunk = false;
        if (!spin_until([&] { return m_done.load() == chunks; })) {
            std::unique_lock<std::mutex> lock(m_mutex);
            m_finished.wait(lock, [&] { return m_done.load() == chunks; });
        }
        std::lock_guard<std::mutex> lock(m_mutex);
        m_chunk = nullptr;
    }

private:
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
        std::size_t seen = 0;
        for (;;) {
            const std::function<void(std::size_t)>* chunk;
            spin_until([&] { return m_generation.load() != seen || m_stop_flag.load(); });
            {
                std::unique_lock<std::mutex> lock(m_mutex);
                m_wake.wait(lock, [&] { return m_stop || m_generation.load() != seen; });
                if (m_stop) return;
                seen = m_generation.load();
                if (index >= m_chunks) continue;
                chunk = m_chunk;
            }
            (*chunk)(index);
            {
                std::lock_guard<std::mutex> lock(m_mutex);
                m_done.fetch_add(1);
            }
            m_finished.notify_one();
        }
    }

    std::vector<std::thread> m_workers;
    std::mutex m_job_mutex, m_mutex;
    std::condition_variable m_wake, m_finished;
    const std::function<void(std::size_t)>* m_chunk = nullptr;
    std::size_t m_chunks = 0;
    std::atomic<std::size_t> m_done{0}, m_generation{0};
    bool m_stop = false;
    std::atomic<bool> m_stop_flag{false};
    const std::chrono::microseconds m_spin;
};

// XGRAD_POOL_SPIN_US: how long an idle thread polls before sleeping (default 100; 0: never).
std::chrono::microseconds spin_wanted() {
    if (const char* v = std::getenv("XGRAD_POOL_SPIN_US")) {
        char* end = nullptr;
        const long n = std::strtol(v, &end, 10);
        if (end != v && *end == '\0' && n >= 0) return std::chrono::microseconds(std::min(n, 100000L));
    }
    return std::chrono::microseconds(100);
}

Pool& pool() {
    static Pool p(threads_wanted(), spin_wanted());
    return p;
}

}  // namespace

std::size_t num_threads() { return pool().size(); }

void parallel_for(std::size_t n, std::size_t grain, const std::function<void(std::size_t, std::size_t)>& f) {
    if (n == 0) return;
    const std::size_t chunks =
        inside_chunk ? 1 : std::min(pool().size(), std::max<std::size_t>(1, n / std::max<std::size_t>(grain, 1)));
    if (chunks <= 1) return f(0, n);
    const std::function<void(std::size_t)> chunk = [&](std::size_t i) { f(n * i / chunks, n * (i + 1) / chunks); };
    pool().run(chunks, chunk);
}

}  // namespace xgrad
