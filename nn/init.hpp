#pragma once
/// Parameter initialisation, as torch.nn.init: each function overwrites `tensor`'s values in
/// place (the handle, requires_grad and its place as a leaf stay), under no-grad, bumping its
/// version as every in-place write does (set_data), and returns the same handle.
///   net.apply([](nn::Module& m) {
///       if (auto* lin = m.as<nn::Linear>()) nn::init::xavier_uniform_(lin->weight());
///   });
/// The random ones draw from `gen` (default: the calling thread's default generator) and need a
/// floating tensor; the fills work on any dtype. Fans and gains are torch's.
#include <cstddef>
#include <optional>
#include <utility>

#include "core/random.hpp"
#include "core/tensor.hpp"

namespace xgrad::nn::init {

/// torch's nonlinearity names for calculate_gain and kaiming_*.
enum class Nonlinearity {
    linear, conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d,
    sigmoid, tanh, relu, leaky_relu, selu
};
/// kaiming_*'s mode: keep the variance of the forward (fan_in) or the backward (fan_out) pass.
enum class Mode { fan_in, fan_out };

/// torch's gain table: 1 for linear, the convolutions and sigmoid; 5/3 for tanh; √2 for relu;
/// √(2 / (1 + slope²)) for leaky_relu (slope = param, default 0.01); 3/4 for selu.
double calculate_gain(Nonlinearity nonlinearity, std::optional<double> param = std::nullopt);

/// (fan_in, fan_out) = (size(1)·r, size(0)·r), r the product of the sizes after the second
/// (a convolution's receptive field). Throws for a tensor of fewer than 2 dimensions, as torch.
std::pair<std::size_t, std::size_t> calculate_fan_in_and_fan_out(const Tensor& tensor);

/// U(a, b).
Tensor uniform_(const Tensor& tensor, double a = 0.0, double b = 1.0, Generator& gen = default_generator());
/// N(mean, std²).
Tensor normal_(const Tensor& tensor, double mean = 0.0, double std = 1.0, Generator& gen = default_generator());
Tensor constant_(const Tensor& tensor, double value);
Tensor zeros_(const Tensor& tensor);
Tensor ones_(const Tensor& tensor);

/// U(-a, a), a = gain·√(6 / (fan_in + fan_out)) (Glorot & Bengio).
Tensor xavier_uniform_(const Tensor& tensor, double gain = 1.0, Generator& gen = default_generator());
/// N(0, std²), std = gain·√(2 / (fan_in + fan_out)).
Tensor xavier_normal_(const Tensor& tensor, double gain = 1.0, Generator& gen = default_generator());
/// U(-bound, bound), bound = √3 · gain / √fan, gain = calculate_gain(nonlinearity, a) (He et al.).
Tensor kaiming_uniform_(const Tensor& tensor, double a = 0.0, Mode mode = Mode::fan_in,
                        Nonlinearity nonlinearity = Nonlinearity::leaky_relu, Generator& gen = default_generator());
/// N(0, std²), std = gain / √fan.
Tensor kaiming_normal_(const Tensor& tensor, double a = 0.0, Mode mode = Mode::fan_in,
                       Nonlinearity nonlinearity = Nonlinearity::leaky_relu, Generator& gen = default_generator());

}  // namespace xgrad::nn::init
