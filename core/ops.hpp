#pragma once
/// The differentiable functions. Each is implemented with its gradient in one body, in the
/// ops_*.cpp file named for its family. Binary ops broadcast as numpy does; their backward
/// reduces each input's gradient back to that input's shape.
///
/// Axes are `long` and may be negative (counted from the end). Unless said otherwise an op
/// needs float32 or float64 inputs of one dtype and throws xgrad::Error otherwise.
///
/// Integer and bool inputs of the unary math ops, as torch: exp, log, sqrt, sin, cos, tanh and
/// sigmoid compute in float32, the default dtype (exp(arange(3)) is float32), with no gradient
/// (an integer tensor cannot require one); neg, abs, sign, relu keep int64, and so do clamp and
/// pow with integer numbers; sign keeps bool, while neg, abs and relu refuse it; gelu, softmax
/// and the reductions that average (mean, var) refuse both.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/attention_mask.hpp"
#include "core/tensor.hpp"

namespace xgrad {

// --- elementwise (ops_elementwise.cpp) ---------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& a);
/// a^p for a number p (0.5, -0.5, -1, -2 as torch's sqrt, 1/sqrt, 1/x, 1/x²). d/da = p·a^(p-1).
/// For an int64 or bool a, as torch's a ** p: an integer (or bool) p gives int64, wrapping (a
/// negative one is refused), a floating p gives float32; bool ** bool is refused.
Tensor pow(const Tensor& a, Scalar p);
/// base^exponent elementwise, a number raised to a tensor (torch.pow(10000, x), as d2l's
/// PositionalEncoding writes it). A floating exponent keeps its dtype however the base is
/// written (10000 or 10000.0); gradient to it: g·(y·ln base), 0 where base is 0 and the exponent
/// ≥ 0 (torch's pow_backward_exponent). An int64 or bool exponent gives torch's result_type:
/// an integer base int64 (pow(2, arange(3)), wrapping; a negative exponent gives 0 unless the
/// base is ±1), a floating base float32 (pow(2.0, arange(3))); bool base and exponent are refused.
Tensor pow(Scalar base, const Tensor& exponent);
/// base^exponent elementwise with broadcasting (torch.pow(a, b), a.pow(b)); the dtype is
/// result_type(base, exponent); int64 raises integers as torch's (wrapping; a negative exponent
/// gives 0 unless the base is ±1). Gradients as torch's: to the base g·e·base^(e−1), 0 where e is 0; to
/// the exponent g·y·ln base, 0 where base is 0 and e ≥ 0 (NaN for a negative base).
Tensor pow(const Tensor& base, const Tensor& exponent);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor relu(const Tensor& a);
/// The exact (erf) GELU, x·Φ(x), as torch.nn.functional.gelu's default.
Tensor gelu(const Tensor& a);
Tensor sin(const Tensor& a);
Tensor cos(const Tensor& a);
/// -1, 0 or 1 by the sign of each element, 0 (+0.0) for NaN and -0.0 too, as torch 1.13's; its
/// gradient is 0, as torch's.
Tensor sign(const Tensor& a);
/// |a|; the gradient is sign(a), so 0 at 0 (as torch). int64 gives int64 (no gradient).
Tensor abs(const Tensor& a);
/// a limited to [min, max], either bound optional (not both missing), as torch.clamp: with
/// min > max every element becomes max. NaN stays NaN; a NaN bound is refused. The gradient passes
/// where min ≤ a ≤ max (bounds included, as torch) and is 0 elsewhere. Bounds must fit the result's dtype.
/// The result's dtype is result_type of a and the bounds, as torch's: an int64 a with integer
/// bounds stays int64, with a floating bound (clamp(i, 0.5)) becomes float32; a bool a gives
/// int64 with integer bounds.
Tensor clamp(const Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
/// clamp with a lower bound only, or an upper bound only, as torch.clamp_min / clamp_max (dtype
/// and gradient as clamp's; a NaN bound is refused, where torch fills NaN).
Tensor clamp_min(const Tensor& a, Scalar min);
Tensor clamp_max(const Tensor& a, Scalar max);
/// Elementwise larger / smaller of two tensors, broadcast and promoted as add; NaN propagates.
/// On a tie the gradient is split half and half between a and b, as torch 1.13.
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
/// Tensor-scalar forms, promoting as torch (see Scalar): a float tensor keeps its dtype.
Tensor add(const Tensor& a, Scalar s);
Tensor sub(const Tensor& a, Scalar s);
Tensor mul(const Tensor& a, Scalar s);
Tensor div(const Tensor& a, Scalar s);
/// s - a and s / a.
Tensor rsub(Scalar s, const Tensor& a);
Tensor rdiv(Scalar s, const Tensor& a);
/// Casts (differentiable between float32 and float64; to int64/bool cuts the graph).
Tensor cast(const Tensor& a, Dtype d);

// --- comparisons (not differentiable; bool results; any dtype, promoted as torch) ----------
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, Scalar s);
Tensor ne(const Tensor& a, Scalar s);
Tensor lt(const Tensor& a, Scalar s);
Tensor le(const Tensor& a, Scalar s);
Tensor gt(const Tensor& a, Scalar s);
Tensor ge(const Tensor& a, Scalar s);
Tensor logical_not(const Tensor& mask);
/// Elementwise and, or, xor of the two tensors' truth (non-zero is true, as torch), broadcast
/// together; any dtypes, a bool result without gradient.
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);

// --- selection (ops_select.cpp) ----------------------------------------------------------
/// cond ? a : b elementwise, with cond a bool tensor; all three broadcast together. a and b
/// share any one dtype. Backward: a gets g where cond, b gets g elsewhere, each summed back
/// to its own shape (saves nothing; reads cond).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
/// Copy of a (any dtype) with `value` wherever mask is true. The mask is bool and must
/// broadcast to a's shape (not the other way: the result keeps a's shape). No gradient flows
/// to the filled positions. The value must fit a's dtype (check_fill_value in fill_value.hpp).
/// The value is a Scalar as torch's: an integer keeps all 64 bits into int64, a bool fills a
/// bool tensor, a floating value into int64 truncates toward zero (NaN and ±inf refused).
Tensor masked_fill(const Tensor& a, const Tensor& mask, Scalar value);

// --- reductions (ops_reduce.cpp) ---------------------------------------------------------
/// Sum of all elements (0-d result) or over `axes`; keepdims keeps them as length 1.
/// An empty `axes` list sums over every axis, as torch.sum(x, dim=[]) (numpy would sum none).
/// Axes must be distinct and in range. Backward broadcasts the gradient back over the summed
/// axes (nothing saved). int64 and bool inputs sum to int64, without gradient (as torch).
Tensor sum(const Tensor& a);
Tensor sum(const Tensor& a, const IntList& axes, bool keepdims = false);
/// g summed over the axes that broadcasting stretched to reach g's shape from `shape`, so the
/// result has `shape` (the reverse of expand, and each is the other's gradient). g itself when
/// the shapes are equal. What every broadcasting op's gradient goes through.
Tensor sum_to(const Tensor& g, const Shape& shape);
/// sum / (number of elements summed); same axes rules as sum; float32/float64 only.
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, const IntList& axes, bool keepdims = false);
/// Index of the maximum along one axis (int64; first on ties, the first NaN if any; not
/// differentiable). The axis must not be empty.
Tensor argmax(const Tensor& a, long axis, bool keepdims = false);
/// The same for the minimum.
Tensor argmin(const Tensor& a, long axis, bool keepdims = false);
/// What torch.max(x, dim), torch.sort and torch.topk return: `auto [values, indices] =
/// max(x, 1);` or `max(x, 1).values`. indices are int64 and carry no gradient.
struct ValuesIndices {
    Tensor values;
    Tensor indices;
};
/// Maximum / minimum along one axis (any dtype; the axis must not be empty) and where it is
/// (first on ties; the first NaN wins, wherever it sits, as torch). The gradient of values goes
/// to that index only.
ValuesIndices max(const Tensor& a, long axis, bool keepdims = false);
ValuesIndices min(const Tensor& a, long axis, bool keepdims = false);
/// Maximum / minimum of all elements (0-d; NaN wins). The gradient is split evenly between
/// the elements that tie for it, as torch.
Tensor max(const Tensor& a);
Tensor min(const Tensor& a);
/// torch's `correction` argument of var/std, as a type so it cannot be mistaken for the bool
/// `unbiased`: var(x, {1}, Correction{0}) is the population variance.
struct Correction {
    double value = 1;
};
/// Variance over `axes` (all when empty): Σ(x − mean)² / max(0, N − correction), as torch:
/// unbiased = true is correction 1. N − correction ≤ 0 divides by 0, giving inf (or NaN for
/// a constant), as torch; a NaN or infinite correction throws. An empty reduction is NaN (0/0).
/// Fused, with backward 2(x − mean)/(N − correction)·g; saves its input.
Tensor var(const Tensor& a, const IntList& axes = {}, bool unbiased = true, bool keepdims = false);
Tensor var(const Tensor& a, const IntList& axes, Correction correction, bool keepdims = false);
/// √var. Where the result is 0 the gradient is 0, as torch (not 0/0). Call it qualified,
/// xgrad::std(x) (as torch::std): under `using namespace xgrad` a bare `std` names the namespace.
Tensor std(const Tensor& a, const IntList& axes = {}, bool unbiased = true, bool keepdims = false);
Tensor std(const Tensor& a, const IntList& axes, Correction correction, bool keepdims = false);
/// Running sum along one axis (torch.cumsum). int64 and bool give int64 (no gradient). Backward
/// is the reversed running sum of the gradient.
Tensor cumsum(const Tensor& a, long axis);
/// Vector p-norm over `axes` (all when empty), as torch.linalg.vector_norm: (Σ|x|^p)^(1/p),
/// max|x| for p = inf, min|x| for p = -inf, the count of non-zero elements for p = 0; negative
/// and fractional p follow the formula. p is read as a float32, as torch does for every dtype:
/// |p| ≥ 2^128 is ±inf and |p| below float's smallest subnormal is 0 (so 1e300 is the max norm
/// and 1e-300 the count); NaN throws. A NaN in the reduced elements gives NaN for every p but 0.
/// An empty reduction is 0, except for p < 0 and ±inf, which have no identity and throw.
/// The gradient at a zero norm is 0 (torch's choice, not NaN); for ±inf it is split between
/// the elements that tie for the result, as torch; for p = 0 it is 0.
Tensor norm(const Tensor& a, double p = 2, const IntList& axes = {}, bool keepdims = false);

// --- shape (ops_shape.cpp, views in ops_view.cpp): any dtype; gradients for float inputs -
// reshape (when the strides allow), permute, transpose, unsqueeze, squeeze, slice, expand,
// narrow, select, split, chunk, unbind, flatten, diagonal and unfold return views that share
// the input's storage (a write through one lands in the input, as torch's); concat, stack,
// repeat and tril/triu make new contiguous tensors. Backward undoes the move (nothing saved).

/// New shape with the same element count; one entry may be -1 (inferred).
Tensor reshape(const Tensor& a, const IntList& shape);
/// Reorders axes: result axis i is input axis axes[i]. `axes` is a permutation of 0..rank-1.
/// Backward applies the inverse permutation.
Tensor permute(const Tensor& a, const IntList& axes);
/// Swaps two axes (a permute).
Tensor transpose(const Tensor& a, long axis0, long axis1);
/// Inserts a length-1 axis at `axis`, which lies in [-rank-1, rank].
Tensor unsqueeze(const Tensor& a, long axis);
/// Removes `axis`, which must have length 1.
Tensor squeeze(const Tensor& a, long axis);
/// Joins tensors of one dtype and rank, of equal shape except along `axis`. Backward hands
/// each input its slice of the gradient.
Tensor concat(const std::vector<Tensor>& tensors, long axis);
/// torch.cat's name for concat.
inline Tensor cat(const std::vector<Tensor>& tensors, long axis = 0) { return concat(tensors, axis); }
/// Elements start, start+step, ... < end along `axis` (numpy a[start:end:step]; end clamps;
/// negative start/end count from the end; step ≥ 1). Backward scatters into zeros.
Tensor slice(const Tensor& a, long axis, long start, long end, long step = 1);
/// Broadcasts a to `shape` (torch's expand): each of a's axes, aligned from the right, must
/// match or be 1; -1 at one of a's axes keeps its size. Backward sums back.
Tensor expand(const Tensor& a, const IntList& shape);
/// a tiled `repeats[i]` times along axis i (torch's Tensor.repeat): as many repeats as a has
/// axes or more, extra ones adding leading axes; a repeat of 0 leaves that axis empty. Backward
/// sums the tiles.
Tensor repeat(const Tensor& a, const IntList& repeats);
/// `length` elements from `start` along axis (torch.narrow; negative start and axis count
/// from the end); start + length must lie within the axis. Backward scatters into zeros.
Tensor narrow(const Tensor& a, long axis, long start, long length);
/// The sub-tensor at `index` along axis, that axis removed (torch.select; negative index and
/// axis count from the end); out of range throws.
Tensor select(const Tensor& a, long axis, long index);
/// Joins tensors of one shape and dtype along a new axis (torch.stack), in [-rank-1, rank].
Tensor stack(const std::vector<Tensor>& tensors, long axis = 0);
/// Pieces of `split_size` along axis, the last one shorter (torch.split); each with gradient.
std::vector<Tensor> split(const Tensor& a, long split_size, long axis = 0);
/// Pieces of the given sizes, which must add up to the axis length.
std::vector<Tensor> split(const Tensor& a, const IntList& sizes, long axis = 0);
/// At most `chunks` pieces of ceil(n / chunks), as torch.chunk (so possibly fewer).
std::vector<Tensor> chunk(const Tensor& a, long chunks, long axis = 0);
/// torch.unbind: the slices of `a` along `axis`, each without that axis, as views of a (a write
/// through one lands in a; as torch's, they refuse in-place ops while a requires grad), made by
/// one op with one output per slice (any dtype; int64 and bool without gradient). Its gradient
/// is stack(grads, axis), zeros for the slices no gradient reached, made once for all of them:
/// a loop over T steps costs O(T) in backward, where T select()s would each send back a zero
/// tensor of a's whole shape. Differentiable again (stack's gradient is unbind's forward).
std::vector<Tensor> unbind(const Tensor& a, long axis = 0);
/// Axes start_dim..end_dim merged into one (torch.flatten): a view when the strides allow.
Tensor flatten(const Tensor& a, long start_dim = 0, long end_dim = -1);
/// Every axis of length 1 removed (torch.squeeze without a dim): a view.
Tensor squeeze(const Tensor& a);
/// The diagonal of axes dim1 and dim2 as the last axis (torch.diagonal): a view.
Tensor diagonal(const Tensor& a, long offset = 0, long dim1 = 0, long dim2 = 1);
/// The view with `size`, `stride` and storage offset `offset` (torch.as_strided; refused unless
/// every element lies inside a's storage; default offset: a's own).
Tensor as_strided(const Tensor& a, const IntList& size, const IntList& stride,
                  std::optional<std::int64_t> offset = std::nullopt);
/// The lower (tril) / upper (triu) triangle of the last two axes, the rest zeroed: element
/// (i, j) kept when j − i ≤ k (tril) or j − i ≥ k (triu). Any dtype; ≥ 2-D.
Tensor tril(const Tensor& a, long k = 0);
Tensor triu(const Tensor& a, long k = 0);

// --- products (ops_matmul.cpp): BLAS gemm, transpose flags in backward --------------------
/// 2-D (M,K)·(K,N); 1-D operands as numpy; ≥3-D batched with broadcasting of batch axes.
Tensor matmul(const Tensor& a, const Tensor& b);
/// (B,M,K)·(B,K,N) → (B,M,N), as torch.bmm (no broadcasting).
Tensor bmm(const Tensor& a, const Tensor& b);
/// alpha·op(a)·op(b), op(x) = x with its last two axes swapped when its flag is set; batch
/// axes broadcast as in matmul. Both operands need at least two axes. No transposed copy is
/// made (gemm's transpose flags): matmul_t(x, W, false, true) is x·Wᵀ for a Linear layer,
/// matmul_t(q, k, false, true, 1/√d) attention scores. (..., M, K)·(K, N) runs as one gemm.
Tensor matmul_t(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b, double alpha = 1.0);
/// torch.nn.functional.linear: x·Wᵀ + b, x (..., in_features) or 1-D, W (out_features,
/// in_features), b (out_features) or undefined (no bias). One gemm over every leading axis with
/// the bias as its starting value (gemm's beta = 1, as torch's addmm), so no pass adds it after.
/// Gradients: matmul_t(x, W, false, true)'s for x and W, the gradient summed over the leading
/// axes for b; of any order. A bias that only broadcasts to the result is added after the
/// product, as are autocast's and oneDNN's products.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// --- normalisation (ops_norm.cpp): fused -------------------------------------------------
/// torch.nn.functional.layer_norm: each row of x's trailing normalized_shape axes becomes
/// (x − mean)/√(var + eps)·weight + bias, the variance biased; weight and bias are optional
/// (undefined), of shape normalized_shape and x's dtype. One op: the row statistics (in double
/// for float32) are computed once and saved for the backward, which reads x and weight. The
/// elementwise passes run in x's type, as torch's, with the mean carried to float's precision
/// twice over (rows far from zero keep float64's answer); rows near float's limits, and rows
/// whose float pass overflowed (weights or gradients near them), are done in double.
/// Refused: an empty normalized_shape, x not ending with it, a mis-shaped or other-dtype weight
/// or bias, a negative or non-finite eps.
Tensor layer_norm(const Tensor& x, const IntList& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
/// layer_norm(x + y, normalized_shape, weight, bias, eps) as one op, for the residual AddNorm of
/// a Transformer block: the sum is written once (rounded as x + y is) and kept for the
/// backward, which gives x and y the same gradient and reads neither again (writing to them
/// afterwards is allowed, as after an add). x and y must have the same shape and dtype (no
/// broadcasting); the rest is refused as layer_norm refuses it.
Tensor add_layer_norm(const Tensor& x, const Tensor& y, const IntList& normalized_shape,
                      const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), double eps = 1e-5);

// --- softmax family (ops_softmax.cpp): fused, stable -------------------------------------
/// exp(x - max) / sum along axis. Backward: gx = y ⊙ (g − Σ g⊙y).
Tensor softmax(const Tensor& a, long axis);
/// x - max - log Σ exp(x - max). Backward: gx = g − softmax ⊙ Σ g.
Tensor log_softmax(const Tensor& a, long axis);
/// d2l's masked_softmax: softmax over the last axis of X (batch, queries, keys) of the keys
/// the mask keeps (see AttentionMask). Masked keys get exactly 0 and gradient 0, and a row
/// that keeps no key is uniform (1/keys each), whatever the scores: d2l's -1e6 fill, whose
/// results these are bit for bit wherever it gave masked keys 0 (every kept maximum above
/// -1e6 + 87 in float32, -1e6 + 745 in float64), without its weight on masked keys once every
/// kept score is below it. A row whose kept scores are all -inf, or hold a NaN, is NaN, as
/// softmax of those scores.
/// One fused op (softmax(masked_fill(X, ...)) without the filled copy); saves its output.
/// With AttentionMask() (every key) it is softmax(X, -1), of any rank.
Tensor masked_softmax(const Tensor& X, const AttentionMask& mask);
/// d2l's signature: valid_lens undefined (every key), (batch,) or (batch, queries).
Tensor masked_softmax(const Tensor& X, const Tensor& valid_lens);
/// With a mask already resolved for X's shape (no host copy, no re-check of the mask).
Tensor masked_softmax(const Tensor& X, const ResolvedMask& mask);

// --- multi-head attention, heads in place (ops_attention.cpp) -----------------------------
// The H heads of a packed projection X (batch, n, H·d) are its column blocks
// X_bh = X[b, :, h·d:(h+1)·d]; the ops hand them to gemm with row length H·d, so neither d2l's
// transpose_qkv nor transpose_output copy is made. Head (b, h) is row b·H + h of the weights.

/// Attention weights of every head, scores and softmax in one op:
///   weights[b·H + h] = masked_softmax(scale · Q_bh · K_bhᵀ, mask of batch row b).
/// Shapes: queries (batch, Tq, H·d), keys (batch, Tk, H·d) → weights (batch·H, Tq, Tk).
/// The mask of batch row b applies to all its heads. The scores are computed into the output
/// and softmaxed in place: only the weights and the mask are saved for backward.
Tensor head_attention_weights(const Tensor& queries, const Tensor& keys, std::size_t num_heads, double scale,
                              const AttentionMask& mask = AttentionMask());
Tensor head_attention_weights(const Tensor& queries, const Tensor& keys, std::size_t num_heads, double scale,
                              const ResolvedMask& mask);
/// Each head's weights applied to its values, written in the merged layout:
///   out[b, :, h·dv:(h+1)·dv] = weights[b·H + h] · V_bh.
/// Shapes: weights (batch·H, Tq, Tk), values (batch, Tk, H·dv) → (batch, Tq, H·dv), what
/// transpose_output(bmm(weights, transpose_qkv(values, H)), H) gives. Saves only its inputs.
Tensor head_attention_combine(const Tensor& weights, const Tensor& values, std::size_t num_heads);

// --- losses (ops_loss.cpp): fused, as torch.nn.functional's --------------------------------

/// How a loss reduces its per-element values: keep them (none), average (mean) or add (sum).
enum class Reduction { none, mean, sum };

/// Cross-entropy of integer class targets under softmax(logits), fused with the log-softmax
/// for stability:  loss_i = logsumexp(logits_i) − logits_i[targets_i]  (0 where ignored).
/// Torch's layout: logits (N, C) or (N, C, d1, ...) with the class axis at 1 (or one unbatched
///         (C,)); a sequence model's class-last (B, T, V) goes in as logits.permute({0, 2, 1})
///         or as logits.reshape({-1, V}) with targets.reshape({-1}).
/// targets: int64 of logits' shape without axis 1, (N) or (N, d1, ...), each in [0, C) or
///         ignore_index; another shape throws, naming both.
/// Result: none → the targets' shape; sum → 0-d; mean → the sum over the targets that are not
///         ignore_index divided by their count (NaN when all are, as torch).
/// Backward: softmax(logits_i) − one_hot(targets_i), times the upstream gradient (divided by
///         the count for mean). Saves the per-row logsumexp.
/// Floating targets of logits' shape are class probabilities, as below.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, Reduction reduction = Reduction::mean,
                     std::int64_t ignore_index = -100);

/// torch's cross_entropy arguments, as LibTorch's F::CrossEntropyFuncOptions:
///   cross_entropy(logits, y, CrossEntropyOptions().weight(w).label_smoothing(0.1).ignore_index(0))
class CrossEntropyOptions {
public:
    /// A rescaling weight per class: a 1-D tensor of C finite values in logits' dtype. It is
    /// not differentiated (as torch's).
    CrossEntropyOptions& weight(const Tensor& w) { m_weight = w; return *this; }
    CrossEntropyOptions& reduction(Reduction r) { m_reduction = r; return *this; }
    /// A class index target equal to it counts for nothing (class index targets only).
    CrossEntropyOptions& ignore_index(std::int64_t i) { m_ignore_index = i; return *this; }
    /// In [0, 1]: the targets become (1 − ε)·target + ε/C over the C classes.
    CrossEntropyOptions& label_smoothing(double eps) { m_label_smoothing = eps; return *this; }
    const Tensor& weight() const { return m_weight; }
    Reduction reduction() const { return m_reduction; }
    std::int64_t ignore_index() const { return m_ignore_index; }
    double label_smoothing() const { return m_label_smoothing; }

private:
    Tensor m_weight;
    Reduction m_reduction = Reduction::mean;
    std::int64_t m_ignore_index = -100;
    double m_label_smoothing = 0;
};

/// torch 1.13's cross_entropy with its options, logp = log_softmax(logits) over the classes:
///  - class index targets (int64, logits' shape without the class axis):
///      nll_i = −w[t_i]·logp_i[t_i], 0 where t_i is ignore_index (w = 1 without a weight);
///      mean divides the sum by Σ w[t_i] over the targets not ignored.
///    With label smoothing ε: (1 − ε)·nll + (ε/C)·smooth, smooth_i = −Σ_c w_c·logp_ic (0 where
///      ignored), each reduced alone (mean: by Σ w[t_i], or the count not ignored, as torch).
///  - class probability targets (floating, logits' shape and dtype; no ignore_index other
///    than the default):  loss_i = −Σ_c w_c·p_ic·logp_ic with p = (1 − ε)·target + ε/C;
///    mean divides by the number of positions (weights or not). The targets get a gradient.
/// Without weight, smoothing or probabilities this is the fused op above.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options);
/// Mean squared error: (input − target)², reduced. input and target have one shape and one
/// floating dtype; both may require grad. sum and mean are one fused op, summed in double; an
/// empty input's mean is NaN, as in torch.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);

// --- indexing (ops_index.cpp) -----------------------------------------------------------
/// Each element repeated `repeats` times along axis (torch.repeat_interleave; any dtype):
/// [3, 2] with repeats 2 → [3, 3, 2, 2]. Backward sums each group of repeats. repeats is
/// int64 as torch's and as size() gives it: a negative count (x.size(1) - 2 at size 1, or a
/// size_t that went below zero) throws, as torch's "repeats can not be negative".
Tensor repeat_interleave(const Tensor& a, std::int64_t repeats, long axis);
/// Without an axis, the elements of a flattened (torch's repeat_interleave(x, r) with dim=None):
/// [[1, 2], [3, 4]] with repeats 2 → [1, 1, 2, 2, 3, 3, 4, 4], 1-D.
Tensor repeat_interleave(const Tensor& a, std::int64_t repeats);
/// Rows of a along axis picked by an int64 index tensor of any shape; the result's `axis` is
/// replaced by the index's shape, as numpy.take (embedding lookup: index_select(weight (V, D),
/// 0, ids (B, T)) → (B, T, D)). Indices must lie in [0, size); negative ones throw.
/// Backward scatter-adds (repeated indices sum); reads the index, saves nothing.
Tensor index_select(const Tensor& a, long axis, const Tensor& index);
/// torch.gather: out[i][j] = a[i][index[i][j]] along axis 1. index is int64 with a's rank,
/// no larger than a on the other axes; the result has index's shape. Indices must lie in
/// [0, a.size(axis)). Backward scatter-adds; saves the flat source offsets.
Tensor gather(const Tensor& a, long axis, const Tensor& index);

/// torch.scatter: a copy of a with src's values written along axis (axis 1 shown):
/// out[i][index[i][j]] = src[i][j] for every position of index. index is int64 with a's rank,
/// no larger than src on any axis nor than a off `axis`, values in [0, a.size(axis)) (negative
/// ones throw, as torch's); src has a's dtype and rank. Where the index repeats, the last write
/// wins (torch leaves it undefined). Backward: a gets g except at the written elements, src
/// gets g at the element each of its values went to (a value overwritten by a later one, 0).
Tensor scatter(const Tensor& a, long axis, const Tensor& index, const Tensor& src);
/// scatter with one value (cast to a's dtype) at every position of index.
Tensor scatter(const Tensor& a, long axis, const Tensor& index, Scalar value);
/// torch.scatter with reduce = "add" or "multiply" (torch 1.13's reduce=): each value of src (or
/// `value`) is added to or multiplied into out[i][index[i][j]], repeated indices each in turn
/// (bool: or, and); the same checks as scatter. Any other reduce is refused, as torch refuses
/// it; bfloat16 is refused (no arithmetic on bfloat16). As in torch 1.13 it has no derivative:
/// a result made from a tensor that requires grad records the op, and a backward through it
/// throws an xgrad::Error naming the call ("derivative for aten::scatter is not implemented").
Tensor scatter(const Tensor& a, long axis, const Tensor& index, const Tensor& src, const std::string& reduce);
Tensor scatter(const Tensor& a, long axis, const Tensor& index, Scalar value, const std::string& reduce);
/// torch.scatter_add: scatter that adds, out[i][index[i][j]] += src[i][j], repeated indices
/// adding each, in index order. Backward: a gets g, src gets gather(g, axis, index).
Tensor scatter_add(const Tensor& a, long axis, const Tensor& index, const Tensor& src);

/// int64 class indices → int64 one-hot vectors on a new last axis (torch.nn.functional.one_hot).
/// num_classes = -1 takes max + 1. Negative indices, or ones ≥ num_classes, throw.
Tensor one_hot(const Tensor& indices, long num_classes = -1);

// --- sorting (ops_sort.cpp): values with gradient, indices without ----------------------------
/// Sorted along axis, ascending unless `descending`; NaN sorts as the largest value (as torch).
/// Always stable: equal values keep their order (torch's stable = true). The gradient of values
/// goes back to where each came from.
ValuesIndices sort(const Tensor& a, long axis = -1, bool descending = false);
/// The indices sort gives (int64).
Tensor argsort(const Tensor& a, long axis = -1, bool descending = false);
/// The k largest (or smallest) along axis, sorted, as torch.topk. Ties keep index order (torch
/// leaves the order of ties unspecified). 0 ≤ k ≤ the axis length.
ValuesIndices topk(const Tensor& a, long k, long axis = -1, bool largest = true);

}  // namespace xgrad
