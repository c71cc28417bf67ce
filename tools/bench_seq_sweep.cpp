// bench_seq_sweep: one training step of d2l's MultiHeadAttention self-attention block (batch 4,
// d 256, 8 heads) at one sequence length, for tools/bench_seq_sweep's table.
//
//   bench_seq_sweep --T N [--mask valid|causal|none] [--autocast none|bf16] [--steps K]
//                   [--need-weights] [--bare]
//
// The step: forward (queries = keys = values = X of (4, T, 256), X without gradient), mse_loss
// against a fixed target, backward, Adam step, zero_grad; the median of K steps (3) after one
// warm-up. Masks: valid lengths T, 3T/4, T/2, T/4 (1-D), causal, or none. --need-weights forces
// the materialised path (weights kept), as before the fused attention.
// Prints one line: T, mask, ms per step, peak RSS (getrusage ru_maxrss, the whole process), and
// GFLOP/s of the step's logical products: the projections (W_q, W_k, W_v forward and weight
// gradient, W_o forward and both gradients) and per head the score and value products (2
// forward, 4 backward) over the keys the mask keeps, each counted once.
// --bare instead times those products as bare float32 sgemm calls (OpenBLAS, the pool's
// threads over the heads), the unmasked shapes, and prints their GFLOP/s: the rate to compare.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <xgrad/xgrad.hpp>

#include "core/flash_attention.hpp"
#include "core/runtime/blas.hpp"
#include "core/runtime/parallel.hpp"
#include "nn/loss.hpp"

using namespace xgrad;

namespace {

constexpr std::size_t kBatch = 4, kHidden = 256, kHeads = 8;

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double peak_rss_mb() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_maxrss) / 1024.0;
}

std::vector<std::int64_t> lengths(std::size_t T) {
    std::vector<std::int64_t> l(kBatch);
    for (std::size_t b = 0; b < kBatch; ++b) l[b] = static_cast<std::int64_t>(T * (kBatch - b) / kBatch);
    return l;
}

// The step's logical product FLOPs: projections and the per-head products over kept pairs.
double logical_flops(std::size_t T, const std::string& mask) {
    const double E = kHidden, BT = double(kBatch) * double(T);
    const double projections = 9 * 2 * BT * E * E;
    double pairs = 0;  // (query, key) pairs kept, summed over the batch
    for (std::size_t b = 0; b < kBatch; ++b) {
        if (mask == "causal") pairs += double(T) * double(T + 1) / 2;
        else if (mask == "valid") pairs += double(T) * double(lengths(T)[b]);
        else pairs += double(T) * double(T);
    }
    const double d = E / kHeads;
    return projections + 6 * 2 * pairs * d * kHeads;
}

int bare(std::size_t T) {
    const std::size_t E = kHidden, d = E / kHeads, BT = kBatch * T;
    std::vector<float> X(BT * E, 0.5f), W(E * E, 0.25f), Y(BT * E);
    const std::size_t threads = num_threads();
    std::vector<std::vector<float>> S(threads, std::vector<float>(T * T, 0.1f));
    std::vector<float> Q(BT * E, 0.3f), O(BT * E);
    auto once = [&] {
        for (int i = 0; i < 9; ++i)
            parallel_for(BT, 256, [&](std::size_t r0, std::size_t r1) {
                blas::gemm<float>(false, false, r1 - r0, E, E, 1.0f, X.data() + r0 * E, E, W.data(), E, 0.0f,
                                  Y.data() + r0 * E, E);
            });
        parallel_for(kBatch * kHeads, 1, [&](std::size_t p0, std::size_t p1) {
            std::vector<float>& s = S[std::min(threads - 1, p0 * threads / (kBatch * kHeads))];
            for (std::size_t p = p0; p < p1; ++p) {
                const std::size_t b = p / kHeads, h = p % kHeads, at = b * T * E + h * d;
                for (int k = 0; k < 2; ++k)  // S = Q·Kᵀ, dP = dO·Vᵀ : (T, d)·(d, T)
                    blas::gemm<float>(false, true, T, T, d, 1.0f, Q.data() + at, E, Q.data() + at, E, 0.0f, s.data(), T);
                for (int k = 0; k < 4; ++k)  // O, dV, dQ, dK : (T, T)·(T, d)
                    blas::gemm<float>(k % 2 == 1, false, T, d, T, 1.0f, s.data(), T, Q.data() + at, E, 0.0f,
                                      O.data() + at, E);
            }
        });
    };
    once();
    std::vector<double> ms;
    for (int i = 0; i < 3; ++i) {
        const double t0 = now_ms();
        once();
        ms.push_back(now_ms() - t0);
    }
    std::sort(ms.begin(), ms.end());
    const double gflops = logical_flops(T, "none") / (ms[1] * 1e6);
    std::printf("bare T=%zu ms=%.1f gflops=%.1f threads=%zu\n", T, ms[1], gflops, threads);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::size_t T = 0, steps = 3;
    std::string mask = "valid", autocast_mode = "none";
    bool need_weights = false, bare_only = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "bench_seq_sweep: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--T") T = std::stoul(next());
        else if (a == "--mask") mask = next();
        else if (a == "--autocast") autocast_mode = next();
        else if (a == "--steps") steps = std::stoul(next());
        else if (a == "--need-weights") need_weights = true;
        else if (a == "--bare") bare_only = true;
        else {
            std::fprintf(stderr, "bench_seq_sweep: unknown option %s\n", a.c_str());
            return 2;
        }
    }
    if (T == 0 || steps == 0 || (mask != "valid" && mask != "causal" && mask != "none") ||
        (autocast_mode != "none" && autocast_mode != "bf16")) {
        std::fprintf(stderr, "bench_seq_sweep: --T N (N > 0) [--mask valid|causal|none] [--autocast none|bf16]\n");
        return 2;
    }
    if (bare_only) return bare(T);
    manual_seed(0);
    nn::MultiHeadAttention mha(nn::MultiHeadAttentionOptions(kHidden, kHeads));
    if (need_weights) mha.need_weights(true);
    optim::Adam opt(mha.parameters(), 1e-4);
    const Tensor X = uniform({long(kBatch), long(T), long(kHidden)}, -1, 1);
    const Tensor target = uniform({long(kBatch), long(T), long(kHidden)}, -1, 1);
    const AttentionMask m = mask == "causal" ? AttentionMask::causal()
                            : mask == "valid" ? AttentionMask::valid_lens(from_vector(lengths(T), {kBatch}))
                                              : AttentionMask();
    std::optional<AutocastGuard> guard;
    if (autocast_mode == "bf16") guard.emplace(kBFloat16);
    auto step = [&] {
        const Tensor loss = mse_loss(mha(X, X, X, m), target);
        loss.backward();
        opt.step();
        opt.zero_grad();
    };
    step();
    std::vector<double> ms;
    for (std::size_t i = 0; i < steps; ++i) {
        const double t0 = now_ms();
        step();
        ms.push_back(now_ms() - t0);
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    std::printf("step T=%zu mask=%s autocast=%s fused=%d ms=%.1f rss_mb=%.0f gflops=%.1f spread=%.1f-%.1f threads=%zu\n",
                T, mask.c_str(), autocast_mode.c_str(), mha.attention()->uses_fused(T, T, kHidden / kHeads) ? 1 : 0, med,
                peak_rss_mb(), logical_flops(T, mask) / (med * 1e6), ms.front(), ms.back(), num_threads());
    return 0;
}
