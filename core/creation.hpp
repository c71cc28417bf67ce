#pragma once
/// Making tensors: constants, ranges, from C++ values, and random draws. All are leaves;
/// float32 unless the options say otherwise.
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/random.hpp"
#include "core/tensor.hpp"

namespace xgrad {

Tensor zeros(const IntList& shape, TensorOptions opts = {});
Tensor ones(const IntList& shape, TensorOptions opts = {});
Tensor full(const IntList& shape, double value, TensorOptions opts = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
/// start, start+step, ... < end (as torch.arange); arange(5) is 0..4.
Tensor arange(double end, TensorOptions opts = {});
Tensor arange(double start, double end, double step = 1.0, TensorOptions opts = {});
/// Identity matrix n×n. n is int64 as torch's: a negative n throws, naming it.
Tensor eye(std::int64_t n, TensorOptions opts = {});

/// From row-major values and a shape (their counts must agree).
Tensor from_vector(const std::vector<double>& values, const IntList& shape, TensorOptions opts = {});
Tensor from_vector(const std::vector<std::int64_t>& values, const IntList& shape);

/// From nested braces, as torch.tensor: tensor({{1, 2}, {3, 4}}). Ragged rows throw.
Tensor tensor(double scalar, TensorOptions opts = {});
Tensor tensor(std::initializer_list<double> v, TensorOptions opts = {});
Tensor tensor(std::initializer_list<std::initializer_list<double>> v, TensorOptions opts = {});
Tensor tensor(std::initializer_list<std::initializer_list<std::initializer_list<double>>> v,
              TensorOptions opts = {});
Tensor tensor(
    std::initializer_list<std::initializer_list<std::initializer_list<std::initializer_list<double>>>> v,
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
/// A random permutation of 0..n-1 (int64). n is int64 as torch's: a negative n throws, naming it.
Tensor randperm(std::int64_t n, Generator& gen = default_generator());

}  // namespace xgrad
