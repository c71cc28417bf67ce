#pragma once
// Shared by the autocast tests: bfloat16 rounding of a float32 tensor, and the float32
// accumulation bound the products under autocast are held to.
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/autocast.hpp"
#include "core/creation.hpp"
#include "core/ops.hpp"
#include "core/runtime/bfloat16.hpp"
#include "core/runtime/dnnl.hpp"

namespace autocast_test {

// Emulation allowed: the tests run alike on CPUs with and without bfloat16 instructions.
inline xgrad::AutocastOptions allow() {
    xgrad::AutocastOptions o;
    o.allow_emulation = true;
    return o;
}

// While alive with `on`, every bfloat16 product is widened to float32 for oneDNN's float32
// matmul, as on a CPU where oneDNN has no bfloat16 matmul (dnnl::bf16_path()), whatever this
// CPU offers; so a test run with on = false and true checks both paths on any machine.
class WidenedBf16 {
public:
    explicit WidenedBf16(bool on) { xgrad::dnnl::force_widened_bf16(on); }
    ~WidenedBf16() { xgrad::dnnl::force_widened_bf16(false); }
    WidenedBf16(const WidenedBf16&) = delete;
    WidenedBf16& operator=(const WidenedBf16&) = delete;
};

// t's values rounded to bfloat16 (to nearest, ties to even), as float64: the exact inputs the
// products under autocast multiply.
inline xgrad::Tensor rounded64(const xgrad::Tensor& t) {
    std::vector<double> v;
    for (float f : t.to_vector<float>()) v.push_back(xgrad::bf16_to_float(xgrad::bf16_from_float(f)));
    return xgrad::from_vector(v, t.shape(), xgrad::kFloat64);
}

// Largest |got - want| / bound over the elements (got float32, want and scale float64): a
// product of bfloat16 values summed in float32 over `terms` terms is within
// bound = (terms + 2)·2^-24·Σ|a||b| of the exact sum (each addition rounds once, the
// result once more). A float32 product of unrounded inputs misses it by about 2^-9 relative.
inline double worst_ratio(const xgrad::Tensor& got, const xgrad::Tensor& want, const xgrad::Tensor& scale,
                          std::size_t terms) {
    const auto g = got.to_vector<double>(), w = want.to_vector<double>(), s = scale.to_vector<double>();
    double worst = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
        const double bound = (static_cast<double>(terms) + 2) * std::ldexp(1.0, -24) * s[i] + 1e-30;
        worst = std::max(worst, std::abs(g[i] - w[i]) / bound);
    }
    return worst;
}

}  // namespace autocast_test
