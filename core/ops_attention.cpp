// Multi-head attention with the heads read and written in place: the H heads of a packed
// projection X (batch, n, H·d) are its column blocks X[b, :, h·d:(h+1)·d], handed to gemm with
// row length H·d, so neither d2l's transpose_qkv nor transpose_output copy is made. Head (b, h)
// is row b·H + h of the weights, the order of transpose_qkv.
#include "core/ops.hpp"

#include <cmath>

#include "core/autocast_product.hpp"
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

// A result with no products to run: empty, or zeros where every product sums no terms. The
// inputs' gradients are zeros, made without a pass over the (batch, head) pairs, of which an
// empty axis leaves room for 2^40 and more.
template <class T>
Tensor without_products(const char* op, xt::xarray<T>&& value, const Tensor& a,
                        const Tensor& b) {
    return make_result<T>(std::move(value), {a, b}, op, [op](Node& self, const Storage&) {
        for (std::size_t i = 0; i < 2; ++i)
            if (needs_grad(self, i))
                accumulate<T>(op, self.parents[i], xt::xarray<T>(xt::zeros<T>(self.parents[i].shape())));
    }, Saves::none());
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

// The scores S = scale·Q_bh·K_bhᵀ on oneDNN (float32 accumulation): of Q and K themselves when
// the float32 engine is oneDNN (gemm_uses_onednn), or under autocast (core/autocast.hpp) of
// bfloat16 copies, head-packed; the masked softmax stays float32, each block of heads' softmax
// right after their products. A bfloat16 backward reads the copies, not the inputs, and runs
// its products in bfloat16 too, a block's dS rounded to bfloat16 as the softmax's backward
// writes it and read by the block's products while in cache; a float32 one reads the inputs.
Tensor attention_weights_dnnl(const Tensor& queries, const Tensor& keys, std::size_t H, double scale,
                              const ResolvedMask& mask, dnnl::Input in) {
    constexpr const char* op = "head_attention_weights";
    const bool bf16 = in == dnnl::Input::bf16;
    const std::size_t B = queries.size(0), Lq = queries.size(1), Lk = keys.size(1), D = queries.size(2), d = D / H;
    const autocast::Bf16 q16 = bf16 ? autocast::to_bf16_heads(values<float>(queries).data(), B, Lq, H, d) : nullptr;
    const autocast::Bf16 k16 = bf16 ? autocast::to_bf16_heads(values<float>(keys).data(), B, Lk, H, d) : nullptr;
    const std::size_t grain = pair_grain(Lq, Lk, d), block = pair_block(Lq, Lk);
    xt::xarray<float> out = xt::empty<float>(Shape{B * H, Lq, Lk});
    // S_bh = scale·Q_bh·K_bhᵀ : (Lq, d)·(d, Lk) → (Lq, Lk), packed (B·H, Lq, Lk)
    dnnl::Matmul s = heads(B, H, in);
    s.trans_b = true, s.m = Lq, s.n = Lk, s.k = d, s.alpha = static_cast<float>(scale);
    set_a(s, head_layout(bf16, Lq, H, d)), set_b(s, head_layout(bf16, Lk, H, d));
    set_c(s, scores_layout(Lq, Lk, H));
    const void* Q = bf16 ? static_cast<const void*>(q16->data()) : values<float>(queries).data();
    const void* K = bf16 ? static_cast<const void*>(k16->data()) : values<float>(keys).data();
    const kernel::MaskedRows kept(mask);
    float* W = out.data();
    pair_blocks(B, H, grain, block, [&](std::size_t p0, std::size_t p1) {
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
    std::vector<Tensor> inputs{queries, keys};
    if (mask.by_mask()) inputs.push_back(mask.where());
    const autocast::Bf16 keep_q = bf16 && autocast::keep_for(keys) ? q16 : nullptr;
    const autocast::Bf16 keep_k = bf16 && autocast::keep_for(queries) ? k16 : nullptr;
    return make_result<float>(std::move(out), std::move(inputs), op,
        [mask, B, H, Lq, Lk, D, d, scale, in, keep_q, keep_k, grain, block](Node& self, const Storage& gs) {
            const bool need_q = needs_grad(self, 0), need_k = needs_grad(self, 1);
            if (!need_q && !need_k) return;
            const bool bf16 = in == dnnl::Input::bf16;
            const kernel::MaskedRows kept(mask);
            const float* W = values<float>(self).data();
            const float* G = grad_as<float>(gs).data();
            const void* Q = bf16 ? static_cast<const void*>(keep_q ? keep_q->data() : nullptr) : values<float>(self.parents[0]).data();
            const void* K = bf16 ? static_cast<const void*>(keep_k ? keep_k->data() : nullptr) : values<float>(self.parents[1]).data();
            xt::xarray<float> dq, dk;
            if (need_q) dq = xt::empty<float>(Shape{B, Lq, D});
            if (need_k) dk = xt::empty<float>(Shape{B, Lk, D});
            // A of both products: a block's dS, (pairs, Lq, Lk) from its first pair
            dnnl::Matmul p = heads(B, H, in);
            p.alpha = static_cast<float>(scale);
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
            if (need_q) accumulate<float>("head_attention_weights", self.parents[0], std::move(dq));
            if (need_k) accumulate<float>("head_attention_weights", self.parents[1], std::move(dk));
        },
        // the weights and a bool mask; bfloat16 copies Q and K, float32 reads them again
        Saves{(mask.by_mask() ? 4u : 0u) | (bf16 ? 0u : 3u), true});
}

// out_bh = W_bh·V_bh on oneDNN: of W and V themselves (float32 engine oneDNN), or under
// autocast of their bfloat16 roundings, V and the upstream gradient head-packed, as
// attention_weights_dnnl; each block of W's heads is rounded right before its products read it.
Tensor attention_combine_dnnl(const Tensor& weights, const Tensor& values, std::size_t H, dnnl::Input in) {
    constexpr const char* op = "head_attention_combine";
    const bool bf16 = in == dnnl::Input::bf16;
    const std::size_t B = values.size(0), Lk = values.size(1), E = values.size(2), Lq = weights.size(1), dv = E / H;
    const float* W = xgrad::values<float>(weights).data();
    auto w_copy = bf16 ? std::make_shared<autocast::Bf16Buffer>(weights.numel()) : nullptr;
    const autocast::Bf16 v16 = bf16 ? autocast::to_bf16_heads(xgrad::values<float>(values).data(), B, Lk, H, dv) : nullptr;
    xt::xarray<float> out = xt::empty<float>(Shape{B, Lq, E});
    // out_bh = W_bh·V_bh : (Lq, Lk)·(Lk, dv), into its head's block (rows of E)
    dnnl::Matmul p = heads(B, H, in);
    p.m = Lq, p.n = dv, p.k = Lk;
    set_a(p, scores_layout(Lq, Lk, H));
    set_b(p, head_layout(bf16, Lk, H, dv)), set_c(p, Lq, H, dv);
    const void* A = bf16 ? static_cast<const void*>(w_copy->data()) : W;
    const void* V = bf16 ? static_cast<const void*>(v16->data()) : xgrad::values<float>(values).data();
    pair_blocks(B, H, pair_grain(Lq, dv, Lk), pair_block(Lq, Lk), [&](std::size_t p0, std::size_t p1) {
        if (bf16)
            row_loop(p0 * Lq, p1 * Lq, Lk, [&](std::size_t r0, std::size_t r1) {
                bf16_from_float(W + r0 * Lk, w_copy->data() + r0 * Lk, (r1 - r0) * Lk);
            });
        head_runs(p, p0, p1, H, [&](std::size_t b, std::size_t nb, std::size_t h0, std::size_t h1) {
            run_heads(p, b, nb, h0, h1, head_at(A, in, p.stride_a, p.head_a, b, h0), V, out.data());
        });
    });
    const autocast::Bf16 w16 = std::move(w_copy);
    const autocast::Bf16 keep_w = bf16 && autocast::keep_for(values) ? w16 : nullptr;
    const autocast::Bf16 keep_v = bf16 && autocast::keep_for(weights) ? v16 : nullptr;
    return make_result<float>(std::move(out), {weights, values}, op,
        [B, H, Lq, Lk, E, dv, in, keep_w, keep_v](Node& self, const Storage& gs) {
            const bool need_w = needs_grad(self, 0), need_v = needs_grad(self, 1);
            if (!need_w && !need_v) return;
            const bool bf16 = in == dnnl::Input::bf16;
            const xt::xarray<float>& g = grad_as<float>(gs);
            const autocast::Bf16 g16 = bf16 ? autocast::to_bf16_heads(g.data(), B, Lq, H, dv) : nullptr;
            const void* G = bf16 ? static_cast<const void*>(g16->data()) : g.data();
            const HeadLayout lg = head_layout(bf16, Lq, H, dv);
            if (need_w) {  // dW_bh = G_bh·V_bhᵀ : (Lq, dv)·(dv, Lk), packed (B·H, Lq, Lk)
                xt::xarray<float> dw = xt::empty<float>(Shape{B * H, Lq, Lk});
                dnnl::Matmul p = heads(B, H, in);
                p.trans_b = true, p.m = Lq, p.n = Lk, p.k = dv;
                set_a(p, lg), set_b(p, head_layout(bf16, Lk, H, dv));
                dnnl::matmul(p, G, bf16 ? static_cast<const void*>(keep_v->data()) : xgrad::values<float>(self.parents[1]).data(),
                             dw.data());
                accumulate<float>("head_attention_combine", self.parents[0], std::move(dw));
            }
            if (need_v) {  // dV_bh = W_bhᵀ·G_bh : (Lk, Lq)·(Lq, dv)
                xt::xarray<float> dval = xt::empty<float>(Shape{B, Lk, E});
                dnnl::Matmul p = heads(B, H, in);
                p.trans_a = true, p.m = Lk, p.n = dv, p.k = Lq;
                set_a(p, scores_layout(Lq, Lk, H));
                set_b(p, lg), set_c(p, Lk, H, dv);
                dnnl::matmul(p, bf16 ? static_cast<const void*>(keep_w->data()) : xgrad::values<float>(self.parents[0]).data(),
                             G, dval.data());
                accumulate<float>("head_attention_combine", self.parents[1], std::move(dval));
            }
        },
        bf16 ? Saves::none() : Saves::only_inputs(3u));
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
    if (queries.dtype() == kFloat32 && !empty && d != 0) {
        if (autocast::use_bf16(Lq * Lk * d)) return attention_weights_dnnl(queries, keys, H, scale, mask, dnnl::Input::bf16);
        if (gemm_uses_onednn(B * H, Lq, Lk, d)) return attention_weights_dnnl(queries, keys, H, scale, mask, dnnl::Input::f32);
    }
    return dispatch_floating(op, queries.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        if (empty) return without_products<T>(op, xt::empty<T>(w_shape), queries, keys);
        const T* Q = values<T>(queries).data();
        const T* K = values<T>(keys).data();
        const T alpha = static_cast<T>(scale);
        const std::size_t grain = pair_grain(Lq, Lk, d);
        const kernel::MaskedRows kept(mask);
        xt::xarray<T> out = xt::empty<T>(w_shape);
        T* W = out.data();
        parallel_for(B * H, grain, [&](std::size_t p0, std::size_t p1) {
            for (std::size_t p = p0; p < p1; ++p) {
                const std::size_t b = p / H, h = p % H;
                T* S = W + p * Lq * Lk;
                // S = scale·Q_bh·K_bhᵀ : (Lq, d)·(d, Lk), then the masked softmax in place row by row
                blas::gemm<T>(false, true, Lq, Lk, d, alpha, Q + b * Lq * D + h * d, D, K + b * Lk * D + h * d, D,
                              T(0), S, Lk);
                kept.forward_rows(b * Lq, Lq, S, S);
            }
        });
        // Saves only the weights (its output) and the resolved mask: no scores tensor is kept. A
        // bool mask is read again by the backward, so it is an input whose writes are refused.
        std::vector<Tensor> inputs{queries, keys};
        if (mask.by_mask()) inputs.push_back(mask.where());
        return make_result<T>(
            std::move(out), std::move(inputs), op, [mask, B, H, Lq, Lk, D, d, alpha, grain](Node& self, const Storage& gs) {
                const bool need_q = needs_grad(self, 0), need_k = needs_grad(self, 1);
                if (!need_q && !need_k) return;
                const kernel::MaskedRows kept(mask);
                const T* W = values<T>(self).data();
                const T* G = grad_as<T>(gs).data();
                const T* Q = values<T>(self.parents[0]).data();
                const T* K = values<T>(self.parents[1]).data();
                // every element of dQ and dK is added by exactly one (b, h) product, into zeros
                xt::xarray<T> dq, dk;
                if (need_q) dq = xt::zeros<T>(Shape{B, Lq, D});
                if (need_k) dk = xt::zeros<T>(Shape{B, Lk, D});
                // Without features dQ and dK are empty: no dS to make, pair by pair.
                if (D != 0) parallel_for(B * H, grain, [&](std::size_t p0, std::size_t p1) {
                    CachedBuffer<T> dS(Lq * Lk);  // one (b, h) at a time
                    for (std::size_t p = p0; p < p1; ++p) {
                        const std::size_t b = p / H, h = p % H;
                        const std::size_t w0 = p * Lq * Lk, q0 = b * Lq * D + h * d, k0 = b * Lk * D + h * d;
                        for (std::size_t i = 0; i < Lq; ++i)
                            kept.backward(b * Lq + i, W + w0 + i * Lk, G + w0 + i * Lk, dS.data() + i * Lk);
                        if (need_q)  // dQ_bh = scale·dS·K_bh : (Lq, Lk)·(Lk, d)
                            blas::gemm<T>(false, false, Lq, d, Lk, alpha, dS.data(), Lk, K + k0, D, T(1),
                                          dq.data() + q0, D);
                        if (need_k)  // dK_bh = scale·dSᵀ·Q_bh : (Lk, Lq)·(Lq, d)
                            blas::gemm<T>(true, false, Lk, d, Lq, alpha, dS.data(), Lk, Q + q0, D, T(1),
                                          dk.data() + k0, D);
                    }
                });
                if (need_q) accumulate<T>("head_attention_weights", self.parents[0], std::move(dq));
                if (need_k) accumulate<T>("head_attention_weights", self.parents[1], std::move(dk));
            });
    });
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
    check_3d(op, "weights", weights);
    check_3d(op, "values", values);
    check_heads(op, "values", values, num_heads);
    const std::size_t B = values.size(0), Lk = values.size(1), E = values.size(2), H = num_heads;
    // Without features every num_heads divides them, and B·H can wrap onto the weights' batch.
    std::size_t pairs = 0;
    const bool wraps = __builtin_mul_overflow(B, H, &pairs);
    if (wraps || weights.size(0) != pairs || weights.size(2) != Lk)
        throw Error(fmt::format("{}: weights must have shape (batch·num_heads, queries, keys) = ({}, queries, {}) "
                                "for values {} and num_heads {}, got {}",
                                op, wraps ? fmt::format("{}·{}", B, H) : std::to_string(pairs), Lk,
                                shape_str(values.shape()), H, shape_str(weights.shape())));
    check_same_dtype(op, weights, values);
    const std::size_t Lq = weights.size(1), dv = E / H;
    const Shape out_shape{B, Lq, E};
    const bool empty = checked_numel(op, out_shape, [&] {
        return fmt::format("the result of weights {} and values {}", shape_str(weights.shape()),
                           shape_str(values.shape()));
    }) == 0;
    const AllocContext context(op, out_shape);
    if (values.dtype() == kFloat32 && !empty && Lk != 0) {
        if (autocast::use_bf16(Lq * Lk * dv)) return attention_combine_dnnl(weights, values, H, dnnl::Input::bf16);
        if (gemm_uses_onednn(B * H, Lq, dv, Lk)) return attention_combine_dnnl(weights, values, H, dnnl::Input::f32);
    }
    return dispatch_floating(op, values.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        // Without keys each head's product sums nothing: zeros, with no pass over the pairs.
        if (empty || Lk == 0)
            return without_products<T>(op, xt::xarray<T>(xt::zeros<T>(out_shape)), weights, values);
        const T* W = xgrad::values<T>(weights).data();
        const T* V = xgrad::values<T>(values).data();  // qualified: the argument hides the function
        const std::size_t grain = pair_grain(Lq, dv, Lk);
        xt::xarray<T> out = xt::zeros<T>(out_shape);
        // out_bh = out[b, :, h·dv:(h+1)·dv] = W_bh·V_bh : (Lq, Lk)·(Lk, dv), row length E as stored
        parallel_for(B * H, grain, [&](std::size_t p0, std::size_t p1) {
            for (std::size_t p = p0; p < p1; ++p) {
                const std::size_t b = p / H, h = p % H;
                blas::gemm<T>(false, false, Lq, dv, Lk, T(1), W + p * Lq * Lk, Lk, V + b * Lk * E + h * dv, E, T(1),
                              out.data() + b * Lq * E + h * dv, E);
            }
        });
        return make_result<T>(std::move(out), {weights, values}, op, [B, H, Lq, Lk, E, dv, grain](Node& self, const Storage& gs) {
            const bool need_w = needs_grad(self, 0), need_v = needs_grad(self, 1);
            const T* W = xgrad::values<T>(self.parents[0]).data();
            const T* V = xgrad::values<T>(self.parents[1]).data();
            const T* G = grad_as<T>(gs).data();
            xt::xarray<T> dw, dval;
            if (need_w) dw = xt::empty<T>(Shape{B * H, Lq, Lk});
            if (need_v) dval = xt::zeros<T>(Shape{B, Lk, E});
            parallel_for(B * H, grain, [&](std::size_t p0, std::size_t p1) {
                for (std::size_t p = p0; p < p1; ++p) {
                    const std::size_t b = p / H, h = p % H;
                    const std::size_t g0 = b * Lq * E + h * dv, v0 = b * Lk * E + h * dv;
                    if (need_w)  // dW_bh = G_bh·V_bhᵀ : (Lq, dv)·(dv, Lk)
                        blas::gemm<T>(false, true, Lq, Lk, dv, T(1), G + g0, E, V + v0, E, T(0),
                                      dw.data() + p * Lq * Lk, Lk);
                    if (need_v)  // dV_bh = W_bhᵀ·G_bh : (Lk, Lq)·(Lq, dv)
                        blas::gemm<T>(true, false, Lk, dv, Lq, T(1), W + p * Lq * Lk, Lk, G + g0, E, T(1),
                                      dval.data() + v0, E);
                }
            });
            if (need_w) accumulate<T>("head_attention_combine", self.parents[0], std::move(dw));
            if (need_v) accumulate<T>("head_attention_combine", self.parents[1], std::move(dval));
        }, Saves::only_inputs(3u));
    });
}

}  // namespace xgrad
