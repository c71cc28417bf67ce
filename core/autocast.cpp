#include "core/autocast.hpp"

#include "core/node.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/autocast_product.hpp"
#include "core/runtime/bfloat16.hpp"
#include "core/runtime/dnnl.hpp"
#include "core/runtime/parallel.hpp"

namespace xgrad {

namespace {

thread_local bool t_autocast = false;

// The last operands this thread rounded to bfloat16 (autocast::to_bf16(const Tensor&)), newest
// first: a copy counts as the tensor's while its node lives and has the same version, data and
// size. The copies are shared with the products that made them (read-only).
struct RememberedCopy {
    std::weak_ptr<Node> node;
    std::uint64_t version = 0;
    const float* data = nullptr;
    std::size_t size = 0;
    autocast::Bf16 copy;
};
thread_local RememberedCopy t_copies[2];


bool emulation_allowed_by_environment() {
    const char* v = std::getenv("XGRAD_AUTOCAST_ALLOW_EMULATION");
    if (v == nullptr || *v == '\0' || std::strcmp(v, "0") == 0) return false;
    if (std::strcmp(v, "1") == 0) return true;
    throw Error(fmt::format("autocast: XGRAD_AUTOCAST_ALLOW_EMULATION must be 0 or 1, got '{}'", v));
}

}  // namespace

AutocastCapabilities AutocastCapabilities::current() {
    return {dnnl::available(), dnnl::native_bf16(), dnnl::isa(), dnnl::version(),
            dnnl::available() && dnnl::bf16_path() == dnnl::Bf16Path::onednn};
}

std::string autocast_refusal(const AutocastCapabilities& caps, bool allow_emulation) {
    if (!caps.dnnl_available)
        return "autocast: bfloat16 products need oneDNN, and this build of xgrad has none (install "
               "libdnnl-dev, which tools/deps.sh does, and rebuild with XGRAD_WITH_DNNL=ON)";
    if (caps.native_bf16 || allow_emulation) return {};
    const std::string isa = caps.isa.empty() ? "unknown" : caps.isa;
    const std::string how =
        caps.dnnl_bf16_matmul
            ? "so bfloat16 products would be emulated through float32 and run about 3x slower than float32 itself"
            : fmt::format("and {} has no bfloat16 matmul for it, so bfloat16 products would be emulated: "
                          "widened to float32 and multiplied there, slower than float32 itself and with more memory",
                          caps.version);
    return fmt::format("autocast: this CPU has no bfloat16 instructions ({} finds instruction set {}, without "
                       "AVX512-BF16 or AMX), {}; run in float32, or allow emulation (AutocastOptions::allow_emulation, "
                       "XGRAD_AUTOCAST_ALLOW_EMULATION=1) to check results",
                       caps.version, isa, how);
}

bool is_autocast_enabled() { return t_autocast; }

AutocastGuard::AutocastGuard(Dtype dtype, AutocastOptions options) : m_previous(t_autocast) {
    if (dtype != kBFloat16)
        throw Error(fmt::format("autocast: dtype must be bfloat16 (the one lower precision CPU autocast offers), got {}",
                                dtype_name(dtype)));
    if (options.enabled) {
        const bool allow = options.allow_emulation || emulation_allowed_by_environment();
        const std::string why = autocast_refusal(AutocastCapabilities::current(), allow);
        if (!why.empty()) throw Error(why);
    }
    t_autocast = options.enabled;
}

AutocastGuard::~AutocastGuard() {
    t_autocast = m_previous;
    // The outermost guard lets go of the remembered copies (torch drops its cast cache there).
    if (!t_autocast)
        for (RememberedCopy& r : t_copies) r = RememberedCopy{};
}

}  // namespace xgrad

// --- the products' pieces (core/autocast_product.hpp) --------------------------------------

namespace xgrad::autocast {

bool use_bf16(std::size_t multiply_adds) { return is_autocast_enabled() && multiply_adds >= kMinMultiplyAdds; }

Bf16 to_bf16(const float* data, std::size_t n) {
    auto out = std::make_shared<Bf16Buffer>(n);
    std::uint16_t* o = out->data();
    parallel_for(n, std::size_t(1) << 15, [&](std::size_t i0, std::size_t i1) { bf16_from_float(data + i0, o + i0, i1 - i0); });
    return out;
}

Bf16 to_bf16(const Tensor& t) {
    const float* data = values<float>(t).data();  // a view's values, in its shape
    const std::size_t size = t.numel();
    const std::uint64_t version = t.version();
    auto same = [&](const RememberedCopy& r) {
        return r.copy && r.data == data && r.size == size && r.version == version && r.node.lock() == t.node_ptr();
    };
    if (same(t_copies[0])) return t_copies[0].copy;
    if (same(t_copies[1])) {
        std::swap(t_copies[0], t_copies[1]);
        return t_copies[0].copy;
    }
    Bf16 copy = to_bf16(data, size);
    t_copies[1] = std::move(t_copies[0]);
    t_copies[0] = RememberedCopy{t.node_ptr(), version, data, size, copy};
    return copy;
}

Bf16 to_bf16_heads(const float* data, std::size_t batch, std::size_t length, std::size_t heads, std::size_t d) {
    auto out = std::make_shared<Bf16Buffer>(batch * length * heads * d);
    std::uint16_t* o = out->data();
    const std::size_t row = heads * d;  // input row b·length + l holds every head's d values
    // Row l of head p = (b, h) is row t = p·length + l of the copy: chunks of such rows, each
    // run of one head's rows one strided conversion (so that one long head spreads too).
    parallel_for(batch * heads * length, std::max<std::size_t>(1, (std::size_t(1) << 15) / std::max<std::size_t>(1, d)),
                 [&](std::size_t t0, std::size_t t1) {
                     for (std::size_t t = t0; t < t1;) {
                         const std::size_t p = t / length, l = t % length, n = std::min(t1 - t, length - l);
                         const std::size_t b = p / heads, h = p % heads;
                         bf16_from_float_rows(data + (b * length + l) * row + h * d, row, o + t * d, d, n, d);
                         t += n;
                     }
                 });
    return out;
}

namespace {

// The fixed stride of an offset list (0 for one entry or a shared matrix), or false.
bool fixed_stride(const Offsets& off, std::size_t& stride) {
    stride = off.size() > 1 ? off[1] - off[0] : 0;
    for (std::size_t i = 0; i < off.size(); ++i)
        if (off[i] != i * stride) return false;
    return true;
}

}  // namespace

void batched(dnnl::Matmul shape, const void* a, const Offsets& a_off, const void* b, const Offsets& b_off, float* c,
             const Offsets& c_off) {
    const std::size_t count = c_off.size();
    if (count == 0) return;
    const std::size_t width = shape.input == dnnl::Input::bf16 ? 2 : 4;
    auto at = [width](const void* base, std::size_t off) { return static_cast<const char*>(base) + off * width; };
    std::size_t sa, sb, sc;
    if (fixed_stride(a_off, sa) && fixed_stride(b_off, sb) && fixed_stride(c_off, sc) && (count == 1 || sc != 0)) {
        shape.batch = count;
        shape.stride_a = count > 1 ? sa : 0;
        shape.stride_b = count > 1 ? sb : 0;
        shape.stride_c = count > 1 ? sc : 0;
        dnnl::matmul(shape, a, b, c);
        return;
    }
    shape.batch = 1;
    for (std::size_t i = 0; i < count; ++i) dnnl::matmul(shape, at(a, a_off[i]), at(b, b_off[i]), c + c_off[i]);
}

}  // namespace xgrad::autocast
