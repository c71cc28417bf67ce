#pragma once
/// Float kernels the compiler turns into SIMD loops, for softmax rows and the elementwise ops:
/// each compiled for baseline x86-64 (SSE2), AVX2 and AVX-512, with the same bits on every level
/// (runtime/simd.hpp); the exp is runtime/exp_kernel.hpp's.
/// vec_math.cpp is compiled with -fno-trapping-math so that its selects vectorise.
#include <cstddef>

namespace xgrad::vec {

/// y[j] = e^(x[j] − m) for x[j] ≤ m, within 2 ulp of std::exp (Cody–Waite reduction and
/// Cephes' degree-6 polynomial); 0 where x[j] − m < −87 (e^−87 ≈ 1.6e−38, the float floor).
/// NaN in x gives NaN in y (and in the sum); any x and m are safe (x[j] − m is clamped to
/// [−87, 88] before the exponent is built). Returns Σ y[j], in eight partial sums (lane l takes
/// j ≡ l mod 8) combined pairwise, then the tail; a NaN sum is always the same quiet NaN.
float exp_shifted_sum(const float* x, float m, float* y, std::size_t n);

/// exp_shifted_sum of `rows` rows at once, row i being the len[i] ≤ stride values at
/// x + i·stride, shifted by m[i], written at y + i·stride, its sum in sums[i]: the same bits as
/// one call per row, but the exps of short rows (a few keys each) overlap instead of each row
/// waiting out its own. A row may read on into the rows after it (never their results), so all
/// of x from x to x + (rows − 1)·stride + len[rows − 1] must be readable; y is x or apart from it.
void exp_shifted_rows(const float* x, std::size_t stride, const float* m, const std::size_t* len, float* y,
                      float* sums, std::size_t rows);

/// max x[j] for n ≥ 1, as std::max over eight lanes (lane l takes j ≡ l mod 8) combined
/// pairwise, then the tail. A NaN in x is skipped or returned depending on where it falls (an
/// order callers may not rely on): callers that must propagate NaN rely on exp_shifted_sum,
/// which turns any NaN x[j], and any NaN m, into a NaN sum.
float max_of(const float* x, std::size_t n);

/// The softmax row's backward: d[j] = y[j]·(g[j] − Σ g⊙y) for j < L, 0 for L ≤ j < n, the sum
/// over all n in lane_sum's eight partial sums (runtime/kernel_loops.hpp): one running sum is
/// a chain of dependent adds that no compiler may split. A NaN d[j] is always the same quiet
/// NaN. d may not overlap y or g.
void softmax_grad(const float* y, const float* g, float* d, std::size_t n, std::size_t L);

/// Elementwise float kernels for the ops of the same names (ops_elementwise.cpp), y may be x:
/// - exp: within 2 ulp of std::exp for normal results (denormal ones to their own ulp); +inf
///   above ln(FLT_MAX), +0 far below, NaN for NaN.
/// - erf: within 2 ulp of std::erf; ±1 for ±inf; ±0 for ±0.
/// - tanh: Cephes' tanhf (its polynomial below |x| = 0.625, 1 − 2/(e^{2|x|} + 1) above).
/// - sigmoid: 1/(1 + e^(−x)) with exp above.
/// - gelu: ½x(1 + erf(x/√2)), the erf above; gelu_backward: g·(Φ(x) + x·φ(x)) in the order
///   ops_elementwise's double path computes it. Both run blocks of eight values and skip erf's
///   far branch (|x|/√2 ≥ 1) in a block that has no such value: the same bits either way.
/// Each compiled for every SIMD level with the same bits (simd_dispatch.hpp); a NaN result is
/// always the same quiet NaN. Callers split long arrays over the pool: the result of each
/// element depends on that element only.
void exp(const float* x, float* y, std::size_t n);
void erf(const float* x, float* y, std::size_t n);
void tanh(const float* x, float* y, std::size_t n);
void sigmoid(const float* x, float* y, std::size_t n);
void gelu(const float* x, float* y, std::size_t n);
void gelu_backward(const float* g, const float* x, float* d, std::size_t n);

}  // namespace xgrad::vec
