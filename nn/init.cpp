#include "init.hpp"

#include <cmath>

#include "core/arguments.hpp"
#include "core/call_context.hpp"
#include "core/creation.hpp"
#include "core/fill_value.hpp"
#include "core/ops.hpp"

namespace xgrad::nn::init {

namespace {

void check_defined(const char* who, const Tensor& t) {
    if (!t.defined()) throw Error(fmt::format("init.{}: tensor is undefined", who));
}

void check_floating(const char* who, const Tensor& t) {
    check_defined(who, t);
    if (!is_floating(t.dtype()))
        throw Error(fmt::format("init.{}: needs a floating-point tensor, got {}", who, dtype_name(t.dtype())));
}

void check_finite(const char* who, const char* what, double v) {
    check_finite_argument(fmt::format("init.{}", who).c_str(), what, v);
}

// The one write path: the values make_values() draws, of the tensor's own shape and dtype, set
// under no-grad. What the draw refuses (memory, a fill value the dtype cannot hold) names the
// init function the user called, "init.uniform_: ...", not the uniform inside it.
template <class Make> Tensor write(const char* who, const Tensor& tensor, Make&& make_values) {
    const std::string call = fmt::format("init.{}", who);
    return as_call(call.c_str(), [&] {
        NoGradGuard no_grad;
        const Tensor values = make_values();
        tensor.set_data(values.dtype() == tensor.dtype() ? values : cast(values, tensor.dtype()));
        return tensor;
    });
}

Tensor uniform_impl(const char* who, const Tensor& t, double a, double b, Generator& gen) {
    check_floating(who, t);
    check_finite(who, "a", a);
    check_finite(who, "b", b);
    if (!(a <= b)) throw Error(fmt::format("init.{}: needs a <= b, got a = {} and b = {}", who, a, b));
    return write(who, t, [&] { return uniform(t.shape(), a, b, t.dtype(), gen); });
}

Tensor normal_impl(const char* who, const Tensor& t, double mean, double std, Generator& gen) {
    check_floating(who, t);
    check_finite(who, "mean", mean);
    check_finite(who, "std", std);
    if (std < 0) throw Error(fmt::format("init.{}: std must be non-negative, got {}", who, std));
    return write(who, t, [&] { return randn(t.shape(), t.dtype(), gen) * std + mean; });
}

std::size_t fan(const Tensor& t, Mode mode) {
    const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
    return mode == Mode::fan_in ? fan_in : fan_out;
}

}  // namespace

double calculate_gain(Nonlinearity nonlinearity, std::optional<double> param) {
    switch (nonlinearity) {
        case Nonlinearity::linear:
        case Nonlinearity::conv1d:
        case Nonlinearity::conv2d:
        case Nonlinearity::conv3d:
        case Nonlinearity::conv_transpose1d:
        case Nonlinearity::conv_transpose2d:
        case Nonlinearity::conv_transpose3d:
        case Nonlinearity::sigmoid:
            return 1.0;
        case Nonlinearity::tanh:
            return 5.0 / 3.0;
        case Nonlinearity::relu:
            return std::sqrt(2.0);
        case Nonlinearity::leaky_relu: {
            const double slope = param.value_or(0.01);
            check_finite("calculate_gain", "negative_slope", slope);
            return std::sqrt(2.0 / (1.0 + slope * slope));
        }
        case Nonlinearity::selu:
            return 3.0 / 4.0;
    }
    throw Error("init.calculate_gain: unknown nonlinearity");
}

std::pair<std::size_t, std::size_t> calculate_fan_in_and_fan_out(const Tensor& tensor) {
    check_defined("calculate_fan_in_and_fan_out", tensor);
    if (tensor.dim() < 2)
        throw Error(fmt::format("init.calculate_fan_in_and_fan_out: fan in and fan out can not be computed for a "
                                "tensor with fewer than 2 dimensions, got shape {}",
                                shape_str(tensor.shape())));
    std::size_t receptive = 1;
    for (std::size_t d = 2; d < tensor.shape().size(); ++d) receptive *= tensor.shape()[d];
    return {tensor.size(1) * receptive, tensor.size(0) * receptive};
}

Tensor uniform_(const Tensor& tensor, double a, double b, Generator& gen) {
    return uniform_impl("uniform_", tensor, a, b, gen);
}

Tensor normal_(const Tensor& tensor, double mean, double std, Generator& gen) {
    return normal_impl("normal_", tensor, mean, std, gen);
}

Tensor constant_(const Tensor& tensor, double value) {
    check_defined("constant_", tensor);
    check_fill_value("init.constant_", "value", value, tensor.dtype());
    return write("constant_", tensor, [&] { return full(tensor.shape(), value, tensor.dtype()); });
}

Tensor zeros_(const Tensor& tensor) { return constant_(tensor, 0.0); }
Tensor ones_(const Tensor& tensor) { return constant_(tensor, 1.0); }

// Below 2-D the fans throw, as torch; a tensor with no elements is left alone, as torch.
namespace {

// The gain and the slope are checked at entry, so that a bad one is named as the caller passed
// it, not as the bound or std made from it.
void check_gain(const char* who, double gain) {
    check_argument(std::isfinite(gain) && gain >= 0, fmt::format("init.{}", who).c_str(), "gain", gain,
                   "a finite gain >= 0");
}

}  // namespace

Tensor xavier_uniform_(const Tensor& tensor, double gain, Generator& gen) {
    check_floating("xavier_uniform_", tensor);
    check_gain("xavier_uniform_", gain);
    const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
    if (tensor.numel() == 0) return tensor;
    const double a = std::sqrt(3.0) * gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
    return uniform_impl("xavier_uniform_", tensor, -a, a, gen);
}

Tensor xavier_normal_(const Tensor& tensor, double gain, Generator& gen) {
    check_floating("xavier_normal_", tensor);
    check_gain("xavier_normal_", gain);
    const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
    if (tensor.numel() == 0) return tensor;
    const double std = gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
    return normal_impl("xavier_normal_", tensor, 0.0, std, gen);
}

Tensor kaiming_uniform_(const Tensor& tensor, double a, Mode mode, Nonlinearity nonlinearity, Generator& gen) {
    check_floating("kaiming_uniform_", tensor);
    check_finite("kaiming_uniform_", "a", a);
    const std::size_t f = fan(tensor, mode);
    if (tensor.numel() == 0) return tensor;
    const double bound = std::sqrt(3.0) * calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(f));
    return uniform_impl("kaiming_uniform_", tensor, -bound, bound, gen);
}

Tensor kaiming_normal_(const Tensor& tensor, double a, Mode mode, Nonlinearity nonlinearity, Generator& gen) {
    check_floating("kaiming_normal_", tensor);
    check_finite("kaiming_normal_", "a", a);
    const std::size_t f = fan(tensor, mode);
    if (tensor.numel() == 0) return tensor;
    const double std = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(f));
    return normal_impl("kaiming_normal_", tensor, 0.0, std, gen);
}

}  // namespace xgrad::nn::init
