#include "loss.hpp"

#include <cmath>

#include "core/creation.hpp"
#include "core/ops.hpp"

namespace xgrad::nn {

Tensor masked_softmax_ce_loss(const Tensor& pred, const Tensor& label, const Tensor& valid_len) {
    constexpr const char* op = "masked_softmax_ce_loss";
    if (pred.dim() != 3 || label.dim() != 2 || valid_len.dim() != 1 || label.shape()[0] != pred.shape()[0] ||
        label.shape()[1] != pred.shape()[1] || valid_len.shape()[0] != pred.shape()[0])
        throw Error(fmt::format("{}: expected pred (B, T, V), label (B, T) and valid_len (B,), got {}, {} and {}", op,
                                shape_str(pred.shape()), shape_str(label.shape()), shape_str(valid_len.shape())));
    if (valid_len.dtype() == kBool)
        throw Error(fmt::format("{}: valid_len must hold lengths (int64 or float), got bool", op));
    Tensor unweighted = cross_entropy(pred, label, Reduction::none);  // (B, T)

    // weights[b, t] = t < valid_len[b]: d2l's sequence_mask applied to ones.
    const std::size_t batch = label.shape()[0], steps = label.shape()[1];
    const std::vector<double> lens = valid_len.to_vector<double>();
    std::vector<double> mask(batch * steps);
    for (std::size_t b = 0; b < batch; ++b)
        for (std::size_t t = 0; t < steps; ++t) mask[b * steps + t] = static_cast<double>(t) < lens[b] ? 1 : 0;
    const Tensor weights = from_vector(mask, label.shape(), pred.dtype());
    return mean(unweighted * weights, {1});
}

}  // namespace xgrad::nn
