// Multi-head attention with the heads read and written in place: the H heads of a packed
// projection X (batch, n, H·d) are its column blocks X[b, :, h·d:(h+1)·d], handed to gemm with
// row length H·d, so neither d2l's transpose_qkv nor transpose_output copy is made. Head (b, h)
// is row b·H + h of the weights, the order of transpose_qkv.
#include "core/ops.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <memory>

#include "core/autocast_product.hpp"
#include "core/creation.hpp"
#include "core/grad_ops.hpp"
#include "core/node.hpp"
#include "core/runtime/bfloat16.hpp"
#include "core/runtime/alloc.hpp"
#include "core/runtime/blas.hpp"
#include "core/runtime/parallel.hpp"
#include "core/softmax_row.hpp"

namespace xgrad {

namespace {

void check_3d(const char* who, const char* arg, const Tensor& t) {
    check_dims(who, arg, t, 3, "(batch, length, features)");
}

void check_heads(const char* op, const char* arg, const Tensor& t, std::size_t num_heads) {
    if (num_heads == 0) throw Error(fmt::format("{}: num_heads must be positive, got 0", op));
    if (t.size(2) % num_heads != 0)
        throw Error(fmt::format("{}: {}' last axis ({}) must be divisible by num_heads ({}), got shape {}", op, arg,
                                t.size(2), num_heads, shape_str(t.shape())));
}

// head_attention_weights' arguments checked, and the weights' shape (B·H, Lq, Lk), counted as
// (B, H, Lq, Lk) before anything is allocated: without features every num_heads divides them,
// so B·H alone can wrap.
Shape check_weights_args(const char* op, const Tensor& queries, const Tensor& keys, std::size_t num_heads,
                         double scale) {
    // A NaN or infinite scale makes every weight NaN, silently.
    if (!std::isfinite(scale)) throw Error(fmt::format("{}: scale must be finite, got {}", op, scale));
    check_3d(op, "queries", queries);
    check_3d(op, "keys", keys);
    if (queries.size(0) != keys.size(0))
        throw Error(fmt::format("{}: queries and keys must have the same batch size, got {} and {}", op,
                                shape_str(queries.shape()), shape_str(keys.shape())));
    if (queries.size(2) != keys.size(2))
        throw Error(fmt::format("{}: queries and keys must have the same last axis, got queries {} and keys {}", op,
                                shape_str(queries.shape()), shape_str(keys.shape())));
    check_heads(op, "queries", queries, num_heads);
    check_same_dtype(op, queries, keys);
    const std::size_t B = queries.size(0), Lq = queries.size(1), Lk = keys.size(1);
    checked_numel(op, {B, num_heads, Lq, Lk}, [&] {
        return fmt::format("the weights' (batch, num_heads, queries, keys) for queries {} and keys {}",
                           shape_str(queries.shape()), shape_str(keys.shape()));
    });
    return {B * num_heads, Lq, Lk};
}

// A head's block of a packed output (rows of H·d, d of them its own) is written by one product.
// Such outputs start zeroed, in one contiguous pass, and the products add into them (beta = 1):
// with beta = 0 OpenBLAS first clears the strided block itself, row by row.
//
// (b, h) pairs per parallel chunk: about 2^20 multiply-adds each, as the batched products. A
// pair also costs a fixed amount per product call and per softmax row, which decides for small
// heads (a few queries and keys take many times their multiply-adds); counted by those alone,
// a whole batch of such heads would make one chunk, on one thread. The call and the row count
// as 4096 and 2048 multiply-adds, about what they cost.
std::size_t pair_grain(std::size_t rows, std::size_t cols, std::size_t inner) {
    const std::size_t cost = rows * cols * inner + 2048 * rows + 4096;
    return std::max<std::size_t>(1, (std::size_t(1) << 20) / cost);
}

// The per-head products of a packed (B, L, H·d) tensor for oneDNN: head (b, h) starts at
// b·L·H·d + h·d, rows H·d apart.
dnnl::Matmul heads(std::size_t B, std::size_t H, dnnl::Input in) {
    dnnl::Matmul p;
    p.input = in;
    p.batch = B;
    p.heads = H;
    return p;
}

// Where head (b, h) of an (B, L, H·d) operand sits for oneDNN: in place in the float32 tensor
// (rows of H·d), or in its bfloat16 copy, head-packed (B·H, L, d) by autocast::to_bf16_heads.
struct HeadLayout {
    std::size_t stride, head, ld;  // elements between batches, between heads, between rows
};
HeadLayout head_layout(bool head_packed, std::size_t L, std::size_t H, std::size_t d) {
    return head_packed ? HeadLayout{H * L * d, L * d, d} : HeadLayout{L * H * d, d, H * d};
}
// The scores or weights, (B·H, Lq, Lk): each head's (Lq, Lk) matrix contiguous.
HeadLayout scores_layout(std::size_t Lq, std::size_t Lk, std::size_t H) { return {H * Lq * Lk, Lq * Lk, Lk}; }
void set_a(dnnl::Matmul& p, HeadLayout x) { p.stride_a = x.stride, p.head_a = x.head, p.lda = x.ld; }
void set_b(dnnl::Matmul& p, HeadLayout x) { p.stride_b = x.stride, p.head_b = x.head, p.ldb = x.ld; }
void set_c(dnnl::Matmul& p, HeadLayout x) { p.stride_c = x.stride, p.head_c = x.head, p.ldc = x.ld; }
// A float32 output written in place: a head's block of a packed (B, L, H·d).
void set_c(dnnl::Matmul& p, std::size_t L, std::size_t H, std::size_t d) { set_c(p, head_layout(false, L, H, d)); }

// Pairs (b, h) per block of the oneDNN paths: a block's products and the softmax pass over
// their scores (or its backward and the products that read its dS) run back to back on one
// thread, so the block's (Lq, Lk) matrices, about 1 MiB of float32, are read again from cache
// rather than memory. Smaller blocks pay oneDNN's per-call cost more often: bench_mha medium
// and large under autocast ran no faster with 2^16 or 2^17 floats per block, and no faster
// again with 2^19 to 2^21.
std::size_t pair_block(std::size_t Lq, std::size_t Lk) {
    return std::max<std::size_t>(1, (std::size_t(1) << 18) / std::max<std::size_t>(1, Lq * Lk));
}

// f(p0, p1) for blocks of at most `block` pairs [p0, p1), the pool's chunks at least `grain`.
// With fewer pairs than threads (one long head, say) the blocks run on the calling thread,
// outside any chunk, so that their products split over the pool (dnnl::matmul) and their row
// loops (row_loop) spread over it; inside a chunk both run inline.
template <class Block> void pair_blocks(std::size_t B, std::size_t H, std::size_t grain, std::size_t block, Block&& f) {
    if (B * H < num_threads() && !in_parallel_chunk()) {
        for (std::size_t p0 = 0; p0 < B * H; p0 += block) f(p0, std::min(B * H, p0 + block));
        return;
    }
    parallel_for(B * H, grain, [&](std::size_t c0, std::size_t c1) {
        for (std::size_t p0 = c0; p0 < c1; p0 += block) f(p0, std::min(c1, p0 + block));
    });
}

// f(r0, r1) over a block's score rows [begin, end) of `keys` each: on the pool when the block
// runs outside a chunk (pair_blocks), inline inside one.
template <class Rows> void row_loop(std::size_t begin, std::size_t end, std::size_t keys, Rows&& f) {
    parallel_for(end - begin, std::max<std::size_t>(1, 4096 / std::max<std::size_t>(1, keys)),
                 [&](std::size_t r0, std::size_t r1) { f(begin + r0, begin + r1); });
}
// run(b, nb, h0, h1) for the pairs [p0, p1) as at most three oneDNN calls, each on heads
// [h0, h1) of batches [b, b + nb): a head in place is strided differently across batches than
// within one, so a call covers part of one batch, or whole batches. When every operand of `p`
// holds its pairs evenly strided (head-packed bfloat16 copies, packed scores), one call covers
// them all, heads counted on past H.
template <class Run> void head_runs(const dnnl::Matmul& p, std::size_t p0, std::size_t p1, std::size_t H, Run&& run) {
    if (p.stride_a == H * p.head_a && p.stride_b == H * p.head_b && p.stride_c == H * p.head_c)
        return run(p0 / H, 1, p0 % H, p0 % H + (p1 - p0));
    std::size_t q = p0;
    if (q % H != 0) {  // the end of a batch
        const std::size_t h0 = q % H, h1 = std::min(H, h0 + (p1 - q));
        run(q / H, 1, h0, h1);
        q += h1 - h0;
    }
    if (const std::size_t nb = (p1 - q) / H; nb > 0) {
        run(q / H, nb, 0, H);
        q += nb * H;
    }
    if (q < p1) run(q / H, 1, 0, p1 - q);  // the start of a batch
}

// Operand x's head (b, h) in a layout of elements `stride` between batches, `head` between heads.
const void* head_at(const void* x, dnnl::Input in, std::size_t stride, std::size_t head, std::size_t b, std::size_t h) {
    return static_cast<const char*>(x) + (b * stride + h * head) * (in == dnnl::Input::bf16 ? 2 : 4);
}

// `p`, its layouts set for the whole product, on heads [h0, h1) of batches [b, b + nb) as one
// call: A given at head (b, h0), B and C from their starts.
void run_heads(dnnl::Matmul p, std::size_t b, std::size_t nb, std::size_t h0, std::size_t h1, const void* a,
               const void* b_start, float* c_start) {
    const void* B = head_at(b_start, p.input, p.stride_b, p.head_b, b, h0);
    float* C = c_start + b * p.stride_c + h0 * p.head_c;
    p.batch = nb, p.heads = h1 - h0;
    // One batch: its stride is moot, but one smaller than its heads span (a run past H) sent
    // oneDNN 2.6 to gemm:jit, at about 70% of brgemm's rate on the scores (DNNL_VERBOSE).
    if (nb == 1) p.stride_a = p.heads * p.head_a, p.stride_b = p.heads * p.head_b, p.stride_c = p.heads * p.head_c;
    dnnl::matmul(p, a, B, C);
}

// Where a head op runs, decided by its forward pass: BLAS (float32 or float64), or oneDNN with
// float32 accumulation, of float32 operands (float32 engine oneDNN, gemm_uses_onednn) or under
// autocast of their bfloat16 copies, head-packed. The ops of its gradients, of every order, run
// there too, whatever the engine setting or the autocast state when they run: under autocast a
// second derivative is correct to bfloat16's precision, as the first is (torch, too, runs the
// backward of an autocast op in its dtype).
enum class Engine { blas, dnnl_f32, dnnl_bf16 };
dnnl::Input input_of(Engine e) { return e == Engine::dnnl_bf16 ? dnnl::Input::bf16 : dnnl::Input::f32; }
using autocast::Bf16;

// Whether an op's result is to be recorded: gradients on and an input requiring one. When it
// is not (a first-order backward runs its formulas so), its formula is not even made.
bool records(std::initializer_list<const Tensor*> inputs) {
    return grad_enabled() && std::any_of(inputs.begin(), inputs.end(), [](const Tensor* t) {
               return t->defined() && t->requires_grad();
           });
}

// A gradient that is zeros whatever its arguments: a plain tensor (no graph, no second derivative).
template <class T> Tensor zeros_result(const Shape& shape) { return make_leaf(Storage(xt::xarray<T>(xt::zeros<T>(shape)))); }

// Zeros for the products to add into (see above), cleared over the pool: one thread clearing
// them while the other waited was about 1% of char_gpt's step.
template <class T> xt::xarray<T> pool_zeros(const Shape& shape) {
    xt::xarray<T> z = xt::empty<T>(shape);
    T* d = z.data();
    parallel_for(z.size(), std::size_t(1) << 16, [d](std::size_t i0, std::size_t i1) { std::fill(d + i0, d + i1, T(0)); });
    return z;
}

// ---- head_attention_combine: out_bh = W_bh·V_bh, and its gradients -----------------------
//   dW_bh = G_bh·V_bhᵀ  (of G and V)  and  dV_bh = W_bhᵀ·G_bh  (of G and W),
// head_attention_combine_backward's two ops, made in one pass. Each of the three is linear in
// each argument, and the gradients of each are the three again: dW's gradient gw gives G
// gw_bh·V_bh (the forward) and V gw_bhᵀ·G_bh (dV of G and gw); dV's gradient gv gives G
// W_bh·gv_bh and W G_bh·gv_bhᵀ (dW of G and gv). So the family is differentiable any number of
// times, and its first order runs the products it always ran.

// What head_attention_combine and the ops of its gradients share.
struct Combine {
    std::size_t B, H, Lq, Lk, E, dv;
    Engine engine;
    Shape w_shape() const { return {B * H, Lq, Lk}; }
    Shape v_shape() const { return {B, Lk, E}; }
    Shape out_shape() const { return {B, Lq, E}; }
    // Whether a product sums any term: else every result is zeros, made without a pass over
    // the (batch, head) pairs, of which an empty axis leaves room for 2^40 and more.
    bool products() const { return B * Lq * E != 0 && Lk != 0; }
};

Formula combine_formula(const Combine& c, Bf16 w16, Bf16 v16);
Formula combine_grad_w_formula(const Combine& c, Bf16 g16, Bf16 v16);
Formula combine_grad_v_formula(const Combine& c, Bf16 g16, Bf16 w16);

// out_bh = W_bh·V_bh on the engine of `c`. On oneDNN: of W and V themselves, or of their
// bfloat16 roundings (w16 and v16 when already made), V head-packed; each block of W's heads
// rounded right before its products read it.
Tensor combine_forward(const Combine& c, const Tensor& weights, const Tensor& values, Bf16 w16 = nullptr,
                       Bf16 v16 = nullptr) {
    constexpr const char* op = "head_attention_combine";
    const std::size_t B = c.B, H = c.H, Lq = c.Lq, Lk = c.Lk, E = c.E, dv = c.dv;
    const Shape out_shape = c.out_shape();
    if (c.engine != Engine::blas && values.dtype() == kFloat32) {
        const dnnl::Input in = input_of(c.engine);
        const bool bf16 = in == dnnl::Input::bf16;
        const float* W = xgrad::values<float>(weights).data();
        auto w_copy = bf16 && !w16 ? std::make_shared<autocast::Bf16Buffer>(weights.numel()) : nullptr;
        if (bf16 && !v16) v16 = autocast::to_bf16_heads(xgrad::values<float>(values).data(), B, Lk, H, dv);
        xt::xarray<float> out = xt::empty<float>(out_shape);
        // out_bh = W_bh·V_bh : (Lq, Lk)·(Lk, dv), into its head's block (rows of E)
        dnnl::Matmul p = heads(B, H, in);
        p.m = Lq, p.n = dv, p.k = Lk;
        set_a(p, scores_layout(Lq, Lk, H));
        set_b(p, head_layout(bf16, Lk, H, dv)), set_c(p, Lq, H, dv);
        const void* A = !bf16 ? static_cast<const void*>(W) : w_copy ? w_copy->data() : w16->data();
        const void* V = bf16 ? static_cast<const void*>(v16->data()) : xgrad::values<float>(values).data();
        pair_blocks(B, H, pair_grain(Lq, dv, Lk), pair_block(Lq, Lk), [&](std::size_t p0, std::size_t p1) {
            if (w_copy)
                row_loop(p0 * Lq, p1 * Lq, Lk, [&](std::size_t r0, std::size_t r1) {
                    bf16_from_float(W + r0 * Lk, w_copy->data() + r0 * Lk, (r1 - r0) * Lk);
                });
            head_runs(p, p0, p1, H, [&](std::size_t b, std::size_t nb, std::size_t h0, std::size_t h1) {
                run_heads(p, b, nb, h0, h1, head_at(A, in, p.stride_a, p.head_a, b, h0), V, out.data());
            });
        });
        if (w_copy) w16 = std::move(w_copy);
        // Each copy is kept only for the other operand's gradient.
        if (!autocast::keep_for(values)) w16 = nullptr;
        if (!autocast::keep_for(weights)) v16 = nullptr;
        if (!records({&weights, &values})) return make_result<float>(std::move(out), {}, op, Formula());
        return make_result<float>(std::move(out), {weights, values}, op,
                                  combine_formula(c, std::move(w16), std::move(v16)),
                                  bf16 ? Saves::none() : Saves::only_inputs(3u));
    }
    return dispatch_floating(op, values.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> out = pool_zeros<T>(out_shape);
        if (c.products()) {
            const T* W = xgrad::values<T>(weights).data();
            const T* V = xgrad::values<T>(values).data();  // qualified: the argument hides the function
            // out_bh = out[b, :, h·dv:(h+1)·dv] = W_bh·V_bh : (Lq, Lk)·(Lk, dv), row length E as stored
            parallel_for(B * H, pair_grain(Lq, dv, Lk), [&](std::size_t p0, std::size_t p1) {
                for (std::size_t p = p0; p < p1; ++p) {
                    const std::size_t b = p / H, h = p % H;
                    blas::gemm<T>(false, false, Lq, dv, Lk, T(1), W + p * Lq * Lk, Lk, V + b * Lk * E + h * dv, E,
                                  T(1), out.data() + b * Lq * E + h * dv, E);
                }
            });
        }
        if (!records({&weights, &values})) return make_result<T>(std::move(out), {}, op, Formula());
        return make_result<T>(std::move(out), {weights, values}, op, combine_formula(c, nullptr, nullptr),
                              c.products() ? Saves::only_inputs(3u) : Saves::none());
    });
}

// Wraps head_attention_combine's gradients as their ops: dW of (G, V), dV of (G, W).
template <class T>
std::pair<Tensor, Tensor> combine_grads(const Combine& c, xt::xarray<T>&& dw, xt::xarray<T>&& dval,
                                        const Tensor& grad, const Tensor& weights, const Tensor& values, Bf16 g16,
                                        Bf16 w16, Bf16 v16, bool need_w, bool need_v, bool bf16) {
    constexpr const char* op = "head_attention_combine_backward";
    const Saves saves = bf16 ? Saves::none() : Saves::only_inputs(3u);
    std::pair<Tensor, Tensor> r;
    if (need_w)
        r.first = records({&grad, &values})
                      ? make_result<T>(std::move(dw), {grad, values}, op, combine_grad_w_formula(c, g16, v16), saves)
                      : make_result<T>(std::move(dw), {}, op, Formula());
    if (need_v)
        r.second = records({&grad, &weights})
                       ? make_result<T>(std::move(dval), {grad, weights}, op, combine_grad_v_formula(c, g16, w16), saves)
                       : make_result<T>(std::move(dval), {}, op, Formula());
    return r;
}

// head_attention_combine's gradients from G: dW_bh = G_bh·V_bhᵀ (when need_w; reads values) and
// dV_bh = W_bhᵀ·G_bh (when need_v; reads weights), in one pass over the heads. On bfloat16,
// g16, w16 and v16 are the copies already made (G and V head-packed), the others made here.
std::pair<Tensor, Tensor> combine_backward(const Combine& c, const Tensor& grad, const Tensor& weights,
                                           const Tensor& values, Bf16 g16, Bf16 w16, Bf16 v16, bool need_w,
                                           bool need_v) {
    constexpr const char* op = "head_attention_combine_backward";
    if (!need_w && !need_v) return {};
    const std::size_t B = c.B, H = c.H, Lq = c.Lq, Lk = c.Lk, E = c.E, dv = c.dv;
    if (c.engine != Engine::blas && grad.dtype() == kFloat32 && c.products()) {
        const dnnl::Input in = input_of(c.engine);
        const bool bf16 = in == dnnl::Input::bf16;
        if (bf16 && !g16) g16 = autocast::to_bf16_heads(xgrad::values<float>(grad).data(), B, Lq, H, dv);
        if (bf16 && need_w && !v16) v16 = autocast::to_bf16_heads(xgrad::values<float>(values).data(), B, Lk, H, dv);
        if (bf16 && need_v && !w16) w16 = autocast::to_bf16(xgrad::values<float>(weights).data(), weights.numel());
        const void* G = bf16 ? static_cast<const void*>(g16->data()) : xgrad::values<float>(grad).data();
        const HeadLayout lg = head_layout(bf16, Lq, H, dv);
        xt::xarray<float> dw, dval;
        if (need_w) {  // dW_bh = G_bh·V_bhᵀ : (Lq, dv)·(dv, Lk), packed (B·H, Lq, Lk)
            dw = xt::empty<float>(c.w_shape());
            dnnl::Matmul p = heads(B, H, in);
            p.trans_b = true, p.m = Lq, p.n = Lk, p.k = dv;
            set_a(p, lg), set_b(p, head_layout(bf16, Lk, H, dv));
            dnnl::matmul(p, G, bf16 ? static_cast<const void*>(v16->data()) : xgrad::values<float>(values).data(),
                         dw.data());
        }
        if (need_v) {  // dV_bh = W_bhᵀ·G_bh : (Lk, Lq)·(Lq, dv)
            dval = xt::empty<float>(c.v_shape());
            dnnl::Matmul p = heads(B, H, in);
            p.trans_a = true, p.m = Lk, p.n = dv, p.k = Lq;
            set_a(p, scores_layout(Lq, Lk, H));
            set_b(p, lg), set_c(p, Lk, H, dv);
            dnnl::matmul(p, bf16 ? static_cast<const void*>(w16->data()) : xgrad::values<float>(weights).data(), G,
                         dval.data());
        }
        return combine_grads<float>(c, std::move(dw), std::move(dval), grad, weights, values, std::move(g16),
                                    std::move(w16), std::move(v16), need_w, need_v, bf16);
    }
    return dispatch_floating(op, grad.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        if (!c.products())
            return std::pair{need_w ? zeros_result<T>(c.w_shape()) : Tensor(),
                             need_v ? zeros_result<T>(c.v_shape()) : Tensor()};
        const T* W = need_v ? xgrad::values<T>(weights).data() : nullptr;
        const T* V = need_w ? xgrad::values<T>(values).data() : nullptr;
        const T* G = xgrad::values<T>(grad).data();
        xt::xarray<T> dw, dval;
        if (need_w) dw = xt::empty<T>(c.w_shape());
        if (need_v) dval = pool_zeros<T>(c.v_shape());
        parallel_for(B * H, pair_grain(Lq, dv, Lk), [&](std::size_t p0, std::size_t p1) {
            for (std::size_t p = p0; p < p1; ++p) {
                const std::size_t b = p / H, h = p % H;
                const std::size_t g0 = b * Lq * E + h * dv, v0 = b * Lk * E + h * dv;
                if (need_w)  // dW_bh = G_bh·V_bhᵀ : (Lq, dv)·(dv, Lk)
                    blas::gemm<T>(false, true, Lq, Lk, dv, T(1), G + g0, E, V + v0, E, T(0), dw.data() + p * Lq * Lk,
                                  Lk);
                if (need_v)  // dV_bh = W_bhᵀ·G_bh : (Lk, Lq)·(Lq, dv)
                    blas::gemm<T>(true, false, Lk, dv, Lq, T(1), W + p * Lq * Lk, Lk, G + g0, E, T(1),
                                  dval.data() + v0, E);
            }
        });
        return combine_grads<T>(c, std::move(dw), std::move(dval), grad, weights, values, nullptr, nullptr, nullptr,
                                need_w, need_v, false);
    });
}

// (Each formula returns a list made before the gradients, as the engine's older backwards had
// it: a step's malloc pattern unchanged keeps glibc from trimming and regrowing its heap top
// every step, which cost bench_mha tiny page faults inside gemm, 4-20% of its step.)
Formula combine_formula(const Combine& c, Bf16 w16, Bf16 v16) {
    return [c, w16 = std::move(w16), v16 = std::move(v16)](const GradArgs& in) -> std::vector<Tensor> {
        std::vector<Tensor> r(2);
        std::tie(r[0], r[1]) = combine_backward(c, in.grad(), in.inputs[0], in.inputs[1], nullptr, w16, v16,
                                                in.needs(0), in.needs(1));
        return r;
    };
}

// dW = G_bh·V_bhᵀ: its gradient gw gives G gw_bh·V_bh and V gw_bhᵀ·G_bh.
Formula combine_grad_w_formula(const Combine& c, Bf16 g16, Bf16 v16) {
    return [c, g16 = std::move(g16), v16 = std::move(v16)](const GradArgs& in) -> std::vector<Tensor> {
        const Tensor &G = in.inputs[0], &V = in.inputs[1], &gw = in.grad();
        return {in.needs(0) ? combine_forward(c, gw, V, nullptr, v16) : Tensor(),
                in.needs(1) ? combine_backward(c, G, gw, Tensor(), g16, nullptr, nullptr, false, true).second : Tensor()};
    };
}

// dV = W_bhᵀ·G_bh: its gradient gv gives G W_bh·gv_bh and W G_bh·gv_bhᵀ.
Formula combine_grad_v_formula(const Combine& c, Bf16 g16, Bf16 w16) {
    return [c, g16 = std::move(g16), w16 = std::move(w16)](const GradArgs& in) -> std::vector<Tensor> {
        const Tensor &G = in.inputs[0], &W = in.inputs[1], &gv = in.grad();
        return {in.needs(0) ? combine_forward(c, W, gv, w16, nullptr) : Tensor(),
                in.needs(1) ? combine_backward(c, G, Tensor(), gv, g16, nullptr, nullptr, true, false).first : Tensor()};
    };
}

// ---- head_attention_weights: W_bh = softmax(scale·Q_bh·K_bhᵀ) masked, and its gradients ----
// From G, the masked softmax's backward dS = keep ⊙ W ⊙ (G − Σ_keys G⊙W), then
//   dQ_bh = scale·dS·K_bh  (of G, W and K)  and  dK_bh = scale·dSᵀ·Q_bh  (of G, W and Q),
// head_attention_weights_backward's two ops, each head's dS made once, in cache, for both
// products. dQ's gradient gq gives K scale·dSᵀ·gq_bh (dK of G, W and gq), and dS the gradient
// E = scale·gq_bh·K_bhᵀ (head_attention_combine's dW of gq and K), which the softmax's backward
// hands on to G and W in plain ops (softmax_backward_grads); dK's likewise.

// What head_attention_weights and the ops of its gradients share.
struct Weights {
    std::size_t B, H, Lq, Lk, D, d;
    double scale;
    ResolvedMask mask;
    Engine engine;
    std::size_t grain, block;  // pairs per chunk, and per block on oneDNN (pair_grain, pair_block)
};

// head_attention_combine's family on these heads, for the products x_bh·y_bhᵀ of (B, Lq, D)
// by (B, Lk, D) (its dW) that a second derivative takes.
Combine scores_of(const Weights& w) { return Combine{w.B, w.H, w.Lq, w.Lk, w.D, w.d, w.engine}; }

Formula weights_grad_q_formula(const Weights& w, Bf16 k16);
Formula weights_grad_k_formula(const Weights& w, Bf16 q16);

// Wraps head_attention_weights' gradients as their ops: dQ of (G, W, K), dK of (G, W, Q), each
// with a bool mask as a last input (read again by a second derivative).
template <class T>
std::pair<Tensor, Tensor> weights_grads(const Weights& w, xt::xarray<T>&& dq, xt::xarray<T>&& dk,
                                        const Tensor& grad, const Tensor& weights, const Tensor& queries,
                                        const Tensor& keys, Bf16 q16, Bf16 k16, bool need_q, bool need_k, bool bf16) {
    constexpr const char* op = "head_attention_weights_backward";
    const bool by_mask = w.mask.by_mask();
    // G and W; the other operand unless its bfloat16 copy stands in for it; the mask
    const Saves saves{3u | (bf16 ? 0u : 4u) | (by_mask ? 8u : 0u), false};
    auto inputs = [&](const Tensor& x) {
        std::vector<Tensor> v{grad, weights, x};
        if (by_mask) v.push_back(w.mask.where());
        return v;
    };
    std::pair<Tensor, Tensor> r;
    if (need_q)
        r.first = records({&grad, &weights, &keys})
                      ? make_result<T>(std::move(dq), inputs(keys), op, weights_grad_q_formula(w, std::move(k16)), saves)
                      : make_result<T>(std::move(dq), {}, op, Formula());
    if (need_k)
        r.second = records({&grad, &weights, &queries})
                       ? make_result<T>(std::move(dk), inputs(queries), op, weights_grad_k_formula(w, std::move(q16)), saves)
                       : make_result<T>(std::move(dk), {}, op, Formula());
    return r;
}

// head_attention_weights' gradients from G and its weights W: dQ (when need_q; reads keys) and
// dK (when need_k; reads queries). On bfloat16, q16 and k16 are the head-packed copies already
// made, the others made here; a block's dS is rounded to bfloat16 as the softmax's backward
// writes it, and read by the block's products while in cache.
std::pair<Tensor, Tensor> weights_backward(const Weights& w, const Tensor& grad, const Tensor& weights,
                                           const Tensor& queries, const Tensor& keys, Bf16 q16, Bf16 k16, bool need_q,
                                           bool need_k) {
    constexpr const char* op = "head_attention_weights_backward";
    if (!need_q && !need_k) return {};
    const std::size_t B = w.B, H = w.H, Lq = w.Lq, Lk = w.Lk, D = w.D, d = w.d;
    const std::size_t grain = w.grain, block = w.block;
    const kernel::MaskedRows kept(w.mask);
    // Without features dQ and dK are empty; without weights, zeros: no dS to make, pair by pair.
    const bool products = D != 0 && B * H * Lq * Lk != 0;
    if (w.engine != Engine::blas && grad.dtype() == kFloat32 && products) {
        const dnnl::Input in = input_of(w.engine);
        const bool bf16 = in == dnnl::Input::bf16;
        if (bf16 && need_k && !q16) q16 = autocast::to_bf16_heads(values<float>(queries).data(), B, Lq, H, d);
        if (bf16 && need_q && !k16) k16 = autocast::to_bf16_heads(values<float>(keys).data(), B, Lk, H, d);
        const float* W = values<float>(weights).data();
        const float* G = values<float>(grad).data();
        const void* Q = !need_k ? nullptr : bf16 ? static_cast<const void*>(q16->data()) : values<float>(queries).data();
        const void* K = !need_q ? nullptr : bf16 ? static_cast<const void*>(k16->data()) : values<float>(keys).data();
        xt::xarray<float> dq, dk;
        if (need_q) dq = xt::empty<float>(Shape{B, Lq, D});
        if (need_k) dk = xt::empty<float>(Shape{B, Lk, D});
        // A of both products: a block's dS, (pairs, Lq, Lk) from its first pair
        dnnl::Matmul p = heads(B, H, in);
        p.alpha = static_cast<float>(w.scale);
        set_a(p, scores_layout(Lq, Lk, H));
        dnnl::Matmul pq = p, pk = p;
        // dQ_bh = scale·dS·K_bh : (Lq, Lk)·(Lk, d), written into its head's block
        pq.m = Lq, pq.n = d, pq.k = Lk;
        set_b(pq, head_layout(bf16, Lk, H, d)), set_c(pq, Lq, H, d);
        // dK_bh = scale·dSᵀ·Q_bh : (Lk, Lq)·(Lq, d)
        pk.trans_a = true, pk.m = Lk, pk.n = d, pk.k = Lq;
        set_b(pk, head_layout(bf16, Lq, H, d)), set_c(pk, Lk, H, d);
        pair_blocks(B, H, grain, block, [&](std::size_t p0, std::size_t p1) {
            // The softmax's backward for the block: float32, or rounded to bfloat16 row by
            // row as it is written. From the caching allocator: a block-sized buffer from
            // malloc would come from mmap and fault its pages in on every block.
            CachedBuffer<float> dS(bf16 ? 0 : (p1 - p0) * Lq * Lk);
            CachedBuffer<std::uint16_t> dS16(bf16 ? (p1 - p0) * Lq * Lk : 0);
            row_loop(p0 * Lq, p1 * Lq, Lk, [&](std::size_t r0, std::size_t r1) {
                CachedBuffer<float> one_row(bf16 ? Lk : 0);  // a float32 row before its rounding
                for (std::size_t r = r0; r < r1; ++r) {
                    const std::size_t b = r / (H * Lq), i = r % Lq, at = (r - p0 * Lq) * Lk;
                    float* d_row = bf16 ? one_row.data() : dS.data() + at;
                    kept.backward(b * Lq + i, W + r * Lk, G + r * Lk, d_row);
                    if (bf16) bf16_from_float(d_row, dS16.data() + at, Lk);
                }
            });
            const char* DS = bf16 ? reinterpret_cast<const char*>(dS16.data()) : reinterpret_cast<const char*>(dS.data());
            const std::size_t width = bf16 ? 2 : 4;
            // Each product splits the block by its own layouts: dQ (C strided Lq·H·d) and dK
            // (Lk·H·d) are evenly strided across batches for different lengths, so runs
            // planned for one would write the other's heads past H into the wrong rows.
            auto dS_at = [&](std::size_t b, std::size_t h0) { return DS + (b * H + h0 - p0) * Lq * Lk * width; };
            if (need_q)
                head_runs(pq, p0, p1, H, [&](std::size_t b, std::size_t nb, std::size_t h0, std::size_t h1) {
                    run_heads(pq, b, nb, h0, h1, dS_at(b, h0), K, dq.data());
                });
            if (need_k)
                head_runs(pk, p0, p1, H, [&](std::size_t b, std::size_t nb, std::size_t h0, std::size_t h1) {
                    run_heads(pk, b, nb, h0, h1, dS_at(b, h0), Q, dk.data());
                });
        });
        return weights_grads<float>(w, std::move(dq), std::move(dk), grad, weights, queries, keys, std::move(q16),
                                    std::move(k16), need_q, need_k, bf16);
    }
    return dispatch_floating(op, grad.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        // every element of dQ and dK is added by exactly one (b, h) product, into zeros
        xt::xarray<T> dq, dk;
        if (need_q) dq = pool_zeros<T>(Shape{B, Lq, D});
        if (need_k) dk = pool_zeros<T>(Shape{B, Lk, D});
        if (!products)
            return std::pair{need_q ? make_leaf(Storage(std::move(dq))) : Tensor(),
                             need_k ? make_leaf(Storage(std::move(dk))) : Tensor()};
        const T* W = values<T>(weights).data();
        const T* G = values<T>(grad).data();
        const T* Q = need_k ? values<T>(queries).data() : nullptr;
        const T* K = need_q ? values<T>(keys).data() : nullptr;
        const T alpha = static_cast<T>(w.scale);
        parallel_for(B * H, grain, [&](std::size_t p0, std::size_t p1) {
            CachedBuffer<T> dS(Lq * Lk);  // one (b, h) at a time
            for (std::size_t p = p0; p < p1; ++p) {
                const std::size_t b = p / H, h = p % H;
                const std::size_t w0 = p * Lq * Lk, q0 = b * Lq * D + h * d, k0 = b * Lk * D + h * d;
                for (std::size_t i = 0; i < Lq; ++i)
                    kept.backward(b * Lq + i, W + w0 + i * Lk, G + w0 + i * Lk, dS.data() + i * Lk);
                if (need_q)  // dQ_bh = scale·dS·K_bh : (Lq, Lk)·(Lk, d)
                    blas::gemm<T>(false, false, Lq, d, Lk, alpha, dS.data(), Lk, K + k0, D, T(1), dq.data() + q0, D);
                if (need_k)  // dK_bh = scale·dSᵀ·Q_bh : (Lk, Lq)·(Lq, d)
                    blas::gemm<T>(true, false, Lk, d, Lq, alpha, dS.data(), Lk, Q + q0, D, T(1), dk.data() + k0, D);
            }
        });
        return weights_grads<T>(w, std::move(dq), std::move(dk), grad, weights, queries, keys, nullptr, nullptr,
                                need_q, need_k, false);
    });
}

// 1 where the mask lets a query attend a key, else 0: (B·H, Lq, Lk) in `dtype`, a constant;
// undefined when every key is kept.
Tensor keep_of(const Weights& w, Dtype dtype) {
    const ResolvedMask& m = w.mask;
    const std::size_t Lq = w.Lq, Lk = w.Lk, H = w.H;
    if (Lk == 0) return Tensor();
    if (!m.by_mask() && std::all_of(m.prefix().begin(), m.prefix().end(), [Lk](std::size_t L) { return L == Lk; }))
        return Tensor();
    return dispatch_floating("head_attention_weights_backward", dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> keep = xt::empty<T>(Shape{w.B * H, Lq, Lk});
        const std::uint8_t* where = m.by_mask() ? bool_bytes(m.where()) : nullptr;
        for (std::size_t r = 0; r < w.B * H * Lq; ++r) {
            // row r = (b·H + h)·Lq + i reads the mask's row b·Lq + i (or i, one for the batch)
            const std::size_t b = r / (H * Lq), i = r % Lq;
            T* row = keep.data() + r * Lk;
            if (where) {
                const std::uint8_t* kept = where + (m.shared() ? i : b * Lq + i) * Lk;
                for (std::size_t j = 0; j < Lk; ++j) row[j] = kept[j] ? T(1) : T(0);
            } else {
                const std::size_t L = m.prefix()[b * Lq + i];
                for (std::size_t j = 0; j < Lk; ++j) row[j] = j < L ? T(1) : T(0);
            }
        }
        return make_leaf(Storage(std::move(keep)));
    });
}

// The gradients, for G and W, of <E, dS> where dS = keep ⊙ W ⊙ (G − r), r = Σ_keys G⊙W, is
// the softmax's backward as the kernel runs it (r sums every key, the masked ones too, whose
// weights are 0, or whose row keeps none). In plain ops, with Ek = keep ⊙ E and s = Σ_keys Ek⊙W:
//   G:  W ⊙ (Ek − s)        W:  Ek ⊙ (G − r) − G ⊙ s
std::pair<Tensor, Tensor> softmax_backward_grads(const Weights& w, const Tensor& E, const Tensor& G, const Tensor& W,
                                                 bool need_g, bool need_w) {
    const Tensor keep = keep_of(w, E.dtype());
    const Tensor Ek = keep.defined() ? E * keep : E;
    return {need_g ? softmax_backward(Ek, W, -1) : Tensor(), need_w ? softmax_backward_grad_y(Ek, G, W, -1) : Tensor()};
}

// dQ = scale·dS(G, W)·K_bh: its gradient gq gives K scale·dSᵀ·gq_bh, and dS E = scale·gq_bh·K_bhᵀ.
Formula weights_grad_q_formula(const Weights& w, Bf16 k16) {
    return [w, k16 = std::move(k16)](const GradArgs& in) -> std::vector<Tensor> {
        const Tensor &G = in.inputs[0], &W = in.inputs[1], &K = in.inputs[2], &gq = in.grad();
        std::vector<Tensor> r(in.inputs.size());
        if (in.needs(0) || in.needs(1)) {
            const Tensor E = combine_backward(scores_of(w), gq, Tensor(), K, nullptr, nullptr, k16, true, false).first;
            std::tie(r[0], r[1]) = softmax_backward_grads(w, E * w.scale, G, W, in.needs(0), in.needs(1));
        }
        if (in.needs(2)) r[2] = weights_backward(w, G, W, gq, Tensor(), nullptr, nullptr, false, true).second;
        return r;
    };
}

// dK = scale·dS(G, W)ᵀ·Q_bh: its gradient gk gives Q scale·dS·gk_bh, and dS E = scale·Q_bh·gk_bhᵀ.
Formula weights_grad_k_formula(const Weights& w, Bf16 q16) {
    return [w, q16 = std::move(q16)](const GradArgs& in) -> std::vector<Tensor> {
        const Tensor &G = in.inputs[0], &W = in.inputs[1], &Q = in.inputs[2], &gk = in.grad();
        std::vector<Tensor> r(in.inputs.size());
        if (in.needs(0) || in.needs(1)) {
            const Tensor E = combine_backward(scores_of(w), Q, Tensor(), gk, q16, nullptr, nullptr, true, false).first;
            std::tie(r[0], r[1]) = softmax_backward_grads(w, E * w.scale, G, W, in.needs(0), in.needs(1));
        }
        if (in.needs(2)) r[2] = weights_backward(w, G, W, Tensor(), gk, nullptr, nullptr, true, false).first;
        return r;
    };
}

// head_attention_weights' own gradient: dQ and dK from G and its output W.
Formula weights_formula(Weights w, Bf16 q16, Bf16 k16) {
    return [w = std::move(w), q16 = std::move(q16), k16 = std::move(k16)](const GradArgs& in) -> std::vector<Tensor> {
        std::vector<Tensor> r(in.inputs.size());
        std::tie(r[0], r[1]) = weights_backward(w, in.grad(), in.output, in.inputs[0], in.inputs[1], q16, k16,
                                                in.needs(0), in.needs(1));
        return r;
    };
}

// The scores S = scale·Q_bh·K_bhᵀ on oneDNN (float32 accumulation): of Q and K themselves, or
// of bfloat16 copies, head-packed; the masked softmax stays float32, each block of heads'
// softmax right after their products.
Tensor weights_dnnl(Weights w, const Tensor& queries, const Tensor& keys) {
    constexpr const char* op = "head_attention_weights";
    const dnnl::Input in = input_of(w.engine);
    const bool bf16 = in == dnnl::Input::bf16;
    const std::size_t B = w.B, H = w.H, Lq = w.Lq, Lk = w.Lk, d = w.d;
    Bf16 q16 = bf16 ? autocast::to_bf16_heads(values<float>(queries).data(), B, Lq, H, d) : nullptr;
    Bf16 k16 = bf16 ? autocast::to_bf16_heads(values<float>(keys).data(), B, Lk, H, d) : nullptr;
    xt::xarray<float> out = xt::empty<float>(Shape{B * H, Lq, Lk});
    // S_bh = scale·Q_bh·K_bhᵀ : (Lq, d)·(d, Lk) → (Lq, Lk), packed (B·H, Lq, Lk)
    dnnl::Matmul s = heads(B, H, in);
    s.trans_b = true, s.m = Lq, s.n = Lk, s.k = d, s.alpha = static_cast<float>(w.scale);
    set_a(s, head_layout(bf16, Lq, H, d)), set_b(s, head_layout(bf16, Lk, H, d));
    set_c(s, scores_layout(Lq, Lk, H));
    const void* Q = bf16 ? static_cast<const void*>(q16->data()) : values<float>(queries).data();
    const void* K = bf16 ? static_cast<const void*>(k16->data()) : values<float>(keys).data();
    const kernel::MaskedRows kept(w.mask);
    float* W = out.data();
    pair_blocks(B, H, w.grain, w.block, [&](std::size_t p0, std::size_t p1) {
        head_runs(s, p0, p1, H, [&](std::size_t b, std::size_t nb, std::size_t h0, std::size_t h1) {
            run_heads(s, b, nb, h0, h1, head_at(Q, in, s.stride_a, s.head_a, b, h0), K, W);
        });
        row_loop(p0 * Lq, p1 * Lq, Lk, [&](std::size_t r0, std::size_t r1) {
            // row r = (b·H + h)·Lq + i, the mask's row b·Lq + i: a head's rows at once
            for (std::size_t r = r0, count; r < r1; r += count) {
                const std::size_t b = r / (H * Lq), i = r % Lq;
                count = std::min(Lq - i, r1 - r);
                kept.forward_rows(b * Lq + i, count, W + r * Lk, W + r * Lk);
            }
        });
    });
    if (!records({&queries, &keys})) return make_result<float>(std::move(out), {}, op, Formula());
    std::vector<Tensor> inputs{queries, keys};
    if (w.mask.by_mask()) inputs.push_back(w.mask.where());
    // Each copy is kept only for the other operand's gradient.
    if (!autocast::keep_for(keys)) q16 = nullptr;
    if (!autocast::keep_for(queries)) k16 = nullptr;
    // the weights and a bool mask; bfloat16 copies Q and K, float32 reads them again
    const Saves saves{(w.mask.by_mask() ? 4u : 0u) | (bf16 ? 0u : 3u), true};
    return make_result<float>(std::move(out), std::move(inputs), op,
                              weights_formula(std::move(w), std::move(q16), std::move(k16)), saves);
}

// Where head_attention_weights runs now, for its arguments' shapes (empty: nothing to multiply).
Engine weights_engine(Dtype dtype, bool empty, std::size_t B, std::size_t H, std::size_t Lq, std::size_t Lk,
                      std::size_t d) {
    if (dtype != kFloat32 || empty || d == 0) return Engine::blas;
    if (autocast::use_bf16(Lq * Lk * d)) return Engine::dnnl_bf16;
    return gemm_uses_onednn(B * H, Lq, Lk, d) ? Engine::dnnl_f32 : Engine::blas;
}

// The same for head_attention_combine.
Engine combine_engine(Dtype dtype, const Combine& c) {
    if (dtype != kFloat32 || !c.products()) return Engine::blas;
    if (autocast::use_bf16(c.Lq * c.Lk * c.dv)) return Engine::dnnl_bf16;
    return gemm_uses_onednn(c.B * c.H, c.Lq, c.dv, c.Lk) ? Engine::dnnl_f32 : Engine::blas;
}

Weights weights_spec(const Tensor& queries, const Tensor& keys, std::size_t H, double scale,
                         const ResolvedMask& mask, bool empty) {
    const std::size_t B = queries.size(0), Lq = queries.size(1), Lk = keys.size(1), D = queries.size(2), d = D / H;
    return Weights{B, H, Lq, Lk, D, d, scale, mask, weights_engine(queries.dtype(), empty, B, H, Lq, Lk, d),
                   pair_grain(Lq, Lk, d), pair_block(Lq, Lk)};
}

// head_attention_weights once its arguments are checked (check_weights_args gave w_shape).
Tensor attention_weights(const Tensor& queries, const Tensor& keys, std::size_t num_heads, double scale,
                         const ResolvedMask& mask, const Shape& w_shape) {
    constexpr const char* op = "head_attention_weights";
    const std::size_t B = queries.size(0), Lq = queries.size(1), Lk = keys.size(1), D = queries.size(2);
    const std::size_t H = num_heads, d = D / H;
    mask.check_fits(op, B, Lq, Lk);
    const bool empty = w_shape[0] * Lq * Lk == 0;
    const AllocContext context(op, w_shape);
    if (empty) {
        // Nothing to multiply: its gradients are zeros, made without a pass over the pairs.
        return dispatch_floating(op, queries.dtype(), [&](auto tag) {
            using T = typename decltype(tag)::type;
            return make_result<T>(xt::empty<T>(w_shape), {queries, keys}, op,
                                  Formula([](const GradArgs& in) -> std::vector<Tensor> {
                                      return {in.needs(0) ? zeros_like(in.inputs[0]) : Tensor(),
                                              in.needs(1) ? zeros_like(in.inputs[1]) : Tensor()};
                                  }),
                                  Saves::none());
        });
    }
    Weights w = weights_spec(queries, keys, H, scale, mask, empty);
    if (w.engine != Engine::blas) return weights_dnnl(std::move(w), queries, keys);
    return dispatch_floating(op, queries.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* Q = values<T>(queries).data();
        const T* K = values<T>(keys).data();
        const T alpha = static_cast<T>(scale);
        const kernel::MaskedRows kept(w.mask);
        xt::xarray<T> out = xt::empty<T>(w_shape);
        T* W = out.data();
        parallel_for(B * H, w.grain, [&](std::size_t p0, std::size_t p1) {
            for (std::size_t p = p0; p < p1; ++p) {
                const std::size_t b = p / H, h = p % H;
                T* S = W + p * Lq * Lk;
                // S = scale·Q_bh·K_bhᵀ : (Lq, d)·(d, Lk), then the masked softmax in place row by row
                blas::gemm<T>(false, true, Lq, Lk, d, alpha, Q + b * Lq * D + h * d, D, K + b * Lk * D + h * d, D,
                              T(0), S, Lk);
                kept.forward_rows(b * Lq, Lq, S, S);
            }
        });
        if (!records({&queries, &keys})) return make_result<T>(std::move(out), {}, op, Formula());
        // Saves only the weights (its output) and the resolved mask: no scores tensor is kept. A
        // bool mask is read again by the backward, so it is an input whose writes are refused.
        std::vector<Tensor> inputs{queries, keys};
        if (mask.by_mask()) inputs.push_back(mask.where());
        return make_result<T>(std::move(out), std::move(inputs), op, weights_formula(std::move(w), nullptr, nullptr));
    });
}

// head_attention_combine's arguments checked; its result's shape.
Shape check_combine_args(const char* op, const Tensor& weights, const Tensor& values, std::size_t num_heads) {
    check_3d(op, "weights", weights);
    check_3d(op, "values", values);
    check_heads(op, "values", values, num_heads);
    const std::size_t B = values.size(0), Lk = values.size(1), E = values.size(2), H = num_heads;
    // Without features every num_heads divides them, and B·H can wrap onto the weights' batch.
    std::size_t pairs = 0;
    const bool wraps = __builtin_mul_overflow(B, H, &pairs);
    if (wraps || weights.shape()[0] != pairs || weights.shape()[2] != Lk)
        throw Error(fmt::format("{}: weights must have shape (batch·num_heads, queries, keys) = ({}, queries, {}) "
                                "for values {} and num_heads {}, got {}",
                                op, wraps ? fmt::format("{}·{}", B, H) : std::to_string(pairs), Lk,
                                shape_str(values.shape()), H, shape_str(weights.shape())));
    check_same_dtype(op, weights, values);
    const Shape out_shape{B, weights.shape()[1], E};
    checked_numel(op, out_shape, [&] {
        return fmt::format("the result of weights {} and values {}", shape_str(weights.shape()),
                           shape_str(values.shape()));
    });
    return out_shape;
}

Combine combine_spec(const Tensor& weights, const Tensor& values, std::size_t H) {
    const Shape& v = values.shape();
    Combine c{v[0], H, weights.shape()[1], v[1], v[2], v[2] / H, Engine::blas};
    c.engine = combine_engine(values.dtype(), c);
    return c;
}

// A backward op's argument `arg` that must have the forward's result shape and the inputs' dtype.
void check_result_like(const char* op, const char* arg, const Tensor& t, const Shape& expected, const Tensor& like) {
    check_3d(op, arg, t);
    if (t.shape() != expected)
        throw Error(fmt::format("{}: {} must have the shape of the forward's result {}, got {}", op, arg,
                                shape_str(expected), shape_str(t.shape())));
    check_same_dtype(op, t, like);
}

}  // namespace

Tensor head_attention_weights(const Tensor& queries, const Tensor& keys, std::size_t num_heads, double scale,
                              const AttentionMask& mask) {
    constexpr const char* op = "head_attention_weights";
    // Checked before the mask is resolved: its table has a row per (batch, query).
    const Shape w_shape = check_weights_args(op, queries, keys, num_heads, scale);
    return attention_weights(queries, keys, num_heads, scale,
                             mask.resolve(op, queries.size(0), queries.size(1), keys.size(1)), w_shape);
}

Tensor head_attention_weights(const Tensor& queries, const Tensor& keys, std::size_t num_heads, double scale,
                              const ResolvedMask& mask) {
    const Shape w_shape = check_weights_args("head_attention_weights", queries, keys, num_heads, scale);
    return attention_weights(queries, keys, num_heads, scale, mask, w_shape);
}

Tensor head_attention_combine(const Tensor& weights, const Tensor& values, std::size_t num_heads) {
    constexpr const char* op = "head_attention_combine";
    const Shape out_shape = check_combine_args(op, weights, values, num_heads);
    const AllocContext context(op, out_shape);
    return combine_forward(combine_spec(weights, values, num_heads), weights, values);
}

QueryKeyGrads head_attention_weights_backward(const Tensor& grad, const Tensor& weights, const Tensor& queries,
                                              const Tensor& keys, std::size_t num_heads, double scale,
                                              const ResolvedMask& mask) {
    constexpr const char* op = "head_attention_weights_backward";
    const Shape w_shape = check_weights_args(op, queries, keys, num_heads, scale);
    mask.check_fits(op, queries.size(0), queries.size(1), keys.size(1));
    check_result_like(op, "weights", weights, w_shape, queries);
    check_result_like(op, "grad", grad, w_shape, queries);
    const bool empty = w_shape[0] * w_shape[1] * w_shape[2] == 0;
    const Weights w = weights_spec(queries, keys, num_heads, scale, mask, empty);
    auto [dq, dk] = weights_backward(w, grad, weights, queries, keys, nullptr, nullptr, true, true);
    return {dq, dk};
}

ValueGrads head_attention_combine_backward(const Tensor& grad, const Tensor& weights, const Tensor& values,
                                           std::size_t num_heads) {
    constexpr const char* op = "head_attention_combine_backward";
    const Shape out_shape = check_combine_args(op, weights, values, num_heads);
    check_result_like(op, "grad", grad, out_shape, values);
    auto [dw, dval] = combine_backward(combine_spec(weights, values, num_heads), grad, weights, values, nullptr,
                                       nullptr, nullptr, true, true);
    return {dw, dval};
}

}  // namespace xgrad
