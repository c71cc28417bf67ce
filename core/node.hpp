#pragma once
/// Node: what a Tensor points at, and the toolkit for writing an op with its gradient.
///
/// An op is one function body in three beats (see ops_elementwise.cpp):
///   1. compute the value as an xt::xarray<T>;
///   2. write its gradient formula (Formula, below): one gradient per input, in xgrad ops on
///      Tensors, from the gradient of the output, the inputs and the output itself;
///   3. return make_result(value, {inputs...}, "name", Formula(...), Saves).
/// The formula is the op's only derivative: a first-order backward runs it as a computation,
/// create_graph records it, so it serves both orders. A fused kernel's backward is an op of its
/// own (grad_ops.hpp) with a formula of its own. The formula captures only what is not a tensor
/// of the graph (axes, masks, statistics), never the output (it is handed in): a captured
/// output would make a shared_ptr cycle.
#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <utility>
#include <variant>

#include "core/dispatch.hpp"
#include "core/xt.hpp"

namespace xgrad {

/// The values of a tensor: one xarray of one of the five element types, in Dtype's order.
using Storage = std::variant<xt::xarray<float>, xt::xarray<double>, xt::xarray<std::int64_t>,
                             xt::xarray<bool>, xt::xarray<bfloat16>>;

/// What an op's gradient formula is given (see Formula).
struct GradArgs {
    /// The gradient of each output: one for an op with one output, one per output of a custom
    /// Function (undefined where no gradient reached an output and it is not materialised).
    const std::vector<Tensor>& grads;
    /// The op's inputs, in argument order. An input written in place since the forward pass
    /// holds its new value: a formula that reads an input's value says so in its Saves, and
    /// the engine then refuses such an input (version counter) before the formula runs.
    const std::vector<Tensor>& inputs;
    /// The op's output, with its graph (a one-output op): what a formula like exp's g·y reads.
    const Tensor& output;
    /// The node the formula belongs to (its op name, for messages).
    const Node& node;
    const Tensor& grad() const { return grads[0]; }
    /// Whether input i wants a gradient (skip the work when it does not).
    bool needs(std::size_t i) const;
};

/// An op's gradient formula: one gradient per input (undefined for an input that needs none),
/// each of that input's shape and dtype, written in differentiable ops. It is the only copy of
/// the op's derivative: a first-order backward runs it with gradients off (a plain computation),
/// and backward(create_graph = true) or autograd::grad runs it with gradients on, so that its
/// result is itself differentiable. A fused kernel's backward is an op of its own, with its own
/// formula, as torch's softmax_backward_data.
using Formula = std::function<std::vector<Tensor>(const GradArgs& args)>;

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

/// The memory a tensor shares with its views (torch's StorageImpl): one row-major buffer in the
/// shape of the tensor that made it, and the count of in-place writes to it. A base and all its
/// views hold one StorageImpl, so a write through any of them is seen by every op that saved
/// another (one version counter per storage, as torch's).
struct StorageImpl {
    explicit StorageImpl(Storage values) : data(std::move(values)) {}
    Storage data;
    std::atomic<std::uint64_t> version{0};  // bumped by every in-place write (set_data, data_ptr, in-place ops)
    const char* last_write = "";   // the accessor of the latest in-place write, for the stale-graph error
};

/// Where a view's elements sit in its base's storage (torch's sizes, strides and storage
/// offset); the shape is the node's own. See core/views.cpp.
struct ViewOf {
    std::shared_ptr<Node> base;          // the tensor that made the storage (never a view itself)
    std::vector<std::int64_t> strides;   // in elements, one per axis; 0 along an expanded axis
    std::int64_t offset = 0;             // of element (0, ..., 0), in elements
    bool row_major = false;              // strides are the shape's row-major ones: no gaps, no repeats
    std::uint32_t base_history = 0;      // base's history when this view's graph edge was made
    bool made_without_grad = false;      // made with gradients off from a base that requires grad
    bool multi_output = false;           // one of several views one node returned (split, chunk)
    // The elements in the view's shape for kernels that read an xarray: for a row-major view an
    // xarray over the base's own buffer (no copy), else a copy taken at `snapshot_version`.
    std::mutex mutex;
    std::unique_ptr<Storage> snapshot;
    const void* snapshot_at = nullptr;   // the base buffer the snapshot was taken from
    std::uint64_t snapshot_version = 0;
};

struct Node {
    std::shared_ptr<StorageImpl> storage;
    std::unique_ptr<ViewOf> view;  // set when this tensor is a view of another's storage
    Shape shape;                   // the tensor's shape (the handle returns a reference)
    Tensor grad;                   // what .grad() hands out (the same handle): leaves and retained non-leaves
    // Guards `grad` (the handle, and the values a backward adds into): two threads' backward
    // passes may accumulate into one shared leaf at once, as torch's AccumulateGrad allows.
    mutable std::mutex grad_mutex;
    // The backward passes going through this (non-leaf) node now: n > 0 passes that keep the
    // graph (retain_graph), -1 one that frees it. A pass claims every node before reading its
    // parents, so two threads never free and read one graph at once (see run_sweep).
    std::atomic<int> sweeps{0};
    bool requires_grad = false;
    bool is_leaf = true;
    bool retains_grad = false;
    bool graph_freed = false;      // backward ran without retain_graph: its formula and parents are gone
    bool freed_by_failure = false; // ... by a backward that then threw part way (for its message)
    bool overwritten = false;      // a past history (see `past`): its output was written in place since
    bool advanced_index = false;   // made by index() with a tensor or list index: a copy, which
                                   // assigning to as a temporary would write alone (refused)
    const char* op = "";           // name of the op that made it ("" for leaves)
    std::uint64_t layout_version = 0;  // bumped by a set_data that changes the shape or the dtype
    std::uint64_t seq = 0;         // creation order (which nodes an in-place op made)
    std::vector<Tensor> parents;   // inputs of the op, in argument order
    // For each parent, the history it had when this op read it (an in-place op on it since
    // starts a new one, see `past`) and which of its outputs this op read (custom Functions).
    std::vector<std::uint32_t> parent_history;
    std::vector<std::uint32_t> parent_slot;
    // An in-place op recorded in the graph gives this tensor a new history: the node keeps the
    // new value and the in-place op as its maker, and a node of its own takes the old history
    // (past[h] for history h), so that the ops that read the tensor before the write still send
    // their gradients to what they read, as torch's saved grad_fn does.
    std::uint32_t history = 0;
    std::vector<std::shared_ptr<Node>> past;
    std::uint32_t num_outputs = 1; // a custom Function's node: its outputs read their slot of it
    // At forward, for the parents and then the output: the version of each tensor the backward
    // reads (saves), the layout version of the others. Every backward uses its inputs' shapes
    // and dtypes, so a new layout is refused for all of them; new values only for saved ones.
    Saves saves;
    std::vector<std::uint64_t> saved_versions;
    Formula formula;               // the op's gradient (see Formula)
    // Tensor hooks (register_hook): each may replace the gradient before it is used.
    std::vector<std::pair<std::uint64_t, std::function<Tensor(const Tensor&)>>> grad_hooks;
    std::vector<std::pair<std::uint64_t, std::function<void(Tensor&)>>> post_grad_hooks;  // leaves only

    /// A tensor owning `values` (a storage of its own).
    explicit Node(Storage values);
    /// A tensor that is no view over `shared`, another tensor's storage (detach).
    explicit Node(std::shared_ptr<StorageImpl> shared);
    /// A view of `base`'s storage: `shape`, `strides` and `offset` are checked by the caller.
    Node(const std::shared_ptr<Node>& base, Shape shape, std::vector<std::int64_t> strides, std::int64_t offset);
    Node(const Node&) = delete;
    Node& operator=(const Node&) = delete;
    /// Releases long parent chains iteratively: a recursive destructor would overflow the
    /// stack on graphs with a very long path (an RNN unrolled for 100k steps).
    ~Node();

    Dtype dtype() const { return static_cast<Dtype>(storage->data.index()); }
    std::uint64_t version() const { return storage->version; }
    /// Counts an in-place write to the storage, through `how` (for the stale-graph error).
    void bump_version(const char* how) {
        ++storage->version;
        storage->last_write = how;
    }
    /// The elements in this tensor's shape, row-major: the storage itself for a tensor that is
    /// no view, else an xarray over the base's buffer (row-major views) or a copy of the
    /// elements taken since the storage's last write. For reading: a write into it is lost
    /// for a view.
    const Storage& data() const;
    /// The storage of a tensor that is no view, to write into (throws for a view).
    Storage& own_data();
};

/// Throws "<op>: dtypes differ: float32 and float64 (convert one with .to())".
void check_same_dtype(const char* op, const Tensor& a, const Tensor& b);

/// The typed values of a node or tensor (the dtype must be T: callers dispatch first).
template <class T> xt::xarray<T>& values(Node& n) { return std::get<xt::xarray<T>>(n.own_data()); }
template <class T> const xt::xarray<T>& values(const Tensor& t) {
    return std::get<xt::xarray<T>>(t.node().data());
}

inline bool GradArgs::needs(std::size_t i) const { return i < inputs.size() && inputs[i].requires_grad(); }

/// Wraps a computed value as an op's output. When gradients are enabled and any input
/// requires one, the output records `inputs`, `formula`, and the versions of what `saves`
/// names; otherwise it is a plain leaf.
template <class T>
Tensor make_result(xt::xarray<T>&& value, std::vector<Tensor> inputs, const char* op,
                   Formula formula, Saves saves = Saves::all());

/// Records `node` (already holding its value and op name) as made from `inputs` by `formula`
/// when gradients are enabled and an input requires one: what make_result does after making
/// the node, for code that builds nodes itself (custom Functions).
void link_node(Node& node, std::vector<Tensor> inputs, Formula formula, Saves saves);

/// An in-place op `op` on `self`, recorded in the graph as torch records one: `compute(old,
/// others)` computes the new value out of place from `old`, a handle on self's value and
/// history before the write (with every one of `others` that is self replaced by it too), and
/// the result, of self's shape and dtype, becomes self's value and history. Ops that read self
/// before keep their gradient path to the old history, and are refused at backward if they
/// saved its value (version counter). Refuses a leaf that requires grad. The caller decides
/// that the op is to be recorded (gradients on, and self or an operand requiring grad).
const Tensor& record_in_place(const char* op, const Tensor& self, std::vector<Tensor> others,
                              const std::function<Tensor(const Tensor& old, const std::vector<Tensor>& others)>& compute);

/// The two halves of rebasing a tensor's history, as record_in_place does, for code that
/// records an in-place write itself (a custom Function's mark_dirty). split_history moves
/// self's history (the op that made it, its parents, versions and graph state) to a new node
/// holding `old_value`, and returns it: the writing op reads that node as its input. Then
/// rebase_history makes `made` (a node the writing op made, with its graph) self's maker, keeps
/// `past` as self's past history (ops that read self before the write still reach it), names
/// the write `op` and bumps self's version.
std::shared_ptr<Node> split_history(Node& self, Storage old_value);
void rebase_history(Node& self, std::shared_ptr<Node> past, Node& made, const char* op);

/// A leaf that owns `value` (no graph).
Tensor make_leaf(Storage value, bool requires_grad = false);

}  // namespace xgrad
