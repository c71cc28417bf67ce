#include "embedding.hpp"

#include "core/call_context.hpp"
#include "core/creation.hpp"
#include "core/ops.hpp"

namespace xgrad::nn {

Embedding::Embedding(SizeArg num_embeddings_arg, SizeArg embedding_dim_arg, Generator& gen)
    : Module("Embedding"),
      m_num(num_embeddings_arg.get("Embedding", "num_embeddings")),
      m_dim(embedding_dim_arg.get("Embedding", "embedding_dim")) {
    const std::size_t num_embeddings = m_num, embedding_dim = m_dim;
    if (num_embeddings == 0 || embedding_dim == 0)
        throw Error(fmt::format("Embedding: num_embeddings and embedding_dim must be positive, got {} and {}",
                                num_embeddings, embedding_dim));
    as_call("Embedding", [&] { register_parameter("weight", randn({num_embeddings, embedding_dim}, kFloat32, gen)); });
}

Tensor Embedding::forward(const Tensor& ids) {
    return as_call("Embedding", [&]() -> Tensor {
        if (ids.dtype() != kInt64)
            throw Error(fmt::format("Embedding: ids must be int64, got {}", dtype_name(ids.dtype())));
        const auto v = ids.to_vector<std::int64_t>();
        for (std::size_t k = 0; k < v.size(); ++k)
            if (v[k] < 0 || static_cast<std::size_t>(v[k]) >= m_num)
                throw Error(fmt::format("Embedding: ids must be in [0, {}), got {} (element {} of shape {})",
                                        m_num, v[k], k, shape_str(ids.shape())));
        return index_select(weight(), 0, ids);  // (*ids.shape, dim)
    });
}

std::string Embedding::extra_repr() const { return fmt::format("{}, {}", m_num, m_dim); }

}  // namespace xgrad::nn
