#pragma once
/// The pieces the product ops share under autocast (core/autocast.hpp): whether a float32
/// product runs in bfloat16, and the bfloat16 copies of its operands that forward and backward
/// both read.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/runtime/dnnl.hpp"

namespace xgrad::autocast {

using Bf16 = std::shared_ptr<const std::vector<std::uint16_t>>;

/// Products smaller than this many multiply-adds stay float32 under autocast: below it the
/// conversions and oneDNN's per-call cost outweigh the bfloat16 product (see the threshold's
/// comment in autocast.cpp).
constexpr std::size_t kMinMultiplyAdds = std::size_t(1) << 16;

/// Whether a float32 product of `multiply_adds` runs in bfloat16 here: a guard is alive on this
/// thread and the product is not tiny.
bool use_bf16(std::size_t multiply_adds);

/// n values rounded to bfloat16 (to nearest, ties to even), converted over the pool.
Bf16 to_bf16(const float* data, std::size_t n);

/// C + c_off[i] (+)= alpha·op(A + a_off[i])·op(B + b_off[i]) for every i, each operand with the
/// flags, sizes and row lengths in `shape` (its batch fields are filled here). One oneDNN call
/// when every list steps by a fixed stride (a stride of 0 sharing one A or B); otherwise one
/// call per batch, in order, and then a C offset that repeats sums its batches (`accumulate`
/// must then be set, into zeros).
void batched(dnnl::Matmul shape, const void* a, const std::vector<std::size_t>& a_off, const void* b,
             const std::vector<std::size_t>& b_off, float* c, const std::vector<std::size_t>& c_off);

}  // namespace xgrad::autocast
