// bench_gemm: GFLOP/s of the bare products, per shape: OpenBLAS sgemm (through xgrad's BLAS
// layer, the core it runs is printed), oneDNN's float32 matmul, and oneDNN's bfloat16 matmul
// (float32 accumulation; inputs already bfloat16, and with the conversion of both inputs
// counted; where oneDNN has no bfloat16 matmul, the inputs widened to float32 for its float32
// one, as autocast runs them). The shapes are 1024³ and the products of tools/bench_mha's
// configurations.
//
//   XGRAD_NUM_THREADS=1 bench_gemm [--seconds S]   one core: both split over xgrad's pool
//
// Each figure is the best of five timed runs of at least S/5 seconds each.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "core/runtime/bfloat16.hpp"
#include "core/runtime/blas.hpp"
#include "core/runtime/dnnl.hpp"
#include "core/runtime/parallel.hpp"

namespace {

struct Shape {
    const char* what;
    std::size_t batch, m, n, k;
};

const Shape shapes[] = {
    {"square 1024", 1, 1024, 1024, 1024},
    {"small: projection", 1, 1024, 128, 128},
    {"small: scores", 128, 32, 32, 32},
    {"medium: projection", 1, 4096, 256, 256},
    {"medium: scores", 256, 128, 128, 32},
    {"large: projection", 1, 4096, 512, 512},
    {"large: scores", 128, 256, 256, 64},
};

double best_gflops(const Shape& s, double seconds, const std::function<void()>& run) {
    using clock = std::chrono::steady_clock;
    run();  // warm-up: first-call costs (primitive creation, page faults) are not the product's
    const double flops = 2.0 * static_cast<double>(s.batch * s.m * s.n * s.k);
    double best = 0;
    for (int round = 0; round < 5; ++round) {
        std::size_t reps = 0;
        const auto start = clock::now();
        double elapsed = 0;
        do {
            run();
            ++reps;
            elapsed = std::chrono::duration<double>(clock::now() - start).count();
        } while (elapsed < seconds / 5);
        best = std::max(best, flops * static_cast<double>(reps) / elapsed / 1e9);
    }
    return best;
}

}  // namespace

int main(int argc, char** argv) {
    double seconds = 1.0;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            char* end = nullptr;
            seconds = std::strtod(argv[++i], &end);
            if (*end != '\0' || !(seconds > 0 && seconds < 3600)) {
                fmt::print(stderr, "bench_gemm: --seconds: expected a number in (0, 3600), got '{}'\n", argv[i]);
                return 2;
            }
        } else {
            fmt::print(stderr, "usage: bench_gemm [--seconds S]\n");
            return 2;
        }
    }
    const auto& blas = xgrad::blas_info();
    // Where oneDNN has no bfloat16 matmul, "dnnl bf16" widens its inputs to float32 (dnnl.hpp, bf16_path).
    const bool widened = xgrad::dnnl::available() && xgrad::dnnl::bf16_path() == xgrad::dnnl::Bf16Path::widened;
    fmt::print("OpenBLAS: {} core {} ({} thread(s)); {}: isa {}, native bfloat16 {}{}; xgrad's pool: {} thread(s)\n",
               blas.vendor, blas.core, blas.num_threads, xgrad::dnnl::available() ? xgrad::dnnl::version() : "no oneDNN",
               xgrad::dnnl::isa(), xgrad::dnnl::native_bf16() ? "yes" : "no",
               widened ? " (no bfloat16 matmul: bf16 widened to float32)" : "", xgrad::num_threads());
    fmt::print("{:<20} {:>24} {:>10} {:>11} {:>11} {:>15}\n", "shape", "batch x m x n x k", "sgemm",
               "dnnl f32", "dnnl bf16", "bf16+convert");
    std::mt19937 rng(0);
    std::uniform_real_distribution<float> uniform(-1, 1);
    for (const auto& s : shapes) {
        std::vector<float> a(s.batch * s.m * s.k), b(s.batch * s.k * s.n), c(s.batch * s.m * s.n);
        for (auto& v : a) v = uniform(rng);
        for (auto& v : b) v = uniform(rng);
        std::vector<std::uint16_t> a16(a.size()), b16(b.size());
        xgrad::bf16_from_float(a.data(), a16.data(), a.size());
        xgrad::bf16_from_float(b.data(), b16.data(), b.size());

        const double sgemm = best_gflops(s, seconds, [&] {
            for (std::size_t i = 0; i < s.batch; ++i)
                xgrad::blas::gemm<float>(false, false, s.m, s.n, s.k, 1.0f, a.data() + i * s.m * s.k, s.k,
                                         b.data() + i * s.k * s.n, s.n, 0.0f, c.data() + i * s.m * s.n, s.n);
        });
        std::string f32 = "-", bf16 = "-", bf16_convert = "-";
        if (xgrad::dnnl::available()) {
            xgrad::dnnl::Matmul p;
            p.batch = s.batch, p.m = s.m, p.n = s.n, p.k = s.k;
            p.stride_a = s.batch > 1 ? s.m * s.k : 0;
            p.stride_b = s.batch > 1 ? s.k * s.n : 0;
            f32 = fmt::format("{:.0f}", best_gflops(s, seconds, [&] { xgrad::dnnl::matmul(p, a.data(), b.data(), c.data()); }));
            p.input = xgrad::dnnl::Input::bf16;
            bf16 = fmt::format("{:.0f}", best_gflops(s, seconds, [&] { xgrad::dnnl::matmul(p, a16.data(), b16.data(), c.data()); }));
            bf16_convert = fmt::format("{:.0f}", best_gflops(s, seconds, [&] {
                xgrad::bf16_from_float(a.data(), a16.data(), a.size());
                xgrad::bf16_from_float(b.data(), b16.data(), b.size());
                xgrad::dnnl::matmul(p, a16.data(), b16.data(), c.data());
            }));
        }
        fmt::print("{:<20} {:>24} {:>10.0f} {:>11} {:>11} {:>15}\n", s.what,
                   fmt::format("{}x{}x{}x{}", s.batch, s.m, s.n, s.k), sgemm, f32, bf16, bf16_convert);
    }
    fmt::print("GFLOP/s, best of 5 runs; OpenBLAS runs one thread (xgrad keeps it so), oneDNN as many as OpenMP gives it.\n");
}
