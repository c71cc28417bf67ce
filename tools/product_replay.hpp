#pragma once
// The products a step ran (xgrad::blas_count), replayed as bare gemm calls on contiguous
// float32 buffers: what OpenBLAS alone takes for those shapes, the floor under any step that
// runs them. bench_mha reports its rate, bench_gpt_ops its time beside the twin's step.
#include <algorithm>
#include <chrono>
#include <vector>

#include "core/runtime/blas.hpp"

namespace xgrad::bench {

inline double flops(const BlasProduct& p) {
    return 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k) *
           static_cast<double>(p.calls);
}

inline double flops(const std::vector<BlasProduct>& products) {
    double f = 0;
    for (const auto& p : products) f += flops(p);
    return f;
}

// Seconds per replay of the whole list: the median of at least five replays run back to back
// for about `seconds`, after one to warm the buffers.
inline double replay_seconds(const std::vector<BlasProduct>& products, double seconds) {
    std::size_t biggest = 1;
    for (const auto& p : products) biggest = std::max({biggest, p.m * p.k, p.k * p.n, p.m * p.n});
    std::vector<float> a(biggest, 0.5f), b(biggest, 0.25f), c(biggest, 0.0f);
    auto once = [&] {
        for (const auto& p : products)
            for (std::uint64_t i = 0; i < p.calls; ++i)
                blas::gemm<float>(p.trans_a, p.trans_b, p.m, p.n, p.k, 1.0f, a.data(), p.trans_a ? p.m : p.k,
                                  b.data(), p.trans_b ? p.k : p.n, 0.0f, c.data(), p.n);
    };
    using clock = std::chrono::steady_clock;
    once();
    std::vector<double> runs;
    const auto start = clock::now();
    while (runs.size() < 5 || std::chrono::duration<double>(clock::now() - start).count() < seconds) {
        const auto t0 = clock::now();
        once();
        runs.push_back(std::chrono::duration<double>(clock::now() - t0).count());
    }
    std::sort(runs.begin(), runs.end());
    return runs[runs.size() / 2];
}

}  // namespace xgrad::bench
