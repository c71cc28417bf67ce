// Fused multi-head attention that never holds a head's (queries × keys) matrix: for each head
// (b, h) and block of queries, the keys are streamed in blocks with an online softmax (a running
// maximum and sum per query), the output accumulated block by block; one log-sum-exp per query
// is saved. The backward (FlashAttention-2's) computes each block's weights again from it:
//   P = e^(S − lse),  dV += Pᵀ·dO,  dP = dO·Vᵀ,  dS = P ⊙ (dP − D),  D = rowsum(dO ⊙ O),
//   dQ += scale·dS·K,  dK += scale·dSᵀ·Q.
// Heads are read in place from the packed (B, L, H·d) projections, as in ops_attention.cpp.
// The forward's tasks are (head, query block), the backward's (head, key block), so a single
// long head keeps every thread busy; dQ's shares are summed in key-block order afterwards, so
// the bits do not depend on the thread count. The float row loops are flash_attention_rows.cpp.
#include "core/flash_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "core/autocast_product.hpp"
#include "core/flash_attention_rows.hpp"
#include "core/grad_ops.hpp"
#include "core/ops.hpp"
#include "core/node.hpp"
#include "core/runtime/alloc.hpp"
#include "core/runtime/bfloat16.hpp"
#include "core/runtime/blas.hpp"
#include "core/runtime/packed_gemm.hpp"
#include "core/runtime/parallel.hpp"
#include "core/runtime/simd.hpp"
#include "core/softmax_row.hpp"

namespace xgrad {

namespace {

constexpr const char* kOp = "flash_attention";

// Queries and keys per block: a block's scores (kBlockQ × kBlockK floats, 128 KiB) and its
// weights' gradient stay in L2 between the products that write and read them.
constexpr std::size_t kBlockQ = 128;
constexpr std::size_t kBlockK = 256;

// ---- dropout: a counter-based draw ---------------------------------------------------------
// splitmix64's finaliser: a bijection of 64 bits whose every output bit depends on every input
// bit, so consecutive counters give independent-looking draws.
inline std::uint64_t mix64(std::uint64_t z) {
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ull;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Weight (pair, i, j) of a (pairs, Lq, Lk) set is dropped when the top 24 bits of
// mix64(mix64(seed) + (counter + 1)·φ) fall below p·2^24; counter = (pair·Lq + i)·Lk + j, which
// fits: the weights' count was checked against size_t when the arguments were.
struct DropoutDraw {
    double p = 0;
    std::uint64_t key = 0;        // mix64(seed)
    std::uint32_t threshold = 0;  // round(p·2^24)
    double scale = 1;             // 1 / (1 − p)
    DropoutDraw(double p_, std::uint64_t seed)
        : p(p_), key(mix64(seed)), threshold(static_cast<std::uint32_t>(std::lround(p_ * 16777216.0))),
          scale(threshold != 0 ? 1.0 / (1.0 - p_) : 1.0) {}
    bool active() const { return threshold != 0; }
    bool keeps(std::uint64_t counter) const {
        return (mix64(key + (counter + 1) * 0x9E3779B97F4A7C15ull) >> 40) >= threshold;
    }
};

// ---- what forward and backward share ----------------------------------------------------------
struct Spec {
    std::size_t B, H, Lq, Lk, D, d, Dv, dv;
    double scale;
    ResolvedMask mask;
    DropoutDraw drop;
    std::uint64_t seed;
    bool bf16;  // autocast: the products take bfloat16 roundings of their operands
};

inline float round_bf16(float x) { return bf16_to_float(bf16_from_float(x)); }
template <class T> void round_rows(T* x, std::size_t n) {
    if constexpr (std::is_same_v<T, float>)
        for (std::size_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
}

// A tensor's values, or (autocast) a copy rounded to bfloat16, for the products to read.
template <class T> struct Operand {
    const T* data = nullptr;
    std::unique_ptr<CachedBuffer<T>> rounded;
    Operand(const Tensor& t, bool bf16) {
        data = values<T>(t).data();
        if (!bf16) return;
        const std::size_t n = t.numel();
        rounded = std::make_unique<CachedBuffer<T>>(n);
        T* r = rounded->data();
        const T* src = data;
        parallel_for(n, 1 << 16, [&](std::size_t i0, std::size_t i1) {
            std::copy(src + i0, src + i1, r + i0);
            round_rows(r + i0, i1 - i0);
        });
        data = r;
    }
};

// The rows [i0, i1) of head (b, ·) under the mask: for each, how many leading keys its block
// range must cover and whether it keeps none (then uniform over every key, its scores 0).
struct RowBlock {
    std::size_t b, i0, nq;
    std::size_t key_end;  // keys [0, key_end) hold every kept key of the block's rows
    const std::size_t* prefix = nullptr;  // per row, when the mask keeps prefixes
    const std::uint8_t* where = nullptr;  // the bool mask's bytes (bool_bytes) from row i0, rows Lk apart
    bool none[kBlockQ];                   // the row keeps no key
};

// Keys [0, key_end) hold every key rows [i0, i0 + nq) of head (b, ·) keep: the longest prefix
// of those rows (a row keeping none covers all Lk, uniform), or Lk under a bool mask.
std::size_t key_end(const Spec& s, std::size_t b, std::size_t i0, std::size_t nq) {
    if (s.mask.by_mask()) return s.Lk;
    const std::size_t* prefix = s.mask.prefix().data() + b * s.Lq + i0;
    std::size_t end = 0;
    for (std::size_t r = 0; r < nq; ++r) end = std::max(end, prefix[r] == 0 ? s.Lk : prefix[r]);
    return end;
}

void describe_rows(const Spec& s, std::size_t b, std::size_t i0, std::size_t nq, RowBlock& rb) {
    rb.b = b, rb.i0 = i0, rb.nq = nq;
    const std::size_t Lk = s.Lk;
    if (!s.mask.by_mask()) {
        rb.prefix = s.mask.prefix().data() + b * s.Lq + i0;
        rb.key_end = 0;
        for (std::size_t r = 0; r < nq; ++r) {
            rb.none[r] = rb.prefix[r] == 0;
            rb.key_end = std::max(rb.key_end, rb.none[r] ? Lk : rb.prefix[r]);
        }
        return;
    }
    rb.where = bool_bytes(s.mask.where()) + ((s.mask.shared() ? 0 : b * s.Lq) + i0) * Lk;
    rb.key_end = Lk;
    for (std::size_t r = 0; r < nq; ++r) {
        const std::uint8_t* row = rb.where + r * Lk;
        rb.none[r] = std::all_of(row, row + Lk, [](std::uint8_t k) { return k == 0; });
    }
}

// Row r's scores for keys [j0, j0 + nk) masked in place: -inf where left out; 0 everywhere in a
// row that keeps none (uniform, as d2l's row of fills).
template <class T> void apply_mask(const RowBlock& rb, std::size_t Lk, std::size_t r, std::size_t j0, std::size_t nk, T* S) {
    if (rb.none[r]) return std::fill(S, S + nk, T(0));
    const T ninf = -std::numeric_limits<T>::infinity();
    if (rb.prefix) {
        const std::size_t L = rb.prefix[r];
        for (std::size_t c = L > j0 ? L - j0 : 0; c < nk; ++c) S[c] = ninf;
        return;
    }
    const std::uint8_t* keep = rb.where + r * Lk + j0;
    for (std::size_t c = 0; c < nk; ++c)
        if (!keep[c]) S[c] = ninf;
}

// Row r of a block: its weights times the dropout's keep / (1 − p), in place.
template <class T>
void drop_row(const Spec& s, std::size_t pair, std::size_t i, std::size_t j0, std::size_t nk, T* P) {
    const std::uint64_t base = (pair * s.Lq + i) * s.Lk + j0;
    const T keep = static_cast<T>(s.drop.scale);
    for (std::size_t c = 0; c < nk; ++c) P[c] = s.drop.keeps(base + c) ? P[c] * keep : T(0);
}

// ---- the block products ------------------------------------------------------------------
// Float32 heads on a CPU whose widest vectors are AVX2's (with FMA) have their operands packed
// once per head (runtime/packed_gemm.hpp): every block product then reads its left operand in
// place and writes C once, where a BLAS call repacks both operands and clears C for each small
// block. On this AMD EPYC (AVX2) that took the scores' product from 55 to 85 GFLOP/s on one
// core and the step at T = 1024 to 0.86-0.98 of its time (tools/bench_results.md). Elsewhere
// BLAS: on an AVX-512 CPU, whose BLAS kernels are twice as wide as the packed one; for float64;
// for heads narrower than a panel (d or dv < 16), where a panel's 16 columns would be mostly
// padding; and for fewer than 32 queries or keys, too few products to pay for packing a head.
template <class T> bool packs(const Spec& s) {
    if constexpr (std::is_same_v<T, float>)
        return PackedMatrix::available() && simd_level_supported() != SimdLevel::Avx512 && s.d >= 16 &&
               s.dv >= 16 && std::min(s.Lq, s.Lk) >= 32;
    return false;
}

// The floats of a head's five packed operands in the backward (see HeadPack).
std::size_t backward_pack_size(const Spec& s) {
    return PackedMatrix::size_of(s.d, s.Lk) + PackedMatrix::size_of(s.dv, s.Lk) + PackedMatrix::size_of(s.Lk, s.d) +
           PackedMatrix::size_of(s.Lq, s.d) + PackedMatrix::size_of(s.Lq, s.dv);
}

// Head `pair`'s keys, values, queries and output gradient, each packed as the right operand
// of the products that read it; only the ones a pass uses are packed.
struct HeadPack {
    PackedMatrix keys_t;    // Kᵀ (d × Lk): scores = Q·Kᵀ
    PackedMatrix values;    // V (Lk × dv): O += P·V
    PackedMatrix values_t;  // Vᵀ (dv × Lk): dP = dO·Vᵀ
    PackedMatrix keys;      // K (Lk × d): dQ = dS·K
    PackedMatrix queries;   // Q (Lq × d): dK = dSᵀ·Q
    PackedMatrix grad;      // dO (Lq × dv): dV = Pᵀ·dO
};

// C (m × n, row length ldc) = alpha·op(A)·op(B)_part (+ C when accumulate), the part rows
// [k0, k0 + k) and columns [n0, n0 + n) of op(B): of the matrix `packed` holds (packed as op(B)),
// or of B for BLAS, stored row-major (ldb) or, when b_t, as op(B)'s transpose. op(A) is m × k,
// stored row-major (lda) or, when a_t, as its k × m transpose.
template <class T>
void block_product(bool a_t, bool b_t, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* A,
                   std::size_t lda, const PackedMatrix* packed, std::size_t k0, std::size_t n0, const T* B,
                   std::size_t ldb, T* C, std::size_t ldc, bool accumulate) {
    if constexpr (std::is_same_v<T, float>)
        if (packed) return packed->multiply_block(A, lda, a_t, m, {k0, k, n0, n}, alpha, C, ldc, accumulate);
    const T* part = b_t ? B + n0 * ldb + k0 : B + k0 * ldb + n0;
    blas::gemm<T>(a_t, b_t, m, n, k, alpha, A, lda, part, ldb, accumulate ? T(1) : T(0), C, ldc);
}

// S (nq × nk, row length nk) = scale·Q_blk·K_blkᵀ for keys [j0, j0 + nk) of a head's keys K;
// d = 0 sums nothing.
template <class T>
void scores(const Spec& s, const T* Q, const T* K, std::size_t j0, std::size_t nq, std::size_t nk, T* S,
            const HeadPack* pack) {
    if (s.d == 0) return std::fill(S, S + nq * nk, T(0));
    block_product<T>(false, true, nq, nk, s.d, static_cast<T>(s.scale), Q, s.D, pack ? &pack->keys_t : nullptr, 0,
                     j0, K, s.D, S, nk, false);
}

// How many leading scores of row r of a key block [j0, j0 + nk) the row keeps, the block's
// scores made ready for it: a prefix mask's hidden keys are left for the row loops to zero; a
// bool mask's are set to −inf here (kept = nk); a row that keeps no key gets scores 0 (uniform).
template <class T>
std::size_t prepare_row(const RowBlock& rb, std::size_t Lk, std::size_t r, std::size_t j0, std::size_t nk, T* row) {
    if (rb.none[r] || !rb.prefix) {
        apply_mask(rb, Lk, r, j0, nk, row);
        return nk;
    }
    const std::size_t L = rb.prefix[r];
    return L > j0 ? std::min(nk, L - j0) : 0;
}

// flash_rows::online_softmax for any T (float runs the vectorised rows).
template <class T>
void online_rows(T* S, std::size_t nq, std::size_t nk, const std::size_t* kept, T* m, T* l, T* rescale) {
    if constexpr (std::is_same_v<T, float>) {
        flash_rows::online_softmax(S, nq, nk, kept, m, l, rescale);
    } else {
        const T ninf = -std::numeric_limits<T>::infinity();
        for (std::size_t r = 0; r < nq; ++r) {
            T* row = S + r * nk;
            const std::size_t k = kept[r];
            std::fill(row + k, row + nk, T(0));
            rescale[r] = T(1);
            if (k == 0) continue;
            const T m_new = std::max(m[r], kernel::row_max(row, k));
            // No kept key yet (a bool mask's leading blocks): its weights stay 0.
            const T shift = m_new == ninf ? T(0) : m_new;
            rescale[r] = std::exp(m[r] - shift);
            l[r] = l[r] * rescale[r] + kernel::exp_shifted_sum(row, shift, row, k);
            m[r] = m_new;
        }
    }
}

// Tasks of a head's blocks in an order that pairs heavy with light: 0, n−1, 1, n−2, ... so
// that parallel_for's contiguous chunks get about equal work under a causal mask, whose
// later query blocks (and earlier key blocks) carry more.
inline std::size_t zigzag(std::size_t k, std::size_t n) { return k % 2 == 0 ? k / 2 : n - 1 - k / 2; }

// f(t0, t1) over tasks [0, cost.size()) in one contiguous range per thread, cut where the
// costs add up to equal shares. Masks make tasks unequal across heads: with d2l's valid lengths
// (T, 3T/4, T/2, T/4) parallel_for's equal counts gave the first thread the two longest
// sequences, 1.75 of 2.5 shares of the work. Each task writes only its own rows, so where the
// cuts fall changes no bit.
template <class F> void parallel_balanced(const std::vector<std::size_t>& cost, F&& f) {
    const std::size_t n = cost.size(), parts = std::min<std::size_t>(num_threads(), n);
    // One range still runs as a chunk, as parallel_for runs one: the products inside then do
    // not split over the pool, whatever the thread count.
    if (parts <= 1) return parallel_for(n == 0 ? 0 : 1, 1, [&](std::size_t, std::size_t) { f(std::size_t(0), n); });
    double total = 0;
    for (const std::size_t c : cost) total += static_cast<double>(c);
    std::vector<std::size_t> cut(parts + 1, n);
    cut[0] = 0;
    double sum = 0;
    for (std::size_t t = 0, p = 1; t < n && p < parts; ++t) {
        sum += static_cast<double>(cost[t]);
        while (p < parts && sum * static_cast<double>(parts) >= total * static_cast<double>(p)) cut[p++] = t + 1;
    }
    parallel_for(parts, 1, [&](std::size_t p0, std::size_t p1) {
        for (std::size_t p = p0; p < p1; ++p)
            if (cut[p] < cut[p + 1]) f(cut[p], cut[p + 1]);
    });
}

// ---- forward --------------------------------------------------------------------------------
// Block (pair, query block): out rows and their log-sum-exp.
template <class T>
void forward_block(const Spec& s, const T* Q, const T* K, const T* V, std::size_t pair, std::size_t i0, T* out,
                   T* lse, T* S, T* O, T* m, T* l, const HeadPack* pack) {
    const std::size_t b = pair / s.H, h = pair % s.H, nq = std::min(kBlockQ, s.Lq - i0);
    RowBlock rb;
    describe_rows(s, b, i0, nq, rb);
    const T ninf = -std::numeric_limits<T>::infinity();
    std::fill(m, m + nq, ninf);
    std::fill(l, l + nq, T(0));
    std::fill(O, O + nq * s.dv, T(0));
    std::size_t kept[kBlockQ];
    T rescale[kBlockQ];
    const T* Qb = Q + (b * s.Lq + i0) * s.D + h * s.d;
    const T* Kh = K + b * s.Lk * s.D + h * s.d;
    const T* Vh = V + b * s.Lk * s.Dv + h * s.dv;
    for (std::size_t j0 = 0; j0 < rb.key_end; j0 += kBlockK) {
        const std::size_t nk = std::min(kBlockK, rb.key_end - j0);
        scores(s, Qb, Kh, j0, nq, nk, S, pack);
        for (std::size_t r = 0; r < nq; ++r) kept[r] = prepare_row(rb, s.Lk, r, j0, nk, S + r * nk);
        online_rows(S, nq, nk, kept, m, l, rescale);
        for (std::size_t r = 0; r < nq; ++r) {
            T* row = S + r * nk;
            if (rescale[r] != T(1))
                for (std::size_t c = 0; c < s.dv; ++c) O[r * s.dv + c] *= rescale[r];
            if (s.drop.active()) drop_row(s, pair, i0 + r, j0, nk, row);
            if (s.bf16) round_rows(row, nk);
        }
        // O += P·V_blk : (nq, nk)·(nk, dv)
        if (s.dv != 0)
            block_product<T>(false, false, nq, s.dv, nk, T(1), S, nk, pack ? &pack->values : nullptr, j0, 0, Vh,
                             s.Dv, O, s.dv, true);
    }
    for (std::size_t r = 0; r < nq; ++r) {
        const T inv = T(1) / l[r];
        T* o = out + (b * s.Lq + i0 + r) * s.Dv + h * s.dv;
        for (std::size_t c = 0; c < s.dv; ++c) o[c] = O[r * s.dv + c] * inv;
        lse[pair * s.Lq + i0 + r] = m[r] + std::log(l[r]);
    }
}

template <class T> void forward(const Spec& s, const T* Q, const T* K, const T* V, T* out, T* lse) {
    const std::size_t blocks = (s.Lq + kBlockQ - 1) / kBlockQ, tasks = s.B * s.H * blocks;
    // A task's cost: the keys its rows visit, and a block's worth of fixed work.
    std::vector<std::size_t> cost(tasks);
    for (std::size_t t = 0; t < tasks; ++t) {
        const std::size_t i0 = zigzag(t % blocks, blocks) * kBlockQ;
        cost[t] = key_end(s, t / blocks / s.H, i0, std::min(kBlockQ, s.Lq - i0)) + kBlockK;
    }
    parallel_balanced(cost, [&](std::size_t t0, std::size_t t1) {
        CachedBuffer<T> S(kBlockQ * kBlockK), O(kBlockQ * std::max<std::size_t>(s.dv, 1)), m(kBlockQ), l(kBlockQ);
        // A range's tasks go head by head: each head's keys and values are packed when it starts.
        HeadPack pack;
        const bool packed = packs<T>(s);
        for (std::size_t t = t0; t < t1; ++t) {
            const std::size_t pair = t / blocks;
            if (packed && (t == t0 || pair != (t - 1) / blocks)) {
                if constexpr (std::is_same_v<T, float>) {
                    const std::size_t b = pair / s.H, h = pair % s.H;
                    pack.keys_t.pack(K + b * s.Lk * s.D + h * s.d, s.D, true, s.d, s.Lk);
                    pack.values.pack(V + b * s.Lk * s.Dv + h * s.dv, s.Dv, false, s.Lk, s.dv);
                }
            }
            forward_block(s, Q, K, V, pair, zigzag(t % blocks, blocks) * kBlockQ, out, lse, S.data(), O.data(),
                          m.data(), l.data(), packed ? &pack : nullptr);
        }
    });
}

// ---- backward -------------------------------------------------------------------------------
// The weights and their scores' gradient of a block, in place: S becomes the (dropped) weights
// P for dV, dP becomes dS = P ⊙ (dP·keep − D). A row that keeps no key has no score gradient
// (its weights do not depend on the scores).
template <class T>
void block_grads(const Spec& s, const RowBlock& rb, std::size_t pair, std::size_t j0, std::size_t nk, const T* lse,
                 const T* Dsum, T* S, T* dP) {
    const std::size_t nq = rb.nq, i0 = rb.i0;
    // Zeroed although the loop fills the first nq: GCC cannot see nq <= kBlockQ and warns.
    std::size_t kept[kBlockQ] = {};
    bool no_grad[kBlockQ] = {};
    for (std::size_t r = 0; r < nq; ++r) {
        kept[r] = prepare_row(rb, s.Lk, r, j0, nk, S + r * nk);
        no_grad[r] = rb.none[r];
    }
    const T* L = lse + pair * s.Lq + i0;
    const T* D = Dsum + pair * s.Lq + i0;
    if constexpr (std::is_same_v<T, float>) {
        if (!s.drop.active()) {
            flash_rows::weights_grad(S, dP, nq, nk, kept, L, D, no_grad);
            if (s.bf16) round_rows(S, nq * nk), round_rows(dP, nq * nk);
            return;
        }
    }
    const T keep = static_cast<T>(s.drop.scale);
    for (std::size_t r = 0; r < nq; ++r) {
        T* row = S + r * nk;
        T* dp = dP + r * nk;
        const std::size_t k = kept[r];
        kernel::exp_shifted_sum(row, L[r], row, k);  // P
        const std::uint64_t base = (pair * s.Lq + i0 + r) * s.Lk + j0;
        for (std::size_t c = 0; c < k; ++c) {
            const T kept_c = !s.drop.active() ? T(1) : s.drop.keeps(base + c) ? keep : T(0);
            dp[c] = no_grad[r] ? T(0) : row[c] * (dp[c] * kept_c - D[r]);
            row[c] *= kept_c;
        }
        std::fill(row + k, row + nk, T(0));
        std::fill(dp + k, dp + nk, T(0));
        if (s.bf16) round_rows(row, nk), round_rows(dp, nk);
    }
}

// Key block [j0, j0 + kBlockK) of head `pair`: its dK and dV rows whole (summed over the query
// blocks in their order), and its share of dQ, scale·dS·K_blk per query block that sees it,
// into dq_part (Lq rows of d) for backward's fixed-order sum over key blocks. Each key block
// only meets the query blocks and keys its mask leaves visible (causal: the diagonal block
// trimmed to its last visible key).
template <class T>
void backward_key_block(const Spec& s, const T* Q, const T* K, const T* V, const T* G, const T* lse, const T* Dsum,
                        std::size_t pair, const RowBlock* rows, std::size_t j0, T* dq_part, T* dk, T* dv, T* S,
                        T* dP, const HeadPack* pack) {
    const std::size_t b = pair / s.H, h = pair % s.H;
    const T alpha = static_cast<T>(s.scale);
    const std::size_t q_blocks = (s.Lq + kBlockQ - 1) / kBlockQ;
    const T *Qh = Q + b * s.Lq * s.D + h * s.d, *Kh = K + b * s.Lk * s.D + h * s.d;
    const T *Vh = V + b * s.Lk * s.Dv + h * s.dv, *Gh = G + b * s.Lq * s.Dv + h * s.dv;
    T* dk_blk = dk + (b * s.Lk + j0) * s.D + h * s.d;
    T* dv_blk = dv + (b * s.Lk + j0) * s.Dv + h * s.dv;
    for (std::size_t qb = 0; qb < q_blocks; ++qb) {
        const RowBlock& rb = rows[qb];
        if (j0 >= rb.key_end) continue;  // every key of this block is hidden from these rows
        const std::size_t i0 = rb.i0, nq = rb.nq, nk = std::min({kBlockK, s.Lk - j0, rb.key_end - j0});
        scores(s, Qh + i0 * s.D, Kh, j0, nq, nk, S, pack);
        // dP (before dropout's scaling) = dO·V_blkᵀ : (nq, dv)·(dv, nk)
        if (s.dv == 0) std::fill(dP, dP + nq * nk, T(0));
        else
            block_product<T>(false, true, nq, nk, s.dv, T(1), Gh + i0 * s.Dv, s.Dv, pack ? &pack->values_t : nullptr,
                             0, j0, Vh, s.Dv, dP, nk, false);
        block_grads(s, rb, pair, j0, nk, lse, Dsum, S, dP);
        // dV_blk += P_dropᵀ·dO : (nk, nq)·(nq, dv)
        if (s.dv != 0)
            block_product<T>(true, false, nk, s.dv, nq, T(1), S, nk, pack ? &pack->grad : nullptr, i0, 0, Gh, s.Dv,
                             dv_blk, s.Dv, true);
        if (s.d != 0) {
            // dQ share = scale·dS·K_blk : (nq, nk)·(nk, d);  dK_blk += scale·dSᵀ·Q : (nk, nq)·(nq, d)
            block_product<T>(false, false, nq, s.d, nk, alpha, dP, nk, pack ? &pack->keys : nullptr, j0, 0, Kh, s.D,
                             dq_part + i0 * s.d, s.d, false);
            block_product<T>(true, false, nk, s.d, nq, alpha, dP, nk, pack ? &pack->queries : nullptr, i0, 0, Qh, s.D,
                             dk_blk, s.D, true);
        }
    }
}

// dQ shares and packed operands held at once, in values: heads are taken in groups whose
// shares and packs fit (at least one).
constexpr std::size_t kShareBudget = std::size_t(4) << 20;

template <class T>
void backward(const Spec& s, const T* Q, const T* K, const T* V, const T* G, const T* G_raw, const T* O, const T* lse,
              T* dq, T* dk, T* dv) {
    // D = rowsum(dO ⊙ O) per (pair, query), from the unrounded gradient and output.
    CachedBuffer<T> Dsum(s.B * s.H * s.Lq);
    parallel_for(s.B * s.H * s.Lq, 1024, [&](std::size_t r0, std::size_t r1) {
        for (std::size_t r = r0; r < r1; ++r) {
            const std::size_t pair = r / s.Lq, i = r % s.Lq, b = pair / s.H, h = pair % s.H;
            const std::size_t at = (b * s.Lq + i) * s.Dv + h * s.dv;
            T sum = 0;
            for (std::size_t c = 0; c < s.dv; ++c) sum += G_raw[at + c] * O[at + c];
            Dsum.data()[r] = sum;
        }
    });
    // Tasks are (head, key block): each owns its keys' dK and dV and writes its dQ share
    // apart; the shares are then summed in key-block order. Every sum runs in one order, so
    // the bits do not depend on the thread count (nor on the grouping of heads).
    const std::size_t pairs = s.B * s.H, q_blocks = (s.Lq + kBlockQ - 1) / kBlockQ,
                      k_blocks = (s.Lk + kBlockK - 1) / kBlockK, share = s.Lq * s.d;
    // A group's heads hold their dQ shares and, packed, their operands.
    const bool packed = packs<T>(s);
    const std::size_t per_head = k_blocks * share + (packed ? backward_pack_size(s) : 0);
    const std::size_t group = std::clamp<std::size_t>(kShareBudget / std::max<std::size_t>(per_head, 1), 1, pairs);
    std::vector<RowBlock> rows(group * q_blocks);
    CachedBuffer<T> parts(group * k_blocks * share);
    std::vector<HeadPack> packs_of(packed ? group : 0);
    for (std::size_t g0 = 0; g0 < pairs; g0 += group) {
        const std::size_t gn = std::min(group, pairs - g0);
        // Each query block's rows described once for its head (a bool mask's rows scanned once).
        parallel_for(gn * q_blocks, 1, [&](std::size_t t0, std::size_t t1) {
            for (std::size_t t = t0; t < t1; ++t) {
                const std::size_t qb = t % q_blocks;
                describe_rows(s, (g0 + t / q_blocks) / s.H, qb * kBlockQ, std::min(kBlockQ, s.Lq - qb * kBlockQ),
                              rows[t]);
            }
        });
        // A key block's cost: the (query, key) pairs it visits, and a block's worth of fixed work.
        std::vector<std::size_t> cost(gn * k_blocks);
        for (std::size_t t = 0; t < cost.size(); ++t) {
            const std::size_t p = t / k_blocks, j0 = zigzag(t % k_blocks, k_blocks) * kBlockK;
            std::size_t visits = kBlockQ * kBlockK;
            for (std::size_t qb = 0; qb < q_blocks; ++qb) {
                const RowBlock& rb = rows[p * q_blocks + qb];
                if (j0 < rb.key_end) visits += rb.nq * std::min({kBlockK, s.Lk - j0, rb.key_end - j0});
            }
            cost[t] = visits;
        }
        // The group's heads packed for the block products, five operands a head.
        if (packed)
            parallel_for(gn * 5, 1, [&](std::size_t j0, std::size_t j1) {
                if constexpr (std::is_same_v<T, float>)
                    for (std::size_t j = j0; j < j1; ++j) {
                        const std::size_t pair = g0 + j / 5, b = pair / s.H, h = pair % s.H;
                        const T *Qh = Q + b * s.Lq * s.D + h * s.d, *Kh = K + b * s.Lk * s.D + h * s.d;
                        const T *Vh = V + b * s.Lk * s.Dv + h * s.dv, *Gh = G + b * s.Lq * s.Dv + h * s.dv;
                        HeadPack& hp = packs_of[j / 5];
                        switch (j % 5) {
                            case 0: hp.keys_t.pack(Kh, s.D, true, s.d, s.Lk); break;
                            case 1: hp.values_t.pack(Vh, s.Dv, true, s.dv, s.Lk); break;
                            case 2: hp.keys.pack(Kh, s.D, false, s.Lk, s.d); break;
                            case 3: hp.queries.pack(Qh, s.D, false, s.Lq, s.d); break;
                            default: hp.grad.pack(Gh, s.Dv, false, s.Lq, s.dv); break;
                        }
                    }
            });
        parallel_balanced(cost, [&](std::size_t t0, std::size_t t1) {
            CachedBuffer<T> S(kBlockQ * kBlockK), dP(kBlockQ * kBlockK);
            for (std::size_t t = t0; t < t1; ++t) {
                const std::size_t p = t / k_blocks, kb = zigzag(t % k_blocks, k_blocks);
                backward_key_block(s, Q, K, V, G, lse, Dsum.data(), g0 + p, rows.data() + p * q_blocks, kb * kBlockK,
                                   parts.data() + (p * k_blocks + kb) * share, dk, dv, S.data(), dP.data(),
                                   packed ? &packs_of[p] : nullptr);
            }
        });
        if (s.d == 0) continue;
        parallel_for(gn * q_blocks, 1, [&](std::size_t t0, std::size_t t1) {
            for (std::size_t t = t0; t < t1; ++t) {
                const std::size_t p = t / q_blocks, pair = g0 + p, b = pair / s.H, h = pair % s.H;
                const RowBlock& rb = rows[t];
                for (std::size_t kb = 0; kb < k_blocks && kb * kBlockK < rb.key_end; ++kb) {
                    const T* part = parts.data() + (p * k_blocks + kb) * share;
                    for (std::size_t r = rb.i0; r < rb.i0 + rb.nq; ++r) {
                        T* to = dq + (b * s.Lq + r) * s.D + h * s.d;
                        const T* from = part + r * s.d;
                        if (kb == 0) std::copy(from, from + s.d, to);
                        else
                            for (std::size_t c = 0; c < s.d; ++c) to[c] += from[c];
                    }
                }
            }
        });
    }
}

// ---- the op -----------------------------------------------------------------------------------
std::size_t check_args(const Tensor& q, const Tensor& k, const Tensor& v, std::size_t H, double scale,
                       double dropout) {
    if (!std::isfinite(scale)) throw Error(fmt::format("{}: scale must be finite, got {}", kOp, scale));
    if (!(dropout >= 0 && dropout < 1))
        throw Error(fmt::format("{}: dropout must be in [0, 1), got {}", kOp, dropout));
    check_dims(kOp, "queries", q, 3, "(batch, length, features)");
    check_dims(kOp, "keys", k, 3, "(batch, length, features)");
    check_dims(kOp, "values", v, 3, "(batch, length, features)");
    if (H == 0) throw Error(fmt::format("{}: num_heads must be positive, got 0", kOp));
    if (q.size(0) != k.size(0) || q.size(0) != v.size(0))
        throw Error(fmt::format("{}: queries, keys and values must have the same batch size, got {}, {} and {}", kOp,
                                shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape())));
    if (k.size(1) != v.size(1))
        throw Error(fmt::format("{}: keys and values must have the same length, got keys {} and values {}", kOp,
                                shape_str(k.shape()), shape_str(v.shape())));
    if (q.size(2) != k.size(2))
        throw Error(fmt::format("{}: queries and keys must have the same last axis, got queries {} and keys {}", kOp,
                                shape_str(q.shape()), shape_str(k.shape())));
    for (const auto& [arg, t] : {std::pair{"queries", &q}, std::pair{"values", &v}})
        if (t->size(2) % H != 0)
            throw Error(fmt::format("{}: {}' last axis ({}) must be divisible by num_heads ({}), got shape {}", kOp,
                                    arg, t->size(2), H, shape_str(t->shape())));
    check_same_dtype(kOp, q, k);
    check_same_dtype(kOp, q, v);
    // The dropout's counters run over the weights (B, H, Lq, Lk), which must count in size_t.
    checked_numel(kOp, {q.shape()[0], H, q.shape()[1], k.shape()[1]}, [&] {
        return fmt::format("the weights' (batch, num_heads, queries, keys) for queries {} and keys {}",
                           shape_str(q.shape()), shape_str(k.shape()));
    });
    return q.size(0);
}

// Whether an op's result is to be recorded: gradients on and an input requiring one.
bool records(std::initializer_list<const Tensor*> inputs) {
    return grad_enabled() && std::any_of(inputs.begin(), inputs.end(), [](const Tensor* t) {
               return t->defined() && t->requires_grad();
           });
}

// Second order and beyond (a backward that records its graph): the materialised ops, which are
// differentiable to any order, on the same weights and dropout.
std::vector<Tensor> materialised_grads(const Spec& s, const GradArgs& in) {
    const Tensor &Q = in.inputs[0], &K = in.inputs[1], &V = in.inputs[2], &G = in.grad();
    const Tensor W = head_attention_weights(Q, K, s.H, s.scale, s.mask);
    const Tensor keep =
        s.drop.active() ? flash_dropout_keep(s.B * s.H, s.Lq, s.Lk, s.drop.p, s.seed, W.dtype()) : Tensor();
    const ValueGrads vg = head_attention_combine_backward(G, keep.defined() ? W * keep : W, V, s.H);
    std::vector<Tensor> r(in.inputs.size());
    if (in.needs(2)) r[2] = vg.values;
    if (in.needs(0) || in.needs(1)) {
        const QueryKeyGrads qk = head_attention_weights_backward(keep.defined() ? vg.weights * keep : vg.weights, W, Q,
                                                                 K, s.H, s.scale, s.mask);
        if (in.needs(0)) r[0] = qk.queries;
        if (in.needs(1)) r[1] = qk.keys;
    }
    return r;
}

template <class T> using Lse = std::shared_ptr<const CachedBuffer<T>>;

template <class T> Formula flash_formula(Spec s, Lse<T> lse) {
    return [s = std::move(s), lse = std::move(lse)](const GradArgs& in) -> std::vector<Tensor> {
        const Tensor &Q = in.inputs[0], &K = in.inputs[1], &V = in.inputs[2], &G = in.grad();
        if (records({&G, &Q, &K, &V})) return materialised_grads(s, in);
        const AllocContext context(kOp, Q.shape(), AllocContext::Phase::backward);
        xt::xarray<T> dq = xt::zeros<T>(Q.shape()), dk = xt::zeros<T>(K.shape()), dv = xt::zeros<T>(V.shape());
        if (s.Lk != 0 && s.B * s.H * s.Lq != 0) {
            const Operand<T> q(Q, s.bf16), k(K, s.bf16), v(V, s.bf16), g(G, s.bf16);
            backward<T>(s, q.data, k.data, v.data, g.data, values<T>(G).data(), values<T>(in.output).data(),
                        lse->data(), dq.data(), dk.data(), dv.data());
        }
        std::vector<Tensor> r(in.inputs.size());
        if (in.needs(0)) r[0] = make_leaf(Storage(std::move(dq)));
        if (in.needs(1)) r[1] = make_leaf(Storage(std::move(dk)));
        if (in.needs(2)) r[2] = make_leaf(Storage(std::move(dv)));
        return r;
    };
}

Tensor run(const Tensor& q, const Tensor& k, const Tensor& v, std::size_t H, double scale, const ResolvedMask& mask,
           double dropout, std::uint64_t seed) {
    const std::size_t B = q.size(0), Lq = q.size(1), Lk = k.size(1), D = q.size(2), Dv = v.size(2);
    mask.check_fits(kOp, B, Lq, Lk);
    Spec s{B, H, Lq, Lk, D, D / H, Dv, Dv / H, scale, mask, DropoutDraw(dropout, seed), seed, false};
    s.bf16 = q.dtype() == kFloat32 && s.d != 0 && autocast::use_bf16(Lq * Lk * s.d);
    const Shape out_shape{B, Lq, Dv};
    const AllocContext context(kOp, out_shape);
    return dispatch_floating(kOp, q.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> out = xt::zeros<T>(out_shape);
        auto lse = std::make_shared<CachedBuffer<T>>(B * H * Lq);
        if (Lk != 0 && B * H * Lq != 0) {
            const Operand<T> Q(q, s.bf16), K(k, s.bf16), V(v, s.bf16);
            forward<T>(s, Q.data, K.data, V.data, out.data(), lse->data());
        }
        if (!records({&q, &k, &v})) return make_result<T>(std::move(out), {}, kOp, Formula());
        // Q, K, V and the output are read again; a bool mask too, so it is an input whose
        // writes are refused.
        std::vector<Tensor> inputs{q, k, v};
        if (mask.by_mask()) inputs.push_back(mask.where());
        return make_result<T>(std::move(out), std::move(inputs), kOp, flash_formula<T>(std::move(s), std::move(lse)),
                              Saves{mask.by_mask() ? 15u : 7u, true});
    });
}

}  // namespace

Tensor flash_attention(const Tensor& queries, const Tensor& keys, const Tensor& values, std::size_t num_heads,
                       double scale, const AttentionMask& mask, double dropout, std::uint64_t seed) {
    check_args(queries, keys, values, num_heads, scale, dropout);
    return run(queries, keys, values, num_heads, scale,
               mask.resolve(kOp, queries.size(0), queries.size(1), keys.size(1)), dropout, seed);
}

Tensor flash_attention(const Tensor& queries, const Tensor& keys, const Tensor& values, std::size_t num_heads,
                       double scale, const ResolvedMask& mask, double dropout, std::uint64_t seed) {
    check_args(queries, keys, values, num_heads, scale, dropout);
    return run(queries, keys, values, num_heads, scale, mask, dropout, seed);
}

Tensor flash_dropout_keep(std::size_t batch_heads, std::size_t queries, std::size_t keys, double dropout,
                          std::uint64_t seed, Dtype dtype) {
    constexpr const char* op = "flash_dropout_keep";
    if (!(dropout >= 0 && dropout < 1))
        throw Error(fmt::format("{}: dropout must be in [0, 1), got {}", op, dropout));
    const Shape shape{batch_heads, queries, keys};
    checked_numel(op, shape);
    const AllocContext context(op, shape);
    const DropoutDraw draw(dropout, seed);
    return dispatch_floating(op, dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> keep = xt::empty<T>(shape);
        T* k = keep.data();
        const T scale = static_cast<T>(draw.scale);
        parallel_for(keep.size(), 1 << 14, [&](std::size_t i0, std::size_t i1) {
            for (std::size_t i = i0; i < i1; ++i) k[i] = !draw.active() || draw.keeps(i) ? scale : T(0);
        });
        return make_leaf(Storage(std::move(keep)));
    });
}

bool flash_attention_faster(std::size_t queries, std::size_t keys, std::size_t /*d*/) {
    return queries * keys >= std::size_t(512) * 512;
}

}  // namespace xgrad
