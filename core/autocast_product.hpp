#pragma once
/// The pieces the product ops share under autocast (core/autocast.hpp): whether a float32
/// product runs in bfloat16, and the bfloat16 copies of its operands that forward and backward
/// both read.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/runtime/alloc.hpp"
#include "core/tensor.hpp"
#include "core/runtime/dnnl.hpp"

namespace xgrad::autocast {

/// A bfloat16 copy: its block comes from the caching allocator and is not cleared first, since
/// the conversion writes every element (a step's copies are megabytes each).
using Bf16Buffer = CachedBuffer<std::uint16_t>;
using Bf16 = std::shared_ptr<const Bf16Buffer>;

/// Matrix products (one of a batch: m·n·k) smaller than this stay float32 under autocast.
/// oneDNN costs microseconds per call, and a bfloat16 product pays a conversion per operand
/// element, so tiny products lose: with native bfloat16 (AVX512-BF16), fed 2 threads,
/// head_attention_weights then head_attention_combine, forward and backward, with seq_train's
/// heads (64 batches × 4 heads, d 16, lengths 1 to 8: m·n·k ≤ 2^10) took 0.4-0.7 ms in
/// bfloat16 against 0.1-0.3 ms in float32 on OpenBLAS. At 2^15 the product itself is faster in
/// bfloat16 (bench_gemm, one thread, 128 products of 32×32×32: 155 GFLOP/s against sgemm's
/// 102), but with its inputs' conversion it is not (59). At the op level heads of 2^13 to 2^17
/// took 0.6 to 1.7 times float32's time, mostly more, on a machine shared with builds, and
/// from 2^19 (bench_mha medium and large) bfloat16 takes 0.75-0.8 of it. The floor sits where
/// the product alone wins. Measured again with the conversion on AVX-512 and the heads'
/// copies packed (bench_mha small, whose heads are 32×32×32 = 2^15, three alternated pairs of
/// runs): a floor of 2^18, which sends those heads to float32 on OpenBLAS, changed neither its
/// training step (1.56-1.60 ms) nor its inference (0.62-0.72 ms), so the floor stays.
constexpr std::size_t kMinMultiplyAdds = std::size_t(1) << 15;

/// Whether a float32 product whose matrices take `multiply_adds` (m·n·k) each runs in bfloat16
/// here: a guard is alive on this thread and the matrices are not tiny. Shape only, never timing,
/// so every replica decides alike.
bool use_bf16(std::size_t multiply_adds);

/// n values rounded to bfloat16 (to nearest, ties to even), converted over the pool.
Bf16 to_bf16(const float* data, std::size_t n);

/// A product operand rounded to bfloat16: to_bf16 of its values, or the copy this thread made
/// of the same tensor moments ago, so that self-attention's three projections round their one
/// input once. The copy is reused only while the tensor is alive with the same values (its
/// version, data and size unchanged; a write through a pointer kept from an earlier
/// mutable_data_ptr() is not seen, as everywhere versions are checked); this thread remembers
/// its last two, until the outermost AutocastGuard ends.
Bf16 to_bf16(const Tensor& t);

/// Whether a product keeps its bfloat16 copy of one operand for the gradient of `other`: when
/// `other` requires grad, or is a leaf, whose requires_grad_() may still be turned on between
/// the forward and the backward (the backward asks the inputs then, as the float32 one does,
/// and would find no copy to multiply).
inline bool keep_for(const Tensor& other) { return other.requires_grad() || other.is_leaf(); }

/// A packed projection (batch, length, heads·d) rounded to bfloat16 as to_bf16, written
/// head-packed, (batch·heads, length, d) with head (b, h) contiguous, in the same one pass. The
/// attention products read their bfloat16 copies this way: oneDNN's bfloat16 kernels run a
/// contiguous head markedly faster than the same head read in place with rows heads·d apart.
Bf16 to_bf16_heads(const float* data, std::size_t batch, std::size_t length, std::size_t heads, std::size_t d);

/// Element offsets of the matrices of a batch of products, one per product: a table as long as
/// the batch, so from the caching allocator, where running out of memory names the op and the
/// shape of an AllocContext in force rather than escaping as std::bad_alloc.
using Offsets = std::vector<std::size_t, cache_allocator<std::size_t>>;

/// C + c_off[i] (+)= alpha·op(A + a_off[i])·op(B + b_off[i]) for every i, each operand with the
/// flags, sizes and row lengths in `shape` (its batch fields are filled here). One oneDNN call
/// when every list steps by a fixed stride (a stride of 0 sharing one A or B); otherwise one
/// call per batch, in order, and then a C offset that repeats sums its batches (`accumulate`
/// must then be set, into zeros).
void batched(dnnl::Matmul shape, const void* a, const Offsets& a_off, const void* b, const Offsets& b_off, float* c,
             const Offsets& c_off);

}  // namespace xgrad::autocast
