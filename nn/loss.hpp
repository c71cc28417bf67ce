#pragma once
/// Loss functions, as torch.nn.functional's, plus d2l's MaskedSoftmaxCELoss.
#include <cstdint>

#include "core/tensor.hpp"

namespace xgrad::nn {

/// How a loss reduces its per-element values: keep them (none), average (mean) or add (sum).
enum class Reduction { none, mean, sum };

/// Cross-entropy of integer class targets under softmax(logits), fused with the log-softmax for
/// stability (no exp of a large logit, no log of an underflowed probability):
///
///   loss_i = logsumexp(logits_i) − logits_i[targets_i]       (0 where targets_i == ignore_index)
///
/// logits: (..., C) with the class axis LAST — (N, C) or (B, T, V). Note that torch wants the
///         classes on axis 1, (B, V, T); here the (B, T, V) output of a sequence model goes in
///         as it is.
/// targets: int64 of logits' shape without the class axis — (N,) or (B, T) — each in [0, C) or
///         equal to ignore_index.
/// Result: reduction none → the targets' shape; sum → 0-d; mean → 0-d sum divided by the number
///         of targets that are not ignore_index (NaN when all are, as torch).
/// Backward: d loss_i / d logits_i = softmax(logits_i) − one_hot(targets_i), times the upstream
///         gradient (divided by the count for mean). Saves the per-row logsumexp and recomputes
///         softmax from the logits.
/// Throws for targets of the wrong dtype or shape, or a target outside [0, C) (naming it).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, Reduction reduction = Reduction::mean,
                     std::int64_t ignore_index = -100);

/// d2l's MaskedSoftmaxCELoss: per-token cross-entropy with the positions past each sequence's
/// valid length weighted 0, averaged over ALL T positions (not only the valid ones), per
/// sequence:
///
///   loss_b = (1/T) Σ_t [t < valid_len_b] · cross_entropy(pred[b, t], label[b, t])
///
/// pred (B, T, V) float, label (B, T) int64, valid_len (B,) int64 or float. Result (B,).
/// Labels at masked positions must still be valid classes (the padding token).
Tensor masked_softmax_ce_loss(const Tensor& pred, const Tensor& label, const Tensor& valid_len);

/// Mean squared error: (input − target)², reduced. input and target have the same shape and
/// dtype; both may require grad. The sum and mean are one fused op (summed in double; saves
/// nothing for backward beyond its inputs); an empty input's mean is NaN, as in torch.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);

}  // namespace xgrad::nn
