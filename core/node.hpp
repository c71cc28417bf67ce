#pragma once
/// Node: what a Tensor points at, and the toolkit for writing an op with its gradient.
///
/// An op is one function body in three beats (see ops_elementwise.cpp):
///   1. compute the value as an xt::xarray<T>;
///   2. write the backward lambda: it receives the output node (its parents and its own
///      value) and the upstream gradient, and accumulates each input's gradient;
///   3. return make_result(value, {inputs...}, "name", backward).
/// The lambda captures only materialised xarrays it needs, by value, and never a Tensor of
/// the output (that would make a shared_ptr cycle). It reads inputs through self.parents.
#include <functional>
#include <optional>
#include <utility>
#include <variant>

#include "core/dispatch.hpp"
#include "core/xt.hpp"

namespace xgrad {

/// The values of a tensor: one xarray of one of the five element types, in Dtype's order.
using Storage = std::variant<xt::xarray<float>, xt::xarray<double>, xt::xarray<std::int64_t>,
                             xt::xarray<bool>, xt::xarray<bfloat16>>;

/// Backward of one op: `self` is the output node, `grad_out` its gradient (same dtype and
/// shape as self.data). Adds into the inputs' gradients with accumulate().
using BackwardFn = std::function<void(Node& self, const Storage& grad_out)>;

/// Which of an op's tensors its backward reads: inputs by position (bit i for input i) and its
/// own output. Only these are checked against in-place writes before a backward runs (as torch
/// checks only what an op saved): `y = a + b; a.mutable_data_ptr()...; y.backward()` is fine,
/// the same with `a * b` throws. The default, everything, is the safe choice for a new op.
struct Saves {
    std::uint32_t inputs = ~0u;
    bool output = true;
    static constexpr Saves all() { return {}; }
    static constexpr Saves none() { return {0u, false}; }
    static constexpr Saves only_output() { return {0u, true}; }
    static constexpr Saves only_inputs(std::uint32_t bits) { return {bits, false}; }
    constexpr bool reads_input(std::size_t i) const { return i >= 32 || (inputs >> i & 1u); }
};

struct Node {
    Storage data;
    Shape shape;                   // cached copy of data's shape (the handle returns a reference)
    std::optional<Storage> grad;   // what the user reads as .grad(): leaves and retained non-leaves
    std::optional<Storage> flow;   // gradient arriving during one backward sweep (engine only)
    bool requires_grad = false;
    bool is_leaf = true;
    bool retains_grad = false;
    bool graph_freed = false;      // backward ran without retain_graph: fn and parents are gone
    bool freed_by_failure = false; // ... by a backward that then threw part way (for its message)
    const char* op = "";           // name of the op that made it ("" for leaves)
    std::uint64_t version = 0;     // bumped by every in-place write (set_data, data_ptr, mutable_data_ptr)
    std::uint64_t layout_version = 0;  // bumped by a set_data that changes the shape or the dtype
    const char* last_write = "";   // the accessor of the latest in-place write, for the stale-graph error
    std::vector<Tensor> parents;   // inputs of the op, in argument order
    // At forward, for the parents and then the output: the version of each tensor the backward
    // reads (saves), the layout version of the others. Every backward uses its inputs' shapes
    // and dtypes, so a new layout is refused for all of them; new values only for saved ones.
    Saves saves;
    std::vector<std::uint64_t> saved_versions;
    BackwardFn backward;
    std::vector<std::pair<std::uint64_t, std::function<void(Tensor&)>>> post_grad_hooks;  // leaves only

    explicit Node(Storage values);
    Node(const Node&) = delete;
    Node& operator=(const Node&) = delete;
    /// Releases long parent chains iteratively: a recursive destructor would overflow the
    /// stack on graphs with a very long path (an RNN unrolled for 100k steps).
    ~Node();

    Dtype dtype() const { return static_cast<Dtype>(data.index()); }
};

/// Throws "<op>: dtypes differ: float32 and float64 (convert one with .to())".
void check_same_dtype(const char* op, const Tensor& a, const Tensor& b);

/// The typed values of a node or tensor (the dtype must be T: callers dispatch first).
template <class T> xt::xarray<T>& values(Node& n) { return std::get<xt::xarray<T>>(n.data); }
template <class T> const xt::xarray<T>& values(const Tensor& t) {
    return std::get<xt::xarray<T>>(t.node().data);
}
template <class T> const xt::xarray<T>& grad_as(const Storage& g) { return std::get<xt::xarray<T>>(g); }

/// Whether input i of this op needs a gradient (skip the work when it does not).
inline bool needs_grad(const Node& self, std::size_t i) { return self.parents[i].requires_grad(); }

/// Adds `g` into the gradient flowing to `input`. Its shape must equal the input's shape:
/// broadcasting ops reduce first with sum_to(). A mismatch is a bug in an op's backward and
/// throws, naming the op, rather than silently broadcasting.
template <class T> void accumulate(const char* op, const Tensor& input, xt::xarray<T>&& g);

/// Wraps a computed value as an op's output. When gradients are enabled and any input
/// requires one, the output records `inputs`, `backward`, and the versions of what `saves`
/// names; otherwise it is a plain leaf.
template <class T>
Tensor make_result(xt::xarray<T>&& value, std::vector<Tensor> inputs, const char* op,
                   BackwardFn backward, Saves saves = Saves::all());

/// A leaf that owns `value` (no graph).
Tensor make_leaf(Storage value, bool requires_grad = false);

}  // namespace xgrad
