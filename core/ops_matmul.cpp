// Matrix products on BLAS gemm. The backward uses gemm's transpose flags and accumulates with
// beta = 1, so no transposed copy is ever made and broadcast batches sum for free.
#include "blas.hpp"
#include "broadcast.hpp"
#include "ops.hpp"

namespace xgrad {

namespace {

// A batched product laid out for gemm: out[i] = A[a_off[i]] · B[b_off[i]], every matrix
// contiguous row-major (M,K)·(K,N) → (M,N), batches in row-major order of the batch shape.
struct Plan {
    std::size_t m, k, n;
    std::vector<std::size_t> a_off, b_off;  // element offsets of each batch's matrices
    Shape out_shape;                         // as returned (1-D operands' axes dropped)
};

// Element offsets of every batch of `batch` (broadcast) in an operand with batch shape `own`:
// broadcast axes (missing or of length 1) have stride 0.
std::vector<std::size_t> batch_offsets(const Shape& batch, const Shape& own, std::size_t matrix) {
    const std::size_t lead = batch.size() - own.size();
    std::vector<std::size_t> stride(batch.size(), 0);
    std::size_t s = matrix;
    for (std::size_t d = batch.size(); d-- > lead;) {
        const std::size_t len = own[d - lead];
        stride[d] = len == 1 ? 0 : s;
        s *= len;
    }
    std::size_t count = 1;
    for (auto v : batch) count *= v;
    std::vector<std::size_t> off(count, 0);
    std::vector<std::size_t> idx(batch.size(), 0);
    for (std::size_t i = 0; i < count; ++i) {
        std::size_t o = 0;
        for (std::size_t d = 0; d < batch.size(); ++d) o += idx[d] * stride[d];
        off[i] = o;
        for (std::size_t d = batch.size(); d-- > 0;)  // odometer increment
            if (++idx[d] < batch[d]) break;
            else idx[d] = 0;
    }
    return off;
}

Plan plan_matmul(const char* op, const Shape& sa, const Shape& sb) {
    if (sa.empty() || sb.empty())
        throw Error(fmt::format("{}: both operands need at least one axis, got shapes {} and {}", op,
                                shape_str(sa), shape_str(sb)));
    // numpy: a 1-D left operand is a row (1,K), a 1-D right operand a column (K,1); the added
    // axis is dropped from the result.
    Shape a = sa.size() == 1 ? Shape{1, sa[0]} : sa;
    Shape b = sb.size() == 1 ? Shape{sb[0], 1} : sb;
    Plan p;
    p.m = a[a.size() - 2];
    p.k = a[a.size() - 1];
    p.n = b[b.size() - 1];
    if (b[b.size() - 2] != p.k)
        throw Error(fmt::format("{}: shapes {} and {} cannot be multiplied ({} != {})", op, shape_str(sa),
                                shape_str(sb), p.k, b[b.size() - 2]));
    const Shape ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
    const Shape batch = broadcast_shapes(op, ba, bb);
    p.a_off = batch_offsets(batch, ba, p.m * p.k);
    p.b_off = batch_offsets(batch, bb, p.k * p.n);
    p.out_shape = batch;
    if (sa.size() > 1) p.out_shape.push_back(p.m);
    if (sb.size() > 1) p.out_shape.push_back(p.n);
    return p;
}

Tensor product(const char* op, const Tensor& a, const Tensor& b, const Plan& p) {
    check_same_dtype(op, a, b);
    return dispatch_floating(op, a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> c = xt::empty<T>(p.out_shape);
        const T* A = values<T>(a).data();
        const T* B = values<T>(b).data();
        const std::size_t mn = p.m * p.n;
        // C[i] = A[i]·B[i] : (M,K)·(K,N) → (M,N)
        for (std::size_t i = 0; i < p.a_off.size(); ++i)
            blas::gemm<T>(false, false, p.m, p.n, p.k, 1, A + p.a_off[i], p.k, B + p.b_off[i], p.n, 0,
                          c.data() + i * mn, p.n);
        return make_result<T>(std::move(c), {a, b}, op, [op, p](Node& self, const Storage& gs) {
            const Tensor& ta = self.parents[0];
            const Tensor& tb = self.parents[1];
            const T* G = grad_as<T>(gs).data();
            const std::size_t mn = p.m * p.n;
            if (needs_grad(self, 0)) {
                // dA[i] += dC[i]·B[i]ᵀ : (M,N)·(N,K) → (M,K)
                xt::xarray<T> da = xt::zeros<T>(ta.shape());
                const T* B = values<T>(tb).data();
                for (std::size_t i = 0; i < p.a_off.size(); ++i)
                    blas::gemm<T>(false, true, p.m, p.k, p.n, 1, G + i * mn, p.n, B + p.b_off[i], p.n, 1,
                                  da.data() + p.a_off[i], p.k);
                accumulate<T>(op, ta, std::move(da));
            }
            if (needs_grad(self, 1)) {
                // dB[i] += A[i]ᵀ·dC[i] : (K,M)·(M,N) → (K,N)
                xt::xarray<T> db = xt::zeros<T>(tb.shape());
                const T* A = values<T>(ta).data();
                for (std::size_t i = 0; i < p.a_off.size(); ++i)
                    blas::gemm<T>(true, false, p.k, p.n, p.m, 1, A + p.a_off[i], p.k, G + i * mn, p.n, 1,
                                  db.data() + p.b_off[i], p.n);
                accumulate<T>(op, tb, std::move(db));
            }
        });
    });
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) { return product("matmul", a, b, plan_matmul("matmul", a.shape(), b.shape())); }

Tensor bmm(const Tensor& a, const Tensor& b) {
    const Shape& sa = a.shape();
    const Shape& sb = b.shape();
    if (sa.size() != 3 || sb.size() != 3)
        throw Error(fmt::format("bmm: expected two 3-D tensors (batch, rows, cols), got shapes {} and {}",
                                shape_str(sa), shape_str(sb)));
    if (sa[0] != sb[0])
        throw Error(fmt::format("bmm: batch sizes differ: shapes {} and {} ({} != {})", shape_str(sa),
                                shape_str(sb), sa[0], sb[0]));
    return product("bmm", a, b, plan_matmul("bmm", sa, sb));
}

}  // namespace xgrad
