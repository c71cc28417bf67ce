#include "loss.hpp"

#include <cmath>

#include "core/call_context.hpp"
#include "core/creation.hpp"
#include "core/ops.hpp"
#include "nn/functional.hpp"

namespace xgrad::nn {

Tensor masked_softmax_ce_loss(const Tensor& pred, const Tensor& label, const Tensor& valid_len) {
    constexpr const char* op = "masked_softmax_ce_loss";
    if (!pred.defined() || !label.defined() || !valid_len.defined())
        throw Error(fmt::format("{}: pred, label and valid_len must all be defined tensors", op));
    if (pred.dim() != 3 || label.dim() != 2 || valid_len.dim() != 1 || label.shape()[0] != pred.shape()[0] ||
        label.shape()[1] != pred.shape()[1] || valid_len.shape()[0] != pred.shape()[0])
        throw Error(fmt::format("{}: expected pred (B, T, V), label (B, T) and valid_len (B,), got {}, {} and {}", op,
                                shape_str(pred.shape()), shape_str(label.shape()), shape_str(valid_len.shape())));
    // What the ops inside refuse (pred's dtype, a label out of range, lengths that are not
    // whole) names the loss, the call made.
    return as_call(op, [&] {
        // weights[b, t] = t < valid_len[b], as d2l's sequence_mask applied to ones (the lengths
        // are checked: whole, finite, non-negative).
        const Tensor weights = sequence_mask(ones(label.shape(), pred.dtype()), valid_len);
        // d2l's line: torch wants the classes on axis 1.
        const Tensor unweighted = cross_entropy(pred.permute({0, 2, 1}), label, Reduction::none);  // (B, T)
        return (unweighted * weights).mean({1});
    });
}

}  // namespace xgrad::nn
