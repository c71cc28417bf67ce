// bench_mha: one training step and one inference forward of d2l's MultiHeadAttention
// self-attention block in float32, per configuration, timed as the median over ~2 s.
//
//   bench_mha [--config tiny|small|medium|large|all] [--seconds S] [--reps N] [--json PATH]
//             [--autocast none|bf16] [--blas-info]
//
// --autocast bf16 runs everything under xgrad::AutocastGuard (core/autocast.hpp): the products in
// bfloat16 on oneDNN. On a CPU without bfloat16 instructions it exits with status 1 and the
// reason on stderr, unless XGRAD_AUTOCAST_ALLOW_EMULATION=1. "in-gemm" counts the products on
// either engine (BLAS or oneDNN, in float32 or bfloat16); "raw" replays their shapes on BLAS's
// float32 gemm, so under autocast or on oneDNN it is the float32 BLAS rate to compare with.
//
// --reps N times exactly N steps of each kind instead of ~S seconds (for perf stat and
// callgrind, whose counts compare across builds where wall time on a busy machine does not).
//
// Training step: forward (queries = keys = values = X, 1-D valid_lens), mse_loss against a
// fixed target, backward, Adam step, zero_grad. Inference: the forward under NoGradGuard.
// The products of one training step are counted (xgrad::blas_count) and replayed as bare
// gemm calls on contiguous buffers: "raw" GFLOP/s is what BLAS gives for those shapes, "in
// gemm" what it gave inside the step, "step" the step's product FLOPs over its whole time.
// tools/bench_torch.py runs the same workloads in PyTorch; tools/bench runs both.
#include <sys/resource.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <xgrad/xgrad.hpp>

#include <optional>

#include "core/runtime/blas.hpp"
#include "core/runtime/dnnl.hpp"
#include "core/runtime/simd.hpp"
#include "nn/loss.hpp"
#include "optim/adam.hpp"
#include "tools/product_replay.hpp"

using namespace xgrad;

namespace {

struct Config {
    const char* name;
    std::size_t batch, queries, keys, hiddens, heads;
};

const Config configs[] = {
    {"tiny", 2, 4, 6, 100, 5},
    {"small", 32, 32, 32, 128, 4},
    {"medium", 32, 128, 128, 256, 8},
    {"large", 16, 256, 256, 512, 8},
};

// tiny uses the seeds' lengths; otherwise every fourth row is full and the others shorter, so
// masking does work. tools/bench_torch.py uses the same rule.
std::vector<std::int64_t> valid_lens(const Config& c) {
    if (std::strcmp(c.name, "tiny") == 0) return {3, 2};
    std::vector<std::int64_t> v(c.batch);
    for (std::size_t i = 0; i < c.batch; ++i) v[i] = static_cast<std::int64_t>(c.keys - (i % 4) * (c.keys / 8));
    return v;
}

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

std::size_t fixed_reps = 0;  // --reps

// Process CPU time (all threads): steadier than wall time on a busy machine, for comparing
// builds with OPENBLAS_NUM_THREADS=1.
double cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Timings {
    std::vector<double> ms, cpu_ms;
};

// Runs `step` a few times to warm up, then until `seconds` have passed (at least 5 times), or
// exactly fixed_reps times; returns each step's wall and CPU milliseconds.
template <class F> Timings time_steps(F&& step, double seconds) {
    for (int i = 0; i < 3; ++i) step();
    Timings t;
    const auto start = clock_type::now();
    while (fixed_reps ? t.ms.size() < fixed_reps : t.ms.size() < 5 || since(start) < seconds) {
        const auto t0 = clock_type::now();
        const double c0 = cpu_seconds();
        step();
        t.ms.push_back(since(t0) * 1e3);
        t.cpu_ms.push_back((cpu_seconds() - c0) * 1e3);
    }
    return t;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double peak_rss_mb() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}


struct Result {
    std::string config;
    std::string shape;  // for tables: "batch×queries×keys, d, heads"
    double train_ms = 0, infer_ms = 0, train_cpu_ms = 0, infer_cpu_ms = 0;
    std::size_t train_reps = 0, infer_reps = 0;
    double base_rss_mb = 0, peak_rss_mb = 0;
    double gflop_per_step = 0, gemm_ms_per_step = 0, in_gemm_gflops = 0, step_gflops = 0, raw_gflops = 0;
};

Result run(const Config& c, double seconds) {
    Result r;
    r.config = c.name;
    r.shape = fmt::format("{}×{}×{}, d {}, {} heads", c.batch, c.queries, c.keys, c.hiddens, c.heads);
    r.base_rss_mb = peak_rss_mb();
    Generator gen(42);
    const std::size_t h = c.hiddens;
    nn::MultiHeadAttention mha(h, h, h, h, c.heads, 0.0, false, gen);
    const Tensor X = randn({c.batch, c.queries, h}, {}, gen);
    // Self-attention, except tiny, which keeps the seeds' 4 queries over 6 keys/values.
    const Tensor Y = c.keys == c.queries ? X : randn({c.batch, c.keys, h}, {}, gen);
    const Tensor target = randn({c.batch, c.queries, h}, {}, gen);
    const auto lens_v = valid_lens(c);
    const Tensor lens = from_vector(lens_v, {lens_v.size()});
    optim::Adam opt(mha.parameters(), 1e-3);

    auto train_step = [&] {
        const Tensor loss = nn::mse_loss(mha.forward(X, Y, Y, lens), target);
        loss.backward();
        opt.step();
        opt.zero_grad();
    };
    auto infer_step = [&] {
        NoGradGuard no_grad;
        const Tensor out = mha.forward(X, Y, Y, lens);
        (void)out;
    };

    const auto train = time_steps(train_step, seconds);
    r.train_ms = median(train.ms);
    r.train_cpu_ms = median(train.cpu_ms);
    r.train_reps = train.ms.size();
    const auto infer = time_steps(infer_step, seconds);
    r.infer_ms = median(infer.ms);
    r.infer_cpu_ms = median(infer.cpu_ms);
    r.infer_reps = infer.ms.size();
    r.peak_rss_mb = peak_rss_mb();

    // One more step, counting its products.
    blas_count(true);
    train_step();
    blas_count(false);
    const auto products = blas_counted();
    const double f = bench::flops(products);
    double s = 0;
    for (const auto& p : products) s += p.seconds;
    r.gflop_per_step = f / 1e9;
    r.gemm_ms_per_step = s * 1e3;
    r.in_gemm_gflops = s > 0 ? f / s / 1e9 : 0;
    r.step_gflops = f / (r.train_ms / 1e3) / 1e9;
    r.raw_gflops = f / bench::replay_seconds(products, std::min(seconds, 1.0)) / 1e9;
    return r;
}

// How bfloat16 products run here (dnnl.hpp): natively, emulated by oneDNN, or widened to
// float32 where oneDNN has no bfloat16 matmul for this CPU; `why` adds the reason.
const char* bf16_how(bool why) {
    if (dnnl::native_bf16()) return "native";
    if (dnnl::bf16_path() == dnnl::Bf16Path::onednn) return why ? "emulated (no AVX512-BF16 or AMX on this CPU)" : "emulated";
    return why ? "widened to float32 (no AVX512-BF16 or AMX on this CPU, and no bfloat16 matmul in oneDNN for it)"
               : "widened to float32";
}

void print_blas() {
    const BlasInfo& b = blas_info();
    // tools/bench reads the word after ", core ".
    std::printf("BLAS: %s [%s, %s], core %s (the library chose %s; CPU level %s%s), %d thread(s)\n",
                b.library.c_str(), b.backend.c_str(), b.vendor.c_str(), b.core.c_str(), b.detected.c_str(),
                b.cpu_level.c_str(), b.core_fixed ? ", fixed by xgrad" : "", b.num_threads);
    // Which library runs the float32 products (blas.hpp, GemmEngine); "in-gemm" counts both.
    std::printf("float32 engine: %s (XGRAD_GEMM), on this machine: %s for calls of 2^20 multiply-adds or more\n",
                gemm_engine_name(gemm_engine()), gemm_uses_onednn(1, 1024, 1024, 1) ? "oneDNN" : "BLAS");
    // The element loops: bfloat16 conversions under autocast, the softmax's exp and max (simd.hpp).
    std::printf("SIMD: %s element loops (XGRAD_SIMD; this CPU runs up to %s)\n", simd_level_name(simd_level()),
                simd_level_name(simd_level_supported()));
    // tools/bench quotes this line for the bfloat16 side of its four-way table.
    if (dnnl::available())
        std::printf("oneDNN: %s, ISA %s, bfloat16 %s\n", dnnl::version().c_str(), dnnl::isa().c_str(), bf16_how(true));
    else
        std::printf("oneDNN: not in this build (autocast refuses)\n");
}

void write_json(const std::vector<Result>& results, const char* path) {
    std::FILE* f = std::fopen(path, "w");
    if (!f) {
        std::perror(path);
        std::exit(1);
    }
    const BlasInfo& b = blas_info();
    std::fprintf(f,
                 "{\"framework\": \"xgrad\", \"blas_library\": \"%s\", \"blas_core\": \"%s\", \"blas_threads\": %d, "
                 "\"threads\": %zu, \"autocast\": \"%s\", \"results\": [\n",
                 b.library.c_str(), b.core.c_str(), b.num_threads, num_threads(), is_autocast_enabled() ? "bf16" : "none");
    for (std::size_t i = 0; i < results.size(); ++i) {
        const Result& r = results[i];
        std::fprintf(f,
                     "  {\"config\": \"%s\", \"shape\": \"%s\", \"train_ms\": %.4f, \"train_reps\": %zu, \"infer_ms\": %.4f, "
                     "\"infer_reps\": %zu, \"train_cpu_ms\": %.4f, \"infer_cpu_ms\": %.4f, \"base_rss_mb\": %.1f, \"peak_rss_mb\": %.1f, \"gflop_per_step\": %.4f, "
                     "\"gemm_ms_per_step\": %.4f, \"in_gemm_gflops\": %.2f, \"step_gflops\": %.2f, "
                     "\"raw_gflops\": %.2f}%s\n",
                     r.config.c_str(), r.shape.c_str(), r.train_ms, r.train_reps, r.infer_ms, r.infer_reps, r.train_cpu_ms,
                     r.infer_cpu_ms, r.base_rss_mb,
                     r.peak_rss_mb, r.gflop_per_step, r.gemm_ms_per_step, r.in_gemm_gflops, r.step_gflops,
                     r.raw_gflops, i + 1 < results.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
}

[[noreturn]] void usage() {
    std::fprintf(stderr,
                 "usage: bench_mha [--config tiny|small|medium|large|all] [--seconds S] [--reps N] [--json PATH] "
                 "[--autocast none|bf16] [--blas-info]\n");
    std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
    std::string which = "all";
    double seconds = 2.0;
    const char* json = nullptr;
    std::string autocast = "none";
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--config" && i + 1 < argc) which = argv[++i];
        else if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
        else if (a == "--reps" && i + 1 < argc) fixed_reps = std::strtoul(argv[++i], nullptr, 10);
        else if (a == "--json" && i + 1 < argc) json = argv[++i];
        else if (a == "--autocast" && i + 1 < argc) autocast = argv[++i];
        else if (a == "--blas-info") {
            try {
                print_blas();
            } catch (const Error& e) {  // a bad XGRAD_GEMM or XGRAD_SIMD
                std::fprintf(stderr, "bench_mha: error: %s\n", e.what());
                return 1;
            }
            return 0;
        } else usage();
    }
    std::vector<const Config*> chosen;
    for (const Config& c : configs)
        if (which == "all" || which == c.name) chosen.push_back(&c);
    if (chosen.empty() || (autocast != "none" && autocast != "bf16")) usage();
    std::optional<AutocastGuard> guard;
    if (autocast == "bf16") {
        try {
            guard.emplace(kBFloat16);
        } catch (const Error& e) {
            std::fprintf(stderr, "bench_mha: error: %s\n", e.what());
            return 1;
        }
    }

    try {
        print_blas();
    } catch (const Error& e) {  // a bad XGRAD_GEMM or XGRAD_SIMD
        std::fprintf(stderr, "bench_mha: error: %s\n", e.what());
        return 1;
    }
    if (guard) std::printf("autocast: bfloat16 products on %s (isa %s%s%s)\n", dnnl::version().c_str(), dnnl::isa().c_str(),
                           dnnl::native_bf16() ? "" : ", ", dnnl::native_bf16() ? "" : bf16_how(false));
    std::printf("%-7s %10s %10s %9s %9s %9s %9s %9s %9s %9s\n", "config", "train ms", "infer ms", "train cpu",
                "infer cpu", "peak MB", "GFLOP", "in-gemm", "step", "raw");
    std::vector<Result> results;
    for (const Config* c : chosen) {
        results.push_back(run(*c, seconds));
        const Result& r = results.back();
        std::printf("%-7s %10.3f %10.3f %9.3f %9.3f %9.1f %9.3f %9.1f %9.1f %9.1f\n", r.config.c_str(), r.train_ms,
                    r.infer_ms, r.train_cpu_ms, r.infer_cpu_ms, r.peak_rss_mb, r.gflop_per_step, r.in_gemm_gflops, r.step_gflops, r.raw_gflops);
        std::fflush(stdout);
    }
    std::printf("(ms: median per step, wall and process CPU time; GFLOP: products per training step; "
                "in-gemm, step, raw: GFLOP/s inside the products (BLAS or oneDNN) during the step, over the whole "
                "step, and for the same shapes replayed bare on BLAS)\n");
    if (json) write_json(results, json);
}
