// Matrix products on BLAS gemm. Forward and backward use gemm's transpose flags, so no
// transposed copy is ever made, and accumulate with beta = 1 where a broadcast operand's
// gradient sums over batches. A product's gradients are products of its family again (Role
// below), so every product is differentiable any number of times.
#include <cmath>
#include <cstdint>
#include <memory>

#include "core/runtime/blas.hpp"
#include "core/autocast_product.hpp"
#include "core/call_context.hpp"
#include "core/broadcast.hpp"
#include "core/ops_util.hpp"
#include "core/ops.hpp"
#include "core/views.hpp"
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

// body(i) for each batch i, over the pool unless the batches write into shared memory, or are
// too few to make two chunks: then one after another, outside any chunk, so that each gemm can
// split over the pool itself (blas.cpp), which a gemm inside a chunk cannot. A single product,
// nn::Linear's over every leading axis, is the common case.
template <class F> void for_batches(const Plan& p, bool shared_target, F&& body) {
    if (shared_target || p.count / batch_grain(p) < 2) {
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

// Where a product runs: BLAS (float32 or float64), or oneDNN with float32 accumulation and a
// float32 result, of float32 operands when the float32 engine is oneDNN (gemm_uses_onednn,
// blas.hpp), or under autocast (core/autocast.hpp) of the operands rounded to bfloat16.
enum class Engine { blas, dnnl_f32, dnnl_bf16 };

// What a product and the products of its gradients share, fixed by its forward pass: the plan
// (its offsets made once) and the engine, which its gradients run on too, whatever the engine
// setting or the autocast state when they run. Each recorded product's formula holds a copy
// (in the one allocation of its std::function, as the older backward's lambda held the plan):
// a first-order backward records nothing and copies nothing.
struct Product {
    const char* op = "";       // "matmul", "bmm", "matmul_t"
    const char* grad_op = "";  // what its gradients' products are called: "matmul_backward", ...
    Plan p;
    Engine engine = Engine::blas;
    autocast::Offsets c_off;   // oneDNN: where each batch's (M, N) result starts, i·M·N
};
using autocast::Bf16;

// The three products of a product's family, each linear in each of its two arguments:
//   forward  C  = α·op(A)·op(B)                                  of (x, y) = (A, B)
//   grad_a   dA = α·G·op(B)ᵀ, or α·op(B)·Gᵀ when A is stored (K, M)  of (G, B)
//   grad_b   dB = α·op(A)ᵀ·G, or α·Gᵀ·op(A) when B is stored (N, K)  of (G, A)
// a gradient summed over the batches its operand serves when broadcast. The gradients of each
// are products of the family again (role_formula), so a product is differentiable any number
// of times, and the first-order backward runs the gemm calls it always ran.
enum class Role { forward, grad_a, grad_b };

// The BLAS products of one role, X and Y its arguments, into D (zeroed where batches sum into it).
// `onto`: the forward adds onto what D holds (linear's bias), as gemm's beta = 1.
template <class T> void blas_role(const Product& s, Role role, const T* X, const T* Y, T* D, bool onto = false) {
    const Plan& p = s.p;
    const T alpha = static_cast<T>(p.alpha);
    const std::size_t mn = p.m * p.n;
    if (role == Role::forward) {
        // C[i] = α·op(A[i])·op(B[i]) (+ C[i]) : (M,K)·(K,N) → (M,N)
        for_batches(p, false, [&](std::size_t i) {
            blas::gemm<T>(p.ta, p.tb, p.m, p.n, p.k, alpha, X + p.a_off[i], p.lda(), Y + p.b_off[i], p.ldb(),
                          onto ? T(1) : T(0), D + i * mn, p.n);
        });
    } else if (role == Role::grad_a) {
        // A matrix shared by several batches sums their gradients (beta = 1 into zeros).
        const T beta = p.a_repeats ? 1 : 0;
        const T *G = X, *B = Y;
        for_batches(p, p.a_repeats, [&](std::size_t i) {
            T* dA = D + p.a_off[i];
            if (!p.ta)  // dA = α·G·op(B)ᵀ : (M,N)·(N,K) → (M,K)
                blas::gemm<T>(false, !p.tb, p.m, p.k, p.n, alpha, G + i * mn, p.n, B + p.b_off[i], p.ldb(), beta, dA,
                              p.k);
            else  // A stored (K,M): dA = α·op(B)·Gᵀ : (K,N)·(N,M) → (K,M)
                blas::gemm<T>(p.tb, true, p.k, p.m, p.n, alpha, B + p.b_off[i], p.ldb(), G + i * mn, p.n, beta, dA,
                              p.m);
        });
    } else {
        const T beta = p.b_repeats ? 1 : 0;
        const T *G = X, *A = Y;
        for_batches(p, p.b_repeats, [&](std::size_t i) {
            T* dB = D + p.b_off[i];
            if (!p.tb)  // dB = α·op(A)ᵀ·G : (K,M)·(M,N) → (K,N)
                blas::gemm<T>(!p.ta, false, p.k, p.n, p.m, alpha, A + p.a_off[i], p.lda(), G + i * mn, p.n, beta, dB,
                              p.n);
            else  // B stored (N,K): dB = α·Gᵀ·op(A) : (N,M)·(M,K) → (N,K)
                blas::gemm<T>(true, p.ta, p.n, p.k, p.m, alpha, G + i * mn, p.n, A + p.a_off[i], p.lda(), beta, dB,
                              p.k);
        });
    }
}

// The same products on oneDNN, X and Y float32 or bfloat16 bits as the engine says.
void dnnl_role(const Product& s, Role role, const void* X, const void* Y, float* D) {
    const Plan& p = s.p;
    dnnl::Matmul shape;
    shape.input = s.engine == Engine::dnnl_bf16 ? dnnl::Input::bf16 : dnnl::Input::f32;
    shape.alpha = static_cast<float>(p.alpha);
    if (role == Role::forward) {
        // C[i] = α·op(A[i])·op(B[i]) : (M,K)·(K,N) → (M,N)
        shape.trans_a = p.ta, shape.trans_b = p.tb, shape.m = p.m, shape.n = p.n, shape.k = p.k;
        shape.lda = p.lda(), shape.ldb = p.ldb(), shape.ldc = p.n;
        autocast::batched(shape, X, p.a_off, Y, p.b_off, D, s.c_off);
    } else if (role == Role::grad_a) {
        // A matrix shared by several batches sums their gradients, one product at a time into zeros.
        shape.accumulate = p.a_repeats;
        const void *G = X, *B = Y;
        if (!p.ta) {  // dA = α·G·op(B)ᵀ : (M,N)·(N,K) → (M,K)
            shape.trans_a = false, shape.trans_b = !p.tb, shape.m = p.m, shape.n = p.k, shape.k = p.n;
            shape.lda = p.n, shape.ldb = p.ldb(), shape.ldc = p.k;
            autocast::batched(shape, G, s.c_off, B, p.b_off, D, p.a_off);
        } else {  // A stored (K,M): dA = α·op(B)·Gᵀ : (K,N)·(N,M) → (K,M)
            shape.trans_a = p.tb, shape.trans_b = true, shape.m = p.k, shape.n = p.m, shape.k = p.n;
            shape.lda = p.ldb(), shape.ldb = p.n, shape.ldc = p.m;
            autocast::batched(shape, B, p.b_off, G, s.c_off, D, p.a_off);
        }
    } else {
        shape.accumulate = p.b_repeats;
        const void *G = X, *A = Y;
        if (!p.tb) {  // dB = α·op(A)ᵀ·G : (K,M)·(M,N) → (K,N)
            shape.trans_a = !p.ta, shape.trans_b = false, shape.m = p.k, shape.n = p.n, shape.k = p.m;
            shape.lda = p.lda(), shape.ldb = p.n, shape.ldc = p.n;
            autocast::batched(shape, A, p.a_off, G, s.c_off, D, p.b_off);
        } else {  // B stored (N,K): dB = α·Gᵀ·op(A) : (N,M)·(M,K) → (N,K)
            shape.trans_a = true, shape.trans_b = p.ta, shape.m = p.n, shape.n = p.k, shape.k = p.m;
            shape.lda = p.n, shape.ldb = p.lda(), shape.ldc = p.k;
            autocast::batched(shape, G, s.c_off, A, p.a_off, D, p.b_off);
        }
    }
}

// A role's result buffer: a gradient whose matrix serves several batches sums them into zeros.
template <class T> xt::xarray<T> result_buffer(const Product& s, Role role, const Shape& shape) {
    const bool sums = (role == Role::grad_a && s.p.a_repeats) || (role == Role::grad_b && s.p.b_repeats);
    return sums ? xt::xarray<T>(xt::zeros<T>(shape)) : xt::xarray<T>(xt::empty<T>(shape));
}

// What a product's backward reads of its two operands, as torch's mm saves them: each operand
// only for the other's gradient, so it is saved (a write to it refused at backward) only when
// the other requires grad at the forward. The engine asks which inputs need a gradient when
// backward runs, and a leaf given requires_grad_() in between gets its gradient (as from every
// op); that gradient reads an operand nothing saved, so the versions are kept here and a write
// to it refused before that gradient, in the engine's words.
struct Operands {
    bool wanted[2];
    std::uint64_t version[2];
    Operands(const Tensor& a, const Tensor& b)
        : wanted{a.requires_grad(), b.requires_grad()}, version{a.version(), b.version()} {}
    Saves saves() const { return Saves::only_inputs((wanted[1] ? 1u : 0u) | (wanted[0] ? 2u : 0u)); }
    // Before operand i's gradient.
    void check(const GradArgs& in, std::size_t i) const {
        const std::size_t j = 1 - i;
        if (wanted[i] || in.inputs[j].version() == version[j]) return;
        throw Error(fmt::format("backward: its input {} (of shape {}) was modified in place after the forward pass "
                                "of '{}' (version {} -> {}), and the gradient of its input {}, which was given "
                                "requires_grad_() since, reads it; clone it first, or call backward before changing it",
                                j, shape_str(in.inputs[j].shape()), in.node.op, version[j], in.inputs[j].version(), i));
    }
};

Formula role_formula(Product s, Role role, Bf16 x16, Bf16 y16, Operands operands);

// Whether an op's result is to be recorded: gradients on and an input requiring one. When it
// is not (a first-order backward runs its formulas so), its formula is not even made.
bool records(const Tensor& x, const Tensor& y) { return grad_enabled() && (x.requires_grad() || y.requires_grad()); }

// One product of the family (see Role) of x and y, of shape `shape` (the forward's result, or
// the operand the gradient is for), recorded with its gradient. On bfloat16, x16 and y16 are
// their copies when already made (by the forward, for its gradients), else made here; each
// product keeps the copies its gradients read, so that a bfloat16 product, and every order of
// its gradient, reads its operands once, as they were at its forward pass. `first`: the forward
// pass of the op itself, which makes the plan's offsets once its result is allocated (so that
// a batch too large for memory fails there, named), and whose formula takes it over.
Tensor run(const Product& s, Role role, const Shape& shape, const Tensor& x, const Tensor& y, Bf16 x16 = nullptr,
           Bf16 y16 = nullptr, Product* first = nullptr) {
    // The formula's copy of the family: the op's own plan moved in, else a copy (second order).
    auto spec = [&] { return first ? std::move(*first) : Product(s); };
    const char* name = role == Role::forward ? s.op : s.grad_op;
    check_same_dtype(name, x, y);
    if (role != Role::forward && x.shape() != s.p.out_shape)
        throw Error(fmt::format("{}: gradient of shape {} for a result of shape {}", name, shape_str(x.shape()),
                                shape_str(s.p.out_shape)));
    const bool record = records(x, y);
    if (s.engine != Engine::blas && x.dtype() == kFloat32) {
        const bool bf16 = s.engine == Engine::dnnl_bf16;
        if (bf16 && !x16) x16 = role == Role::forward ? autocast::to_bf16(x) : autocast::to_bf16(values<float>(x).data(), x.numel());
        if (bf16 && !y16) y16 = role == Role::forward ? autocast::to_bf16(y) : autocast::to_bf16(values<float>(y).data(), y.numel());
        xt::xarray<float> d = result_buffer<float>(s, role, shape);
        if (first) {
            make_offsets(first->p);
            first->c_off.resize(s.p.count);
            for (std::size_t i = 0; i < s.p.count; ++i) first->c_off[i] = i * s.p.m * s.p.n;
        }
        dnnl_role(s, role, bf16 ? static_cast<const void*>(x16->data()) : values<float>(x).data(),
                  bf16 ? static_cast<const void*>(y16->data()) : values<float>(y).data(), d.data());
        // The forward keeps each copy only for the other operand's gradient.
        if (role == Role::forward) {
            if (!autocast::keep_for(y)) x16 = nullptr;
            if (!autocast::keep_for(x)) y16 = nullptr;
        }
        if (!record) return make_result<float>(std::move(d), {}, name, Formula());
        const Operands operands(x, y);
        return make_result<float>(std::move(d), {x, y}, name,
                                  role_formula(spec(), role, std::move(x16), std::move(y16), operands),
                                  bf16 ? Saves::none() : operands.saves());
    }
    return dispatch_floating(name, x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> d = result_buffer<T>(s, role, shape);
        if (first) make_offsets(first->p);
        blas_role<T>(s, role, values<T>(x).data(), values<T>(y).data(), d.data());
        if (!record) return make_result<T>(std::move(d), {}, name, Formula());
        const Operands operands(x, y);
        return make_result<T>(std::move(d), {x, y}, name, role_formula(spec(), role, nullptr, nullptr, operands),
                              operands.saves());
    });
}

// Each product's gradients, in products of its family: for the forward, dA and dB; for
// dA(G, B) = α·G·op(B)ᵀ (say), the gradient gg of its result gives G the product α·gg·op(B),
// the forward's, and B the product dB(G, gg) of A = gg; dB(G, A) likewise.
Formula role_formula(Product s, Role role, Bf16 x16, Bf16 y16, Operands operands) {
    return [s = std::move(s), role, x16 = std::move(x16), y16 = std::move(y16),
            operands](const GradArgs& in) -> std::vector<Tensor> {
        const Tensor &x = in.inputs[0], &y = in.inputs[1], &g = in.grad();
        const Shape& out = s.p.out_shape;
        // The list first, then the gradients, as the engine's older backwards allocated them: a
        // step's malloc pattern unchanged keeps glibc from trimming and regrowing its heap top
        // every step (bench_mha tiny: page faults inside gemm, 4-20% of its step).
        std::vector<Tensor> r(2);
        Tensor &dx = r[0], &dy = r[1];
        // Both gradients read g: under bfloat16 it is rounded once, for both.
        Bf16 g16;
        if (s.engine == Engine::dnnl_bf16 && g.dtype() == kFloat32 && in.needs(0) && in.needs(1))
            g16 = autocast::to_bf16(values<float>(g).data(), g.numel());
        // Under bfloat16 the gradients read the copies the forward kept, not the operands.
        if (s.engine != Engine::dnnl_bf16)
            for (std::size_t i = 0; i < 2; ++i)
                if (in.needs(i)) operands.check(in, i);
        switch (role) {
            case Role::forward:  // (A, B)
                if (in.needs(0)) dx = run(s, Role::grad_a, x.shape(), g, y, g16, y16);
                if (in.needs(1)) dy = run(s, Role::grad_b, y.shape(), g, x, g16, x16);
                break;
            case Role::grad_a:  // (G, B)
                if (in.needs(0)) dx = run(s, Role::forward, out, g, y, g16, y16);
                if (in.needs(1)) dy = run(s, Role::grad_b, y.shape(), x, g, x16, g16);
                break;
            case Role::grad_b:  // (G, A)
                if (in.needs(0)) dx = run(s, Role::forward, out, y, g, y16, g16);
                if (in.needs(1)) dy = run(s, Role::grad_a, y.shape(), x, g, x16, g16);
                break;
        }
        return r;
    };
}

// The op `op` on a and b planned as p. Under autocast (bfloat16) a product's gradients of
// every order run in bfloat16 too, as torch runs the backward of an autocast op in its dtype:
// a second derivative through one is correct to bfloat16's precision, as its first is.
// Where a product of `dtype` planned as p runs (see Engine): oneDNN under autocast or when the
// float32 engine is oneDNN, else the BLAS.
Engine engine_of(Dtype dtype, const Plan& p) {
    if (dtype != kFloat32 || p.m == 0 || p.n == 0 || p.k == 0 || p.count == 0) return Engine::blas;
    if (autocast::use_bf16(p.m * p.n * p.k)) return Engine::dnnl_bf16;
    if (gemm_uses_onednn(p.count, p.m, p.n, p.k)) return Engine::dnnl_f32;
    return Engine::blas;
}

Tensor product(const char* op, const char* grad_op, const Tensor& a, const Tensor& b, Plan p) {
    check_same_dtype(op, a, b);
    Product s;
    s.engine = engine_of(a.dtype(), p);
    s.op = op;
    s.grad_op = grad_op;
    s.p = std::move(p);
    const Shape out_shape = s.p.out_shape;  // s moves into the formula
    const AllocContext context(op, out_shape);
    return run(s, Role::forward, out_shape, a, b, nullptr, nullptr, &s);
}

}  // namespace

namespace {

// Whether t's last two axes are swapped against a row-major layout (x.t(), k.transpose(1, 2) of
// a contiguous k): then its transpose is a row-major view, which gemm reads in place with its
// transpose flag, and the product makes no copy of it.
bool transposed_layout(const Tensor& t) {
    if (t.dim() < 2 || t.is_contiguous()) return false;
    Shape shape = t.shape();
    std::vector<std::int64_t> strides = t.strides();
    std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
    std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
    return is_contiguous_layout(shape, strides);
}

// matmul or bmm (`op`) of operands of two or more axes, a transposed operand read in place.
Tensor product_of_views(const char* op, const char* grad_op, const Tensor& a, const Tensor& b) {
    const bool ta = transposed_layout(a), tb = transposed_layout(b);
    if (!ta && !tb) return product(op, grad_op, a, b, plan_matmul(op, a.shape(), b.shape()));
    const Tensor x = ta ? a.transpose(-2, -1) : a, y = tb ? b.transpose(-2, -1) : b;
    Plan p = plan_product(op, x.shape(), y.shape(), ta, tb, 1.0, a.shape(), b.shape());
    p.out_shape.push_back(a.size(-2));
    p.out_shape.push_back(b.size(-1));
    return product(op, grad_op, x, y, std::move(p));
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
    check_defined("matmul", a, "a");
    check_defined("matmul", b, "b");
    if (a.dim() >= 2 && b.dim() >= 2) return product_of_views("matmul", "matmul_backward", a, b);
    return product("matmul", "matmul_backward", a, b, plan_matmul("matmul", a.shape(), b.shape()));
}

Tensor bmm(const Tensor& a, const Tensor& b) {
    check_defined("bmm", a, "a");
    check_defined("bmm", b, "b");
    const Shape& sa = a.shape();
    const Shape& sb = b.shape();
    if (sa.size() != 3 || sb.size() != 3)
        throw Error(fmt::format("bmm: expected two 3-D tensors (batch, rows, cols), got shapes {} and {}",
                                shape_str(sa), shape_str(sb)));
    if (sa[0] != sb[0])
        throw Error(fmt::format("bmm: batch sizes differ: shapes {} and {} ({} != {})", shape_str(sa),
                                shape_str(sb), sa[0], sb[0]));
    return product_of_views("bmm", "bmm_backward", a, b);
}

namespace {
Tensor linear_body(const Tensor& x, const Tensor& weight, const Tensor& bias) {
    check_defined("linear", x, "input");
    check_defined("linear", weight, "weight");
    if (weight.dim() != 2)
        throw Error(fmt::format("linear: weight must be 2-D (out_features, in_features), got shape {}",
                                shape_str(weight.shape())));
    if (x.dim() == 0 || x.shape().back() != weight.shape()[1])
        throw Error(fmt::format("linear: input must have last axis in_features = {} (weight {}), got shape {}",
                                weight.shape()[1], shape_str(weight.shape()), shape_str(x.shape())));
    // torch multiplies integers too; xgrad's products take float32 and float64 (the message says
    // how to go on from bfloat16), named for the argument rather than the product inside.
    dispatch_floating("linear: input", x.dtype(), [](auto) {});
    if (weight.dtype() != x.dtype())
        throw Error(fmt::format("linear: weight must have the input's dtype {}, got {}", dtype_name(x.dtype()),
                                dtype_name(weight.dtype())));
    // x (..., in)·Wᵀ → (..., out) as one gemm over every leading axis, W read transposed in place.
    const auto product_of = [&] { return x.dim() == 1 ? matmul(weight, x) : matmul_t(x, weight, false, true); };
    if (!bias.defined()) return product_of();
    // torch refuses a bias of another dtype (addmm) and one that would change the result's shape
    // (its add_ in place): an add after the product would promote or broadcast it silently.
    if (bias.dtype() != x.dtype())
        throw Error(fmt::format("linear: bias must have the input's dtype {}, got {}", dtype_name(x.dtype()),
                                dtype_name(bias.dtype())));
    const std::size_t N = weight.shape()[0];
    Shape result = x.shape();  // x's with out_features last
    result.back() = N;
    const Shape& bs = bias.shape();
    bool fits = bs.size() <= result.size();
    for (std::size_t i = 1; fits && i <= bs.size(); ++i)
        fits = bs[bs.size() - i] == 1 || bs[bs.size() - i] == result[result.size() - i];
    if (!fits)
        throw Error(fmt::format("linear: bias must broadcast to the result's shape {} without changing it, as "
                                "(out_features,) = ({},) does; got shape {}",
                                shape_str(result), N, shape_str(bs)));
    // The bias fused as the product's starting value (gemm's beta = 1, as torch's addmm): for
    // BLAS products of a bias of shape (out,) (the dtypes were checked above). Anything else (a
    // 1-D input, a broadcasting bias, oneDNN or autocast products) adds it after the product.
    if (x.dim() < 2 || bias.dim() != 1 || bias.shape()[0] != N) return product_of() + bias;
    Plan p = plan_product("linear", x.shape(), weight.shape(), false, true, 1.0, x.shape(), weight.shape());
    p.out_shape.push_back(x.shape()[-2]);
    p.out_shape.push_back(N);
    if (engine_of(x.dtype(), p) != Engine::blas) return product_of() + bias;
    Product s;
    s.op = "linear";
    s.grad_op = "linear_backward";
    s.p = std::move(p);
    const AllocContext context("linear", s.p.out_shape);
    return dispatch_floating("linear", x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> d = xt::empty<T>(s.p.out_shape);
        // Every row of the result starts as the bias, over the pool.
        const T* b = values<T>(bias).data();
        T* out = d.data();
        const std::size_t rows = N == 0 ? 0 : d.size() / N;
        parallel_for(rows, std::max<std::size_t>(1, (std::size_t(1) << 15) / std::max<std::size_t>(N, 1)),
                     [&](std::size_t r0, std::size_t r1) {
                         for (std::size_t r = r0; r < r1; ++r) std::copy(b, b + N, out + r * N);
                     });
        make_offsets(s.p);
        blas_role<T>(s, Role::forward, values<T>(x).data(), values<T>(weight).data(), out, true);
        if (!grad_enabled() || !(x.requires_grad() || weight.requires_grad() || bias.requires_grad()))
            return make_result<T>(std::move(d), {}, "linear", Formula());
        // The input's and weight's gradients are matmul_t's (products of its family, so of any
        // order); the bias's sums the gradient over every leading axis.
        const Operands operands(x, weight);
        Formula formula = [s, operands](const GradArgs& in) -> std::vector<Tensor> {
            const Tensor &x = in.inputs[0], &w = in.inputs[1], &g = in.grad();
            std::vector<Tensor> r(3);
            for (std::size_t i = 0; i < 2; ++i)
                if (in.needs(i)) operands.check(in, i);
            if (in.needs(0)) r[0] = run(s, Role::grad_a, x.shape(), g, w);
            if (in.needs(1)) r[1] = run(s, Role::grad_b, w.shape(), g, x);
            if (in.needs(2)) r[2] = sum_to(g, in.inputs[2].shape());
            return r;
        };
        // x is read for W's gradient and W for x's, as torch's addmm saves them: a bias trained
        // alone (x data, W frozen) leaves x free to be written before backward.
        return make_result<T>(std::move(d), {x, weight, bias}, "linear", std::move(formula), operands.saves());
    });
}
}  // namespace

// Named "linear" whatever inside refuses (matmul_t's dtype check, add's broadcast).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
    return as_call("linear", [&] { return linear_body(x, weight, bias); });
}

Tensor matmul_t(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b, double alpha) {
    check_defined("matmul_t", a, "a");
    check_defined("matmul_t", b, "b");
    if (a.dim() < 2 || b.dim() < 2)
        throw Error(fmt::format("matmul_t: both operands need at least two axes, got shapes {} and {}",
                                shape_str(a.shape()), shape_str(b.shape())));
    // A NaN or infinite alpha makes every element NaN or infinite, silently.
    if (!std::isfinite(alpha)) throw Error(fmt::format("matmul_t: alpha must be finite, got {}", alpha));
    Plan p = plan_product("matmul_t", a.shape(), b.shape(), transpose_a, transpose_b, alpha, a.shape(), b.shape());
    p.out_shape.push_back(transpose_a ? a.size(-1) : a.size(-2));
    p.out_shape.push_back(transpose_b ? b.size(-2) : b.size(-1));
    return product("matmul_t", "matmul_t_backward", a, b, std::move(p));
}

}  // namespace xgrad
