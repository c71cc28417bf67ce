#pragma once
/// Tensor: the handle users hold. A cheap-to-copy pointer to a Node: where its elements sit in a
/// storage (shape, strides, offset), the gradient and the link back into the graph that made it.
///
/// Copies of the handle alias: `Tensor b = a;` shares a's data, gradient and graph position, as
/// a second Python name for the same torch.Tensor would, and so does every Tensor an accessor
/// documents as the tensor itself (grad(), a module's parameters). As in torch, the movement
/// ops return views that share this tensor's storage, so a write through one lands here (and
/// the reverse): view, reshape (when the strides allow), transpose, permute, t, narrow, select,
/// t[i], index() with integers, slices, None and Ellipsis, split, chunk, unbind, unsqueeze,
/// squeeze, expand, diagonal, unfold, as_strided, flatten, detach. Every other op's result owns
/// new contiguous storage, and so do clone(), contiguous() of a non-contiguous tensor and
/// index() with a tensor or list (advanced indexing). A view keeps all of its base's storage
/// alive: clone() a small piece of a large tensor to let the rest go.
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
    /// A new leaf cut from the graph that shares this tensor's storage (a view, as torch's
    /// detach): a write into either is seen by both, and by the version counter.
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
    /// Where element (0, ..., 0) sits in the storage, T the tensor's own type (checked): for a
    /// contiguous tensor numel() values in row-major order follow; a view's elements are
    /// strides() apart (in elements) from there, in its base's buffer, as torch's. As LibTorch's accessors:
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
    /// A view with another shape (one size may be -1), as torch's view: refused when the strides
    /// cannot express it (a transposed tensor flattened), where reshape copies instead.
    Tensor view(const IntList& shape) const;
    template <class... I, std::enable_if_t<(sizeof...(I) > 0) && (is_index_v<I> && ...), int> = 0>
    Tensor view(I... sizes) const { return view(IntList{sizes...}); }
    /// flatten(start, end): axes start..end merged into one (a view when the strides allow).
    Tensor flatten(long start_dim = 0, long end_dim = -1) const;
    /// unflatten(dim, sizes): axis dim split into `sizes` (one may be -1); a view.
    Tensor unflatten(long dim, const IntList& sizes) const;
    Tensor permute(const IntList& axes) const;
    template <class... I, std::enable_if_t<(sizeof...(I) > 0) && (is_index_v<I> && ...), int> = 0>
    Tensor permute(I... axes) const { return permute(IntList{axes...}); }
    /// Broadcasts to `shape` (expand in ops.hpp; -1 keeps an axis' size, as torch).
    Tensor expand(const IntList& shape) const;
    /// Tiled along each axis (repeat in ops.hpp: torch's x.repeat(2, 1)).
    Tensor repeat(const IntList& repeats) const;
    template <class... I, std::enable_if_t<(sizeof...(I) > 0) && (is_index_v<I> && ...), int> = 0>
    Tensor repeat(I... repeats) const { return repeat(IntList{repeats...}); }
    /// length elements from start along axis (torch's narrow; a view).
    Tensor narrow(long axis, long start, long length) const;
    /// The sub-tensor at index along axis, that axis removed (torch's select; a view).
    Tensor select(long axis, long index) const;
    /// Axes a and b swapped (a view).
    Tensor transpose(long a, long b) const;
    /// torch's t(): a 2-D tensor transposed, a 0-D or 1-D one itself (a view).
    Tensor t() const;
    /// The pieces along axis with that axis removed (torch's unbind; views).
    std::vector<Tensor> unbind(long axis = 0) const;
    /// The diagonal of the axes dim1 and dim2 (offset above it when positive, below when
    /// negative), as the last axis: a view (torch's diagonal).
    Tensor diagonal(long offset = 0, long dim1 = 0, long dim2 = 1) const;
    /// Every window of `size` elements `step` apart along `dim`, as a new last axis (torch's
    /// unfold; a view whose windows may share elements).
    Tensor unfold(long dim, long size, long step) const;
    /// The view of this tensor's storage with `size`, `stride` and storage_offset `offset`
    /// (torch's as_strided): refused unless every element lies inside the storage.
    Tensor as_strided(const IntList& size, const IntList& stride, std::optional<std::int64_t> offset = std::nullopt) const;
    /// Pieces along axis (torch's x.split(3, dim), x.split([2, 5], dim), x.chunk(2, dim)), views:
    /// see split and chunk in ops.hpp.
    std::vector<Tensor> split(long split_size, long axis = 0) const;
    std::vector<Tensor> split(const IntList& sizes, long axis = 0) const;
    std::vector<Tensor> chunk(long chunks, long axis = 0) const;
    /// A copy with `value` where mask is true (torch's x.masked_fill(mask, v); masked_fill in
    /// ops.hpp). masked_fill_ below writes into this tensor instead.
    Tensor masked_fill(const Tensor& mask, Scalar value) const;
    /// This tensor itself when is_contiguous(), else a contiguous copy (differentiable), as torch's.
    Tensor contiguous() const;
    /// Whether the elements are in row-major order without gaps (torch's rule: axes of length 1
    /// and empty tensors count as contiguous). Op results always are; views may not be.
    bool is_contiguous() const;
    /// The step between neighbours along each axis, in elements (torch's stride()).
    std::vector<std::int64_t> strides() const;
    std::int64_t stride(long axis) const;
    /// Where element (0, ..., 0) sits in the storage, in elements.
    std::int64_t storage_offset() const;
    /// Whether this tensor is a view of another's storage (torch's _is_view), and that tensor
    /// (torch's _base; undefined for a tensor that is no view).
    bool is_view() const;
    Tensor _base() const;
    /// Whether the two share one storage.
    bool is_alias_of(const Tensor& other) const;
    Tensor unsqueeze(long axis) const;
    Tensor squeeze(long axis) const;
    /// Every axis of length 1 removed (a view).
    Tensor squeeze() const;
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
    /// t[i]: the sub-tensor at i along axis 0 (negative i counts from the end), a view, so that
    /// assigning to it and its in-place ops write into t (`t[0] = v`, `t[0][1] = 5`,
    /// `t[0].mul_(2)`, `Tensor r = t[0]; r += 1`). Out of range throws, naming the axis, the
    /// index and the size.
    template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
    Tensor operator[](I i) const {
        return select_index(checked_index("index", i));
    }
    /// LibTorch's t.index({Slice(0, 2), 1, None, Ellipsis}): integers (negative from the end),
    /// Slice(start, stop, step) with None ends, None (a new axis of length 1) and one Ellipsis;
    /// and torch's advanced indices: an int64 tensor or a list `{0, -1}` picks along one axis
    /// (t[:, [-1]] is `t.index({Slice(), {-1}})`, which keeps the axis), a bool mask covers as
    /// many axes as it has and picks where it is true (t[t > 0] is 1-D, t[rows] picks rows).
    /// Advanced indices broadcast together; their result axes replace theirs when they are
    /// adjacent, else come first (numpy's rule; integers are applied first, as torch's). Indices
    /// out of range, or of another dtype, throw naming the axis, the index and the size.
    /// With only integers, slices, None and Ellipsis the result is a view (a write through it
    /// lands in t: `t.index({Slice(), 0}) = v`); with a tensor or list index it is a copy, as
    /// torch's, whose gradient goes back to the picked elements (repeated picks sum), and a
    /// write into it stays in it: write into t with index_put_ (torch's t[mask] = v).
    Tensor index(const std::vector<TensorIndex>& indices) const;
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
    // The typed accessors' bodies, instantiated for the element types only (tensor.cpp).
    template <class T> T item_as() const;
    template <class T> std::vector<T> to_vector_as() const;
    template <class T> T* grad_ptr_as();
    template <class T> const T* grad_ptr_as() const;
    template <class T> T* mutable_grad_ptr_as();
    template <class T> T* data_ptr_as();
    template <class T> const T* const_data_ptr_as() const;
    template <class T> T* mutable_data_ptr_as() const;
    Tensor select_index(long i) const;  // t[i]
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
/// The same on a temporary: `x[0] += 1` and `x.t() *= 2` write through the view into x. On the
/// copy that index() with a tensor, list or mask index returns it is refused, as is assigning
/// to one (`x.index({mask}) = v`): the write would land in the copy alone; index_put_ writes x.
const Tensor& operator+=(Tensor&& a, const Tensor& b);
const Tensor& operator-=(Tensor&& a, const Tensor& b);
const Tensor& operator*=(Tensor&& a, const Tensor& b);
const Tensor& operator/=(Tensor&& a, const Tensor& b);
const Tensor& operator+=(Tensor&& a, Scalar s);
const Tensor& operator-=(Tensor&& a, Scalar s);
const Tensor& operator*=(Tensor&& a, Scalar s);
const Tensor& operator/=(Tensor&& a, Scalar s);
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

#undef XGRAD_ELEMENT_TYPES_MESSAGE
