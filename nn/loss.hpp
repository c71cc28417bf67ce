#pragma once
/// Losses: torch.nn.functional's fused ones (core ops) and d2l's MaskedSoftmaxCELoss.
#include <cstdint>

#include "core/ops.hpp"
#include "core/tensor.hpp"

namespace xgrad::nn {

// The fused losses are core ops (core/ops.hpp), named here as torch.nn.functional names them.
using xgrad::cross_entropy;
using xgrad::mse_loss;
using xgrad::Reduction;

/// d2l's MaskedSoftmaxCELoss: per-token cross-entropy with the positions past each sequence's
/// valid length weighted 0, averaged over ALL T positions (not only the valid ones), per
/// sequence:
///
///   loss_b = (1/T) Σ_t [t < valid_len_b] · cross_entropy(pred[b, t], label[b, t])
///
/// pred (B, T, V) float, label (B, T) int64, valid_len (B,) int64 or float. Result (B,).
/// Labels at masked positions must still be valid classes (the padding token).
Tensor masked_softmax_ce_loss(const Tensor& pred, const Tensor& label, const Tensor& valid_len);

/// d2l's `MaskedSoftmaxCELoss()` object, for a verbatim port:
///   nn::MaskedSoftmaxCELoss loss;  Tensor l = loss(Y_hat, Y, Y_valid_len);  // (B,)
struct MaskedSoftmaxCELoss {
    Tensor operator()(const Tensor& pred, const Tensor& label, const Tensor& valid_len) const {
        return masked_softmax_ce_loss(pred, label, valid_len);
    }
    Tensor forward(const Tensor& pred, const Tensor& label, const Tensor& valid_len) const {
        return masked_softmax_ce_loss(pred, label, valid_len);
    }
};

}  // namespace xgrad::nn
