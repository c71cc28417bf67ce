#pragma once
/// xgrad::autograd: gradients as values (torch.autograd.grad), for second derivatives and for
/// losses that contain a gradient; and custom functions with a backward of their own
/// (Function, AutogradContext: core/autograd_function.hpp).
#include <optional>
#include <vector>

#include "core/autograd_function.hpp"
#include "core/tensor.hpp"

namespace xgrad::autograd {

/// The gradients of `outputs` with respect to `inputs`, as torch.autograd.grad: returned, not
/// added into any .grad(). `grad_outputs` gives one gradient per output (an undefined entry, or
/// an empty list, means ones for a one-element output); the outputs' gradients are summed.
///  - retain_graph (default: create_graph) keeps the graph for another sweep.
///  - create_graph records the computation, so the results have a graph: autograd::grad of
///    them gives second derivatives (Hessian-vector products, gradient penalties).
///  - an input the outputs do not depend on throws unless allow_unused, which returns an
///    undefined tensor for it.
/// Every input must require grad; only the part of the graph between the inputs and the
/// outputs is run.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, std::optional<bool> retain_graph = std::nullopt,
                         bool create_graph = false, bool allow_unused = false);

}  // namespace xgrad::autograd
