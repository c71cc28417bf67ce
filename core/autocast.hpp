#pragma once
/// Autocast, as torch.autocast("cpu", dtype=torch.bfloat16): while an AutocastGuard is alive
/// on a thread, the float32 products that thread runs (matmul, bmm, matmul_t, nn::Linear, the
/// attention products) round their inputs to bfloat16 (to nearest, ties to even) and multiply
/// on oneDNN with float32 accumulation. Everything else stays float32: softmax, layer norm,
/// losses, reductions, the optimizer; float64 products are left alone. So do small products:
/// a matrix under 2^15 multiply-adds (m·n·k of one product of a batch) stays float32, forward
/// and backward, because oneDNN's per-call cost outweighs it; such a product reads its inputs
/// at backward as any float32 product does, so an in-place write to one is refused.
///
/// Which ops go which way follows torch's CPU lists (aten/src/ATen/autocast_mode.cpp,
/// TORCH_LIBRARY_IMPL(aten, AutocastCPU, m)): lower_precision_fp has the products mm, bmm,
/// addmm, baddbmm, addbmm, linear (and the convolutions, which xgrad lacks); batch_norm and the
/// rest of the fp32 list, and everything unlisted (softmax, layer norm, losses, reductions, the
/// optimizer's arithmetic), run on float32 here because the products hand them float32.
///
/// Unlike torch, whose autocast products return bfloat16 tensors, xgrad's return float32: one
/// rounding fewer, and the elementwise ops that follow stay float32.
///
/// The backward of a product runs in the precision its forward used, whether or not a guard is
/// alive when backward() runs: the op records it, with bfloat16 copies of its inputs (so, as in
/// torch where the cast is an op of its own, it does not read the inputs again), and the
/// gradients it hands back are float32. The same holds at every order: under create_graph the
/// products in a product's gradient formula read the same bfloat16 copies, so a second
/// derivative (a Hessian-vector product, a gradient penalty) is the bfloat16-rounded one, as in
/// torch, whose backward of an autocast op runs in the autocast dtype.
///
/// bfloat16 needs oneDNN in the build (libdnnl-dev) and a CPU with bfloat16 instructions
/// (AVX512-BF16 or AMX). Elsewhere bfloat16 is emulated through float32: by oneDNN on other
/// AVX-512 CPUs, about 3x slower than float32 itself; on AVX2 CPUs, where oneDNN 2.6 has no
/// bfloat16 matmul, by widening the bfloat16 operands to float32 (exact) for oneDNN's float32
/// matmul (dnnl::bf16_path()), 1.1-1.4x float32's time with more memory. Either way the guard
/// refuses with an xgrad::Error saying so, unless emulation is allowed
/// (AutocastOptions::allow_emulation, or XGRAD_AUTOCAST_ALLOW_EMULATION=1 for programs): the
/// results are then those of a native CPU (the same bfloat16 values, products accumulated in
/// float32), up to the order of the float32 sums, only slower.
#include <string>

#include "core/dtype.hpp"

namespace xgrad {

struct AutocastOptions {
    /// torch.autocast's `enabled`: false makes a guard that turns autocast off inside it.
    bool enabled = true;
    /// Run on a CPU without bfloat16 instructions anyway (tests, and checking results on a
    /// development machine). XGRAD_AUTOCAST_ALLOW_EMULATION=1 in the environment allows it too.
    bool allow_emulation = false;
};

/// What the guard checks, apart so that the decision can be tested with any capabilities.
struct AutocastCapabilities {
    bool dnnl_available = false;
    bool native_bf16 = false;
    std::string isa;       ///< oneDNN's instruction set on this CPU ("avx512_core_vnni")
    std::string version;   ///< "oneDNN 2.6.3"
    /// oneDNN multiplies bfloat16 itself here (natively or emulated); false: it has no
    /// bfloat16 matmul for this CPU, and xgrad widens the operands to float32 for it.
    bool dnnl_bf16_matmul = false;
    /// This machine's.
    static AutocastCapabilities current();
};

/// Why autocast to bfloat16 cannot run with `caps` ("" when it can): oneDNN absent, or a CPU
/// that would emulate bfloat16 (in oneDNN, or widened to float32) and emulation not allowed.
std::string autocast_refusal(const AutocastCapabilities& caps, bool allow_emulation);

/// Whether products on this thread run in bfloat16 now.
bool is_autocast_enabled();

/// While alive, products on this thread autocast to `dtype`, which must be kBFloat16 (as torch's
/// CPU autocast, the only lower precision offered), to bfloat16 (or, with enabled = false, do
/// not). Nests: the destructor restores the state the constructor found. Composes with
/// NoGradGuard (either order). Throws xgrad::Error naming "autocast" when refused (see
/// autocast_refusal), leaving the state unchanged.
class AutocastGuard {
public:
    explicit AutocastGuard(Dtype dtype, AutocastOptions options = {});
    ~AutocastGuard();
    AutocastGuard(const AutocastGuard&) = delete;
    AutocastGuard& operator=(const AutocastGuard&) = delete;

private:
    bool m_previous;
};

}  // namespace xgrad
