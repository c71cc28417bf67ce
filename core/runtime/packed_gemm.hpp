#pragma once
/// A float32 matrix packed once for many products by small left operands: the recurrent layers'
/// W_hh, multiplied by every step's (batch, hidden) state (core/sequence_ops.cpp). A BLAS call
/// repacks its right operand on every call, which for a (32, 256)·(256, 768) step is a large
/// part of the product; here the packing is paid once per sequence. Internal to core.
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

    /// C = A·op(B), or C += A·op(B) when `accumulate`: A m×k row-major (row length lda), C m×n
    /// (row length ldc). Requires available().
    void multiply(const float* a, std::size_t lda, std::size_t m, float* c, std::size_t ldc, bool accumulate) const;

    std::size_t k() const { return m_k; }
    std::size_t n() const { return m_n; }

private:
    std::size_t m_k, m_n, m_panels;
    // Panel p holds columns [16p, 16p + 16) of op(B) as k rows of 16 (zeros past n).
    std::vector<float> m_data;
};

}  // namespace xgrad
