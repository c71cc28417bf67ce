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

/// update(i, j0, j1) for elements [j0, j1) of parameter i, which has sizes[i] elements: every
/// element of every parameter once, in chunks of about 2^15 elements over the pool.
template <class F> void for_parameter_ranges(const std::vector<std::size_t>& sizes, F&& update) {
    std::vector<std::size_t> start(sizes.size() + 1, 0);
    for (std::size_t i = 0; i < sizes.size(); ++i) start[i + 1] = start[i] + sizes[i];
    parallel_for(start.back(), std::size_t(1) << 15, [&](std::size_t a, std::size_t b) {
        // the last parameter starting at or before a, then each one that starts before b
        std::size_t i = static_cast<std::size_t>(std::upper_bound(start.begin(), start.end(), a) - start.begin()) - 1;
        for (; i < sizes.size() && start[i] < b; ++i) {
            const std::size_t j0 = std::max(a, start[i]) - start[i], j1 = std::min(b, start[i + 1]) - start[i];
            if (j0 < j1) update(i, j0, j1);
        }
    });
}

}  // namespace xgrad::optim
