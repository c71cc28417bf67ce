#pragma once
// Seed 003's attention, line by line from its PyTorch: scaled_dot_product_attention with its
// masks, one AttentionHead per head, and a MultiHeadAttention that keeps the heads in an
// nn::ModuleList and concatenates their outputs into an output Linear (biases on, as
// nn.Linear's default). This is the seed's user code; scaled_dot_product_attention.cpp runs it.
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include <xgrad/xgrad.hpp>

namespace xgrad::examples::seed003 {

/// weights = softmax(Q·Kᵀ/√d_k) with scores set to -inf where mask == 0; → weights·V.
/// Shapes: query (batch, Tq, d), key (batch, Tk, d), value (batch, Tk, v) → (batch, Tq, v).
/// query_mask (batch, Tq) and key_mask (batch, Tk), both given, make mask = their outer
/// product (batch, Tq, Tk) (as the seed: it replaces a mask passed alongside them). A query
/// row whose mask is 0 for every key has only -inf scores, and its output is NaN, as in torch:
/// nothing to attend to has no defined average. As in torch the NaN also reaches the gradient
/// of every value of that batch row (0·NaN), even if the row is dropped afterwards: keep every
/// query with at least one key when training, or use nn::masked_softmax (d2l's -1e6), which
/// gives such a row uniform weights instead.
inline Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                           const Tensor& query_mask = Tensor(), const Tensor& key_mask = Tensor(),
                                           Tensor mask = Tensor()) {
    const double dim_k = static_cast<double>(query.size(-1));
    Tensor scores = bmm(query, key.transpose(1, 2)) / std::sqrt(dim_k);
    if (query_mask.defined() && key_mask.defined()) mask = bmm(query_mask.unsqueeze(-1), key_mask.unsqueeze(1));
    if (mask.defined()) scores = masked_fill(scores, eq(mask, 0.0), -std::numeric_limits<double>::infinity());
    const Tensor weights = softmax(scores, -1);
    return bmm(weights, value);
}

/// One head: its own q, k, v projections (embed_dim → head_dim, with bias), then
/// scaled_dot_product_attention.
class AttentionHead : public nn::Module, public nn::Callable<AttentionHead> {
public:
    AttentionHead(std::size_t embed_dim, std::size_t head_dim) : nn::Module("AttentionHead") {
        q = register_module("q", std::make_shared<nn::Linear>(embed_dim, head_dim));
        k = register_module("k", std::make_shared<nn::Linear>(embed_dim, head_dim));
        v = register_module("v", std::make_shared<nn::Linear>(embed_dim, head_dim));
    }

    Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& query_mask = Tensor(),
                   const Tensor& key_mask = Tensor(), const Tensor& mask = Tensor()) {
        return scaled_dot_product_attention((*q)(query), (*k)(key), (*v)(value), query_mask, key_mask, mask);
    }

    std::shared_ptr<nn::Linear> q, k, v;
};

/// num_heads AttentionHeads of embed_dim / num_heads each (the seed ignores its head_dim
/// argument and so does this), concatenated on the last axis → output_linear.
class MultiHeadAttention : public nn::Module, public nn::Callable<MultiHeadAttention> {
public:
    MultiHeadAttention(std::size_t embed_dim, std::size_t num_heads, std::size_t /*head_dim*/)
        : nn::Module("MultiHeadAttention") {
        if (num_heads == 0) throw Error("MultiHeadAttention: num_heads must be positive, got 0");
        const std::size_t head_dim = embed_dim / num_heads;
        heads = register_module("heads", std::make_shared<nn::ModuleList>());
        for (std::size_t h = 0; h < num_heads; ++h) heads->push_back(std::make_shared<AttentionHead>(embed_dim, head_dim));
        output_linear = register_module("output_linear", std::make_shared<nn::Linear>(embed_dim, embed_dim));
    }

    Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& query_mask = Tensor(),
                   const Tensor& key_mask = Tensor(), const Tensor& mask = Tensor()) {
        std::vector<Tensor> outputs;
        for (const auto& h : *heads)
            outputs.push_back((*h->as<AttentionHead>())(query, key, value, query_mask, key_mask, mask));
        return (*output_linear)(concat(outputs, -1));
    }

    std::shared_ptr<nn::ModuleList> heads;
    std::shared_ptr<nn::Linear> output_linear;
};

}  // namespace xgrad::examples::seed003
