#pragma once
// Seed 004's MultiHeadAttention, line by line from its PyTorch: d_model split over num_heads
// on a 4th axis, biased Linear projections (nn.Linear's default), 4-D
// matmul(q, k.transpose(-2, -1)) for every batch row and head at once, and the output Linear.
// This is the seed's user code; mha_d_model.cpp runs it.
#include <cmath>
#include <memory>

#include <xgrad/xgrad.hpp>

namespace xgrad::examples::seed004 {

class MultiHeadAttention : public nn::Module, public nn::Callable<MultiHeadAttention> {
public:
    /// d_model: the model width; num_heads: how many heads share it (must divide it).
    MultiHeadAttention(std::size_t d_model, std::size_t num_heads)
        : nn::Module("MultiHeadAttention"), d_model(d_model), num_heads(num_heads) {
        // assert d_model % num_heads == 0, "d_model must be divisible by num_heads"
        if (num_heads == 0 || d_model % num_heads != 0)
            throw Error(fmt::format("MultiHeadAttention: d_model must be divisible by num_heads, got d_model = {} "
                                    "and num_heads = {}",
                                    d_model, num_heads));
        dim_head = d_model / num_heads;
        w_q = register_module("w_q", std::make_shared<nn::Linear>(d_model, d_model));
        w_k = register_module("w_k", std::make_shared<nn::Linear>(d_model, d_model));
        w_v = register_module("w_v", std::make_shared<nn::Linear>(d_model, d_model));
        w_out = register_module("w_out", std::make_shared<nn::Linear>(d_model, d_model));
    }

    /// q, k, v: (batch_size, num_heads, seq_len, dim_head) → the same shape.
    Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v) const {
        const Tensor raw_scores = matmul(q, k.transpose(-2, -1));
        const Tensor scaled_scores = raw_scores / sqrt(tensor(static_cast<double>(dim_head), raw_scores.dtype()));
        const Tensor attn_weights = softmax(scaled_scores, -1);
        return matmul(attn_weights, v);
    }

    /// q, k, v: (batch_size, seq_len, d_model) → (batch_size, seq_len, d_model).
    Tensor forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in) {
        if (q_in.dim() != 3 || q_in.shape()[2] != d_model)
            throw Error(fmt::format("MultiHeadAttention: q must be (batch_size, seq_len, {}), got {}", d_model,
                                    shape_str(q_in.shape())));
        const long batch_size = q_in.size(0), seq_len = q_in.size(1);
        const long H = static_cast<long>(num_heads), dh = static_cast<long>(dim_head);
        auto heads = [&](nn::Linear& w, const Tensor& x) {  // .view(b, s, H, dh).transpose(1, 2)
            return w(x).reshape({batch_size, -1, H, dh}).transpose(1, 2);
        };
        // Step 1: project to the heads
        const Tensor q = heads(*w_q, q_in), k = heads(*w_k, k_in), v = heads(*w_v, v_in);
        // Step 2: attention for every (batch, head) at once
        Tensor attn_output = scaled_dot_product_attention(q, k, v);
        // Step 3: concatenate the heads: .transpose(1, 2).contiguous().view(b, s, d_model)
        attn_output = attn_output.transpose(1, 2).reshape({batch_size, seq_len, static_cast<long>(d_model)});
        // Step 4: the output projection
        return (*w_out)(attn_output);
    }

    std::size_t d_model, num_heads, dim_head = 0;
    std::shared_ptr<nn::Linear> w_q, w_k, w_v, w_out;
};

}  // namespace xgrad::examples::seed004
