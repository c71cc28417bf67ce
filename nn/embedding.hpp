#pragma once
/// Embedding: a lookup table of vectors, as torch.nn.Embedding.
#include <cstddef>

#include "core/random.hpp"
#include "nn/module.hpp"

namespace xgrad::nn {

/// y[..., :] = weight[ids[...], :]. Shapes: ids int64 of any shape, values in
/// [0, num_embeddings) → (*ids.shape, embedding_dim); weight (num_embeddings, embedding_dim),
/// initialised N(0, 1) from `gen` as PyTorch. Backward scatter-adds into the rows used.
/// Prints as `Embedding(10, 8)`.
class Embedding : public Module, public Callable<Embedding> {
public:
    Embedding(SizeArg num_embeddings, SizeArg embedding_dim, Generator& gen = default_generator());

    Tensor forward(const Tensor& ids);

    /// The table parameter itself (num_embeddings, embedding_dim): the handle aliases it.
    const Tensor& weight() const { return parameter("weight"); }
    std::size_t num_embeddings() const { return m_num; }
    std::size_t embedding_dim() const { return m_dim; }
    std::string extra_repr() const override;

private:
    std::size_t m_num;
    std::size_t m_dim;
};

}  // namespace xgrad::nn
