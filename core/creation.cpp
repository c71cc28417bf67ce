#include "core/creation.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "core/fill_value.hpp"
#include "core/call_context.hpp"
#include "core/node.hpp"
#include "core/ops_util.hpp"
#include "core/runtime/simd_dispatch.hpp"

namespace xgrad {

namespace {

// A leaf of the requested dtype whose values come from fill(xarray<T>&); `op` names it in
// errors (a shape too large to count, or to allocate).
template <class Fill> Tensor build(const char* op, const Shape& shape, TensorOptions opts, Fill&& fill) {
    checked_numel(op, shape);
    const AllocContext context(op, shape);
    Tensor t = dispatch_all(opts.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        xt::xarray<T> a = xt::zeros<T>(shape);
        fill(a);
        return make_leaf(Storage(std::move(a)));
    });
    if (opts.requires_grad()) t.requires_grad_(true);
    return t;
}

// Values below `high` (when finite): a double just under it, e.g. 1 - 2^-53, rounds up to
// exactly `high` in float32 (rand gave 1.0f about once in 2^25 draws); those become the
// largest T below `high`, but never less than `low`.
template <class Draw>
Tensor draw(const char* op, const Shape& shape, TensorOptions opts, Draw&& next, double low = -INFINITY,
            double high = INFINITY) {
    if (opts.dtype() != kFloat32 && opts.dtype() != kFloat64)
        throw Error(fmt::format("{}: expected dtype float32 or float64, got {}{}", op, dtype_name(opts.dtype()),
                                opts.dtype() == kBFloat16 ? " (draw in float32, then convert with .to(kBFloat16))" : ""));
    return build(op, shape, opts, [&](auto& a) {
        using T = typename std::decay_t<decltype(a)>::value_type;
        if constexpr (std::is_floating_point_v<T>) {
        T below = static_cast<T>(high);
        while (static_cast<double>(below) >= high) below = std::nextafter(below, -std::numeric_limits<T>::infinity());
        below = std::max(below, static_cast<T>(low));
        for (auto& v : a) {
            v = static_cast<T>(next());
            if (static_cast<double>(v) >= high && low < high) v = below;
        }
        }
    });
}

// A double stored as T: for int64, NaN, ±inf and values outside int64's range throw (the
// cast would be undefined); fractions truncate toward zero, as torch's.
template <class T> T stored_as(const char* op, const char* what, double v) {
    if constexpr (std::is_same_v<T, std::int64_t>) return checked_int64(op, what, v);
    else return static_cast<T>(v);
}

Tensor filled(const char* op, const Shape& shape, double value, TensorOptions opts) {
    check_fill_value(op, "the fill value", value, opts.dtype());
    return build(op, shape, opts, [op, value](auto& a) {
        using T = typename std::decay_t<decltype(a)>::value_type;
        a.fill(stored_as<T>(op, "the fill value", value));
    });
}

}  // namespace

void check_fill_value(const char* op, const char* what, Scalar value, Dtype d) {
    if (value.kind() != kFloat64) return;  // a bool or int64 fits every dtype (|int64| < 3.4e38)
    const double v = value.to_double();
    if (d == kInt64) {
        checked_int64(op, what, v);
        return;
    }
    // float32 and bfloat16 share float's exponent range, but bfloat16's largest finite value is
    // smaller: 3.3895313892515355e+38, as torch compares against (a value between it and what
    // would round up to inf is refused too).
    double largest = 0;
    if (d == kFloat32) largest = std::numeric_limits<float>::max();
    else if (d == kBFloat16) largest = static_cast<double>(bfloat16::from_bits(0x7f7f));
    else return;  // float64 holds every double, bool every number
    if (std::isfinite(v) && std::fabs(v) > largest)
        throw Error(fmt::format("{}: {} {} cannot be converted to {} without overflow (a finite {} value lies within "
                                "±{}; inf and NaN are stored as they are)",
                                op, what, v, dtype_name(d), dtype_name(d), largest));
}

Tensor zeros(const IntList& shape, TensorOptions opts) { return build("zeros", shape.shape("zeros"), opts, [](auto&) {}); }

Tensor ones(const IntList& shape, TensorOptions opts) { return filled("ones", shape.shape("ones"), 1.0, opts); }

Tensor full(const IntList& shape, double value, TensorOptions opts) { return filled("full", shape.shape("full"), value, opts); }

Tensor zeros_like(const Tensor& t) {
    check_defined("zeros_like", t);
    return as_call("zeros_like", [&] { return zeros(t.shape(), t.dtype()); });
}
Tensor ones_like(const Tensor& t) {
    check_defined("ones_like", t);
    return as_call("ones_like", [&] { return ones(t.shape(), t.dtype()); });
}

Tensor arange(Scalar end, TensorOptions opts) { return arange(0, end, 1, opts); }

Tensor arange(Scalar start, Scalar end, TensorOptions opts) { return arange(start, end, 1, opts); }

namespace {
// arange of integers into int64, exactly (the double path rounds past 2^53): the count
// ceil((end - start) / step) in 128 bits, where end - start cannot overflow.
Tensor integer_arange(std::int64_t start, std::int64_t end, std::int64_t step, TensorOptions opts) {
    if (step == 0)
        throw Error(fmt::format("arange: expected finite start, end and a non-zero step, got start={}, end={}, step={}",
                                start, end, step));
    const __int128 span = static_cast<__int128>(end) - start;
    __int128 count = 0;
    if (step > 0 && span > 0) count = (span + step - 1) / step;
    else if (step < 0 && span < 0) count = (span + step + 1) / step;
    if (count > static_cast<__int128>(kMaxElements))
        throw Error(fmt::format("arange: start={}, end={}, step={} give {} elements, more than fit in memory", start,
                                end, step, static_cast<double>(count)));
    const auto n = static_cast<std::size_t>(count);
    return build("arange", {n}, opts, [&](auto& a) {
        using T = typename std::decay_t<decltype(a)>::value_type;
        // Every value lies between start and end, so within int64.
        if constexpr (std::is_same_v<T, std::int64_t>)
            for (std::size_t i = 0; i < n; ++i)
                a(i) = static_cast<T>(start + static_cast<__int128>(step) * static_cast<__int128>(i));
    });
}
}  // namespace

Tensor arange(Scalar start_arg, Scalar end_arg, Scalar step_arg, TensorOptions opts) {
    const bool integers = start_arg.kind() != kFloat64 && end_arg.kind() != kFloat64 && step_arg.kind() != kFloat64;
    if (integers && !opts.has_dtype()) opts.dtype(kInt64);
    if (integers && opts.dtype() == kInt64)
        return integer_arange(start_arg.to_int64(), end_arg.to_int64(), step_arg.to_int64(), opts);
    const double start = start_arg.to_double(), end = end_arg.to_double(), step = step_arg.to_double();
    if (step == 0.0 || !std::isfinite(step) || !std::isfinite(start) || !std::isfinite(end))
        throw Error(fmt::format("arange: expected finite start, end and a non-zero step, got start={}, "
                                "end={}, step={}",
                                start, end, step));
    // The count is ceil((end - start) / step), checked as a double before it becomes an
    // integer: the conversion is undefined past size_t, and the span may be inf (±1e308 bounds).
    const double span = std::ceil((end - start) / step);
    static_assert(kMaxElements == (std::size_t(1) << 60) - 1, "the bound below is kMaxElements + 1");
    if (!(span < 0x1p60))
        throw Error(fmt::format("arange: start={}, end={}, step={} give {} elements, more than fit in memory",
                                start, end, step, span));
    const std::size_t n = span > 0 ? static_cast<std::size_t>(span) : 0;
    return build("arange", {n}, opts, [&](auto& a) {
        using T = typename std::decay_t<decltype(a)>::value_type;
        // Both ends are checked for int64 (values in between lie between them).
        if (n > 0) {
            stored_as<T>("arange", "the first value", start);
            stored_as<T>("arange", "the last value", start + step * static_cast<double>(n - 1));
        }
        for (std::size_t i = 0; i < n; ++i) a(i) = static_cast<T>(start + step * static_cast<double>(i));
    });
}

Tensor eye(std::int64_t n_arg, TensorOptions opts) {
    if (n_arg < 0) throw Error(fmt::format("eye: n must be non-negative, got {}", n_arg));
    const auto n = static_cast<std::size_t>(n_arg);
    return build("eye", {n, n}, opts, [n](auto& a) {
        using T = typename std::decay_t<decltype(a)>::value_type;
        for (std::size_t i = 0; i < n; ++i) a(i, i) = static_cast<T>(1);
    });
}

Tensor from_vector(const std::vector<double>& values, const IntList& shape_arg, TensorOptions opts) {
    const Shape shape = shape_arg.shape("from_vector");
    const std::size_t n = checked_numel("from_vector", shape);
    if (n != values.size())
        throw Error(fmt::format("from_vector: shape {} holds {} elements, got {} values", shape_str(shape),
                                n, values.size()));
    return build("from_vector", shape, opts, [&](auto& a) {
        using T = typename std::decay_t<decltype(a)>::value_type;
        if constexpr (std::is_same_v<T, std::int64_t>)
            for (std::size_t k = 0; k < n; ++k)
                if (!fits_int64(values[k]))
                    throw Error(fmt::format("from_vector: value {} at index {} cannot be stored as int64 (must be "
                                            "finite and within int64's range)",
                                            values[k], k));
        std::transform(values.begin(), values.end(), a.begin(), [](double v) { return static_cast<T>(v); });
    });
}

Tensor from_vector(const std::vector<std::int64_t>& values, const IntList& shape_arg) {
    const Shape shape = shape_arg.shape("from_vector");
    const std::size_t n = checked_numel("from_vector", shape);
    if (n != values.size())
        throw Error(fmt::format("from_vector: shape {} holds {} elements, got {} values", shape_str(shape),
                                n, values.size()));
    const AllocContext context("from_vector", shape);
    xt::xarray<std::int64_t> a = xt::zeros<std::int64_t>(shape);
    std::copy(values.begin(), values.end(), a.begin());
    return make_leaf(Storage(std::move(a)));
}

namespace detail {
void add_list_row(std::vector<long>& shape, std::size_t depth, std::size_t length) {
    if (shape.size() <= depth) shape.push_back(static_cast<long>(length));
    else if (shape[depth] != static_cast<long>(length))
        throw Error(fmt::format("tensor: ragged nested list: a row at depth {} has {} elements, an earlier one {}",
                                depth, length, shape[depth]));
}

Tensor list_tensor(const std::vector<Scalar>& numbers, const std::vector<long>& shape, TensorOptions opts) {
    const auto any = [&](Dtype kind) {
        return std::any_of(numbers.begin(), numbers.end(), [kind](const Scalar& s) { return s.kind() == kind; });
    };
    const bool floating = numbers.empty() || any(kFloat64);  // torch.tensor([]) is float32
    if (!opts.has_dtype()) opts.dtype(floating ? kFloat32 : any(kInt64) ? kInt64 : kBool);
    // Built by from_vector, whose errors (a value int64 cannot hold) name tensor, the call made.
    return as_call("tensor", [&]() -> Tensor {
        // Integers into int64 keep every bit; the rest converts from doubles (an integer past
        // 2^53 into a floating dtype rounds, as torch's).
        if (opts.dtype() == kInt64 && !floating && !opts.requires_grad()) {
            std::vector<std::int64_t> values(numbers.size());
            std::transform(numbers.begin(), numbers.end(), values.begin(), [](const Scalar& s) { return s.to_int64(); });
            return from_vector(values, shape);
        }
        std::vector<double> values(numbers.size());
        std::transform(numbers.begin(), numbers.end(), values.begin(), [](const Scalar& s) { return s.to_double(); });
        return from_vector(values, shape, opts);
    });
}
}  // namespace detail

Tensor tensor(double scalar, TensorOptions opts) {
    return as_call("tensor", [&] { return from_vector({scalar}, {}, opts); });
}
Tensor tensor(std::initializer_list<Scalar> v, TensorOptions opts) { return detail::from_list(v, opts); }
Tensor tensor(std::initializer_list<std::initializer_list<Scalar>> v, TensorOptions opts) {
    return detail::from_list(v, opts);
}
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<Scalar>>> v, TensorOptions opts) {
    return detail::from_list(v, opts);
}
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<std::initializer_list<Scalar>>>> v,
              TensorOptions opts) {
    return detail::from_list(v, opts);
}

Tensor rand(const IntList& shape, TensorOptions opts, Generator& gen) {
    return draw("rand", shape.shape("rand"), opts, [&gen] { return gen.next_double(); }, 0.0, 1.0);
}

namespace {

// dropout_mask's values: rand's draw u (53 bits as a double, then as T, a value that rounds up
// to 1 put just below it), kept as `scale` where u >= p, else 0. Every step of that is monotone
// in the draw's 53 bits k, so "kept" is k >= K for the least K that is kept: the values compare
// as integers, from the engine's bulk draws, and equal what rand's path gives bit for bit.
template <class T> std::uint64_t least_kept(T p) {
    const T below = std::nextafter(T(1), T(0));
    const auto kept = [&](std::uint64_t k) {
        T v = static_cast<T>(static_cast<double>(k) * 0x1.0p-53);
        if (static_cast<double>(v) >= 1.0) v = below;
        return v >= p;
    };
    std::uint64_t lo = 0, hi = std::uint64_t(1) << 53;  // kept(hi) stands for "none kept"
    while (lo < hi) {
        const std::uint64_t mid = lo + (hi - lo) / 2;
        if (kept(mid)) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

template <class T> void fill_dropout(T* out, std::size_t n, Mt19937_64& engine, T p, T scale) {
    const std::uint64_t least = least_kept(p);
    std::uint64_t draws[256];
    for (std::size_t at = 0; at < n; at += std::size(draws)) {
        const std::size_t count = std::min(n - at, std::size(draws));
        engine.fill(draws, count);
        // By value and without a branch: a random keep would mispredict, and the vectoriser
        // compares the 53 bits as signed 64-bit lanes (both sides are below 2^63).
        simd_dispatch([bits = &draws[0], to = out + at, count, least = static_cast<std::int64_t>(least), scale]()
                          XGRAD_SIMD_BODY {
                              for (std::size_t i = 0; i < count; ++i)
                                  to[i] = static_cast<T>(static_cast<std::int64_t>(bits[i] >> 11) >= least) * scale;
                              return 0;
                          });
    }
}

}  // namespace

Tensor dropout_mask(const IntList& shape_arg, double p, TensorOptions opts, Generator& gen) {
    if (!(p >= 0.0 && p < 1.0)) throw Error(fmt::format("dropout_mask: p must be in [0, 1), got {}", p));
    if (opts.dtype() != kFloat32 && opts.dtype() != kFloat64)
        throw Error(fmt::format("dropout_mask: expected dtype float32 or float64, got {}", dtype_name(opts.dtype())));
    // rand's draws, each compared and scaled in the dtype as ge(u, full({}, p)) and
    // cast(keep) * (1 / (1 - p)) do it: the same values in one pass.
    const double scale = 1.0 / (1.0 - p);
    return build("dropout_mask", shape_arg.shape("dropout_mask"), opts, [&](auto& a) {
        using T = typename std::decay_t<decltype(a)>::value_type;
        if constexpr (std::is_floating_point_v<T>)
            fill_dropout<T>(a.data(), a.size(), gen.engine(), static_cast<T>(p), static_cast<T>(scale));
    });
}

Tensor randn(const IntList& shape, TensorOptions opts, Generator& gen) {
    return draw("randn", shape.shape("randn"), opts, [&gen] { return gen.next_normal(); });
}

Tensor uniform(const IntList& shape_arg, double low, double high, TensorOptions opts, Generator& gen) {
    // high - low must be finite too: ±1e308 bounds would draw inf, and NaN where inf meets a 0 draw.
    if (!(low <= high) || !std::isfinite(high - low))
        throw Error(fmt::format("uniform: expected finite low <= high a finite distance apart, got low={}, high={}",
                                low, high));
    return draw(
        "uniform", shape_arg.shape("uniform"), opts, [&] { return low + (high - low) * gen.next_double(); }, low,
        high);
}

Tensor randint(std::int64_t low, std::int64_t high, const IntList& shape_arg, Generator& gen) {
    const Shape shape = shape_arg.shape("randint");
    if (low >= high)
        throw Error(fmt::format("randint: expected low < high, got low={}, high={}", low, high));
    checked_numel("randint", shape);
    const AllocContext context("randint", shape);
    xt::xarray<std::int64_t> a = xt::zeros<std::int64_t>(shape);
    // In unsigned arithmetic: high - low overflows int64 (undefined) for a range wider than 2^63.
    const std::uint64_t range = static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(low);
    // Rejection sampling keeps every value equally likely (a plain modulo would not).
    const std::uint64_t limit = UINT64_MAX - UINT64_MAX % range;
    for (auto& v : a) {
        std::uint64_t r;
        do r = gen.engine()(); while (r >= limit);
        v = static_cast<std::int64_t>(static_cast<std::uint64_t>(low) + r % range);
    }
    return make_leaf(Storage(std::move(a)));
}

Tensor randint(std::int64_t high, const IntList& shape, Generator& gen) { return randint(0, high, shape, gen); }

Tensor randperm(std::int64_t n_arg, Generator& gen) {
    if (n_arg < 0) throw Error(fmt::format("randperm: n must be non-negative, got {}", n_arg));
    const auto n = static_cast<std::size_t>(n_arg);
    checked_numel("randperm", {n});
    const Shape shape{n};
    const AllocContext context("randperm", shape);
    xt::xarray<std::int64_t> a = xt::zeros<std::int64_t>({n});
    std::iota(a.begin(), a.end(), 0);
    // Fisher-Yates with our own draws: std::shuffle's algorithm is library-specific.
    for (std::size_t i = n; i > 1; --i) {
        const auto j = static_cast<std::size_t>(gen.next_double() * static_cast<double>(i));
        std::swap(a(i - 1), a(std::min(j, i - 1)));
    }
    return make_leaf(Storage(std::move(a)));
}

}  // namespace xgrad
