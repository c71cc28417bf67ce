#pragma once
/// A float32 matrix packed once for many products by small left operands: the recurrent layers'
/// W_hh, multiplied by every step's (batch, hidden) state (core/sequence_ops.cpp), and a head's
/// keys, values, queries and output gradient, multiplied block by block in flash attention
/// (core/ops_flash_attention.cpp). A BLAS call repacks both operands and clears C on every call,
/// which for these small products is a large part of their time; here the right operand is
/// packed once, the left one read in place, and C written once. Internal to core.
///
/// The kernel needs AVX2 and FMA (a 6×16 register block, sums in k order with one rounding per
/// multiply-add); available() says whether this CPU has them, and without them callers use
/// blas::gemm. The panels of columns are split over xgrad's pool (parallel.hpp) when the
/// product is large enough; each element's sum is the same however it is split.
#include <cstddef>
#include <vector>

namespace xgrad {

class PackedMatrix {
public:
    /// Whether this CPU runs the packed kernel (AVX2 and FMA).
    static bool available();

    /// Packs op(B), k×n: B stored row-major with row length ldb, op(B) = Bᵀ when `transpose`
    /// (B then stored n×k).
    PackedMatrix(const float* b, std::size_t ldb, bool transpose, std::size_t k, std::size_t n);
    /// An empty matrix, for pack() to fill.
    PackedMatrix() = default;
    /// Packs another op(B) in place of this one, reusing its memory.
    void pack(const float* b, std::size_t ldb, bool transpose, std::size_t k, std::size_t n);

    /// C = A·op(B), or C += A·op(B) when `accumulate`: A m×k row-major (row length lda), C m×n
    /// (row length ldc). Requires available(). Large products split over xgrad's pool.
    void multiply(const float* a, std::size_t lda, std::size_t m, float* c, std::size_t ldc, bool accumulate) const;

    /// A product by a block of op(B), on the calling thread only (for callers already running on
    /// the pool): C = α·A·op(B)[k0 : k0 + k, n0 : n0 + n], or C += that when `accumulate`.
    /// A is m×k read in place, row-major with row length lda, or, when `a_transposed`, stored
    /// k×m (the transpose of a row-major k×m block is read, as a BLAS call's transa). n0 must
    /// start a panel (a multiple of 16). Each element is α times its sum in k order, as
    /// multiply's. Requires available().
    struct Block {
        std::size_t k0, k, n0, n;
    };
    void multiply_block(const float* a, std::size_t lda, bool a_transposed, std::size_t m, const Block& block,
                        float alpha, float* c, std::size_t ldc, bool accumulate) const;

    /// The floats a packed k×n matrix holds (n rounded up to whole panels of 16 columns).
    static std::size_t size_of(std::size_t k, std::size_t n) { return (n + 15) / 16 * 16 * k; }

    std::size_t k() const { return m_k; }
    std::size_t n() const { return m_n; }

private:
    std::size_t m_k = 0, m_n = 0, m_panels = 0;
    // Panel p holds columns [16p, 16p + 16) of op(B) as k rows of 16 (zeros past n).
    std::vector<float> m_data;
};

}  // namespace xgrad
