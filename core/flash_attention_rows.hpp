#pragma once
/// The float row loops of flash_attention (ops_flash_attention.cpp): one block's online softmax
/// and its weights' gradient, each in one pass over a row with the exp computed inline.
/// Each loop is compiled for every SIMD level and the level picked as for vec_math's loops
/// (runtime/simd_dispatch.hpp: XGRAD_SIMD and set_simd_level choose), with the same bits on
/// each; the exp is vec_math's (runtime/exp_kernel.hpp). Internal to core.
#include <cstddef>

namespace xgrad::flash_rows {

/// y[j] = e^(x[j] − m) by exp_kernel::shifted (the bits of vec::exp_shifted_sum's y): within
/// 2 ulp of std::exp, 0 where x[j] − m < −87, NaN stays NaN. Returns Σ y[j] (sixteen lane sums
/// combined pairwise). For the accuracy test and the loops below.
float exp_shifted_sum(const float* x, float m, float* y, std::size_t n);

/// One query block's step of the online softmax over a key block: row r of S (nq rows of nk)
/// keeps its first kept[r] scores (the rest are hidden keys); with its running maximum m[r] and
/// sum l[r] it becomes e^(S − m'), hidden keys 0, m[r] = m' (the new maximum; a row with no
/// finite score yet shifts by 0), l[r] = l[r]·rescale[r] + Σ row, rescale[r] = e^(m − m'),
/// the factor the row's output accumulated so far is to be scaled by.
void online_softmax(float* S, std::size_t nq, std::size_t nk, const std::size_t* kept, float* m, float* l,
                    float* rescale);

/// The backward's block: row r's weights P = e^(S − lse[r]) over its first kept[r] keys (0
/// after), written into S; dS = P ⊙ (dP − D[r]) written into dP (0 where `no_grad[r]`: a row
/// keeping no key, whose weights do not depend on its scores).
void weights_grad(float* S, float* dP, std::size_t nq, std::size_t nk, const std::size_t* kept, const float* lse,
                  const float* D, const bool* no_grad);

}  // namespace xgrad::flash_rows
