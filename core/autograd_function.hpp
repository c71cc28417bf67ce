#pragma once
/// Custom autograd functions, as LibTorch's torch::autograd::Function: an op of your own with a
/// backward you write, which the engine runs like any built-in op's.
///
///     struct Exp : xgrad::autograd::Function<Exp> {
///         static constexpr const char* name = "Exp";   // optional: errors and anomaly mode say it
///         static Tensor forward(AutogradContext* ctx, const Tensor& x) {
///             Tensor y = exp(x);
///             ctx->save_for_backward({y});
///             return y;
///         }
///         static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
///             Tensor y = ctx->get_saved_variables()[0];
///             return {grad_outputs[0] * y};
///         }
///     };
///     Tensor y = Exp::apply(x);
///
/// forward(ctx, args...) takes any arguments: Tensor, std::vector<Tensor> (each element is an
/// input), std::optional<Tensor> (an input when it holds a defined tensor) and anything else
/// (numbers, strings, masks as plain values), which is passed through and not differentiated.
/// It runs with gradients off (nothing it does is recorded) and returns a Tensor or a
/// std::vector<Tensor>; apply returns the same. An output that is not floating-point never
/// requires grad. An input returned as it is (not marked dirty) comes back as a copy, the
/// function's own output (torch returns a view; xgrad has none), and so does an output returned
/// twice.
///
/// backward(ctx, grad_outputs) receives one gradient per output of forward and returns one per
/// argument of forward, as LibTorch counts them: a std::vector<Tensor> argument counts once per
/// element; an undefined Tensor() where the argument is not a tensor or its input needs no
/// gradient (trailing undefined extras are allowed). Each gradient must have its input's shape
/// and dtype: a wrong count, shape or dtype throws an xgrad::Error naming the function. An
/// output no gradient reached gets zeros of its shape, or an undefined tensor after
/// ctx->set_materialize_grads(false).
///
/// backward runs as every op's gradient formula does: with gradients off in a first-order
/// backward, and on under backward(create_graph = true) and autograd::grad(create_graph), so a
/// backward written in differentiable xgrad ops is itself differentiable (gradgradcheck passes)
/// and a second derivative flows through the tensors it saved. A backward on raw arrays is fine
/// for first order, but its result has no graph.
///
/// A backward that is not written in differentiable ops (raw arrays, a library call) should say
/// so with `static constexpr bool once_differentiable = true;` (torch's @once_differentiable):
/// it then runs with gradients off even under create_graph, and its gradients carry an op that
/// throws, naming the function, if anything tries to differentiate them again, instead of
/// giving a silently wrong (zero) second derivative.
///
/// The function's name (a `static constexpr const char* name` member, else the class's name
/// without its namespaces) is the op name: y.op_name(), anomaly mode ("Exp backward: produced
/// nan ..."), and every error about the function.
///
/// Interplay with the rest of xgrad:
///  - NoGradGuard (or no input requiring grad): forward runs, nothing is recorded, the outputs
///    are plain tensors, the context is dropped.
///  - register_hook on an output sees its gradient before backward does, and may replace it.
///  - Anomaly mode checks what the function produces, naming it: its outputs (the ops inside
///    forward are not checked one by one) and the gradients its backward returns.
///  - Autocast: forward runs under the autocast state around apply, as torch runs a custom
///    forward (without custom_fwd): a product inside it rounds to bfloat16 under an
///    AutocastGuard. backward runs under the state around backward(), as torch's does on the
///    CPU; the usual place for backward() is outside the guard, so it runs in float32. To keep
///    a forward in float32 inside an autocast region (torch's custom_fwd(cast_inputs=float32)),
///    open AutocastGuard(kBFloat16, AutocastOptions{false}) inside it.
///  - Data parallelism: the function's gradients reach the parameters' .grad() like any op's,
///    through the same accumulation and post-accumulate hooks DistributedDataParallel uses.
///
/// Memory: the context lives as long as the graph through the function (freed by a backward
/// without retain_graph, or with the outputs). Saved inputs are held; a saved output is not
/// (that would be a reference cycle), except that a function with several outputs keeps a copy
/// of each output it saved, for a backward reached through another output after that one is gone.
///
/// This header does not include xtensor or the engine's internals: the machinery is in
/// autograd_function.cpp, behind detail::FunctionCall.
#include <any>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/tensor.hpp"

namespace xgrad::autograd {

/// LibTorch's names for a tensor and a list of them, so ported code reads the same.
using Variable = Tensor;
using variable_list = std::vector<Tensor>;

namespace detail {
template <class T> struct is_vector : std::false_type {};
template <class E, class A> struct is_vector<std::vector<E, A>> : std::true_type {};
}  // namespace detail

/// A non-tensor value kept for backward in AutogradContext::saved_data (where LibTorch keeps an
/// at::IValue): a bool, an integer (kept as int64), a floating-point number (kept as double), a
/// string, a Tensor, a list of integers or of numbers, or a value of any other copyable type.
///     ctx->saved_data["scale"] = 2.5;            ctx->saved_data["scale"].to_double()
///     ctx->saved_data["axes"] = std::vector<long>{0, 2};   ...["axes"].to_int_list()
///     ctx->saved_data["opts"] = MyOptions{...};  ...["opts"].get<MyOptions>()
/// Reading it as another kind throws an xgrad::Error naming both kinds.
class SavedValue {
public:
    SavedValue() = default;
    template <class T, std::enable_if_t<!std::is_same_v<std::decay_t<T>, SavedValue>, int> = 0>
    SavedValue(T&& value) : m_value(normalize(std::forward<T>(value))) {}  // NOLINT: implicit, as IValue

    bool has_value() const { return m_value.has_value(); }
    bool is_bool() const;
    bool is_int() const;
    bool is_double() const;
    bool is_string() const;
    bool is_tensor() const;
    bool to_bool() const;
    std::int64_t to_int() const;
    /// A floating-point value, or an integer converted.
    double to_double() const;
    const std::string& to_string() const;
    Tensor to_tensor() const;
    std::vector<std::int64_t> to_int_list() const;
    std::vector<double> to_double_list() const;
    /// The value as T: any arithmetic T converts from the stored number; other types must be
    /// the type stored (as given, without references and const).
    template <class T> T get() const {
        if constexpr (std::is_same_v<T, bool>)
            return to_bool();
        else if constexpr (std::is_integral_v<T>)
            return static_cast<T>(to_int());
        else if constexpr (std::is_floating_point_v<T>)
            return static_cast<T>(to_double());
        else {
            const T* p = std::any_cast<T>(&m_value);
            if (!p) wrong_kind(typeid(T));
            return *p;
        }
    }
    /// The stored value itself.
    const std::any& any() const { return m_value; }

private:
    template <class T> static std::any normalize(T&& v) {
        using D = std::decay_t<T>;
        if constexpr (std::is_same_v<D, bool>)
            return std::any(static_cast<bool>(v));
        else if constexpr (std::is_integral_v<D>)
            return std::any(static_cast<std::int64_t>(v));
        else if constexpr (std::is_floating_point_v<D>)
            return std::any(static_cast<double>(v));
        else if constexpr (std::is_convertible_v<T&&, std::string> && !std::is_same_v<D, std::nullptr_t>)
            return std::any(std::string(std::forward<T>(v)));
        else if constexpr (detail::is_vector<D>::value) {
            using E = typename D::value_type;
            if constexpr (std::is_integral_v<E> && !std::is_same_v<E, bool>)
                return std::any(std::vector<std::int64_t>(v.begin(), v.end()));
            else if constexpr (std::is_floating_point_v<E>)
                return std::any(std::vector<double>(v.begin(), v.end()));
            else
                return std::any(D(std::forward<T>(v)));
        } else
            return std::any(D(std::forward<T>(v)));
    }
    [[noreturn]] void wrong_kind(const std::type_info& asked) const;
    std::any m_value;
};

namespace detail {
class FunctionCall;
}

/// What forward and backward of a custom Function share (LibTorch's AutogradContext). apply
/// makes one per call; it lives as long as the graph that needs it.
class AutogradContext {
public:
    AutogradContext(const AutogradContext&) = delete;
    AutogradContext& operator=(const AutogradContext&) = delete;
    ~AutogradContext();

    /// Non-tensor values for backward. Tensors go through save_for_backward, which checks them
    /// for in-place writes and keeps outputs without a reference cycle; an output of the
    /// function kept here is refused, since it would keep its own graph alive forever.
    std::unordered_map<std::string, SavedValue> saved_data;

    /// Keeps tensors for backward (inputs, outputs, or anything forward made): call it at most
    /// once, inside forward. Each is version-checked as a built-in op's saved tensors are:
    /// get_saved_variables refuses one written in place since forward returned, naming the
    /// function. A saved output is kept without owning it (no reference cycle through the
    /// graph), and comes back in backward with its graph, so a second derivative flows through it.
    void save_for_backward(std::vector<Tensor> to_save);
    /// In backward: the tensors save_for_backward kept, in its order (undefined where it was
    /// given an undefined one). Throws, naming the function, if one was written in place after
    /// forward, or outside backward.
    std::vector<Tensor> get_saved_variables() const;

    /// Says forward changed these inputs in place (an in-place custom op), as torch's
    /// mark_dirty: each must be an input, written by forward (under its no-grad mode, e.g. `x +=
    /// 1.0`), and returned as an output. The tensor's history moves onto this function (ops
    /// that read it before keep their gradient path to its old value, and are refused at
    /// backward if they saved it); its version is bumped. As in torch, an input that is a leaf
    /// requiring grad is refused while gradients are recorded (forward has written it by then).
    void mark_dirty(const std::vector<Tensor>& inputs);
    /// Says these outputs are not differentiable (indices, masks): they never require grad, and
    /// backward receives zeros (or undefined, see set_materialize_grads) for them. Outputs that
    /// are not floating-point are never differentiable anyway.
    void mark_non_differentiable(const std::vector<Tensor>& outputs);
    /// Whether backward receives zeros (true, the default) or undefined tensors for outputs no
    /// gradient reached.
    void set_materialize_grads(bool value);

    /// Whether tensor input `index` needs a gradient (it requires grad and gradients are being
    /// recorded), to skip work in backward; also valid in forward. As in LibTorch, `index`
    /// counts tensor inputs only (an std::vector<Tensor> argument once per element), not the
    /// other arguments; backward's result counts every argument.
    bool needs_input_grad(std::size_t index) const;
    /// Whether any of these tensor inputs needs a gradient.
    bool needs_input_grad(std::initializer_list<std::size_t> indices) const;

    /// The function's name, as errors say it.
    const char* name() const;

private:
    friend class detail::FunctionCall;
    struct State;
    AutogradContext();
    std::unique_ptr<State> m_state;
};

namespace detail {

using BackwardFn = std::vector<Tensor> (*)(AutogradContext*, std::vector<Tensor>);

/// One call of a custom Function, for Function<Derived>::apply: the type-erased part, so that
/// this header needs no engine internals. Register the arguments in order, run forward with
/// context(), then hand its outputs to finish, which records the graph.
class FunctionCall {
public:
    FunctionCall(const char* name, BackwardFn backward, bool once_differentiable = false);
    ~FunctionCall();
    FunctionCall(const FunctionCall&) = delete;
    FunctionCall& operator=(const FunctionCall&) = delete;
    void add_tensor(const Tensor& t);
    void add_other();
    AutogradContext* context() const { return m_ctx.get(); }
    std::vector<Tensor> finish(std::vector<Tensor> outputs);

private:
    std::shared_ptr<AutogradContext> m_ctx;
};

inline void add_argument(FunctionCall& call, const Tensor& t) { call.add_tensor(t); }
inline void add_argument(FunctionCall& call, const std::vector<Tensor>& ts) {
    for (const Tensor& t : ts) call.add_tensor(t);
}
inline void add_argument(FunctionCall& call, const std::optional<Tensor>& t) {
    if (t && t->defined())
        call.add_tensor(*t);
    else
        call.add_other();
}
template <class T> void add_argument(FunctionCall& call, const T&) { call.add_other(); }

template <class T, class = void> struct has_name : std::false_type {};
template <class T>
struct has_name<T, std::enable_if_t<std::is_convertible_v<decltype(T::name), const char*>>> : std::true_type {};

/// The class's name without its namespaces and enclosing functions ("Exp", "Scale<double>"):
/// a string that lives as long as the program.
const char* readable_type_name(const std::type_info& type);

template <class T, class = void> struct has_once_differentiable : std::false_type {};
template <class T>
struct has_once_differentiable<T, std::enable_if_t<std::is_convertible_v<decltype(T::once_differentiable), bool>>>
    : std::true_type {};
template <class D> constexpr bool once_differentiable() {
    if constexpr (has_once_differentiable<D>::value)
        return D::once_differentiable;
    else
        return false;
}

template <class D> const char* function_name() {
    if constexpr (has_name<D>::value)
        return D::name;
    else
        return readable_type_name(typeid(D));
}

template <class D> std::vector<Tensor> call_backward(AutogradContext* ctx, std::vector<Tensor> grads) {
    auto result = D::backward(ctx, std::move(grads));
    if constexpr (std::is_same_v<std::decay_t<decltype(result)>, Tensor>)
        return {std::move(result)};
    else
        return std::vector<Tensor>(std::move(result));
}

template <class X, class... Args>
using forward_t = std::decay_t<decltype(X::forward(std::declval<AutogradContext*>(), std::declval<Args>()...))>;

}  // namespace detail

/// Base of a custom function: `struct MyOp : Function<MyOp>` with static forward and backward
/// (see the top of this header), called as MyOp::apply(args...).
template <class Derived>
struct Function {
    /// Runs Derived::forward(ctx, args...) and, when gradients are recorded and a tensor input
    /// requires grad, records it in the graph with Derived::backward as its gradient.
    template <class X = Derived, class... Args>
    static auto apply(Args&&... args) -> std::enable_if_t<std::is_same_v<X, Derived>, detail::forward_t<X, Args...>> {
        using Result = detail::forward_t<X, Args...>;
        static_assert(std::is_same_v<Result, Tensor> || std::is_same_v<Result, std::vector<Tensor>>,
                      "a custom Function's forward returns a Tensor or a std::vector<Tensor>");
        detail::FunctionCall call(detail::function_name<Derived>(), &detail::call_backward<Derived>,
                                  detail::once_differentiable<Derived>());
        (detail::add_argument(call, args), ...);
        Result out;
        {
            NoGradGuard no_grad;
            DetectAnomalyGuard whole(false);  // anomaly mode judges the function's outputs, in finish
            out = Derived::forward(call.context(), std::forward<Args>(args)...);
        }
        if constexpr (std::is_same_v<Result, Tensor>)
            return call.finish({std::move(out)})[0];
        else
            return call.finish(std::move(out));
    }
};

}  // namespace xgrad::autograd
