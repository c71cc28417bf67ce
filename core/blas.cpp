#include "blas.hpp"

#include <cblas.h>

namespace xgrad::blas {

namespace {
CBLAS_TRANSPOSE flag(bool t) { return t ? CblasTrans : CblasNoTrans; }
// cblas takes int sizes; every caller checks shapes first, and these fit for any tensor that
// fits in memory along one matrix axis.
int i(std::size_t v) { return static_cast<int>(v); }
// BLAS rejects leading dimensions below 1 and has nothing to do for empty products; an empty
// inner dimension still has to scale C by beta.
int ld(std::size_t v) { return static_cast<int>(v == 0 ? 1 : v); }
template <class T> bool trivial(std::size_t m, std::size_t n, std::size_t k, T beta, T* c, std::size_t ldc) {
    if (m == 0 || n == 0) return true;
    if (k != 0) return false;
    for (std::size_t r = 0; r < m; ++r)
        for (std::size_t j = 0; j < n; ++j) c[r * ldc + j] = beta == T(0) ? T(0) : beta * c[r * ldc + j];
    return true;
}
}  // namespace

template <>
void gemm<float>(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
                 std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) {
    if (trivial(m, n, k, beta, c, ldc)) return;
    cblas_sgemm(CblasRowMajor, flag(ta), flag(tb), i(m), i(n), i(k), alpha, a, ld(lda), b, ld(ldb), beta, c,
                ld(ldc));
}

template <>
void gemm<double>(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, double alpha,
                  const double* a, std::size_t lda, const double* b, std::size_t ldb, double beta, double* c,
                  std::size_t ldc) {
    if (trivial(m, n, k, beta, c, ldc)) return;
    cblas_dgemm(CblasRowMajor, flag(ta), flag(tb), i(m), i(n), i(k), alpha, a, ld(lda), b, ld(ldb), beta, c,
                ld(ldc));
}

}  // namespace xgrad::blas
