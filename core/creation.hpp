#pragma once
/// Making tensors: constants, ranges, from C++ values, and random draws. All are leaves;
/// float32 unless the options say otherwise, except where torch infers the dtype from the
/// numbers: arange and tensor of integers give int64 (of bools, tensor gives bool).
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
/// Identity matrix n×n. n is int64 as torch's: a negative n throws, naming it.
Tensor eye(std::int64_t n, TensorOptions opts = {});

/// From row-major values and a shape (their counts must agree).
Tensor from_vector(const std::vector<double>& values, const IntList& shape, TensorOptions opts = {});
Tensor from_vector(const std::vector<std::int64_t>& values, const IntList& shape);

/// From nested braces, as torch.tensor: tensor({{1, 2}, {3, 4}}). Ragged rows throw. As
/// torch's, the dtype follows the numbers when none is given: any floating number makes
/// float32 (tensor({1.0, 2}), tensor({0.5})), else any integer int64 (tensor({1, 2, 3}),
/// tensor({x.size(0), 5}), every int64 exact), else bool (tensor({true, false})); a dtype given
/// wins. One number gives a 0-d tensor the same way: tensor(5) is int64, tensor(2.0) float32.
Tensor tensor(double scalar, TensorOptions opts = {});

namespace detail {
/// Throws tensor's error for a ragged list: a row at `depth` of a length other than an earlier one's.
void add_list_row(std::vector<long>& shape, std::size_t depth, std::size_t length);
/// tensor's numbers, flattened row by row, as written, with the row lengths (`shape`): the
/// tensor, its dtype inferred as torch.tensor infers it unless opts give one.
Tensor list_tensor(const std::vector<Scalar>& numbers, const std::vector<long>& shape, TensorOptions opts);
template <class T> void flatten_list(const T& v, std::vector<Scalar>& out, std::vector<long>&, std::size_t) {
    out.emplace_back(v);  // a 64-bit unsigned value beyond int64 is refused here
}
template <class L>
void flatten_list(std::initializer_list<L> list, std::vector<Scalar>& out, std::vector<long>& shape,
                  std::size_t depth) {
    add_list_row(shape, depth, list.size());
    for (const auto& item : list) flatten_list(item, out, shape, depth + 1);
}
template <class L> Tensor from_list(const L& list, TensorOptions opts) {
    std::vector<Scalar> numbers;
    std::vector<long> shape;
    flatten_list(list, numbers, shape, 0);
    return list_tensor(numbers, shape, opts);
}
template <class T> inline constexpr bool is_list_number_v = std::is_arithmetic_v<T>;
}  // namespace detail

/// Lists whose numbers are of one C++ type (tensor({1, 2}), tensor({0.5, 1.5}), a
/// std::initializer_list<double> variable), and one number of any arithmetic type.
template <class T, std::enable_if_t<detail::is_list_number_v<T>, int> = 0>
Tensor tensor(T scalar, TensorOptions opts = {}) {
    return detail::from_list(scalar, opts);
}
template <class T, std::enable_if_t<detail::is_list_number_v<T>, int> = 0>
Tensor tensor(std::initializer_list<T> v, TensorOptions opts = {}) {
    return detail::from_list(v, opts);
}
template <class T, std::enable_if_t<detail::is_list_number_v<T>, int> = 0>
Tensor tensor(std::initializer_list<std::initializer_list<T>> v, TensorOptions opts = {}) {
    return detail::from_list(v, opts);
}
template <class T, std::enable_if_t<detail::is_list_number_v<T>, int> = 0>
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<T>>> v, TensorOptions opts = {}) {
    return detail::from_list(v, opts);
}
template <class T, std::enable_if_t<detail::is_list_number_v<T>, int> = 0>
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<std::initializer_list<T>>>> v,
              TensorOptions opts = {}) {
    return detail::from_list(v, opts);
}
/// Lists mixing types ({1, 2.5}, {x.size(0), 5}, {true, 2}), where the forms above deduce
/// nothing: each number as written (a Scalar).
Tensor tensor(std::initializer_list<Scalar> v, TensorOptions opts = {});
Tensor tensor(std::initializer_list<std::initializer_list<Scalar>> v, TensorOptions opts = {});
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<Scalar>>> v, TensorOptions opts = {});
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<std::initializer_list<Scalar>>>> v,
              TensorOptions opts = {});

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
/// A random permutation of 0..n-1 (int64). n is int64 as torch's: a negative n throws, naming it.
Tensor randperm(std::int64_t n, Generator& gen = default_generator());

}  // namespace xgrad
