// In-place ops (add_, mul_, copy_, fill_, ...), the compound operators and rvalue assignment.
// Each computes its result out of place with the ops it stands for; with a graph to record it
// becomes the tensor's new value and history (record_in_place), otherwise the values are
// copied into the tensor's own storage.
#include <algorithm>

#include "core/creation.hpp"
#include "core/fill_value.hpp"
#include "core/node.hpp"
#include "core/ops.hpp"
#include "core/ops_util.hpp"
#include "core/views.hpp"

namespace xgrad {

void check_in_place_leaf(const char* op, const Tensor& t) {
    if (grad_enabled() && t.requires_grad() && t.is_leaf())
        throw Error(fmt::format("{}: a leaf Variable that requires grad is being used in an in-place operation "
                                "(refused while gradients are recorded, as in torch); do it under NoGradGuard, or "
                                "on a clone()",
                                op));
}

namespace {

using Compute = std::function<Tensor(const Tensor& self, const std::vector<Tensor>& others)>;

void check_in_place_defined(const char* op, const Tensor& t, const char* arg) {
    if (!t.defined())
        throw Error(fmt::format("{}: {} is an undefined tensor{}", op, arg,
                                std::string_view(arg) == "the tensor written to"
                                    ? " (p.grad() is undefined before a backward reaches p: set one with set_grad)"
                                    : ""));
}

// The values `r` copied into t's storage (same shape and dtype; at a view's positions in its
// base), as a write: every handle, every view and any pointer into the storage sees them.
void write_values(const char* op, const Tensor& t, const Tensor& r) { write_into_storage(op, t, r); }

// Runs in-place op `op` on self: `compute(self, others)` gives the new value out of place (of a
// shape that must be self's, of a dtype cast back to self's, checked by can_cast when `checked`).
const Tensor& in_place(const char* op, const Tensor& self, std::vector<Tensor> others, bool checked,
                       const Compute& compute) {
    check_in_place_defined(op, self, "the tensor written to");
    check_no_internal_overlap(op, self);
    check_view_write(op, self);
    for (const Tensor& o : others) {
        check_in_place_defined(op, o, "the operand");
        if (!broadcastable_to(o.shape(), self.shape()))
            throw Error(fmt::format("{}: an operand of shape {} cannot be broadcast to the shape {} of the tensor written "
                                    "to (an in-place op keeps its shape)",
                                    op, shape_str(o.shape()), shape_str(self.shape())));
    }
    auto result = [&](const Tensor& old, const std::vector<Tensor>& operands) {
        Tensor r = compute(old, operands);
        if (checked && !can_cast(r.dtype(), old.dtype()))
            throw Error(fmt::format("{}: result type {} can't be cast to the desired output type {} (as in torch)", op,
                                    dtype_name(r.dtype()), dtype_name(old.dtype())));
        if (r.shape() != old.shape())
            throw Error(fmt::format("{}: output with shape {} doesn't match the broadcast shape {}", op,
                                    shape_str(old.shape()), shape_str(r.shape())));
        return cast(r, old.dtype());
    };
    const bool record = grad_enabled() && (self.requires_grad() || std::any_of(others.begin(), others.end(), [](const Tensor& t) {
                                               return t.requires_grad();
                                           }));
    if (record) {
        check_in_place_leaf(op, self);
        return record_in_place(op, self, std::move(others), result);
    }
    Tensor r;
    {
        NoGradGuard no_grad;
        r = result(self, others);
    }
    write_values(op, self, r);
    return self;
}

// A 0-d tensor holding s in its own kind: float64, int64 (all 64 bits) or bool.
Tensor scalar_tensor(Scalar s) {
    if (s.kind() == kFloat64) return full(Shape{}, s.to_double(), kFloat64);
    const Tensor v = from_vector(std::vector<std::int64_t>{s.to_int64()}, Shape{});
    return s.kind() == kBool ? cast(v, kBool) : v;
}

// dst's new value src: src broadcast to dst's shape and cast to its dtype, as an op whose
// gradient goes to src (summed back to its shape and dtype) and none to dst's old value.
Tensor copy_into(const Tensor& dst, const Tensor& src) {
    constexpr const char* op = "copy_";
    if (!broadcastable_to(src.shape(), dst.shape()))
        throw Error(fmt::format("{}: src of shape {} cannot be broadcast to the tensor's shape {}", op,
                                shape_str(src.shape()), shape_str(dst.shape())));
    Tensor values;
    {
        NoGradGuard no_grad;
        values = cast(xgrad::expand(src, dst.shape()), dst.dtype());
    }
    return dispatch_all(dst.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> y = xgrad::values<T>(values);
        return make_any_result<T>(
            std::move(y), {dst, src}, op, Formula([](const GradArgs& in) -> std::vector<Tensor> {
                const Tensor& s = in.inputs[1];
                return {in.needs(0) ? zeros_like(in.grad()) : Tensor(),
                        in.needs(1) ? cast(sum_to(in.grad(), s.shape()), s.dtype()) : Tensor()};
            }),
            Saves::none());
    });
}

// torch converts alpha to a floating tensor's dtype, so it must fit as a fill value would (an
// integer tensor refuses a floating alpha through can_cast instead).
void check_alpha(const char* op, const Scalar& alpha, Dtype d) {
    if (is_floating(d)) check_fill_value(op, "alpha", alpha, d);
}

}  // namespace

// --- arithmetic ------------------------------------------------------------------------------

const Tensor& Tensor::add_(const Tensor& other) const {
    return in_place("add_", *this, {other}, true, [](const Tensor& a, const std::vector<Tensor>& o) { return add(a, o[0]); });
}
const Tensor& Tensor::add_(const Tensor& other, Scalar alpha) const {
    return in_place("add_", *this, {other}, true, [alpha](const Tensor& a, const std::vector<Tensor>& o) {
        check_alpha("add_", alpha, a.dtype());
        return add(a, mul(o[0], alpha));
    });
}
const Tensor& Tensor::add_(Scalar other) const {
    return in_place("add_", *this, {}, true, [other](const Tensor& a, const std::vector<Tensor>&) { return add(a, other); });
}
const Tensor& Tensor::sub_(const Tensor& other) const {
    return in_place("sub_", *this, {other}, true, [](const Tensor& a, const std::vector<Tensor>& o) { return sub(a, o[0]); });
}
const Tensor& Tensor::sub_(const Tensor& other, Scalar alpha) const {
    return in_place("sub_", *this, {other}, true, [alpha](const Tensor& a, const std::vector<Tensor>& o) {
        check_alpha("sub_", alpha, a.dtype());
        return sub(a, mul(o[0], alpha));
    });
}
const Tensor& Tensor::sub_(Scalar other) const {
    return in_place("sub_", *this, {}, true, [other](const Tensor& a, const std::vector<Tensor>&) { return sub(a, other); });
}
const Tensor& Tensor::mul_(const Tensor& other) const {
    return in_place("mul_", *this, {other}, true, [](const Tensor& a, const std::vector<Tensor>& o) { return mul(a, o[0]); });
}
const Tensor& Tensor::mul_(Scalar other) const {
    return in_place("mul_", *this, {}, true, [other](const Tensor& a, const std::vector<Tensor>&) { return mul(a, other); });
}
const Tensor& Tensor::div_(const Tensor& other) const {
    return in_place("div_", *this, {other}, true, [](const Tensor& a, const std::vector<Tensor>& o) { return div(a, o[0]); });
}
const Tensor& Tensor::div_(Scalar other) const {
    return in_place("div_", *this, {}, true, [other](const Tensor& a, const std::vector<Tensor>&) { return div(a, other); });
}

// --- selection -------------------------------------------------------------------------------

const Tensor& Tensor::masked_fill_(const Tensor& mask, Scalar value) const {
    return in_place("masked_fill_", *this, {mask}, true, [value](const Tensor& a, const std::vector<Tensor>& o) {
        return xgrad::masked_fill("masked_fill_", a, o[0], value);
    });
}

const Tensor& Tensor::clamp_(std::optional<Scalar> min, std::optional<Scalar> max) const {
    return in_place("clamp_", *this, {}, true,
                    [min, max](const Tensor& a, const std::vector<Tensor>&) { return xgrad::clamp(a, min, max); });
}

const Tensor& Tensor::clamp_min_(Scalar min) const {
    return in_place("clamp_min_", *this, {}, true,
                    [min](const Tensor& a, const std::vector<Tensor>&) { return xgrad::clamp_min(a, min); });
}

const Tensor& Tensor::clamp_max_(Scalar max) const {
    return in_place("clamp_max_", *this, {}, true,
                    [max](const Tensor& a, const std::vector<Tensor>&) { return xgrad::clamp_max(a, max); });
}

// --- writing values --------------------------------------------------------------------------

const Tensor& Tensor::copy_(const Tensor& src) const {
    return in_place("copy_", *this, {src}, false,
                    [](const Tensor& a, const std::vector<Tensor>& o) { return copy_into(a, o[0]); });
}

const Tensor& Tensor::fill_(Scalar value) const {
    return in_place("fill_", *this, {}, false, [value](const Tensor& a, const std::vector<Tensor>&) {
        check_fill_value("fill_", "value", value, a.dtype());
        return copy_into(a, scalar_tensor(value));
    });
}

const Tensor& write_in_place(const char* op, const Tensor& self, const Tensor& values) {
    return in_place(op, self, {}, false,
                    [&values](const Tensor& a, const std::vector<Tensor>&) { return copy_into(a, values); });
}

const Tensor& Tensor::zero_() const {
    return in_place("zero_", *this, {}, false,
                    [](const Tensor& a, const std::vector<Tensor>&) { return copy_into(a, scalar_tensor(Scalar(0))); });
}

namespace {
// A write into a temporary that advanced indexing made would land in the copy alone, as in
// LibTorch, where it is silently lost: refused, naming what writes into the tensor indexed.
const Tensor& written_temporary(const char* how, const Tensor& t) {
    if (t.defined() && t.node().advanced_index)
        throw Error(fmt::format("index: `t.index({{...}}) {} v` with a tensor, list or mask index would write into "
                                "a copy (advanced indexing copies, as torch's), not into t; write "
                                "t.index_put_({{...}}, v) (torch's t[mask] = v), or hold the copy in a named tensor",
                                how));
    return t;
}
}  // namespace

// As torch's setitem (t[0][1] = tensor({5.0})): the value broadcast to this tensor's shape
// after dropping leading axes of length 1, cast to its dtype (index_put_ of the whole).
Tensor& Tensor::operator=(const Tensor& src) && {
    if (!defined() || !src.defined()) copy_(src);  // which names what is undefined
    else written_temporary("=", *this).index_put_({}, src);
    return *this;
}

Tensor& Tensor::operator=(Scalar value) && {
    written_temporary("=", *this).fill_(value);
    return *this;
}

// --- the compound operators --------------------------------------------------------------------

const Tensor& operator+=(Tensor&& a, const Tensor& b) { return written_temporary("+=", a).add_(b); }
const Tensor& operator-=(Tensor&& a, const Tensor& b) { return written_temporary("-=", a).sub_(b); }
const Tensor& operator*=(Tensor&& a, const Tensor& b) { return written_temporary("*=", a).mul_(b); }
const Tensor& operator/=(Tensor&& a, const Tensor& b) { return written_temporary("/=", a).div_(b); }
const Tensor& operator+=(Tensor&& a, Scalar s) { return written_temporary("+=", a).add_(s); }
const Tensor& operator-=(Tensor&& a, Scalar s) { return written_temporary("-=", a).sub_(s); }
const Tensor& operator*=(Tensor&& a, Scalar s) { return written_temporary("*=", a).mul_(s); }
const Tensor& operator/=(Tensor&& a, Scalar s) { return written_temporary("/=", a).div_(s); }

const Tensor& operator+=(const Tensor& a, const Tensor& b) { return a.add_(b); }
const Tensor& operator-=(const Tensor& a, const Tensor& b) { return a.sub_(b); }
const Tensor& operator*=(const Tensor& a, const Tensor& b) { return a.mul_(b); }
const Tensor& operator/=(const Tensor& a, const Tensor& b) { return a.div_(b); }
const Tensor& operator+=(const Tensor& a, Scalar s) { return a.add_(s); }
const Tensor& operator-=(const Tensor& a, Scalar s) { return a.sub_(s); }
const Tensor& operator*=(const Tensor& a, Scalar s) { return a.mul_(s); }
const Tensor& operator/=(const Tensor& a, Scalar s) { return a.div_(s); }

}  // namespace xgrad
