// Which library multiplies float32 products (blas.hpp, GemmEngine).
#include <atomic>
#include <cstdlib>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/runtime/blas.hpp"
#include "core/runtime/dnnl.hpp"

namespace xgrad {

namespace {

// -1: not set by set_gemm_engine (the environment decides); else a GemmEngine.
std::atomic<int> g_forced{-1};

// XGRAD_GEMM, read once: the engine, or the error every product then reports.
struct FromEnvironment {
    GemmEngine engine = GemmEngine::Auto;
    std::string error;
};

const FromEnvironment& from_environment() {
    static const FromEnvironment e = [] {
        FromEnvironment out;
        const char* v = std::getenv("XGRAD_GEMM");
        if (v == nullptr || *v == '\0') return out;
        try {
            out.engine = parse_gemm_engine(v);
            if (out.engine == GemmEngine::OneDnn && !dnnl::available())
                out.error = "XGRAD_GEMM=onednn: this build of xgrad has no oneDNN (install libdnnl-dev and "
                            "rebuild, or set XGRAD_GEMM=openblas or auto)";
        } catch (const Error& err) {
            out.error = err.what();
        }
        return out;
    }();
    return e;
}

}  // namespace

GemmEngine parse_gemm_engine(const std::string& value, const char* what) {
    if (value == "auto") return GemmEngine::Auto;
    if (value == "openblas") return GemmEngine::OpenBlas;
    if (value == "onednn") return GemmEngine::OneDnn;
    throw Error(fmt::format("{}: expected auto, openblas or onednn, got '{}'", what, value));
}

const char* gemm_engine_name(GemmEngine engine) {
    switch (engine) {
        case GemmEngine::OpenBlas: return "openblas";
        case GemmEngine::OneDnn: return "onednn";
        default: return "auto";
    }
}

GemmEngine gemm_engine() {
    const int forced = g_forced.load(std::memory_order_relaxed);
    if (forced >= 0) return static_cast<GemmEngine>(forced);
    const FromEnvironment& e = from_environment();
    if (!e.error.empty()) throw Error(e.error);
    return e.engine;
}

void set_gemm_engine(GemmEngine engine) {
    if (engine != GemmEngine::Auto && engine != GemmEngine::OpenBlas && engine != GemmEngine::OneDnn)
        throw Error(fmt::format("set_gemm_engine: expected Auto, OpenBlas or OneDnn, got value {}", static_cast<int>(engine)));
    if (engine == GemmEngine::OneDnn && !dnnl::available())
        throw Error("set_gemm_engine: OneDnn asked for, but this build of xgrad has no oneDNN (install libdnnl-dev "
                    "and rebuild)");
    g_forced.store(static_cast<int>(engine), std::memory_order_relaxed);
}

bool gemm_rule_picks_onednn(const std::string& blas_backend, const std::string& dnnl_isa, std::size_t batch,
                            std::size_t m, std::size_t n, std::size_t k) {
    if (dnnl_isa.rfind("avx512_core", 0) != 0) return false;
    if (blas_backend != "openblas-runtime") return false;
    // In doubles: a batch of huge matrices must not wrap around to a small count.
    return static_cast<double>(batch) * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) >=
           static_cast<double>(kGemmOneDnnMinMultiplyAdds);
}

bool gemm_uses_onednn(std::size_t batch, std::size_t m, std::size_t n, std::size_t k) {
    switch (gemm_engine()) {
        case GemmEngine::OpenBlas: return false;
        case GemmEngine::OneDnn: return true;
        default: break;
    }
    if (!dnnl::available()) return false;
    struct Machine {
        std::string backend, isa;
    };
    static const Machine machine = [] { return Machine{blas_info().backend, dnnl::isa()}; }();
    return gemm_rule_picks_onednn(machine.backend, machine.isa, batch, m, n, k);
}

}  // namespace xgrad
