#pragma once
/// Tensor: the handle users hold. A cheap-to-copy pointer to a Node that owns the values,
/// the gradient and the link back into the graph that made it.
///
/// Copies of the handle alias: `Tensor b = a;` shares a's data, gradient and graph position, as
/// a second Python name for the same torch.Tensor would, and so does every Tensor an accessor
/// documents as the tensor itself (grad(), a module's parameters). What an op returns owns its
/// values: xgrad has no views, so reshape, permute, t[i] and index() copy (see IndexedTensor for
/// how writes through t[i] still reach t). Use clone() for an independent copy.
///
/// This header does not include xtensor: code that only composes ops (nn/, optim/, user
/// programs) never pays for xtensor's templates. core/xt.hpp gives typed access to the array.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "core/dtype.hpp"
#include "core/error.hpp"

// A program built with _GLIBCXX_DEBUG has std::vector and std::string of another layout than a
// library built without it (and the reverse), and xgrad's interface passes both: mixed, shapes
// and names would be read as garbage, with no error. Every file that includes this header
// refers to the symbol for its own setting, and the library defines only the one it was built
// with, so a mixed build fails to link, and the missing symbol names the mismatch.
#ifdef _GLIBCXX_DEBUG
extern "C" const int xgrad_this_program_has_GLIBCXX_DEBUG_and_xgrad_must_too;
[[gnu::used]] static const int* const xgrad_library_glibcxx_debug_check =
    &xgrad_this_program_has_GLIBCXX_DEBUG_and_xgrad_must_too;
#else
extern "C" const int xgrad_this_program_lacks_GLIBCXX_DEBUG_and_xgrad_must_too;
[[gnu::used]] static const int* const xgrad_library_glibcxx_debug_check =
    &xgrad_this_program_lacks_GLIBCXX_DEBUG_and_xgrad_must_too;
#endif

// The compile error of a typed accessor (item<T>, data_ptr<T>...) given a T that is no element
// type: it names the accessor and the types there are (undefined at the end of this header).
#define XGRAD_ELEMENT_TYPES_MESSAGE(accessor)                                                                  \
    "Tensor::" accessor "<T>: T must be float, double, std::int64_t, bool or bfloat16 (the element types: "    \
    "use one of those, and convert the values read)"

namespace xgrad {

struct Node;
class TensorIndex;
class IndexedTensor;
class Generator;
/// The calling thread's default generator (core/random.hpp).
Generator& default_generator();

/// A number beside a tensor, remembering how it was written (torch's wrapped numbers): a bool,
/// an integer or a floating-point value. It promotes as torch's Python scalars do: an int64
/// tensor + 2 stays int64, + 2.5 becomes float32 (the default dtype); a float32 tensor + 2.5
/// (a C++ double) stays float32.
class Scalar {
public:
    // A template, so only a real bool matches: a pointer (or anything else that merely converts
    // to bool) is not a Scalar.
    template <class T, std::enable_if_t<std::is_same_v<T, bool>, int> = 0>
    Scalar(T v) : m_kind(kBool), m_int(v), m_double(v) {}  // NOLINT: implicit, as at::Scalar
    template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
    Scalar(T v) : m_kind(kInt64), m_int(static_cast<std::int64_t>(v)), m_double(static_cast<double>(v)) {  // NOLINT
        if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(std::int64_t))
            if (v > static_cast<T>(INT64_MAX)) throw Error(fmt::format("Scalar: {} does not fit int64", v));
    }
    template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
    Scalar(T v) : m_kind(kFloat64), m_int(0), m_double(static_cast<double>(v)) {}  // NOLINT
    /// kBool, kInt64 or kFloat64: how the number was written.
    Dtype kind() const { return m_kind; }
    double to_double() const { return m_double; }
    /// The integer value (for a bool or integer Scalar).
    std::int64_t to_int64() const { return m_int; }

private:
    Dtype m_kind;
    std::int64_t m_int;
    double m_double;
};

/// What to build a tensor as: `zeros({2, 3}, kFloat64)` or
/// `zeros({2, 3}, TensorOptions(kFloat64).requires_grad(true))`.
class TensorOptions {
public:
    TensorOptions() = default;
    TensorOptions(Dtype d) : m_dtype(d), m_has_dtype(true) {}  // NOLINT: implicit, as torch::TensorOptions
    TensorOptions& dtype(Dtype d) { m_dtype = d; m_has_dtype = true; return *this; }
    TensorOptions& requires_grad(bool on) { m_requires_grad = on; return *this; }
    /// The dtype asked for, float32 when none was.
    Dtype dtype() const { return m_dtype; }
    /// Whether a dtype was asked for: arange(5) and tensor({1, 2}) infer int64 only when not.
    bool has_dtype() const { return m_has_dtype; }
    bool requires_grad() const { return m_requires_grad; }

private:
    Dtype m_dtype = kFloat32;
    bool m_has_dtype = false;
    bool m_requires_grad = false;
};

class Tensor {
public:
    /// An undefined tensor (as a default torch::Tensor): defined() is false.
    Tensor() = default;
    explicit Tensor(std::shared_ptr<Node> node);
    Tensor(const Tensor&) = default;
    Tensor(Tensor&&) noexcept = default;
    ~Tensor() = default;
    /// Assigning to a named tensor rebinds the handle (`a = b` makes a another name for b), as
    /// LibTorch's lvalue operator=.
    Tensor& operator=(const Tensor&) & = default;
    Tensor& operator=(Tensor&&) & noexcept = default;
    /// Assigning to a temporary writes into the tensor it stands for, as LibTorch's rvalue
    /// operator=: `p.grad() = g` is `p.grad().copy_(g)` and `f() = 0.5` is `f().fill_(0.5)`, so
    /// that no such write vanishes into a copy of the handle.
    Tensor& operator=(const Tensor& src) &&;
    Tensor& operator=(Scalar value) &&;

    bool defined() const noexcept { return static_cast<bool>(m_node); }
    const Shape& shape() const;
    // dim, numel and size are signed, as LibTorch's int64_t: a count from them mixes with int
    // and long loop variables, std::min(top_k, x.size(-1)) and `x.size(1) - 2` without a cast,
    // a sign-compare warning or a wrap below zero. shape() keeps the unsigned Shape.
    std::int64_t dim() const { return static_cast<std::int64_t>(shape().size()); }
    std::int64_t numel() const;
    /// Length of one axis; negative axes count from the end.
    std::int64_t size(long axis) const;
    Dtype dtype() const;

    // --- autograd -------------------------------------------------------------------
    bool requires_grad() const;
    /// Marks a leaf as a parameter to differentiate; throws on a non-leaf (as PyTorch).
    Tensor& requires_grad_(bool on = true);
    /// A leaf is a tensor the user made (not the result of an op that tracks gradients).
    bool is_leaf() const;
    /// Keep the gradient of a non-leaf after backward (leaves always keep theirs).
    void retain_grad();
    /// The accumulated gradient, or an undefined tensor before any backward reached it. The
    /// handle aliases the stored gradient, as torch's `p.grad`: `p.grad() *= c`,
    /// `p.grad().zero_()` and `p.grad().clamp_(-1, 1)` change what the next optimiser step reads.
    /// A later backward adds into the same storage (in place), unless it runs with create_graph,
    /// which makes the sum a new tensor with a graph (as torch). grad(), set_grad(), has_grad()
    /// and zero_grad() take the tensor's gradient lock, which backward holds while it adds into
    /// a leaf: several threads' backward passes may accumulate into one leaf at once.
    Tensor grad() const;
    /// The stored gradient itself, to assign a new one: `p.mutable_grad() = g` (as LibTorch).
    /// Assigning does not check the shape; set_grad does. Unlike set_grad it is not locked: not
    /// while another thread's backward may reach this tensor.
    Tensor& mutable_grad() const;
    /// Makes `g` the gradient (an undefined tensor clears it): the tensor itself, not a copy,
    /// as torch's `p.grad = g`. Its shape and dtype must match this tensor's.
    void set_grad(const Tensor& g);
    /// Whether a gradient is held (torch: grad().defined()).
    bool has_grad() const;
    /// Drops the gradient (PyTorch's zero_grad(set_to_none=True)).
    void zero_grad();
    /// The gradient's storage, row-major, for code that updates or communicates it in place
    /// (optimisers, gradient all-reduce): null when there is no gradient. T must be the
    /// tensor's own type (checked). The non-const form counts as a write to the gradient.
    /// T is an element type (float, double, std::int64_t, bool, bfloat16; another T does not
    /// compile), as for every typed accessor below.
    template <class T> T* grad_ptr() {
        static_assert(is_element_type_v<T>, XGRAD_ELEMENT_TYPES_MESSAGE("grad_ptr"));
        return grad_ptr_as<T>();
    }
    template <class T> const T* grad_ptr() const {
        static_assert(is_element_type_v<T>, XGRAD_ELEMENT_TYPES_MESSAGE("grad_ptr"));
        return grad_ptr_as<T>();
    }
    /// The same, first making a zero gradient when there is none.
    template <class T> T* mutable_grad_ptr() {
        static_assert(is_element_type_v<T>, XGRAD_ELEMENT_TYPES_MESSAGE("mutable_grad_ptr"));
        return mutable_grad_ptr_as<T>();
    }
    /// Reverse-mode sweep from this tensor, as torch's Tensor.backward. A scalar needs no
    /// `gradient`; a non-scalar needs one of its own shape. Gradients add into the .grad() of
    /// the leaves that require grad (and of non-leaves that retain_grad()).
    ///  - retain_graph (default: create_graph) keeps the graph for another backward; without
    ///    it the graph is freed as the sweep goes.
    ///  - create_graph records the backward computation itself, so the gradients have a graph
    ///    and can be differentiated again (second derivatives, gradient penalties). An op
    ///    whose gradient cannot be differentiated throws, naming itself.
    void backward(const Tensor& gradient = Tensor(), std::optional<bool> retain_graph = std::nullopt,
                  bool create_graph = false) const;
    /// Registers `hook(grad)`, called with the gradient of this tensor each time a backward (or
    /// autograd::grad) computes it, before it is used: added into .grad() for a leaf, passed on
    /// to the op that made it otherwise. Returning a defined tensor replaces the gradient (same
    /// shape and dtype); returning an undefined one keeps it. Hooks run in the order they were
    /// registered, on the thread that called backward. For a tensor that requires grad (throws
    /// otherwise), as torch's Tensor.register_hook. Returns an id for remove_hook, which ignores
    /// an unknown id.
    /// A hook that returns nothing only looks.
    template <class F> std::uint64_t register_hook(F&& hook) {
        if constexpr (std::is_void_v<std::invoke_result_t<F&, const Tensor&>>)
            return add_hook([h = std::forward<F>(hook)](const Tensor& g) mutable { h(g); return Tensor(); });
        else
            return add_hook(std::function<Tensor(const Tensor&)>(std::forward<F>(hook)));
    }
    void remove_hook(std::uint64_t id);
    /// Calls `hook(leaf)` each time a backward sweep has accumulated this leaf's gradient
    /// (torch's register_post_accumulate_grad_hook): grad() then holds all this sweep adds.
    /// It runs on the thread that called backward; an exception from it ends that backward as
    /// an op's would. For a leaf that requires grad (throws otherwise). Returns an id for
    /// remove_post_accumulate_grad_hook, which ignores an unknown id.
    std::uint64_t register_post_accumulate_grad_hook(std::function<void(Tensor&)> hook);
    void remove_post_accumulate_grad_hook(std::uint64_t id);
    /// The values as a new leaf cut from the graph: a copy (torch's detach shares storage); writes stay in it.
    Tensor detach() const;
    /// Name of the op that made this tensor ("mul", "softmax"...), "" for a leaf.
    std::string op_name() const;

    // --- values ---------------------------------------------------------------------
    /// The single value of a one-element tensor, converted to T: float, double, std::int64_t,
    /// bool or bfloat16 (the element types; another T does not compile: read one of these and
    /// convert it, static_cast<int>(t.item<std::int64_t>())).
    template <class T> T item() const {
        static_assert(is_element_type_v<T>, XGRAD_ELEMENT_TYPES_MESSAGE("item"));
        return item_as<T>();
    }
    /// All values in row-major order, converted to T (the same T as item).
    template <class T> std::vector<T> to_vector() const {
        static_assert(is_element_type_v<T>, XGRAD_ELEMENT_TYPES_MESSAGE("to_vector"));
        return to_vector_as<T>();
    }
    /// Row-major contiguous storage, T the tensor's own type (checked). As LibTorch's accessors:
    ///  - data_ptr() on a non-const tensor hands out write access, so it counts as an in-place
    ///    write (bumps version(), see there) even if the caller only reads;
    ///  - const_data_ptr() (and data_ptr() on a const tensor) is for reading, and counts nothing;
    ///  - mutable_data_ptr() writes, also through a const handle (optimisers, communication).
    /// A bool element is one byte, and every op reads any byte but 0 as true (as numpy does), so
    /// a mask written as raw 0/255 bytes through data_ptr<bool> or a cast pointer is a mask.
    template <class T> T* data_ptr() {
        static_assert(is_element_type_v<T>, XGRAD_ELEMENT_TYPES_MESSAGE("data_ptr"));
        return data_ptr_as<T>();
    }
    template <class T> const T* data_ptr() const {
        static_assert(is_element_type_v<T>, XGRAD_ELEMENT_TYPES_MESSAGE("data_ptr"));
        return const_data_ptr_as<T>();
    }
    template <class T> const T* const_data_ptr() const {
        static_assert(is_element_type_v<T>, XGRAD_ELEMENT_TYPES_MESSAGE("const_data_ptr"));
        return const_data_ptr_as<T>();
    }
    template <class T> T* mutable_data_ptr() const {
        static_assert(is_element_type_v<T>, XGRAD_ELEMENT_TYPES_MESSAGE("mutable_data_ptr"));
        return mutable_data_ptr_as<T>();
    }
    /// How many in-place writes this tensor's storage has had (torch's _version): set_data,
    /// data_ptr and mutable_data_ptr bump it. Before a backward runs, every op on the way checks
    /// the tensors its backward reads (saved inputs, its own output) still have the versions
    /// they had at forward, and throws naming the op and the tensor if not: "... was modified in
    /// place after it was saved for backward by 'matmul' (version 0 -> 1 ...)". Writes under
    /// NoGradGuard are allowed as any other; only the backward through a stale graph is refused.
    std::uint64_t version() const;
    /// Replaces this tensor's values with a copy of `values`' (shape and dtype may change),
    /// keeping the handle, its requires_grad and its place as a leaf, as torch's set_data:
    /// how Module::to and load_state_dict change a parameter that an optimiser also holds.
    /// A gradient of another shape or dtype is dropped. Bumps the version (see version()).
    void set_data(const Tensor& values) const;
    /// A copy with another element type (a differentiable cast between float types).
    Tensor to(Dtype d) const;
    /// An independent copy of the values (differentiable, like torch.clone).
    Tensor clone() const;

    // --- the most used ops as methods (the free functions in ops.hpp are the same) ---
    // Sizes and axes are IntLists (core/error.hpp): braced lists of any integer types mixed,
    // so `x.reshape({-1, x.size(-1)})` needs no cast.
    Tensor reshape(const IntList& shape) const;
    /// torch's x.reshape(B, T, C) with the sizes as separate arguments.
    template <class... I, std::enable_if_t<(sizeof...(I) > 0) && (is_index_v<I> && ...), int> = 0>
    Tensor reshape(I... sizes) const { return reshape(IntList{sizes...}); }
    /// torch's view, for porting: here the same as reshape, a copy (xgrad has no views), so an
    /// in-place write into the result does not reach this tensor as it would in torch.
    Tensor view(const IntList& shape) const { return reshape(shape); }
    template <class... I, std::enable_if_t<(sizeof...(I) > 0) && (is_index_v<I> && ...), int> = 0>
    Tensor view(I... sizes) const { return reshape(IntList{sizes...}); }
    Tensor permute(const IntList& axes) const;
    template <class... I, std::enable_if_t<(sizeof...(I) > 0) && (is_index_v<I> && ...), int> = 0>
    Tensor permute(I... axes) const { return permute(IntList{axes...}); }
    /// Broadcasts to `shape` (expand in ops.hpp; -1 keeps an axis' size, as torch).
    Tensor expand(const IntList& shape) const;
    /// Tiled along each axis (repeat in ops.hpp: torch's x.repeat(2, 1)).
    Tensor repeat(const IntList& repeats) const;
    template <class... I, std::enable_if_t<(sizeof...(I) > 0) && (is_index_v<I> && ...), int> = 0>
    Tensor repeat(I... repeats) const { return repeat(IntList{repeats...}); }
    /// length elements from start along axis (torch's narrow; a copy).
    Tensor narrow(long axis, long start, long length) const;
    /// The sub-tensor at index along axis, that axis removed (torch's select; a copy).
    Tensor select(long axis, long index) const;
    Tensor transpose(long a, long b) const;
    /// Pieces along axis (torch's x.split(3, dim), x.split([2, 5], dim), x.chunk(2, dim)): see
    /// split and chunk in ops.hpp.
    std::vector<Tensor> split(long split_size, long axis = 0) const;
    std::vector<Tensor> split(const IntList& sizes, long axis = 0) const;
    std::vector<Tensor> chunk(long chunks, long axis = 0) const;
    /// A copy with `value` where mask is true (torch's x.masked_fill(mask, v); masked_fill in
    /// ops.hpp). masked_fill_ below writes into this tensor instead.
    Tensor masked_fill(const Tensor& mask, Scalar value) const;
    /// This tensor itself, an alias, as torch's contiguous() of a contiguous tensor: every xgrad
    /// tensor is contiguous (an op's result owns a row-major array), so a ported
    /// `y.transpose(1, 2).contiguous().view(B, T, C)` reads as in torch.
    Tensor contiguous() const { return *this; }
    Tensor unsqueeze(long axis) const;
    Tensor squeeze(long axis) const;
    Tensor sum() const;
    Tensor sum(const IntList& axes, bool keepdims = false) const;
    Tensor mean() const;
    Tensor mean(const IntList& axes, bool keepdims = false) const;
    Tensor matmul(const Tensor& other) const;
    Tensor pow(Scalar exponent) const;
    Tensor pow(const Tensor& exponent) const;
    /// clamp, clamp_min and clamp_max (ops.hpp) as torch's methods: `x.clamp(0, 1)`,
    /// `x.clamp(std::nullopt, 1)`, `x.clamp_min(1e-8)`.
    Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt) const;
    Tensor clamp_min(Scalar min) const;
    Tensor clamp_max(Scalar max) const;
    Tensor exp() const;
    Tensor log() const;

    // --- indexing as torch (ops_index.cpp; the index forms are below the class) ---------
    /// t[i]: the sub-tensor at i along axis 0 (negative i counts from the end), a copy with
    /// gradient, as an IndexedTensor: assigning to it and its in-place ops write into t
    /// (`t[0] = v`, `t[0][1] = 5`, `t[0].mul_(2)`, `t[0] += 1`). Out of range throws, naming the
    /// axis, the index and the size.
    template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
    IndexedTensor operator[](I i) const;
    /// LibTorch's t.index({Slice(0, 2), 1, None, Ellipsis}): integers (negative from the end),
    /// Slice(start, stop, step) with None ends, None (a new axis of length 1) and one Ellipsis;
    /// and torch's advanced indices: an int64 tensor or a list `{0, -1}` picks along one axis
    /// (t[:, [-1]] is `t.index({Slice(), {-1}})`, which keeps the axis), a bool mask covers as
    /// many axes as it has and picks where it is true (t[t > 0] is 1-D, t[rows] picks rows).
    /// Advanced indices broadcast together; their result axes replace theirs when they are
    /// adjacent, else come first (numpy's rule; integers are applied first, as torch's). Indices
    /// out of range, or of another dtype, throw naming the axis, the index and the size.
    /// A copy (xgrad has no views) whose gradient goes back to the picked elements (repeated
    /// picks sum), as an IndexedTensor: `t.index({Slice(), 0}) = v`, `t.index({mask}) = v` and
    /// in-place ops on it write into t.
    IndexedTensor index(const std::vector<TensorIndex>& indices) const;
    /// Writes `value` (broadcast to the indexed part, cast to this tensor's dtype) into the
    /// elements `indices` pick, in place: every alias sees it and version() is bumped. With
    /// `accumulate`, adds it there instead, repeated picks adding each (torch's accumulate=True).
    /// Without it, where advanced indices pick an element more than once the last pick wins
    /// (torch leaves that undefined), and only the winning value gets its gradient. With
    /// gradients recorded and this tensor or `value` requiring grad, it is recorded in the graph
    /// as torch's: the tensor's gradient flows to its old value except at the written elements
    /// (all of it with `accumulate`), whose gradient goes to `value` (summed over its broadcast).
    /// Refused, as in torch, on a leaf that requires grad while gradients are recorded. A number
    /// must fit (check_fill_value).
    const Tensor& index_put_(const std::vector<TensorIndex>& indices, const Tensor& value,
                             bool accumulate = false) const;
    const Tensor& index_put_(const std::vector<TensorIndex>& indices, Scalar value, bool accumulate = false) const;
    /// torch's scatter_ along `axis`: self[..., index[i][j], ...] = src[i][j] (axis 1 shown),
    /// for every position of `index` (int64, self's rank, no larger than src on any axis nor than
    /// self off `axis`, values in [0, self.size(axis))); src has self's dtype. Where the index
    /// repeats, the last write wins. In place as the ops below; the gradient goes to self except
    /// at the written elements and to src at the picked ones. See scatter in ops.hpp.
    const Tensor& scatter_(long axis, const Tensor& index, const Tensor& src) const;
    const Tensor& scatter_(long axis, const Tensor& index, Scalar value) const;
    /// scatter_ with reduce = "add" or "multiply" (torch 1.13's reduce=): see scatter with reduce
    /// in ops.hpp; not differentiable (a backward through it throws, as torch's).
    const Tensor& scatter_(long axis, const Tensor& index, const Tensor& src, const std::string& reduce) const;
    const Tensor& scatter_(long axis, const Tensor& index, Scalar value, const std::string& reduce) const;
    /// scatter_ that adds instead (repeated indices add each): self's gradient is the whole g.
    const Tensor& scatter_add_(long axis, const Tensor& index, const Tensor& src) const;

    // --- in-place ops (ops_inplace.cpp), as torch's: every handle on this tensor sees the new
    // values and version() is bumped. With gradients recorded and this tensor or an operand
    // requiring grad, the op is recorded in the graph (the tensor's history moves onto it, see
    // record_in_place in node.hpp): the ops that read it before keep their gradient path to the
    // old value, and a backward through one that saved it is refused (version()). A leaf that
    // requires grad is refused while gradients are recorded, as in torch. Without a graph the
    // values are written into the tensor's own storage. Arithmetic results are cast back to this
    // tensor's dtype where torch's can_cast allows it (an int64 tensor mul_(2.5) throws), and
    // operands must broadcast to this tensor's shape.
    const Tensor& add_(const Tensor& other) const;
    /// this += alpha·other (torch's add_ with alpha; a floating tensor's alpha must fit its dtype, as torch's)
    const Tensor& add_(const Tensor& other, Scalar alpha) const;
    const Tensor& add_(Scalar other) const;
    const Tensor& sub_(const Tensor& other) const;
    const Tensor& sub_(const Tensor& other, Scalar alpha) const;
    const Tensor& sub_(Scalar other) const;
    const Tensor& mul_(const Tensor& other) const;
    const Tensor& mul_(Scalar other) const;
    const Tensor& div_(const Tensor& other) const;
    const Tensor& div_(Scalar other) const;
    /// value (it must fit this dtype: check_fill_value) where mask (bool, broadcastable) is true; no gradient there.
    const Tensor& masked_fill_(const Tensor& mask, Scalar value) const;
    /// clamp (ops.hpp) in place; either bound may be missing, not both. An integer tensor takes
    /// integer bounds (a floating one would make the result float32, which it cannot hold).
    const Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt) const;
    const Tensor& clamp_min_(Scalar min) const;
    const Tensor& clamp_max_(Scalar max) const;
    /// src's values (broadcast to this shape, cast to this dtype as torch's copy_, a float into
    /// int64 truncating); the gradient goes to src, summed over its broadcast, none to the old
    /// values.
    const Tensor& copy_(const Tensor& src) const;
    /// Every element 0 / `value` (refused unless it fits this dtype: check_fill_value); no gradient to the old values.
    const Tensor& zero_() const;
    const Tensor& fill_(Scalar value) const;
    /// Random values drawn from `gen` (core/random.hpp), as torch's: uniform in [from, to)
    /// (float32/float64/bfloat16 tensors; from <= to, both finite, as torch), normal with `mean`
    /// and `std` (finite, std >= 0), 1 with probability p and 0 otherwise (any dtype; p in
    /// [0, 1], a number or a tensor broadcastable to this shape). The same values as
    /// uniform / randn * std + mean / rand < p of this shape and dtype from the same generator
    /// state (bfloat16: drawn in float32, then rounded). No gradient to the old values.
    const Tensor& uniform_(double from = 0.0, double to = 1.0, Generator& gen = default_generator()) const;
    const Tensor& normal_(double mean = 0.0, double std = 1.0, Generator& gen = default_generator()) const;
    const Tensor& bernoulli_(double p = 0.5, Generator& gen = default_generator()) const;
    const Tensor& bernoulli_(const Tensor& p, Generator& gen = default_generator()) const;

    /// True when both handles point at the same node.
    bool is_same(const Tensor& other) const noexcept { return m_node == other.m_node; }
    /// The node behind the handle, for op implementations (core/node.hpp).
    Node& node() const;
    const std::shared_ptr<Node>& node_ptr() const { return m_node; }

private:
    friend class IndexedTensor;
    // The typed accessors' bodies, instantiated for the element types only (tensor.cpp).
    template <class T> T item_as() const;
    template <class T> std::vector<T> to_vector_as() const;
    template <class T> T* grad_ptr_as();
    template <class T> const T* grad_ptr_as() const;
    template <class T> T* mutable_grad_ptr_as();
    template <class T> T* data_ptr_as();
    template <class T> const T* const_data_ptr_as() const;
    template <class T> T* mutable_data_ptr_as() const;
    Tensor select_index(long i) const;                                   // t[i]'s values
    Tensor index_values(const std::vector<TensorIndex>& indices) const;  // index()'s values
    std::uint64_t add_hook(std::function<Tensor(const Tensor&)> hook);
    std::shared_ptr<Node> m_node;
};

// --- index forms for Tensor::index, as LibTorch's torch::indexing ----------------------------
namespace indexing {
/// None: a new axis of length 1 (numpy's newaxis), and an open end of a Slice.
struct NoneIndex {};
inline constexpr NoneIndex None{};
/// Ellipsis ("..."): as many full slices as the other indices leave axes.
struct EllipsisIndex {};
inline constexpr EllipsisIndex Ellipsis{};

/// One end of a Slice: an integer (negative counts from the end) or None (open).
struct SliceBound {
    SliceBound(NoneIndex) {}  // NOLINT: implicit, so Slice(None, 2) reads as Python's [:2]
    template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
    SliceBound(T v) : value(checked_index("Slice", v)), set(true) {}  // NOLINT
    long value = 0;
    bool set = false;
};

/// Python's start:stop:step. Bounds clamp to the axis as Python's do; step must be ≥ 1 (as torch).
struct Slice {
    // Parameter names differ from the members', so a program built with -Wshadow builds quietly.
    Slice(SliceBound first = None, SliceBound last = None, long stride = 1)  // NOLINT: implicit
        : start(first), stop(last), step(stride) {}
    SliceBound start, stop;
    long step;
};
}  // namespace indexing

/// One entry of Tensor::index: an integer, a Slice, None, Ellipsis, or an advanced index: an
/// int64 tensor, a bool mask, or a braced list of integers (`{-1}`, `{0, 2}`: torch's [0, 2]).
class TensorIndex {
public:
    enum class Kind { integer, slice, none, ellipsis, tensor };
    template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
    TensorIndex(T i) : m_kind(Kind::integer), m_integer(checked_index("index", i)) {}  // NOLINT
    TensorIndex(indexing::Slice s) : m_kind(Kind::slice), m_slice(s) {}          // NOLINT
    TensorIndex(indexing::NoneIndex) : m_kind(Kind::none) {}                     // NOLINT
    TensorIndex(indexing::EllipsisIndex) : m_kind(Kind::ellipsis) {}             // NOLINT
    /// An int64 index tensor or a bool mask (any other dtype is refused when it is used).
    TensorIndex(const Tensor& t) : m_kind(Kind::tensor), m_tensor(t) {}         // NOLINT
    /// A list of integers, as a 1-D int64 index: `t.index({Slice(), {-1}})` is torch's t[:, [-1]].
    template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
    TensorIndex(std::initializer_list<T> list) : m_kind(Kind::tensor) {  // NOLINT
        std::vector<long> v;
        for (T i : list) v.push_back(checked_index("index", i));
        m_tensor = list_tensor(v);
    }
    Kind kind() const { return m_kind; }
    long integer() const { return m_integer; }
    const indexing::Slice& slice() const { return m_slice; }
    const Tensor& tensor() const { return m_tensor; }

private:
    static Tensor list_tensor(const std::vector<long>& list);
    Kind m_kind;
    long m_integer = 0;
    indexing::Slice m_slice;
    Tensor m_tensor;
};

// --- writing through t[i] and index() (indexed_tensor.cpp) -----------------------------------

/// What t[i] and t.index({...}) return: the picked values, a copy with gradient that remembers t
/// and the indices, so a write through it lands in t as with torch's views and LibTorch's rvalue
/// operator=. Not a view: every node owns its contiguous array, which every kernel relies on;
/// views would bring storage offsets and strides into all of them for the sake of these writes:
///
///     t[0] = v;  t[0][1] = 5;  t.index({Slice(), 0}) = v;          // t.index_put_(...)
///     t[0].mul_(2);  t[0] += 1;  t[0].index_put_({1}, 5);          // read, op, write back
///
/// Every write becomes t.index_put_ (chained through each level for t[0][1]): it bumps t's
/// version and, with gradients recorded, is recorded in the graph, so the gradient reaches t's
/// old value and the operands as torch's does. An in-place op reads t's part afresh, applies the
/// op and writes the result back, then this handle holds the values written (so a write to t
/// made since it was taken is not lost). Otherwise reading it gives the values as they were when
/// it was taken: a later write to t does not show in it (no view).
///
/// The link lives in this type only. `auto r = t[0];` keeps it (r.mul_(2) writes into t);
/// held as a plain Tensor (`Tensor r = t[0];`, or passed on as `const Tensor&`) it is an ordinary
/// copy, and writes to it stay in it. Forms that would write into the copy alone do not compile,
/// with a message naming the form that works: assigning to a named one (`r = v`, which would
/// only rebind r; write `r.copy_(v)`), data_ptr() and mutable_data_ptr() (a pointer cannot reach
/// t; read with const_data_ptr()), and set_data().
class IndexedTensor : public Tensor {
    template <class> static constexpr bool always_false = false;

public:
    IndexedTensor(const IndexedTensor&) = default;
    IndexedTensor(IndexedTensor&&) noexcept = default;
    ~IndexedTensor() = default;

    /// t[i] = v: writes v (broadcast to the picked shape, cast to t's dtype) into t.
    IndexedTensor& operator=(const Tensor& value) &&;
    IndexedTensor& operator=(const IndexedTensor& value) &&;
    IndexedTensor& operator=(Scalar value) &&;
    template <class T> IndexedTensor& operator=(T&&) & {
        static_assert(always_false<T>,
                      "assigning to a named t[i] / t.index(...) handle would only rebind it: write "
                      "`r.copy_(v)` to write into the tensor it came from, or hold it as `Tensor r` to rebind");
        return *this;
    }

    /// The in-place ops of Tensor, written into the tensor this came from (see the class).
    const IndexedTensor& add_(const Tensor& other) const;
    const IndexedTensor& add_(const Tensor& other, Scalar alpha) const;
    const IndexedTensor& add_(Scalar other) const;
    const IndexedTensor& sub_(const Tensor& other) const;
    const IndexedTensor& sub_(const Tensor& other, Scalar alpha) const;
    const IndexedTensor& sub_(Scalar other) const;
    const IndexedTensor& mul_(const Tensor& other) const;
    const IndexedTensor& mul_(Scalar other) const;
    const IndexedTensor& div_(const Tensor& other) const;
    const IndexedTensor& div_(Scalar other) const;
    const IndexedTensor& masked_fill_(const Tensor& mask, Scalar value) const;
    const IndexedTensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt) const;
    const IndexedTensor& clamp_min_(Scalar min) const;
    const IndexedTensor& clamp_max_(Scalar max) const;
    const IndexedTensor& copy_(const Tensor& src) const;
    const IndexedTensor& zero_() const;
    const IndexedTensor& fill_(Scalar value) const;
    const IndexedTensor& uniform_(double from = 0.0, double to = 1.0, Generator& gen = default_generator()) const;
    const IndexedTensor& normal_(double mean = 0.0, double std = 1.0, Generator& gen = default_generator()) const;
    const IndexedTensor& bernoulli_(double p = 0.5, Generator& gen = default_generator()) const;
    const IndexedTensor& bernoulli_(const Tensor& p, Generator& gen = default_generator()) const;
    const IndexedTensor& index_put_(const std::vector<TensorIndex>& indices, const Tensor& value,
                                    bool accumulate = false) const;
    const IndexedTensor& index_put_(const std::vector<TensorIndex>& indices, Scalar value,
                                    bool accumulate = false) const;
    const IndexedTensor& scatter_(long axis, const Tensor& index, const Tensor& src) const;
    const IndexedTensor& scatter_(long axis, const Tensor& index, Scalar value) const;
    const IndexedTensor& scatter_add_(long axis, const Tensor& index, const Tensor& src) const;

    /// Indexing again keeps the chain: t[0][1] = 5 writes into t.
    template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
    IndexedTensor operator[](I i) const;
    IndexedTensor index(const std::vector<TensorIndex>& indices) const;

    /// Reading is as Tensor's; writing through a pointer or set_data would miss t (see the class).
    template <class T> const T* data_ptr() const { return Tensor::data_ptr<T>(); }
    template <class T> T* data_ptr() {
        static_assert(always_false<T>,
                      "data_ptr() on t[i] / t.index(...) hands out a copy's storage, so a write through it would "
                      "not reach t: read with const_data_ptr(), write with index_put_, copy_ or an in-place op");
        return nullptr;
    }
    template <class T> T* mutable_data_ptr() const {
        static_assert(always_false<T>,
                      "mutable_data_ptr() on t[i] / t.index(...) hands out a copy's storage, so a write through it "
                      "would not reach t: write with index_put_, copy_ or an in-place op");
        return nullptr;
    }
    template <class T = void> void set_data(const Tensor&) const {
        static_assert(always_false<T>,
                      "set_data() on t[i] / t.index(...) would replace a copy's values only: write into t with "
                      "copy_(v) (or t.index_put_(...))");
    }

private:
    friend class Tensor;
    IndexedTensor(Tensor values, Tensor base, std::vector<TensorIndex> indices);
    IndexedTensor(Tensor values, std::shared_ptr<const IndexedTensor> parent, std::vector<TensorIndex> indices);
    // Refuses a write into a leaf that requires grad (the tensor at the root of the chain, t
    // for t[0][1]) while gradients are recorded, before anything is written.
    void check_root(const char* op) const;
    // Runs `write(base)` on what this handle indexes: t itself, or for t[0][1] the part that
    // t[0] stands for, read from t and written back into it.
    void write_base(const char* op, const std::function<void(const Tensor& base)>& write) const;
    // An in-place op `f` on a fresh read of this part, written back into the base; when `keep`,
    // this handle then holds the values written.
    const IndexedTensor& update(const char* op, const std::function<void(const Tensor& part)>& f,
                                bool keep = true) const;

    Tensor m_base;                                  // what the indices pick from, or
    std::shared_ptr<const IndexedTensor> m_parent;  // the IndexedTensor they pick from (t[0][1])
    std::vector<TensorIndex> m_indices;
};

template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int>>
IndexedTensor Tensor::operator[](I i) const {
    const long k = checked_index("index", i);
    return IndexedTensor(select_index(k), *this, {TensorIndex(k)});
}

template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int>>
IndexedTensor IndexedTensor::operator[](I i) const {
    const long k = checked_index("index", i);
    return IndexedTensor(select_index(k), std::make_shared<const IndexedTensor>(*this), {TensorIndex(k)});
}

// --- operators as torch (ops_elementwise.cpp) -------------------------------------------
//
// Arithmetic and comparisons broadcast as numpy and promote their operands' dtypes as torch
// does (see result_type): int64 + float32 → float32, float32 with float64 → float64, bool
// promotes, int64 / int64 → float32, and any `-` with a bool operand throws, as in torch.
// Comparisons give bool tensors without gradient. A number on either side is a Scalar.


/// The dtype torch gives `a op b` (torch.result_type): the highest category (bool < integer <
/// floating) wins; within one, the wider type. Tensors with dimensions outrank 0-d tensors,
/// which outrank Scalars, unless the lower one is of a higher category: float32 (2,) with a 0-d
/// float64 gives float32, int64 (2,) with a 0-d float64 gives float64, int64 with 2.5 float32.
Dtype result_type(const Tensor& a, const Tensor& b);
Dtype result_type(const Tensor& a, const Scalar& s);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, Scalar s);
Tensor operator-(const Tensor& a, Scalar s);
Tensor operator*(const Tensor& a, Scalar s);
Tensor operator/(const Tensor& a, Scalar s);
Tensor operator+(Scalar s, const Tensor& a);
Tensor operator-(Scalar s, const Tensor& a);
Tensor operator*(Scalar s, const Tensor& a);
Tensor operator/(Scalar s, const Tensor& a);
/// logical_not for bool, bitwise not for int64 (torch's ~); floats throw.
Tensor operator~(const Tensor& a);
/// torch's `&`, `|`, `^`: logical for two bool masks (`(x > 0) & valid`), bitwise for int64
/// (a bool operand counting as 0 and 1); floats throw.
Tensor operator&(const Tensor& a, const Tensor& b);
Tensor operator|(const Tensor& a, const Tensor& b);
Tensor operator^(const Tensor& a, const Tensor& b);

Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, Scalar s);
Tensor operator!=(const Tensor& a, Scalar s);
Tensor operator<(const Tensor& a, Scalar s);
Tensor operator<=(const Tensor& a, Scalar s);
Tensor operator>(const Tensor& a, Scalar s);
Tensor operator>=(const Tensor& a, Scalar s);
Tensor operator==(Scalar s, const Tensor& a);
Tensor operator!=(Scalar s, const Tensor& a);
Tensor operator<(Scalar s, const Tensor& a);
Tensor operator<=(Scalar s, const Tensor& a);
Tensor operator>(Scalar s, const Tensor& a);
Tensor operator>=(Scalar s, const Tensor& a);

/// In place: a += b is a.add_(b), and so on (see the in-place ops of Tensor): every handle on a
/// sees the new values, a's version() is bumped, and with gradients recorded the op is recorded
/// in the graph (a leaf that requires grad is refused, as in torch).
const Tensor& operator+=(const Tensor& a, const Tensor& b);
const Tensor& operator-=(const Tensor& a, const Tensor& b);
const Tensor& operator*=(const Tensor& a, const Tensor& b);
const Tensor& operator/=(const Tensor& a, const Tensor& b);
const Tensor& operator+=(const Tensor& a, Scalar s);
const Tensor& operator-=(const Tensor& a, Scalar s);
const Tensor& operator*=(const Tensor& a, Scalar s);
const Tensor& operator/=(const Tensor& a, Scalar s);
/// On t[i] or t.index(...), the same written into t (see IndexedTensor).
inline const IndexedTensor& operator+=(const IndexedTensor& a, const Tensor& b) { return a.add_(b); }
inline const IndexedTensor& operator-=(const IndexedTensor& a, const Tensor& b) { return a.sub_(b); }
inline const IndexedTensor& operator*=(const IndexedTensor& a, const Tensor& b) { return a.mul_(b); }
inline const IndexedTensor& operator/=(const IndexedTensor& a, const Tensor& b) { return a.div_(b); }
inline const IndexedTensor& operator+=(const IndexedTensor& a, Scalar s) { return a.add_(s); }
inline const IndexedTensor& operator-=(const IndexedTensor& a, Scalar s) { return a.sub_(s); }
inline const IndexedTensor& operator*=(const IndexedTensor& a, Scalar s) { return a.mul_(s); }
inline const IndexedTensor& operator/=(const IndexedTensor& a, Scalar s) { return a.div_(s); }

/// Throws unless t is defined with `dims` axes, for ops and layers checking their arguments:
/// "<who>: <arg> must be 3-D (batch, length, features), got shape (2, 3)" (`layout` in brackets).
void check_dims(const char* who, const char* arg, const Tensor& t, std::size_t dims, const char* layout);

// --- gradient mode ----------------------------------------------------------------------

/// Whether ops record the graph on this thread (true unless a NoGradGuard is alive).
bool grad_enabled();

/// While alive, ops on this thread record no graph (as torch::NoGradGuard): for optimiser
/// steps and evaluation. Nests; restores the previous mode on destruction.
class NoGradGuard {
public:
    NoGradGuard();
    ~NoGradGuard();
    NoGradGuard(const NoGradGuard&) = delete;
    NoGradGuard& operator=(const NoGradGuard&) = delete;

private:
    bool m_previous;
};

/// Sets whether ops record the graph on this thread for its lifetime, then restores the
/// previous mode (torch::AutoGradMode): AutoGradMode(true) turns recording back on inside a
/// NoGradGuard, for code that must differentiate there.
class AutoGradMode {
public:
    explicit AutoGradMode(bool enabled);
    ~AutoGradMode();
    AutoGradMode(const AutoGradMode&) = delete;
    AutoGradMode& operator=(const AutoGradMode&) = delete;

private:
    bool m_previous;
};

/// Anomaly detection (as torch.autograd.set_detect_anomaly), off by default, per thread.
/// While on, the first NaN or Inf an op produces throws xgrad::Error naming the op: in
/// forward, when the op's result is made; in backward, when an op's backward hands a
/// gradient to one of its inputs ("log backward: produced nan in the gradient for an input
/// of shape (2, 3)"). It scans every result, so it is for debugging, not for training runs;
/// when off it costs one thread-local flag test per op.
void set_detect_anomaly(bool on);
bool detect_anomaly_enabled();

/// Turns anomaly detection on (or off) for its lifetime, then restores the previous mode.
class DetectAnomalyGuard {
public:
    explicit DetectAnomalyGuard(bool on = true);
    ~DetectAnomalyGuard();
    DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
    DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

private:
    bool m_previous;
};

// --- printing ---------------------------------------------------------------------------

/// PyTorch-style text: values (summarised past 1000 elements), shape, dtype, and the op
/// that made it or requires_grad for a leaf:
///   tensor([[1.0000, 2.0000]], shape=(1, 2), dtype=float32, op=<mul>)
std::string to_string(const Tensor& t);
std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace xgrad

/// `fmt::print("{}", t.shape())` prints `[2, 3]` (a 0-d shape `[]`): the list torch.Size shows
/// and what fmt/ranges.h prints for the same vector. Error messages keep "(2, 3)" (shape_str).
template <>
struct fmt::formatter<xgrad::Shape> : fmt::formatter<std::string_view> {
    template <class Ctx>
    auto format(const xgrad::Shape& s, Ctx& ctx) const {
        std::string out = "[";
        for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
        out += "]";
        return fmt::formatter<std::string_view>::format(out, ctx);
    }
};

/// fmt::print("{}", t.dtype()) prints "float32", as dtype_name.
template <>
struct fmt::formatter<xgrad::Dtype> : fmt::formatter<std::string_view> {
    template <class Ctx>
    auto format(xgrad::Dtype d, Ctx& ctx) const {
        return fmt::formatter<std::string_view>::format(xgrad::dtype_name(d), ctx);
    }
};

template <>
struct fmt::formatter<xgrad::Tensor> : fmt::formatter<std::string> {
    template <class Ctx>
    auto format(const xgrad::Tensor& t, Ctx& ctx) const {
        return fmt::formatter<std::string>::format(xgrad::to_string(t), ctx);
    }
};

template <>
struct fmt::formatter<xgrad::IndexedTensor> : fmt::formatter<xgrad::Tensor> {};

#undef XGRAD_ELEMENT_TYPES_MESSAGE
