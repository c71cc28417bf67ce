#pragma once
/// Thin typed wrapper over cblas gemm (row-major), the one place core/ calls BLAS.
/// C = alpha·op(A)·op(B) + beta·C, op(X) = Xᵀ when its flag is set; M×N result, K inner.
/// Leading dimensions are those of the matrices as stored (before the transpose flag).
///
/// The build chooses how BLAS is reached (CMake cache option XGRAD_BLAS, core/CMakeLists.txt):
///
/// openblas-runtime (default): OpenBLAS is loaded with dlopen on the first product, not linked:
/// its kernel choice is made once, when the library loads, from OPENBLAS_CORETYPE or its own CPU
/// detection, and Debian's 0.3.21 detects some recent Intel cores as an older one (e.g.
/// "Prescott", SSE3 kernels, about 5x slower sgemm). xgrad compares the core OpenBLAS chose with
/// the CPU's own feature flags and, when the core is weaker than the CPU, reloads OpenBLAS with
/// OPENBLAS_CORETYPE set to the best kernel family the CPU runs, saying so once on stderr.
///
/// cblas: the CBLAS that CMake's find_package(BLAS) found at configure time (BLA_VENDOR=FLAME for
/// BLIS, OpenBLAS, Intel10_64lp for MKL, Generic for Debian's libblas.so alternative) is linked
/// and called through the cxxblas layer bundled with xtensor-blas. Its kernels are its own
/// choice: xgrad checks and fixes nothing, and blas_info() names the file that provides
/// cblas_sgemm and what that library says it is.
///
/// Environment:
///   XGRAD_BLAS_CORETYPE=auto (default) fix a mis-detected core; an OPENBLAS_CORETYPE the
///                         user set is kept as set (openblas-runtime only).
///   XGRAD_BLAS_CORETYPE=keep  never change the core OpenBLAS picks.
///   XGRAD_BLAS_LIBRARY=path   the shared library to load (default libopenblas.so.0;
///                             openblas-runtime only).
///   OPENBLAS_NUM_THREADS      kept when set (and, for their libraries, BLIS_NUM_THREADS,
///                             MKL_NUM_THREADS, OMP_NUM_THREADS); otherwise the BLAS runs 1 thread
///                             and xgrad splits large products over its own pool
///                             (XGRAD_NUM_THREADS, parallel.hpp).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace xgrad {

/// What xgrad's BLAS runs on; loads the library if it is not loaded yet.
struct BlasInfo {
    std::string backend;     ///< the build's XGRAD_BLAS: "openblas-runtime" or "cblas"
    std::string library;     ///< what dlopen loaded, e.g. "libopenblas.so.0"; for cblas, the file
                             ///< that provides cblas_sgemm with its links resolved
    std::string vendor;      ///< what the library says it is, e.g. "OpenBLAS 0.3.21 ...", "BLIS 0.9.0";
                             ///< "unknown CBLAS" when it has no call that says
    std::string core;        ///< the kernels it runs after any fix: openblas_get_corename(), e.g.
                             ///< "SkylakeX", or BLIS's sub-configuration; "unknown" when it cannot tell
    std::string cpu_level;   ///< best kernel family the CPU's flags allow: "SkylakeX", "Haswell", ...
    std::string detected;    ///< the core OpenBLAS chose by itself (or the user's), before any fix;
                             ///< for cblas the same as `core`
    bool core_fixed = false; ///< xgrad reloaded OpenBLAS with a better OPENBLAS_CORETYPE
    int num_threads = 0;     ///< the library's own thread count; 0 when it has no call to ask
};

/// Loads the BLAS (once) and reports what runs. openblas-runtime: throws std::runtime_error
/// naming the library when it or one of its symbols is missing.
const BlasInfo& blas_info();

/// Sets the BLAS library's own thread count (OpenBLAS, BLIS or MKL). xgrad already keeps it at 1
/// and splits large products over its pool (parallel.hpp); for programs that want otherwise. A
/// CBLAS with no such call (the reference BLAS runs one thread) is left as it is, and xgrad says
/// so once on stderr.
void blas_set_num_threads(int threads);

/// One product shape run while counting was on: op(A) m×k times op(B) k×n, how often and the
/// seconds spent inside BLAS for it (wall clock).
struct BlasProduct {
    bool trans_a = false, trans_b = false;
    std::size_t m = 0, n = 0, k = 0;
    bool is_double = false;
    std::uint64_t calls = 0;
    double seconds = 0;
};

/// Starts (and clears) or stops counting products, for benchmarks: each gemm then costs two
/// clock reads. Not thread-safe: count from one thread.
void blas_count(bool on);
/// The products counted since blas_count(true), by shape.
std::vector<BlasProduct> blas_counted();
/// For the other engine (oneDNN): whether counting is on, and adds `calls` products of one
/// shape that took `seconds` in all, so the benchmarks' rates cover every float32 product.
bool blas_counting();
void blas_record(const BlasProduct& product);

/// Which library multiplies float32 products (matmul, bmm, matmul_t, nn::Linear, the attention
/// products); float64 always runs on the BLAS, and autocast's bfloat16 always on oneDNN.
///   Auto:    the rule below (gemm_rule_picks_onednn), from the shape and what the BLAS and
///            oneDNN run on this CPU, never from timing, so replicas with the same libraries,
///            CPU level and settings pick alike.
///   OpenBlas: always the BLAS (whatever blas_info() names: OpenBLAS, or the cblas build's).
///   OneDnn:  always oneDNN (an Error where the build has none).
/// The two engines round float32 sums differently: a result may differ in the last bits.
enum class GemmEngine { Auto, OpenBlas, OneDnn };

/// "auto", "openblas" or "onednn"; anything else is an Error naming `what` and the choices.
GemmEngine parse_gemm_engine(const std::string& value, const char* what = "XGRAD_GEMM");
const char* gemm_engine_name(GemmEngine engine);

/// The engine setting: the last set_gemm_engine(), else XGRAD_GEMM from the environment (read
/// once; a bad value is an Error on every call), else Auto.
GemmEngine gemm_engine();
/// Sets the engine for the whole process, from then on (products already recorded keep the
/// engine their forward used for their backward too). OneDnn without oneDNN in the build
/// throws xgrad::Error and changes nothing.
void set_gemm_engine(GemmEngine engine);

/// Auto's rule, apart so that it can be tested for any CPU. oneDNN is chosen when
///   - oneDNN runs AVX-512 here (`dnnl_isa` starts with "avx512_core"), and
///   - the BLAS is OpenBLAS (`blas_backend` "openblas-runtime"), whichever kernel family it
///     runs: in bench_mha's training and inference steps oneDNN's float32 was faster than
///     OpenBLAS's SkylakeX kernels at small, medium and large on one thread (1.2-1.5x) and
///     more so on two (1.4-2.5x: OpenBLAS's packing and clearing of C do not split well), and
///     1.2-2.5x faster than its Haswell kernels, the fleet's OPENBLAS_CORETYPE. A single large
///     projection replayed bare on one thread still ran faster on OpenBLAS SkylakeX
///     (bench_gemm); the rule follows the whole step, which is what programs run; and
///   - the call multiplies at least kGemmOneDnnMinMultiplyAdds (batch·m·n·k, the product's
///     `batch` matrices of m×k by k×n together): below that oneDNN's cost per call (about
///     10 µs) outweighs its faster kernels (bench_mha tiny ran slower on it).
/// Other BLAS libraries (the cblas build) are the user's choice and stay; so does oneDNN
/// without AVX-512. tools/bench_results.md has the measurements.
bool gemm_rule_picks_onednn(const std::string& blas_backend, const std::string& dnnl_isa, std::size_t batch,
                            std::size_t m, std::size_t n, std::size_t k);
constexpr std::size_t kGemmOneDnnMinMultiplyAdds = std::size_t(1) << 20;

/// Whether a float32 product of `batch` matrices m×k by k×n runs on oneDNN now (the setting,
/// then the rule with this machine's BLAS and oneDNN). The ops decide once per call, forward
/// and backward alike.
bool gemm_uses_onednn(std::size_t batch, std::size_t m, std::size_t n, std::size_t k);

}  // namespace xgrad

namespace xgrad::blas {

template <class T>
void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
          std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc);

}  // namespace xgrad::blas
