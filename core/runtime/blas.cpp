#include "core/runtime/blas.hpp"

#include "core/runtime/parallel.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#ifdef XGRAD_BLAS_CBLAS
// xtensor-blas's configuration (HAVE_CBLAS, 32-bit indices) and the cxxblas layer it bundles:
// typed overloads over the linked CBLAS, without xtensor's expression templates. Its headers use
// std::complex without including <complex> (xblas.hpp has xtensor include it first).
#include <complex>
#include <xtensor-blas/xblas_config.hpp>
#include <xflens/cxxblas/cxxblas.cxx>
#endif

namespace xgrad {

namespace {

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "";
}

// xgrad splits large products over its own pool (core/runtime/parallel.hpp); the library's pool
// beside it would oversubscribe the cores, so it runs one thread unless one of the variables it
// reads for its thread count is set.
bool threads_chosen_by_user(const std::vector<const char*>& variables) {
    return std::any_of(variables.begin(), variables.end(), [](const char* v) { return !env(v).empty(); });
}

// __builtin_cpu_supports also checks that the OS saves the wide registers (XCR0).
int level_of_cpu() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512cd"))
        return 3;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 2;
    if (__builtin_cpu_supports("avx")) return 1;
#endif
    return 0;
}

const char* name_of_level(int level) {
    return level == 3 ? "SkylakeX" : level == 2 ? "Haswell" : level == 1 ? "Sandybridge" : "SSE";
}

struct Blas {
    BlasInfo info;
    std::function<void(int)> set_num_threads;  // empty when the library has no call for it
    std::function<int()> get_num_threads;
#ifndef XGRAD_BLAS_CBLAS
    void* handle = nullptr;
    using sgemm_fn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                              float*, int);
    using dgemm_fn = void (*)(int, int, int, int, int, int, double, const double*, int, const double*, int,
                              double, double*, int);
    sgemm_fn sgemm = nullptr;
    dgemm_fn dgemm = nullptr;
    char* (*corename)() = nullptr;
#endif
};

#ifndef XGRAD_BLAS_CBLAS

// The cblas enums as OpenBLAS's cblas.h defines them; declaring them here keeps the build free
// of BLAS headers and libraries.
constexpr int row_major = 101, no_trans = 111, trans = 112;

// Kernel families by the widest vector unit they use. OpenBLAS names its x86 cores after the
// Intel/AMD generation whose kernels they run; anything not listed counts as SSE-only.
int level_of_core(const std::string& core) {
    static const char* const avx512[] = {"skylakex", "cooperlake", "sapphirerapids"};
    static const char* const avx2[] = {"haswell", "zen", "skylake", "alderlake"};
    static const char* const avx[] = {"sandybridge", "bulldozer", "piledriver", "steamroller", "excavator"};
    auto in = [&](const auto& names) {
        for (const char* n : names)
            if (strcasecmp(core.c_str(), n) == 0) return true;
        return false;
    };
    return in(avx512) ? 3 : in(avx2) ? 2 : in(avx) ? 1 : 0;
}

// The OPENBLAS_CORETYPE spelling of each level's reference core.
const char* coretype_for(int level) { return level == 3 ? "SKYLAKEX" : level == 2 ? "HASWELL" : "SANDYBRIDGE"; }

void* symbol(void* handle, const std::string& lib, const char* name) {
    void* p = dlsym(handle, name);
    if (!p)
        throw std::runtime_error("xgrad: BLAS library '" + lib + "' has no symbol '" + name +
                                 "' (xgrad needs OpenBLAS; set XGRAD_BLAS_LIBRARY to its path)");
    return p;
}

void open(Blas& b, const std::string& lib) {
    b.handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!b.handle) {
        const char* why = dlerror();
        throw std::runtime_error("xgrad: cannot load the BLAS library '" + lib + "': " + (why ? why : "?") +
                                 " (install OpenBLAS, e.g. apt-get install libopenblas0, or set "
                                 "XGRAD_BLAS_LIBRARY to its path)");
    }
    b.sgemm = reinterpret_cast<Blas::sgemm_fn>(symbol(b.handle, lib, "cblas_sgemm"));
    b.dgemm = reinterpret_cast<Blas::dgemm_fn>(symbol(b.handle, lib, "cblas_dgemm"));
    b.corename = reinterpret_cast<char* (*)()>(symbol(b.handle, lib, "openblas_get_corename"));
    b.set_num_threads = reinterpret_cast<void (*)(int)>(symbol(b.handle, lib, "openblas_set_num_threads"));
    b.get_num_threads = reinterpret_cast<int (*)()>(symbol(b.handle, lib, "openblas_get_num_threads"));
}

Blas load() {
    Blas b;
    const std::string lib = env("XGRAD_BLAS_LIBRARY").empty() ? "libopenblas.so.0" : env("XGRAD_BLAS_LIBRARY");
    const std::string mode = env("XGRAD_BLAS_CORETYPE").empty() ? "auto" : env("XGRAD_BLAS_CORETYPE");
    if (mode != "auto" && mode != "keep")
        throw std::runtime_error("xgrad: XGRAD_BLAS_CORETYPE must be 'auto' or 'keep', got '" + mode + "'");
    const std::string user_core = env("OPENBLAS_CORETYPE");
    const int cpu = level_of_cpu();

    open(b, lib);
    b.info.backend = "openblas-runtime";
    b.info.library = lib;
    b.info.cpu_level = name_of_level(cpu);
    b.info.detected = b.corename();
    const int core = level_of_core(b.info.detected);

    // An OPENBLAS_CORETYPE the user set is their choice and stays, silently (blas_info() shows
    // it beside the CPU's level).
    if (mode == "auto" && user_core.empty() && core < cpu && cpu > 0) {
        // OpenBLAS picks its kernels in its load-time constructor, so the fix is to unload it,
        // set the core type and load it again. If something else in the process holds the
        // library, dlclose leaves it loaded and the core stays as it was: say so.
        dlclose(b.handle);
        setenv("OPENBLAS_CORETYPE", coretype_for(cpu), 1);
        open(b, lib);
        const std::string now = b.corename();
        b.info.core_fixed = level_of_core(now) >= cpu;
        if (b.info.core_fixed)
            std::fprintf(stderr,
                         "xgrad: OpenBLAS detected this CPU as '%s' but it supports %s kernels; "
                         "using OPENBLAS_CORETYPE=%s (XGRAD_BLAS_CORETYPE=keep turns this off).\n",
                         b.info.detected.c_str(), name_of_level(cpu), coretype_for(cpu));
        else
            std::fprintf(stderr,
                         "xgrad: OpenBLAS detected this CPU as '%s' but it supports %s kernels, and the "
                         "library was already loaded; start the program with OPENBLAS_CORETYPE=%s for "
                         "full-speed GEMM.\n",
                         b.info.detected.c_str(), name_of_level(cpu), coretype_for(cpu));
    }
    b.info.core = b.corename();
    const auto config = reinterpret_cast<char* (*)()>(dlsym(b.handle, "openblas_get_config"));
    b.info.vendor = config ? config() : "OpenBLAS";
    if (!threads_chosen_by_user({"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"}))
        b.set_num_threads(1);
    b.info.num_threads = b.get_num_threads();
    return b;
}

// One product through the loaded library's cblas_sgemm or cblas_dgemm.
struct Gemm {
    Blas::sgemm_fn sgemm;
    Blas::dgemm_fn dgemm;
    template <class T>
    void operator()(bool ta, bool tb, int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb,
                    T beta, T* c, int ldc) const {
        const auto f = [&] {
            if constexpr (std::is_same_v<T, float>) return sgemm;
            else return dgemm;
        }();
        f(row_major, ta ? trans : no_trans, tb ? trans : no_trans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    }
};
Gemm gemm_of(const Blas& b) { return {b.sgemm, b.dgemm}; }

#else  // XGRAD_BLAS_CBLAS

// A function of the library that provides cblas_sgemm, looked up in that library, so that
// another BLAS loaded into the process for something else cannot answer for it. Null when absent.
template <class F> F from_library(void* lib, const char* name) {
    return lib ? reinterpret_cast<F>(dlsym(lib, name)) : nullptr;
}

Blas load() {
    Blas b;
    b.info.backend = "cblas";
    b.info.cpu_level = name_of_level(level_of_cpu());
    // The file that provides cblas_sgemm, its links resolved: on Debian libblas.so.3 is an
    // alternatives link, and the same build may run OpenBLAS, BLIS or the reference BLAS.
    void* lib = nullptr;
    Dl_info where{};
    if (void* f = dlsym(RTLD_DEFAULT, "cblas_sgemm"); f && dladdr(f, &where) && where.dli_fname) {
        char resolved[PATH_MAX];
        b.info.library = realpath(where.dli_fname, resolved) ? resolved : where.dli_fname;
        lib = dlopen(where.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    } else {
        b.info.library = "linked into the program";
    }

    std::vector<const char*> thread_variables;
    b.info.vendor = "unknown CBLAS";
    b.info.core = "unknown";
    if (const auto config = from_library<char* (*)()>(lib, "openblas_get_config")) {
        b.info.vendor = config();
        if (const auto corename = from_library<char* (*)()>(lib, "openblas_get_corename")) b.info.core = corename();
        b.set_num_threads = from_library<void (*)(int)>(lib, "openblas_set_num_threads");
        b.get_num_threads = from_library<int (*)()>(lib, "openblas_get_num_threads");
        thread_variables = {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"};
    } else if (const auto version = from_library<const char* (*)()>(lib, "bli_info_get_version_str")) {
        b.info.vendor = std::string("BLIS ") + version();
        // BLIS picks one sub-configuration (kernel set) for the CPU when it initialises.
        const auto arch = from_library<int (*)()>(lib, "bli_arch_query_id");
        const auto arch_name = from_library<const char* (*)(int)>(lib, "bli_arch_string");
        if (arch && arch_name) b.info.core = arch_name(arch());
        // BLIS counts threads in dim_t, a 64-bit integer, and reports -1 while no count is set
        // (it then runs one thread).
        if (const auto set = from_library<void (*)(std::int64_t)>(lib, "bli_thread_set_num_threads"))
            b.set_num_threads = [set](int n) { set(n); };
        if (const auto get = from_library<std::int64_t (*)()>(lib, "bli_thread_get_num_threads"))
            b.get_num_threads = [get] { return static_cast<int>(std::max<std::int64_t>(get(), 1)); };
        thread_variables = {"BLIS_NUM_THREADS", "OMP_NUM_THREADS"};
    } else if (const auto version = from_library<void (*)(char*, int)>(lib, "MKL_Get_Version_String")) {
        char text[256] = {};
        version(text, sizeof text);
        b.info.vendor = text;
        b.set_num_threads = from_library<void (*)(int)>(lib, "MKL_Set_Num_Threads");
        b.get_num_threads = from_library<int (*)()>(lib, "MKL_Get_Max_Threads");
        thread_variables = {"MKL_NUM_THREADS", "OMP_NUM_THREADS"};
    }
    if (!std::string(XGRAD_BLAS_VENDOR).empty()) b.info.vendor += " (BLA_VENDOR=" XGRAD_BLAS_VENDOR ")";
    b.info.detected = b.info.core;  // nothing to fix: the library's choice is the build's
    if (b.set_num_threads && !threads_chosen_by_user(thread_variables)) b.set_num_threads(1);
    if (b.get_num_threads) b.info.num_threads = b.get_num_threads();
    return b;
}

// One product through xtensor-blas's cxxblas, which calls the linked cblas_sgemm or cblas_dgemm.
struct Gemm {
    template <class T>
    void operator()(bool ta, bool tb, int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb,
                    T beta, T* c, int ldc) const {
        const auto op = [](bool t) { return t ? cxxblas::Trans : cxxblas::NoTrans; };
        cxxblas::gemm(cxxblas::RowMajor, op(ta), op(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    }
};
Gemm gemm_of(const Blas&) { return {}; }

#endif  // XGRAD_BLAS_CBLAS

Blas& loaded() {
    static Blas b = load();  // thread-safe one-time initialisation
    return b;
}

// cblas takes int sizes; every caller checks shapes first, and these fit for any tensor that
// fits in memory along one matrix axis.
int i(std::size_t v) { return static_cast<int>(v); }
// BLAS rejects leading dimensions below 1 and has nothing to do for empty products; an empty
// inner dimension still has to scale C by beta.
int ld(std::size_t v) { return static_cast<int>(v == 0 ? 1 : v); }
template <class T> bool trivial(std::size_t m, std::size_t n, std::size_t k, T beta, T* c, std::size_t ldc) {
    if (m == 0 || n == 0) return true;
    if (k != 0) return false;
    for (std::size_t r = 0; r < m; ++r)
        for (std::size_t j = 0; j < n; ++j) c[r * ldc + j] = beta == T(0) ? T(0) : beta * c[r * ldc + j];
    return true;
}

// A profiling switch read by every product, on any thread: atomic, and the list under its lock.
std::atomic<bool> counting{false};
std::vector<BlasProduct> counted;
std::mutex counted_mutex;  // products of one batch may run on several threads

template <class F>
void timed(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, bool is_double, F&& run) {
    if (!counting.load(std::memory_order_relaxed)) return run();
    const auto t0 = std::chrono::steady_clock::now();
    run();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    blas_record({ta, tb, m, n, k, is_double, 1, s});
}

// Products below this many multiply-adds run on one thread: a hand-off to the pool costs a
// few microseconds, and smaller blocks lose gemm efficiency.
constexpr double split_threshold = 1 << 21;

// C = α·op(A)·op(B) + β·C with C's rows (or its columns, when it has more) split over the
// pool; each part is an ordinary gemm on a sub-block, addressed through the leading dimensions.
template <class T>
void split_gemm(const Gemm& gemm, bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, T alpha,
                const T* a, std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
    auto call = [&](std::size_t m_, std::size_t n_, const T* a_, const T* b_, T* c_) {
        gemm(ta, tb, i(m_), i(n_), i(k), alpha, a_, ld(lda), b_, ld(ldb), beta, c_, ld(ldc));
    };
    if (static_cast<double>(m) * n * k < split_threshold || num_threads() == 1) return call(m, n, a, b, c);
    if (m >= n)
        parallel_for(m, 32, [&](std::size_t r0, std::size_t r1) {
            call(r1 - r0, n, ta ? a + r0 : a + r0 * lda, b, c + r0 * ldc);
        });
    else
        parallel_for(n, 32, [&](std::size_t c0, std::size_t c1) {
            call(m, c1 - c0, a, tb ? b + c0 * ldb : b + c0, c + c0);
        });
}

}  // namespace

const BlasInfo& blas_info() { return loaded().info; }

void blas_set_num_threads(int threads) {
    Blas& b = loaded();
    if (!b.set_num_threads) {
        static std::once_flag said;
        std::call_once(said, [&] {
            std::fprintf(stderr,
                         "xgrad: blas_set_num_threads: the BLAS in use (%s, %s) has no call to set its "
                         "threads; it keeps the count its own settings give.\n",
                         b.info.vendor.c_str(), b.info.library.c_str());
        });
        return;
    }
    b.set_num_threads(std::max(threads, 1));
    if (b.get_num_threads) b.info.num_threads = b.get_num_threads();
}

void blas_count(bool on) {
    std::lock_guard<std::mutex> lock(counted_mutex);
    counting.store(on);
    if (on) counted.clear();
}

bool blas_counting() { return counting.load(std::memory_order_relaxed); }

void blas_record(const BlasProduct& product) {
    std::lock_guard<std::mutex> lock(counted_mutex);
    for (BlasProduct& p : counted)
        if (std::tie(p.trans_a, p.trans_b, p.m, p.n, p.k, p.is_double) ==
            std::tie(product.trans_a, product.trans_b, product.m, product.n, product.k, product.is_double)) {
            p.calls += product.calls;
            p.seconds += product.seconds;
            return;
        }
    counted.push_back(product);
}

std::vector<BlasProduct> blas_counted() {
    std::lock_guard<std::mutex> lock(counted_mutex);
    return counted;
}

namespace blas {

template <class T>
void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
          const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
    if (trivial(m, n, k, beta, c, ldc)) return;
    const Gemm f = gemm_of(loaded());
    timed(ta, tb, m, n, k, std::is_same_v<T, double>,
          [&] { split_gemm(f, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); });
}

template void gemm<float>(bool, bool, std::size_t, std::size_t, std::size_t, float, const float*, std::size_t,
                          const float*, std::size_t, float, float*, std::size_t);
template void gemm<double>(bool, bool, std::size_t, std::size_t, std::size_t, double, const double*, std::size_t,
                           const double*, std::size_t, double, double*, std::size_t);

}  // namespace blas

}  // namespace xgrad
