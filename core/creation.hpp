#pragma once
/// Making tensors: constants, ranges, from C++ values, and random draws. All are leaves;
/// float32 unless the options say otherwise.
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "core/random.hpp"
#include "core/tensor.hpp"

namespace xgrad {

Tensor zeros(const IntList& shape, TensorOptions opts = {});
Tensor ones(const IntList& shape, TensorOptions opts = {});
Tensor full(const IntList& shape, double value, TensorOptions opts = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
/// start, start+step, ... < end (as torch.arange); arange(5) is 0..4. As torch's, the dtype
/// follows the numbers when none is given: int64 when all are integers (arange(5), arange(0, T),
/// exact over all of int64), float32 when any is floating (arange(0, 1, 0.25), arange(5.0)).
Tensor arange(Scalar end, TensorOptions opts = {});
Tensor arange(Scalar start, Scalar end, TensorOptions opts = {});
Tensor arange(Scalar start, Scalar end, Scalar step, TensorOptions opts = {});
/// Identity matrix n×n.
Tensor eye(std::size_t n, TensorOptions opts = {});

/// From row-major values and a shape (their counts must agree).
Tensor from_vector(const std::vector<double>& values, const IntList& shape, TensorOptions opts = {});
Tensor from_vector(const std::vector<std::int64_t>& values, const IntList& shape);

/// From nested braces, as torch.tensor: tensor({{1, 2}, {3, 4}}). Ragged rows throw. As
/// torch's, the dtype follows the numbers when none is given: all integers give int64
/// (tensor({1, 2, 3}), every int64 exact), all bools bool, any floating one float32
/// (tensor({1.0, 2}), tensor({0.5})).
Tensor tensor(double scalar, TensorOptions opts = {});
Tensor tensor(std::initializer_list<double> v, TensorOptions opts = {});
Tensor tensor(std::initializer_list<std::initializer_list<double>> v, TensorOptions opts = {});
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<double>>> v,
              TensorOptions opts = {});
Tensor tensor(
    std::initializer_list<std::initializer_list<std::initializer_list<std::initializer_list<double>>>> v,
    TensorOptions opts = {});

namespace detail {
template <class T> inline constexpr bool is_list_integer_v = std::is_integral_v<T> && !std::is_same_v<T, char>;
/// tensor's lists of integers or bools: values flattened row by row (shape their lengths),
/// int64 (or bool, for bools) unless opts give a dtype.
Tensor integer_list(const std::vector<std::int64_t>& values, const std::vector<long>& shape, bool bools,
                    TensorOptions opts);
/// Throws tensor's error for a ragged list: a row at `depth` of a length other than an earlier one's.
void add_list_row(std::vector<long>& shape, std::size_t depth, std::size_t length);
template <class T> void flatten_list(T v, std::vector<std::int64_t>& out, std::vector<long>&, std::size_t) {
    out.push_back(Scalar(v).to_int64());  // a 64-bit unsigned value beyond int64 is refused
}
template <class L>
void flatten_list(std::initializer_list<L> list, std::vector<std::int64_t>& out, std::vector<long>& shape,
                  std::size_t depth) {
    add_list_row(shape, depth, list.size());
    for (const auto& item : list) flatten_list(item, out, shape, depth + 1);
}
template <class T, class L> Tensor from_integer_list(const L& list, TensorOptions opts) {
    std::vector<std::int64_t> values;
    std::vector<long> shape;
    flatten_list(list, values, shape, 0);
    return integer_list(values, shape, std::is_same_v<T, bool>, opts);
}
}  // namespace detail

/// Lists of integers or of bools, and one integer or bool (tensor(5) is a 0-d int64); the
/// double forms above take any list with a floating number in it.
template <class T, std::enable_if_t<detail::is_list_integer_v<T>, int> = 0>
Tensor tensor(T scalar, TensorOptions opts = {}) {
    return detail::from_integer_list<T>(scalar, opts);
}
template <class T, std::enable_if_t<detail::is_list_integer_v<T>, int> = 0>
Tensor tensor(std::initializer_list<T> v, TensorOptions opts = {}) {
    return detail::from_integer_list<T>(v, opts);
}
template <class T, std::enable_if_t<detail::is_list_integer_v<T>, int> = 0>
Tensor tensor(std::initializer_list<std::initializer_list<T>> v, TensorOptions opts = {}) {
    return detail::from_integer_list<T>(v, opts);
}
template <class T, std::enable_if_t<detail::is_list_integer_v<T>, int> = 0>
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<T>>> v, TensorOptions opts = {}) {
    return detail::from_integer_list<T>(v, opts);
}
template <class T, std::enable_if_t<detail::is_list_integer_v<T>, int> = 0>
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<std::initializer_list<T>>>> v,
              TensorOptions opts = {}) {
    return detail::from_integer_list<T>(v, opts);
}

/// Uniform in [0, 1).
Tensor rand(const IntList& shape, TensorOptions opts = {}, Generator& gen = default_generator());
/// Dropout's scaled keep-mask: 1/(1 − p) where a uniform draw (rand's, the same draws from gen)
/// is ≥ p, else 0; the values of cast(ge(rand(shape, opts, gen), p), dtype) · (1/(1 − p)) in one
/// pass. p in [0, 1); float32 or float64.
Tensor dropout_mask(const IntList& shape, double p, TensorOptions opts = {}, Generator& gen = default_generator());
/// Standard normal.
Tensor randn(const IntList& shape, TensorOptions opts = {}, Generator& gen = default_generator());
/// Uniform in [low, high).
Tensor uniform(const IntList& shape, double low, double high, TensorOptions opts = {},
               Generator& gen = default_generator());
/// Integers uniform in [low, high) (int64).
Tensor randint(std::int64_t low, std::int64_t high, const IntList& shape,
               Generator& gen = default_generator());
/// Integers uniform in [0, high) (int64), as torch.randint(high, size): the draws of
/// randint(0, high, shape, gen).
Tensor randint(std::int64_t high, const IntList& shape, Generator& gen = default_generator());
/// A random permutation of 0..n-1 (int64).
Tensor randperm(std::size_t n, Generator& gen = default_generator());

}  // namespace xgrad
