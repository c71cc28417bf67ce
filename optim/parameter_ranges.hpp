#pragma once
/// The elements of a step's parameters as one range split over the pool, for the optimizers'
/// updates: a model's many small parameters, each under a chunk's worth, would otherwise run one
/// after another on the calling thread, and a large one on one thread alone. Parameters never
/// share storage (each leaf owns its values, and an optimizer refuses a parameter twice), so no
/// two chunks write one element; the updates are elementwise, so the result has the same bits
/// on any number of threads.
#include <algorithm>
#include <cstddef>
#include <vector>

#include "core/runtime/parallel.hpp"

namespace xgrad::optim {

/// update(job, j0, j1) for elements [j0, j1) of each job's parameter, which has job.n elements:
/// every element of every job once, in chunks of about 2^15 elements over the pool.
template <class Job, class F> void for_parameter_ranges(const std::vector<Job>& jobs, F&& update) {
    std::vector<std::size_t> start(jobs.size() + 1, 0);
    for (std::size_t i = 0; i < jobs.size(); ++i) start[i + 1] = start[i] + jobs[i].n;
    parallel_for(start.back(), std::size_t(1) << 15, [&](std::size_t a, std::size_t b) {
        // the last job starting at or before a, then each one that starts before b
        std::size_t i = static_cast<std::size_t>(std::upper_bound(start.begin(), start.end(), a) - start.begin()) - 1;
        for (; i < jobs.size() && start[i] < b; ++i) {
            const std::size_t j0 = std::max(a, start[i]) - start[i], j1 = std::min(b, start[i + 1]) - start[i];
            if (j0 < j1) update(jobs[i], j0, j1);
        }
    });
}

}  // namespace xgrad::optim
