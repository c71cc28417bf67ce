// Draws from distributions given as tensors (sampling.hpp) and the random in-place fills
// (Tensor::uniform_, normal_, bernoulli_). Every argument is checked before the first draw.
#include "core/sampling.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <numeric>

#include "core/arguments.hpp"
#include "core/broadcast.hpp"
#include "core/creation.hpp"
#include "core/dispatch.hpp"
#include "core/node.hpp"
#include "core/ops.hpp"
#include "core/ops_util.hpp"

namespace xgrad {

namespace {

// The dtype a draw for a tensor of dtype d is made in: its own, float32 for bfloat16 (rounded
// after), as torch's kernels draw in float for bfloat16.
Dtype draw_dtype(Dtype d) { return d == kBFloat16 ? kFloat32 : d; }

void check_floating_tensor(const char* op, const Tensor& t, const char* arg) {
    if (!is_floating(t.dtype()))
        throw Error(fmt::format("{}: expected a floating-point {} (float32, float64 or bfloat16), got {} (as torch)",
                                op, arg, dtype_name(t.dtype())));
}

// A number argument written into a tensor of dtype d: finite, and within d's range (a float32
// tensor cannot hold 1e300; torch: "from is out of bounds for float").
void check_representable(const char* op, const char* arg, double v, Dtype d) {
    check_finite_argument(op, arg, v);
    if (d != kFloat64 && std::fabs(v) > FLT_MAX)
        throw Error(fmt::format("{}: invalid {} {} (expected a number within {}'s range, as torch)", op, arg, v,
                                dtype_name(d)));
}

void check_probability(const char* op, double p) {
    if (!(p >= 0.0 && p <= 1.0))
        throw Error(fmt::format("{}: expected p in [0, 1], got p={} (as torch)", op, p));
}

// Every value of p in [0, 1]; the first one outside named with its flat index.
void check_probabilities(const char* op, const Tensor& p) {
    const std::vector<double> v = p.to_vector<double>();
    for (std::size_t i = 0; i < v.size(); ++i)
        if (!(v[i] >= 0.0 && v[i] <= 1.0))
            throw Error(fmt::format("{}: expected every value of p in [0, 1], got {} at flat index {} (as torch)", op,
                                    v[i], i));
}

void check_std(const char* op, const Tensor& std) {
    const std::vector<double> v = std.to_vector<double>();
    for (std::size_t i = 0; i < v.size(); ++i)
        if (!(v[i] >= 0.0))
            throw Error(fmt::format("{}: expected every element of std >= 0.0, got {} at flat index {} (as torch)", op,
                                    v[i], i));
}

void check_std(const char* op, double std) {
    check_finite_argument(op, "std", std);
    if (!(std >= 0.0)) throw Error(fmt::format("{}: expected std >= 0.0, got std {} (as torch)", op, std));
}

// `values` as the result of a draw from `inputs`: with a graph to record, torch's derivative
// of a draw, a zero gradient to every input that requires one.
Tensor drawn_from(const char* op, const Tensor& values, std::vector<Tensor> inputs) {
    const bool record = grad_enabled() && std::any_of(inputs.begin(), inputs.end(), [](const Tensor& t) {
                            return t.defined() && t.requires_grad();
                        });
    if (!record) return values;
    return dispatch_all(values.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> v = xgrad::values<T>(values);
        return make_any_result<T>(
            std::move(v), std::move(inputs), op, Formula([](const GradArgs& in) {
                std::vector<Tensor> grads;
                for (std::size_t i = 0; i < in.inputs.size(); ++i)
                    grads.push_back(in.needs(i) ? zeros_like(in.inputs[i]) : Tensor());
                return grads;
            }),
            Saves::none());
    });
}

// 1 where a uniform draw in [0, 1) falls below p (p a number or a tensor of `shape`), as float64.
Tensor bernoulli_values(const Shape& shape, const Tensor& p, Generator& gen) {
    NoGradGuard no_grad;
    return cast(lt(rand(shape, kFloat64, gen), cast(p, kFloat64)), kFloat64);
}

// mean + std · z with z from randn in dtype d (the arithmetic in d, as t.normal_'s).
Tensor normal_values(const Tensor& mean, const Tensor& std, const Shape& shape, Dtype d, Generator& gen) {
    NoGradGuard no_grad;
    return add(mul(randn(shape, draw_dtype(d), gen), cast(std, draw_dtype(d))), cast(mean, draw_dtype(d)));
}

// --- multinomial -------------------------------------------------------------------------------

// One row's weights, scaled by their maximum (so that their sum cannot overflow).
void check_row(const char* op, std::vector<double>& w, std::size_t row, std::size_t rows, std::int64_t num_samples,
               bool replacement) {
    const std::string where = rows > 1 ? fmt::format(" (row {})", row) : "";
    double top = 0;
    std::size_t positive = 0;
    for (const double v : w) {
        if (!(v >= 0.0) || std::isinf(v))
            throw Error(fmt::format("{}: probability tensor contains either `inf`, `nan` or element < 0{}: got {} "
                                    "(as torch)", op, where, v));
        top = std::max(top, v);
        positive += v > 0;
    }
    if (top == 0.0)
        throw Error(fmt::format("{}: invalid multinomial distribution (sum of probabilities <= 0){} (as torch)", op,
                                where));
    if (!replacement && static_cast<std::uint64_t>(num_samples) > positive)
        throw Error(fmt::format("{}: invalid multinomial distribution (with replacement=False, not enough non-negative "
                                "category to sample){}: {} samples asked, {} categories of non-zero probability "
                                "(torch's documented rule)", op, where, num_samples, positive));
    for (double& v : w) v /= top;
}

// One draw by inverse CDF: the first category whose cumulative weight exceeds u · total.
std::int64_t draw_one(const std::vector<double>& cdf, Generator& gen) {
    const double u = gen.next_double() * cdf.back();
    auto it = std::upper_bound(cdf.begin(), cdf.end(), u);
    // u · total may round up to total: then the last category of non-zero weight.
    if (it == cdf.end()) it = std::lower_bound(cdf.begin(), cdf.end(), cdf.back());
    return static_cast<std::int64_t>(it - cdf.begin());
}

}  // namespace

Tensor multinomial(const Tensor& probs, std::int64_t num_samples, bool replacement, Generator& gen) {
    constexpr const char* op = "multinomial";
    check_defined(op, probs, "probs");
    if (!is_floating(probs.dtype()))
        throw Error(fmt::format("{}: only supports floating-point dtypes for input, got: {} (as torch)", op,
                                dtype_name(probs.dtype())));
    if (probs.dim() != 1 && probs.dim() != 2)
        throw Error(fmt::format("{}: prob_dist must be 1 or 2 dim, got shape {} (as torch)", op,
                                shape_str(probs.shape())));
    if (num_samples <= 0)
        throw Error(fmt::format("{}: cannot sample n_sample <= 0 samples, got num_samples={} (as torch)", op,
                                num_samples));
    const std::size_t n = probs.shape().back();
    const std::size_t rows = probs.dim() == 2 ? probs.shape()[0] : 1;
    if (!replacement && static_cast<std::uint64_t>(num_samples) > n)
        throw Error(fmt::format("{}: cannot sample n_sample > prob_dist.size(-1) samples without replacement, got "
                                "num_samples={} and {} categories (as torch)", op, num_samples, n));
    const auto k = static_cast<std::size_t>(num_samples);
    Shape out_shape = probs.dim() == 2 ? Shape{rows, k} : Shape{k};
    checked_numel(op, out_shape);

    std::vector<std::vector<double>> weights(rows);
    {
        const std::vector<double> all = probs.to_vector<double>();
        for (std::size_t r = 0; r < rows; ++r) {
            weights[r].assign(all.begin() + static_cast<std::ptrdiff_t>(r * n),
                              all.begin() + static_cast<std::ptrdiff_t>((r + 1) * n));
            check_row(op, weights[r], r, rows, num_samples, replacement);
        }
    }

    std::vector<std::int64_t> out;
    out.reserve(rows * k);
    std::vector<double> cdf(n), keys(n);
    std::vector<std::int64_t> order(n);
    for (std::size_t r = 0; r < rows; ++r) {
        const std::vector<double>& w = weights[r];
        if (replacement || k == 1) {
            std::partial_sum(w.begin(), w.end(), cdf.begin());
            for (std::size_t s = 0; s < k; ++s) out.push_back(draw_one(cdf, gen));
            continue;
        }
        // Without replacement: each category gets an exponential arrival time of rate w (one
        // draw each); the k first to arrive, in order, are a draw of k without replacement in
        // proportion to the weights left at each pick. Zero weights never arrive (checked: at
        // least k weights are positive).
        for (std::size_t i = 0; i < n; ++i) {
            const double e = -std::log1p(-gen.next_double());  // 1 - u in (0, 1]: e in [0, inf)
            keys[i] = w[i] > 0 ? e / w[i] : INFINITY;
        }
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                          [&](std::int64_t a, std::int64_t b) {
                              const double ka = keys[static_cast<std::size_t>(a)], kb = keys[static_cast<std::size_t>(b)];
                              return ka < kb || (ka == kb && a < b);
                          });
        out.insert(out.end(), order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));
    }
    return from_vector(out, out_shape);
}

Tensor bernoulli(const Tensor& p, Generator& gen) {
    constexpr const char* op = "bernoulli";
    check_defined(op, p, "p");
    check_floating_tensor(op, p, "p");
    check_probabilities(op, p);
    Tensor values;
    {
        NoGradGuard no_grad;
        values = cast(bernoulli_values(p.shape(), p, gen), p.dtype());
    }
    return drawn_from(op, values, {p});
}

Tensor bernoulli(const Tensor& like, double p, Generator& gen) {
    constexpr const char* op = "bernoulli";
    check_defined(op, like, "input");
    check_floating_tensor(op, like, "input");
    check_probability(op, p);
    Tensor values;
    {
        NoGradGuard no_grad;
        values = cast(bernoulli_values(like.shape(), full({}, p, kFloat64), gen), like.dtype());
    }
    return drawn_from(op, values, {like});
}

Tensor normal(const Tensor& mean, const Tensor& std, Generator& gen) {
    constexpr const char* op = "normal";
    check_defined(op, mean, "mean");
    check_defined(op, std, "std");
    check_floating_tensor(op, mean, "mean");
    if (std.dtype() == kBool) check_floating_tensor(op, std, "std");
    const Shape shape = broadcast_shapes(op, mean.shape(), std.shape());
    check_std(op, std);
    Tensor values;
    {
        NoGradGuard no_grad;
        values = cast(normal_values(mean, std, shape, mean.dtype(), gen), mean.dtype());
    }
    return drawn_from(op, values, {mean, std});
}

Tensor normal(const Tensor& mean, double std, Generator& gen) {
    constexpr const char* op = "normal";
    check_defined(op, mean, "mean");
    check_floating_tensor(op, mean, "mean");
    check_std(op, std);
    check_representable(op, "std", std, mean.dtype());
    Tensor values;
    {
        NoGradGuard no_grad;
        values = cast(normal_values(mean, full({}, std, kFloat64), mean.shape(), mean.dtype(), gen), mean.dtype());
    }
    return drawn_from(op, values, {mean});
}

Tensor normal(double mean, const Tensor& std, Generator& gen) {
    constexpr const char* op = "normal";
    check_defined(op, std, "std");
    check_floating_tensor(op, std, "std");
    check_representable(op, "mean", mean, std.dtype());
    check_std(op, std);
    Tensor values;
    {
        NoGradGuard no_grad;
        values = cast(normal_values(full({}, mean, kFloat64), std, std.shape(), std.dtype(), gen), std.dtype());
    }
    return drawn_from(op, values, {std});
}

Tensor normal(double mean, double std, const Shape& shape, TensorOptions opts, Generator& gen) {
    constexpr const char* op = "normal";
    if (!is_floating(opts.dtype()))
        throw Error(fmt::format("{}: expected a floating-point dtype (float32, float64 or bfloat16), got {} (as torch)",
                                op, dtype_name(opts.dtype())));
    check_representable(op, "mean", mean, opts.dtype());
    check_std(op, std);
    check_representable(op, "std", std, opts.dtype());
    checked_numel(op, shape);
    Tensor values;
    {
        NoGradGuard no_grad;
        values = cast(normal_values(full({}, mean, kFloat64), full({}, std, kFloat64), shape, opts.dtype(), gen),
                      opts.dtype());
    }
    if (opts.requires_grad()) values.requires_grad_(true);
    return values;
}

// --- the in-place fills ------------------------------------------------------------------------

namespace {

// What every random fill checks before drawing: a defined tensor, of a floating dtype unless
// `any_dtype`, that may be written (a leaf requiring grad is refused while gradients are on).
void check_fill(const char* op, const Tensor& t, bool any_dtype) {
    if (!t.defined()) throw Error(fmt::format("{}: the tensor written to is an undefined tensor", op));
    if (!any_dtype && !is_floating(t.dtype()))
        throw Error(fmt::format("{}: expected a floating-point tensor (float32, float64 or bfloat16), got {} (as "
                                "torch)", op, dtype_name(t.dtype())));
    check_in_place_leaf(op, t);
}

}  // namespace

const Tensor& Tensor::uniform_(double from, double to, Generator& gen) const {
    constexpr const char* op = "uniform_";
    check_fill(op, *this, false);
    check_representable(op, "from", from, dtype());
    check_representable(op, "to", to, dtype());
    if (!(from <= to))
        throw Error(fmt::format("{}: expects to return a [from, to) range, but found from={} > to={} (as torch)", op,
                                from, to));
    if (!std::isfinite(to - from) || (dtype() != kFloat64 && to - from > FLT_MAX))
        throw Error(fmt::format("{}: expected to - from within {}'s range, got from={} and to={} (as torch)", op,
                                dtype_name(dtype()), from, to));
    return write_in_place(op, *this, uniform(shape(), from, to, draw_dtype(dtype()), gen));
}

const Tensor& Tensor::normal_(double mean, double std, Generator& gen) const {
    constexpr const char* op = "normal_";
    check_fill(op, *this, false);
    check_std(op, std);
    check_representable(op, "mean", mean, dtype());
    check_representable(op, "std", std, dtype());
    const Tensor values =
        normal_values(full({}, mean, kFloat64), full({}, std, kFloat64), shape(), dtype(), gen);
    return write_in_place(op, *this, values);
}

const Tensor& Tensor::bernoulli_(double p, Generator& gen) const {
    constexpr const char* op = "bernoulli_";
    check_fill(op, *this, true);
    check_probability(op, p);
    return write_in_place(op, *this, bernoulli_values(shape(), full({}, p, kFloat64), gen));
}

const Tensor& Tensor::bernoulli_(const Tensor& p, Generator& gen) const {
    constexpr const char* op = "bernoulli_";
    check_fill(op, *this, true);
    check_defined(op, p, "p");
    check_floating_tensor(op, p, "p");
    if (!broadcastable_to(p.shape(), shape()))
        throw Error(fmt::format("{}: p of shape {} cannot be broadcast to the shape {} of the tensor written to", op,
                                shape_str(p.shape()), shape_str(shape())));
    check_probabilities(op, p);
    return write_in_place(op, *this, bernoulli_values(shape(), p, gen));
}

}  // namespace xgrad
