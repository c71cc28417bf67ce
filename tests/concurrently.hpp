#pragma once
// Runs jobs on threads of their own, all started together, for the tests of what two threads
// may do at once.
#include <atomic>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace xgrad::test_threads {

/// Runs every job on its own thread once all have started; each job's exception message ("" where
/// it returned).
inline std::vector<std::string> run_together(const std::vector<std::function<void()>>& jobs) {
    std::vector<std::string> errors(jobs.size());
    std::atomic<std::size_t> ready{0};
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < jobs.size(); ++i)
        threads.emplace_back([&, i] {
            ++ready;
            while (ready.load() < jobs.size()) std::this_thread::yield();
            try {
                jobs[i]();
            } catch (const std::exception& e) {
                errors[i] = e.what();
                if (errors[i].empty()) errors[i] = "(an exception without a message)";
            }
        });
    for (auto& t : threads) t.join();
    return errors;
}

}  // namespace xgrad::test_threads
