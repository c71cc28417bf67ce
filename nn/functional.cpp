#include "functional.hpp"

#include <cmath>

#include "core/call_context.hpp"
#include "core/creation.hpp"

namespace xgrad::nn {

void check_attention_inputs(const char* who, const Tensor& queries, const Tensor& keys,
                            const Tensor& values) {
    for (const auto& [arg, t] : {std::pair{"queries", &queries}, std::pair{"keys", &keys}, std::pair{"values", &values}})
        check_dims(who, arg, *t, 3, "(batch, length, features)");
    if (queries.size(0) != keys.size(0) || keys.size(0) != values.size(0))
        throw Error(
            fmt::format("{}: queries, keys and values must have the same batch size, got {}, {} and {}", who,
                        shape_str(queries.shape()), shape_str(keys.shape()), shape_str(values.shape())));
    if (keys.size(1) != values.size(1))
        throw Error(
            fmt::format("{}: keys and values must have the same length (axis 1), got keys {} and "
                        "values {}",
                        who, shape_str(keys.shape()), shape_str(values.shape())));
}

void check_last_axis(const char* who, const char* arg, const Tensor& t, const char* size_name,
                     std::size_t size) {
    if (t.dim() == 0 || t.shape().back() != size)
        throw Error(fmt::format("{}: {} must have last axis {} = {}, got shape {}", who, arg, size_name, size,
                                shape_str(t.shape())));
}

namespace {
// The C++ name a user writes: kFloat32.
const char* constant_name(Dtype d) {
    switch (d) {
        case kFloat32: return "kFloat32";
        case kFloat64: return "kFloat64";
        case kInt64: return "kInt64";
        case kBool: return "kBool";
        case kBFloat16: return "kBFloat16";
    }
    return "?";
}
}  // namespace

void check_input_dtype(const char* who, const char* arg, const Tensor& t, Dtype dtype) {
    if (t.dtype() == dtype) return;
    // Parameters are never bfloat16, so "or the module with .to(kBFloat16)" would be no advice.
    if (!is_floating(t.dtype()) || t.dtype() == kBFloat16)
        throw Error(fmt::format("{}: {} is {}, expected a floating tensor of the module's parameters' dtype {}; "
                                "convert it with .to({})",
                                who, arg, dtype_name(t.dtype()), dtype_name(dtype), constant_name(dtype)));
    throw Error(fmt::format("{}: {} is {} but the module's parameters are {}; convert the {} with .to({}), or "
                            "the module with .to({})",
                            who, arg, dtype_name(t.dtype()), dtype_name(dtype), arg, constant_name(dtype),
                            constant_name(t.dtype())));
}

Tensor sequence_mask(const Tensor& X, const Tensor& valid_len, double value) {
    if (!X.defined()) throw Error("sequence_mask: X is an undefined tensor");
    if (X.dim() < 2)
        throw Error(fmt::format("sequence_mask: X must have at least 2 axes (n, maxlen, ...), got shape {}",
                                shape_str(X.shape())));
    if (!valid_len.defined() || valid_len.dim() != 1 || valid_len.size(0) != X.size(0))
        throw Error(fmt::format("sequence_mask: valid_len must have shape ({},), got {}", X.size(0),
                                valid_len.defined() ? shape_str(valid_len.shape()) : "an undefined tensor"));
    // The lengths checked (whole, finite, ≥ 0) and read once, as the attention masks read them.
    const ResolvedMask kept = AttentionMask::valid_lens(valid_len).resolve("sequence_mask", X.size(0), 1, X.size(1), "valid_len");
    // drop (n, maxlen, 1, ...): position j ≥ valid_len[i], broadcast over X's trailing axes.
    const std::size_t n = X.size(0), maxlen = X.size(1);
    std::vector<double> drop(n * maxlen);
    for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < maxlen; ++j) drop[i * maxlen + j] = j >= kept.prefix()[i];
    Shape mask_shape(X.dim(), 1);
    mask_shape[0] = n;
    mask_shape[1] = maxlen;
    // the fill value refused for X's dtype names sequence_mask, the call made
    return as_call("sequence_mask", [&] { return masked_fill(X, from_vector(drop, mask_shape, kBool), value); });
}

}  // namespace xgrad::nn
