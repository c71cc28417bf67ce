#pragma once
/// Thin typed wrapper over cblas gemm (row-major), the one place core/ calls BLAS.
/// C = alpha·op(A)·op(B) + beta·C, op(X) = Xᵀ when its flag is set; M×N result, K inner.
/// Leading dimensions are those of the matrices as stored (before the transpose flag).
#include <cstddef>

namespace xgrad::blas {

template <class T>
void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
          std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc);

}  // namespace xgrad::blas
