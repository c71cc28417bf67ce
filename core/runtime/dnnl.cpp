#include "core/runtime/dnnl.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

#ifdef XGRAD_WITH_DNNL
#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <tuple>
#include <vector>

#include "core/runtime/alloc.hpp"
#include "core/runtime/bfloat16.hpp"
#include "core/runtime/blas.hpp"
#include "core/runtime/parallel.hpp"

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace xgrad::dnnl {

#ifndef XGRAD_WITH_DNNL

bool available() { return false; }
std::string isa() { return {}; }
bool native_bf16() { return false; }
std::string version() { return {}; }
Bf16Path bf16_path() { return Bf16Path::onednn; }
void force_widened_bf16(bool) {}
void matmul(const Matmul&, const void*, const void*, float*) {
    throw Error("dnnl matmul: this build of xgrad has no oneDNN (install libdnnl-dev and rebuild; "
                "tools/deps.sh does)");
}

#else

namespace {

using ::dnnl::memory;

::dnnl::engine& engine() {
    static ::dnnl::engine e(::dnnl::engine::kind::cpu, 0);
    return e;
}

// The shape, layout and scale a primitive was made for (always for one thread).
using Key = std::tuple<int, bool, bool, std::size_t, std::size_t, std::size_t, std::size_t, std::size_t,
                       std::size_t, bool, std::uint32_t, std::size_t, std::size_t, std::size_t, std::size_t,
                       std::size_t, std::size_t, std::size_t, std::size_t>;

struct Cached {
    ::dnnl::matmul primitive;
    memory::desc a, b, c, scratchpad;
};

// A stored operand as oneDNN's 4-D (batch, heads, rows, cols) tensor: the logical matrix is
// rows×cols; stored transposed it is cols×rows, row-major, `ld` apart. A batch or head stride
// of 0 is a broadcast axis of length 1.
memory::desc operand_desc(memory::data_type type, const Matmul& p, std::size_t stride, std::size_t head,
                          std::size_t rows, std::size_t cols, bool trans, std::size_t ld) {
    const auto r = static_cast<memory::dim>(rows), c = static_cast<memory::dim>(cols);
    const memory::dim row = static_cast<memory::dim>(ld != 0 ? ld : trans ? rows : cols);
    const memory::dim matrix = trans ? c * row : r * row;
    const memory::dim h = head == 0 ? 1 : static_cast<memory::dim>(p.heads);
    const memory::dim hs = head == 0 ? matrix : static_cast<memory::dim>(head);
    const memory::dim b = stride == 0 ? 1 : static_cast<memory::dim>(p.batch);
    const memory::dim bs = stride == 0 ? matrix * h : static_cast<memory::dim>(stride);
    return memory::desc({b, h, r, c}, type, trans ? memory::dims{bs, hs, 1, row} : memory::dims{bs, hs, row, 1});
}

// oneDNN runs on OpenMP's threads; libgomp comes with libdnnl, so its setter is found at run time
// (xgrad itself is not built with -fopenmp). xgrad never lets it start a team: two thread pools
// on the same cores, each spinning while the other works, made every product 5-15x slower than
// on one thread (bench_mha small under DNNL_VERBOSE: 7.6 ms vs 1.2 ms per 1024x128x128 product on
// 2 cores). Each call runs on the calling thread, and matmul() splits the work over xgrad's pool
// instead, as blas::gemm does. The count is per calling thread, so it is set on each one once.
void use_one_openmp_thread() {
    using setter = void (*)(int);
    static const setter set = reinterpret_cast<setter>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    thread_local bool done = false;
    if (set && !done) set(1);
    done = true;
}

// The primitives made so far, by shape. fork() copies the map with whatever lock another thread
// held at that moment (it is held while a primitive is made, for milliseconds), and the child,
// which has only the forking thread, would wait for it forever: the lock is held across the
// fork, so that both copies start unlocked and consistent. Made on first use, after the
// allocator cache, so its fork handler takes this lock first, in the order a thread making a
// primitive takes the two.
struct PrimitiveCache {
    std::mutex mutex;
    std::map<Key, std::shared_ptr<const Cached>> map;
    PrimitiveCache() {
        pthread_atfork([] { get().mutex.lock(); }, [] { get().mutex.unlock(); }, [] { get().mutex.unlock(); });
    }
    static PrimitiveCache& get() {
        static PrimitiveCache c;
        return c;
    }
};

// Shared, so that a primitive another thread is running outlives the cache dropping it.
std::shared_ptr<const Cached> primitive_for(const Matmul& p) {
    PrimitiveCache& primitives = PrimitiveCache::get();
    std::mutex& mutex = primitives.mutex;
    std::map<Key, std::shared_ptr<const Cached>>& cache = primitives.map;
    std::uint32_t alpha_bits;
    std::memcpy(&alpha_bits, &p.alpha, sizeof alpha_bits);
    const Key key{static_cast<int>(p.input), p.trans_a, p.trans_b, p.batch, p.m, p.n, p.k, p.stride_a, p.stride_b,
                  p.accumulate, alpha_bits, p.heads, p.head_a, p.head_b, p.head_c, p.lda, p.ldb, p.ldc, p.stride_c};
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    // Sequences of every length make new shapes; a bounded cache keeps a long run's memory flat
    // (the attention's blocks of heads add a few shapes per op, called from every pool thread).
    if (cache.size() >= 4096) cache.clear();
    const auto type = p.input == Input::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
    auto entry = std::make_shared<Cached>();
    entry->a = operand_desc(type, p, p.stride_a, p.head_a, p.m, p.k, p.trans_a, p.lda);
    entry->b = operand_desc(type, p, p.stride_b, p.head_b, p.k, p.n, p.trans_b, p.ldb);
    const auto b = static_cast<memory::dim>(p.batch), h = static_cast<memory::dim>(p.heads),
               m = static_cast<memory::dim>(p.m), n = static_cast<memory::dim>(p.n);
    const memory::dim ldc = p.ldc != 0 ? static_cast<memory::dim>(p.ldc) : n;
    const memory::dim hc = p.head_c != 0 ? static_cast<memory::dim>(p.head_c) : m * ldc;
    const memory::dim sc = p.stride_c != 0 ? static_cast<memory::dim>(p.stride_c) : h * hc;
    entry->c = memory::desc({b, h, m, n}, memory::data_type::f32, memory::dims{sc, hc, ldc, 1});
    ::dnnl::primitive_attr attr;
    // The pool's threads run one primitive at once: each brings its own scratch space (with the
    // library's, shared by every execution, concurrent parts of one product overwrote each
    // other's partial sums).
    attr.set_scratchpad_mode(::dnnl::scratchpad_mode::user);
    if (p.alpha != 1.0f) attr.set_output_scales(0, {p.alpha});
    if (p.accumulate) {
        ::dnnl::post_ops ops;
        ops.append_sum(1.0f);
        attr.set_post_ops(ops);
    }
    ::dnnl::matmul::desc desc(entry->a, entry->b, entry->c);
    const ::dnnl::matmul::primitive_desc pd(desc, attr, engine());
    entry->primitive = ::dnnl::matmul(pd);
    entry->scratchpad = pd.scratchpad_desc();
    return cache.emplace(key, std::move(entry)).first->second;
}

}  // namespace

bool available() { return true; }

std::string isa() {
    switch (::dnnl::get_effective_cpu_isa()) {
        case ::dnnl::cpu_isa::sse41: return "sse41";
        case ::dnnl::cpu_isa::avx: return "avx";
        case ::dnnl::cpu_isa::avx2: return "avx2";
        case ::dnnl::cpu_isa::avx512_core: return "avx512_core";
        case ::dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
        case ::dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
        case ::dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
        default: return "other";
    }
}

bool native_bf16() {
    const auto i = ::dnnl::get_effective_cpu_isa();
    return i == ::dnnl::cpu_isa::avx512_core_bf16 || i == ::dnnl::cpu_isa::avx512_core_amx;
}

std::string version() {
    const auto* v = ::dnnl::version();
    return fmt::format("oneDNN {}.{}.{}", v->major, v->minor, v->patch);
}

namespace {

// Whether oneDNN makes a bfloat16 matmul on this CPU, asked once per process with a 2×2 one.
// oneDNN 2.6 has bfloat16 matmul from avx512_core up, where its reference kernel takes any
// layout, and none at all below (status 3, unimplemented, for every shape on AVX2), so one
// shape answers for all. Asked rather than read off isa(), so that a oneDNN with bfloat16
// kernels for AVX2 gets used; asked once, so that no product pays for a failed primitive
// creation and an exception.
bool onednn_makes_bf16_matmul() {
    static const bool makes = [] {
        try {
            const memory::desc m({2, 2}, memory::data_type::bf16, memory::format_tag::ab);
            const memory::desc c({2, 2}, memory::data_type::f32, memory::format_tag::ab);
            const ::dnnl::matmul::primitive_desc pd(::dnnl::matmul::desc(m, m, c), engine());
            return true;
        } catch (const ::dnnl::error&) {
            return false;
        }
    }();
    return makes;
}

std::atomic<bool> g_force_widened{false};

}  // namespace

Bf16Path bf16_path() {
    return g_force_widened.load(std::memory_order_relaxed) || !onednn_makes_bf16_matmul() ? Bf16Path::widened
                                                                                         : Bf16Path::onednn;
}

void force_widened_bf16(bool on) { g_force_widened.store(on, std::memory_order_relaxed); }

namespace {

void run_unchecked(const Matmul& p, const void* a, const void* b, float* c) {
    use_one_openmp_thread();
    const std::shared_ptr<const Cached> held = primitive_for(p);
    const Cached& prim = *held;
    ::dnnl::stream stream(engine());
    memory ma(prim.a, engine(), const_cast<void*>(a));
    memory mb(prim.b, engine(), const_cast<void*>(b));
    memory mc(prim.c, engine(), c);
    thread_local std::vector<char> scratch;
    const std::size_t need = prim.scratchpad.get_size();
    if (scratch.size() < need) scratch.resize(need);
    memory ms(prim.scratchpad, engine(), scratch.data());
    prim.primitive.execute(stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc},
                                    {DNNL_ARG_SCRATCHPAD, ms}});
    stream.wait();
}

// One call, whose failures are xgrad's Errors: oneDNN reports memory it could not get for its
// kernels' code or its own buffers as a dnnl::error (and a cache entry or our scratch space as
// std::bad_alloc), which would reach the caller naming no op. Out of memory it is the
// allocator's Error, naming the op this thread (or, on the pool, its caller) is running.
void run(const Matmul& p, const void* a, const void* b, float* c) {
    try {
        run_unchecked(p, a, b, c);
    } catch (const ::dnnl::error& e) {
        if (e.status == dnnl_out_of_memory) throw_out_of_memory("oneDNN's kernels or working memory");
        throw Error(fmt::format("dnnl matmul: oneDNN failed ({}, status {}) on a product of batch {} heads {} m {} "
                                "n {} k {}",
                                e.what(), static_cast<int>(e.status), p.batch, p.heads, p.m, p.n, p.k));
    } catch (const std::bad_alloc&) {
        throw_out_of_memory("oneDNN's kernels or working memory");
    }
}

// Products below this many multiply-adds run as one call, as blas::gemm's split threshold.
constexpr std::size_t kSplitWork = std::size_t(1) << 21;

// One product: as one call, or in parts over the pool.
void split(const Matmul& p, const void* a, const void* b, float* c);

// Elements from an operand's first to one past its last, laid out as operand_desc lays it.
std::size_t extent(const Matmul& p, std::size_t stride, std::size_t head, std::size_t rows, std::size_t cols,
                   bool trans, std::size_t ld) {
    const std::size_t stored_rows = trans ? cols : rows, stored_cols = trans ? rows : cols;
    std::size_t end = (stored_rows - 1) * (ld != 0 ? ld : stored_cols) + stored_cols;
    if (stride != 0) end += (p.batch - 1) * stride;
    if (head != 0) end += (p.heads - 1) * head;
    return end;
}

// out's size of bfloat16 values from x as float32 (exact), in the same layout, over the pool.
void widen(const void* x, CachedBuffer<float>& out) {
    const auto* in = static_cast<const std::uint16_t*>(x);
    float* o = out.data();
    parallel_for(out.size(), std::size_t(1) << 15,
                 [&](std::size_t i0, std::size_t i1) { bf16_to_float(in + i0, o + i0, i1 - i0); });
}

// A bfloat16 product where oneDNN has no bfloat16 matmul (bf16_path()): the float32 product of
// the widened operands, on oneDNN's float32 matmul, which takes every layout, alpha and
// accumulate the bfloat16 one does, unchanged. On the AVX2 EPYC this was written for it runs
// as fast as OpenBLAS's Zen sgemm or faster (bench_gemm, one thread: 91 against 92 GFLOP/s at
// 1024³, 63 against 48 and 87 against 66 on medium's and large's attention scores).
void product(const Matmul& p, const void* a, const void* b, float* c) {
    if (p.input != Input::bf16 || bf16_path() == Bf16Path::onednn) return split(p, a, b, c);
    CachedBuffer<float> a32(extent(p, p.stride_a, p.head_a, p.m, p.k, p.trans_a, p.lda));
    CachedBuffer<float> b32(extent(p, p.stride_b, p.head_b, p.k, p.n, p.trans_b, p.ldb));
    widen(a, a32);
    widen(b, b32);
    Matmul q = p;
    q.input = Input::f32;
    split(q, a32.data(), b32.data(), c);
}

}  // namespace

void matmul(const Matmul& p, const void* a, const void* b, float* c) {
    if (p.batch == 0 || p.heads == 0 || p.m == 0 || p.n == 0 || p.k == 0)
        throw Error(fmt::format("dnnl matmul: expected non-zero sizes, got batch {} heads {} m {} n {} k {}",
                                p.batch, p.heads, p.m, p.n, p.k));
    if (blas_counting()) {  // counted as blas::gemm counts: per matrix, from any thread
        const auto t0 = std::chrono::steady_clock::now();
        product(p, a, b, c);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        blas_record({p.trans_a, p.trans_b, p.m, p.n, p.k, false, p.batch * p.heads, s});
        return;
    }
    product(p, a, b, c);
}

namespace {

void split(const Matmul& p, const void* a, const void* b, float* c) {
    const std::size_t per_matrix = p.m * p.n * p.k, work = per_matrix * p.batch * p.heads;
    if (num_threads() == 1 || in_parallel_chunk() || work < kSplitWork) return run(p, a, b, c);
    // Every layout made explicit, so a part addresses its block of the whole.
    Matmul part = p;
    part.lda = p.lda != 0 ? p.lda : p.trans_a ? p.m : p.k;
    part.ldb = p.ldb != 0 ? p.ldb : p.trans_b ? p.k : p.n;
    part.ldc = p.ldc != 0 ? p.ldc : p.n;
    part.head_c = p.head_c != 0 ? p.head_c : p.m * part.ldc;
    part.stride_c = p.stride_c != 0 ? p.stride_c : p.heads * part.head_c;
    const std::size_t width = p.input == Input::bf16 ? 2 : 4;
    const auto* A = static_cast<const char*>(a);
    const auto* B = static_cast<const char*>(b);
    if (p.batch > 1) {  // whole batches per part, about 2^20 multiply-adds each
        const std::size_t grain = std::max<std::size_t>(1, (kSplitWork / 2) / (per_matrix * p.heads));
        parallel_for(p.batch, grain, [&](std::size_t i0, std::size_t i1) {
            Matmul q = part;
            q.batch = i1 - i0;
            run(q, A + i0 * p.stride_a * width, B + i0 * p.stride_b * width, c + i0 * part.stride_c);
        });
        return;
    }
    // One batch: blocks of C's rows, each from A's rows and the whole of B.
    parallel_for(p.m, 32, [&](std::size_t r0, std::size_t r1) {
        Matmul q = part;
        q.m = r1 - r0;
        run(q, A + (p.trans_a ? r0 : r0 * part.lda) * width, b, c + r0 * part.ldc);
    });
}

}  // namespace

#endif

}  // namespace xgrad::dnnl
