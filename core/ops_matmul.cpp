// Matrix products on BLAS gemm. Forward and backward use gemm's transpose flags, so no
// transposed copy is ever made, and accumulate with beta = 1 where a broadcast operand's
// gradient sums over batches.
#include <cmath>

#include "core/runtime/blas.hpp"
#include "core/autocast_product.hpp"
#include "core/broadcast.hpp"
#include "core/ops.hpp"
#include "core/runtime/parallel.hpp"

namespace xgrad {

namespace {

// A batched product laid out for gemm: out[i] = alpha·op(A[a_off[i]])·op(B[b_off[i]]), op(X) = Xᵀ
// when its flag is set, every matrix contiguous row-major: op(A) (M,K), op(B) (K,N) → (M,N),
// batches in row-major order of the batch shape.
struct Plan {
    std::size_t m, k, n;
    bool ta = false, tb = false;
    double alpha = 1;
    std::size_t count = 0;                   // products per pass (0: the result is empty)
    Shape batch, a_batch, b_batch;           // the broadcast batch shape, and each operand's own
    autocast::Offsets a_off, b_off;          // element offsets of each batch's matrices (make_offsets)
    bool a_repeats = false, b_repeats = false;  // broadcast: one matrix serves several batches
    Shape out_shape;                         // as returned (1-D operands' axes dropped)
    std::size_t lda() const { return ta ? m : k; }  // row lengths as stored
    std::size_t ldb() const { return tb ? k : n; }
};

// Element offsets of every batch of `batch` (broadcast, `count` batches) in an operand with batch
// shape `own`: broadcast axes (missing or of length 1) have stride 0.
autocast::Offsets batch_offsets(const Shape& batch, std::size_t count, const Shape& own, std::size_t matrix) {
    const std::size_t lead = batch.size() - own.size();
    std::vector<std::size_t> stride(batch.size(), 0);
    std::size_t s = matrix;
    for (std::size_t d = batch.size(); d-- > lead;) {
        const std::size_t len = own[d - lead];
        stride[d] = len == 1 ? 0 : s;
        s *= len;
    }
    autocast::Offsets off(count);
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

// Batches per parallel chunk: enough multiply-adds (about 2^20) to be worth a hand-off.
std::size_t batch_grain(const Plan& p) {
    const std::size_t work = std::max<std::size_t>(1, p.m * p.n * p.k);
    return std::max<std::size_t>(1, (std::size_t(1) << 20) / work);
}

// body(i) for each batch i, over the pool unless the batches write into shared memory.
template <class F> void for_batches(const Plan& p, bool shared_target, F&& body) {
    if (shared_target) {
        for (std::size_t i = 0; i < p.count; ++i) body(i);
        return;
    }
    parallel_for(p.count, batch_grain(p), [&](std::size_t i0, std::size_t i1) {
        for (std::size_t i = i0; i < i1; ++i) body(i);
    });
}

std::size_t count_of(const Shape& s) {
    std::size_t c = 1;
    for (auto v : s) c *= v;
    return c;
}

// sa, sb: the operands' shapes as stored, rank >= 2 (matmul adds the axes of 1-D operands).
Plan plan_product(const char* op, const Shape& sa, const Shape& sb, bool ta, bool tb, double alpha,
                  const Shape& shown_a, const Shape& shown_b) {
    const std::size_t ra = sa[sa.size() - 2], ca = sa[sa.size() - 1];
    const std::size_t rb = sb[sb.size() - 2], cb = sb[sb.size() - 1];
    Plan p;
    p.ta = ta;
    p.tb = tb;
    p.alpha = alpha;
    p.m = ta ? ca : ra;
    p.k = ta ? ra : ca;
    p.n = tb ? rb : cb;
    const std::size_t kb = tb ? cb : rb;
    if (kb != p.k)
        throw Error(fmt::format("{}: shapes {} and {} cannot be multiplied ({} != {})", op, shape_str(shown_a),
                                shape_str(shown_b), p.k, kb));
    const Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
    const Shape batch = broadcast_axes(op, ba, bb);
    // The result (batch..., M, N), counted whole before anything is allocated: the batch axes of
    // two small operands can broadcast to more products than fit in memory, or to a count that
    // wraps, and the per-batch tables are as long as the batch.
    Shape out = batch;
    out.insert(out.end(), {p.m, p.n});
    const bool empty = checked_numel(op, out, [&] {
        return fmt::format("the product of {} and {}", shape_str(shown_a), shape_str(shown_b));
    }) == 0;
    p.out_shape = batch;
    if (empty) {
        // Nothing to multiply: no per-batch tables (a batch of 2^40 empty products would build
        // 2^40 offsets), and the input gradients are zeros.
        p.a_repeats = p.b_repeats = true;
    } else if (bb.empty() && !ta) {
        // (..., M, K)·(K, N): the batches of A stack into one (…·M, K) matrix, one gemm.
        p.m *= count_of(batch);
        p.count = 1;
    } else {
        p.count = count_of(batch);
        p.batch = batch, p.a_batch = ba, p.b_batch = bb;
        p.a_repeats = count_of(ba) != p.count;
        p.b_repeats = count_of(bb) != p.count;
    }
    return p;
}

// The per-batch offset tables, 8 bytes a batch for each operand: made after the result is
// allocated, under its AllocContext, so that a batch too large for memory fails there, named.
void make_offsets(Plan& p) {
    if (p.count == 0) return;
    p.a_off = batch_offsets(p.batch, p.count, p.a_batch, p.m * p.k);
    p.b_off = batch_offsets(p.batch, p.count, p.b_batch, p.k * p.n);
}

Plan plan_matmul(const char* op, const Shape& sa, const Shape& sb) {
    if (sa.empty() || sb.empty())
        throw Error(fmt::format("{}: both operands need at least one axis, got shapes {} and {}", op,
                                shape_str(sa), shape_str(sb)));
    // numpy: a 1-D left operand is a row (1,K), a 1-D right operand a column (K,1); the added
    // axis is dropped from the result.
    const Shape a = sa.size() == 1 ? Shape{1, sa[0]} : sa;
    const Shape b = sb.size() == 1 ? Shape{sb[0], 1} : sb;
    Plan p = plan_product(op, a, b, false, false, 1.0, sa, sb);
    if (sa.size() > 1) p.out_shape.push_back(a[a.size() - 2]);
    if (sb.size() > 1) p.out_shape.push_back(b[b.size() - 1]);
    return p;
}

// On oneDNN, with float32 accumulation and a float32 result: float32 operands when the float32
// engine is oneDNN (gemm_uses_onednn, blas.hpp), or under autocast (core/autocast.hpp) the
// operands rounded to bfloat16. A bfloat16 backward reads the copies made here, never the inputs
// again, and multiplies in bfloat16 as well (G rounded), whatever the autocast state when it
// runs; a float32 backward reads the inputs, as the BLAS path's does.
Tensor product_dnnl(const char* op, const Tensor& a, const Tensor& b, Plan p, dnnl::Input in) {
    using autocast::Bf16;
    const bool bf16 = in == dnnl::Input::bf16;
    const Shape out_shape = p.out_shape;  // p moves into the backward
    const AllocContext context(op, out_shape);
    const Bf16 a16 = bf16 ? autocast::to_bf16(a) : nullptr;
    const Bf16 b16 = bf16 ? autocast::to_bf16(b) : nullptr;
    xt::xarray<float> c = xt::empty<float>(out_shape);
    make_offsets(p);
    const std::size_t count = p.count, mn = p.m * p.n;
    autocast::Offsets c_off(count);
    for (std::size_t i = 0; i < count; ++i) c_off[i] = i * mn;
    dnnl::Matmul shape;
    shape.input = in;
    shape.alpha = static_cast<float>(p.alpha);
    // C[i] = α·op(A[i])·op(B[i]) : (M,K)·(K,N) → (M,N)
    shape.trans_a = p.ta, shape.trans_b = p.tb, shape.m = p.m, shape.n = p.n, shape.k = p.k;
    shape.lda = p.lda(), shape.ldb = p.ldb(), shape.ldc = p.n;
    autocast::batched(shape, bf16 ? static_cast<const void*>(a16->data()) : values<float>(a).data(), p.a_off,
                      bf16 ? static_cast<const void*>(b16->data()) : values<float>(b).data(), p.b_off, c.data(), c_off);
    // Each copy is kept only for the other operand's gradient.
    const Bf16 keep_a = bf16 && autocast::keep_for(b) ? a16 : nullptr, keep_b = bf16 && autocast::keep_for(a) ? b16 : nullptr;
    return make_result<float>(std::move(c), {a, b}, op, [op, p = std::move(p), c_off = std::move(c_off), in, keep_a,
                                                         keep_b](Node& self, const Storage& gs) {
        const bool need_a = needs_grad(self, 0), need_b = needs_grad(self, 1);
        if (!need_a && !need_b) return;
        const bool bf16 = in == dnnl::Input::bf16;
        const xt::xarray<float>& g = grad_as<float>(gs);
        const Bf16 g16 = bf16 ? autocast::to_bf16(g.data(), g.size()) : nullptr;
        const void* G = bf16 ? static_cast<const void*>(g16->data()) : g.data();
        // The operands as multiplied: the bfloat16 copies, or the float32 inputs themselves.
        auto operand = [&](std::size_t i) -> const void* {
            if (bf16) return (i == 0 ? keep_a : keep_b)->data();
            return values<float>(self.parents[i]).data();
        };
        dnnl::Matmul shape;
        shape.input = in;
        shape.alpha = static_cast<float>(p.alpha);
        // A matrix shared by several batches sums their gradients, one product at a time into zeros.
        auto buffer = [](const Shape& s, bool repeats) { return repeats ? xt::xarray<float>(xt::zeros<float>(s)) : xt::xarray<float>(xt::empty<float>(s)); };
        if (need_a) {
            xt::xarray<float> da = buffer(self.parents[0].shape(), p.a_repeats);
            shape.accumulate = p.a_repeats;
            if (!p.ta) {  // dA = α·G·op(B)ᵀ : (M,N)·(N,K) → (M,K)
                shape.trans_a = false, shape.trans_b = !p.tb, shape.m = p.m, shape.n = p.k, shape.k = p.n;
                shape.lda = p.n, shape.ldb = p.ldb(), shape.ldc = p.k;
                autocast::batched(shape, G, c_off, operand(1), p.b_off, da.data(), p.a_off);
            } else {  // A stored (K,M): dA = α·op(B)·Gᵀ : (K,N)·(N,M) → (K,M)
                shape.trans_a = p.tb, shape.trans_b = true, shape.m = p.k, shape.n = p.m, shape.k = p.n;
                shape.lda = p.ldb(), shape.ldb = p.n, shape.ldc = p.m;
                autocast::batched(shape, operand(1), p.b_off, G, c_off, da.data(), p.a_off);
            }
            accumulate<float>(op, self.parents[0], std::move(da));
        }
        if (need_b) {
            xt::xarray<float> db = buffer(self.parents[1].shape(), p.b_repeats);
            shape.accumulate = p.b_repeats;
            if (!p.tb) {  // dB = α·op(A)ᵀ·G : (K,M)·(M,N) → (K,N)
                shape.trans_a = !p.ta, shape.trans_b = false, shape.m = p.k, shape.n = p.n, shape.k = p.m;
                shape.lda = p.lda(), shape.ldb = p.n, shape.ldc = p.n;
                autocast::batched(shape, operand(0), p.a_off, G, c_off, db.data(), p.b_off);
            } else {  // B stored (N,K): dB = α·Gᵀ·op(A) : (N,M)·(M,K) → (N,K)
                shape.trans_a = true, shape.trans_b = p.ta, shape.m = p.n, shape.n = p.k, shape.k = p.m;
                shape.lda = p.n, shape.ldb = p.lda(), shape.ldc = p.k;
                autocast::batched(shape, G, c_off, operand(0), p.a_off, db.data(), p.b_off);
            }
            accumulate<float>(op, self.parents[1], std::move(db));
        }
    }, bf16 ? Saves::none() : Saves::only_inputs(3u));
}

Tensor product(const char* op, const Tensor& a, const Tensor& b, Plan p) {
    check_same_dtype(op, a, b);
    if (a.dtype() == kFloat32 && p.m != 0 && p.n != 0 && p.k != 0 && p.count != 0) {
        if (autocast::use_bf16(p.m * p.n * p.k)) return product_dnnl(op, a, b, std::move(p), dnnl::Input::bf16);
        if (gemm_uses_onednn(p.count, p.m, p.n, p.k)) return product_dnnl(op, a, b, std::move(p), dnnl::Input::f32);
    }
    return dispatch_floating(op, a.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const Shape out_shape = p.out_shape;  // p moves into the backward
        const AllocContext context(op, out_shape);
        xt::xarray<T> c = xt::empty<T>(out_shape);
        make_offsets(p);
        const T* A = values<T>(a).data();
        const T* B = values<T>(b).data();
        const T alpha = static_cast<T>(p.alpha);
        const std::size_t mn = p.m * p.n;
        // C[i] = α·op(A[i])·op(B[i]) : (M,K)·(K,N) → (M,N)
        for_batches(p, false, [&](std::size_t i) {
            blas::gemm<T>(p.ta, p.tb, p.m, p.n, p.k, alpha, A + p.a_off[i], p.lda(), B + p.b_off[i], p.ldb(), 0,
                          c.data() + i * mn, p.n);
        });
        return make_result<T>(std::move(c), {a, b}, op, [op, p = std::move(p)](Node& self, const Storage& gs) {
            const Tensor& ta = self.parents[0];
            const Tensor& tb = self.parents[1];
            const T* G = grad_as<T>(gs).data();
            const T alpha = static_cast<T>(p.alpha);
            const std::size_t mn = p.m * p.n;
            // A matrix shared by several batches sums their gradients (beta = 1 into zeros).
            auto buffer = [](const Shape& s, bool repeats) { return repeats ? xt::xarray<T>(xt::zeros<T>(s)) : xt::xarray<T>(xt::empty<T>(s)); };
            if (needs_grad(self, 0)) {
                xt::xarray<T> da = buffer(ta.shape(), p.a_repeats);
                const T* B = values<T>(tb).data();
                const T beta = p.a_repeats ? 1 : 0;
                for_batches(p, p.a_repeats, [&](std::size_t i) {
                    T* D = da.data() + p.a_off[i];
                    if (!p.ta)  // dA = α·G·op(B)ᵀ : (M,N)·(N,K) → (M,K)
                        blas::gemm<T>(false, !p.tb, p.m, p.k, p.n, alpha, G + i * mn, p.n, B + p.b_off[i], p.ldb(),
                                      beta, D, p.k);
                    else  // A stored (K,M): dA = α·op(B)·Gᵀ : (K,N)·(N,M) → (K,M)
                        blas::gemm<T>(p.tb, true, p.k, p.m, p.n, alpha, B + p.b_off[i], p.ldb(), G + i * mn, p.n,
                                      beta, D, p.m);
                });
                accumulate<T>(op, ta, std::move(da));
            }
            if (needs_grad(self, 1)) {
                xt::xarray<T> db = buffer(tb.shape(), p.b_repeats);
                const T* A = values<T>(ta).data();
                const T beta = p.b_repeats ? 1 : 0;
                for_batches(p, p.b_repeats, [&](std::size_t i) {
                    T* D = db.data() + p.b_off[i];
                    if (!p.tb)  // dB = α·op(A)ᵀ·G : (K,M)·(M,N) → (K,N)
                        blas::gemm<T>(!p.ta, false, p.k, p.n, p.m, alpha, A + p.a_off[i], p.lda(), G + i * mn, p.n,
                                      beta, D, p.n);
                    else  // B stored (N,K): dB = α·Gᵀ·op(A) : (N,M)·(M,K) → (N,K)
                        blas::gemm<T>(true, p.ta, p.n, p.k, p.m, alpha, G + i * mn, p.n, A + p.a_off[i], p.lda(),
                                      beta, D, p.k);
                });
                accumulate<T>(op, tb, std::move(db));
            }
        }, Saves::only_inputs(3u));
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

Tensor matmul_t(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b, double alpha) {
    if (a.dim() < 2 || b.dim() < 2)
        throw Error(fmt::format("matmul_t: both operands need at least two axes, got shapes {} and {}",
                                shape_str(a.shape()), shape_str(b.shape())));
    // A NaN or infinite alpha makes every element NaN or infinite, silently.
    if (!std::isfinite(alpha)) throw Error(fmt::format("matmul_t: alpha must be finite, got {}", alpha));
    Plan p = plan_product("matmul_t", a.shape(), b.shape(), transpose_a, transpose_b, alpha, a.shape(), b.shape());
    p.out_shape.push_back(transpose_a ? a.size(-1) : a.size(-2));
    p.out_shape.push_back(transpose_b ? b.size(-2) : b.size(-1));
    return product("matmul_t", a, b, std::move(p));
}

}  // namespace xgrad
