#include "core/runtime/dnnl.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

#ifdef XGRAD_WITH_DNNL
#include <map>
#include <mutex>
#include <tuple>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace xgrad::dnnl {

#ifndef XGRAD_WITH_DNNL

bool available() { return false; }
std::string isa() { return {}; }
bool native_bf16() { return false; }
std::string version() { return {}; }
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

// The shape and layout a primitive was made for.
using Key = std::tuple<int, bool, bool, std::size_t, std::size_t, std::size_t, std::size_t,
                       std::size_t, std::size_t, bool>;

struct Cached {
    ::dnnl::matmul primitive;
    memory::desc a, b, c;
};

memory::desc matrix_desc(memory::data_type type, std::size_t batch, std::size_t stride,
                         std::size_t rows, std::size_t cols, bool trans) {
    // The logical matrix is rows×cols; stored transposed it is cols×rows, row-major.
    const auto r = static_cast<memory::dim>(rows), c = static_cast<memory::dim>(cols);
    const memory::dim b = stride == 0 ? 1 : static_cast<memory::dim>(batch);
    const memory::dim s = stride == 0 ? r * c : static_cast<memory::dim>(stride);
    return memory::desc({b, r, c}, type, trans ? memory::dims{s, 1, r} : memory::dims{s, c, 1});
}

const Cached& primitive_for(const Matmul& p) {
    static std::mutex mutex;
    static std::map<Key, Cached> cache;
    const Key key{static_cast<int>(p.input), p.trans_a, p.trans_b, p.batch, p.m, p.n, p.k,
                  p.stride_a, p.stride_b, p.accumulate};
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    const auto type = p.input == Input::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
    Cached entry;
    entry.a = matrix_desc(type, p.batch, p.stride_a, p.m, p.k, p.trans_a);
    entry.b = matrix_desc(type, p.batch, p.stride_b, p.k, p.n, p.trans_b);
    const auto b = static_cast<memory::dim>(p.batch), m = static_cast<memory::dim>(p.m),
               n = static_cast<memory::dim>(p.n);
    entry.c = memory::desc({b, m, n}, memory::data_type::f32, memory::dims{m * n, n, 1});
    ::dnnl::primitive_attr attr;
    if (p.accumulate) {
        ::dnnl::post_ops ops;
        ops.append_sum(1.0f);
        attr.set_post_ops(ops);
    }
    ::dnnl::matmul::desc desc(entry.a, entry.b, entry.c);
    entry.primitive = ::dnnl::matmul(::dnnl::matmul::primitive_desc(desc, attr, engine()));
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

void matmul(const Matmul& p, const void* a, const void* b, float* c) {
    if (p.batch == 0 || p.m == 0 || p.n == 0 || p.k == 0)
        throw Error(fmt::format("dnnl matmul: expected non-zero sizes, got batch {} m {} n {} k {}",
                                p.batch, p.m, p.n, p.k));
    const Cached& prim = primitive_for(p);
    ::dnnl::stream stream(engine());
    memory ma(prim.a, engine(), const_cast<void*>(a));
    memory mb(prim.b, engine(), const_cast<void*>(b));
    memory mc(prim.c, engine(), c);
    prim.primitive.execute(stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    stream.wait();
}

#endif

}  // namespace xgrad::dnnl
