#pragma once
/// Ops for walking a tensor step by step (the recurrent layers' loops): torch.unbind.
#include <vector>

#include "core/tensor.hpp"

namespace xgrad {

/// torch.unbind: the slices of `a` along `axis`, each without that axis, as one op with one
/// output per slice (any floating dtype; int64 and bool without gradient). Its gradient is
/// stack(grads, axis), zeros for the slices no gradient reached, made once for all of them:
/// a loop over T steps costs O(T) in backward, where T slice()s would each send back a zero
/// tensor of a's whole shape. Differentiable again (stack's gradient is unbind's forward).
std::vector<Tensor> unbind(const Tensor& a, long axis = 0);

}  // namespace xgrad
