#pragma once
/// Position information added to a sequence of vectors: d2l's fixed sinusoidal
/// PositionalEncoding, and a learned alternative (an Embedding of positions).
///
/// Neither scales X: d2l's TransformerEncoder multiplies the embeddings by √num_hiddens before
/// its PositionalEncoding, and that choice belongs to the encoder that uses these modules (a
/// measured note: sinusoidal encoding after √d scaling stalled on the reverse task where learned
/// positions reached 100%).
#include <cstddef>
#include <memory>

#include "core/random.hpp"
#include "nn/dropout.hpp"
#include "nn/embedding.hpp"
#include "nn/module.hpp"

namespace xgrad::nn {

/// d2l's PositionalEncoding: y = dropout(X + P[:, offset : offset + T, :]) with the fixed table
///   P[0, i, 2j] = sin(i / 10000^(2j/d)),  P[0, i, 2j+1] = cos(i / 10000^(2j/d)).
/// Shapes: X (batch, T, num_hiddens) with offset + T ≤ max_len → same; table (1, max_len, d),
/// float32, computed in double, cast to X's dtype on use. Not a parameter (not in state_dict).
/// `offset` gives the position of X's first step (incremental decoding; d2l always uses 0).
class PositionalEncoding : public Module, public Callable<PositionalEncoding> {
public:
    PositionalEncoding(SizeArg num_hiddens, double dropout, SizeArg max_len = 1000);

    Tensor forward(const Tensor& X, std::size_t offset = 0);

    /// The table P itself, (1, max_len, num_hiddens): the handle aliases what forward adds.
    const Tensor& table() const { return m_P; }

private:
    std::size_t m_num_hiddens;
    std::size_t m_max_len;
    std::shared_ptr<Dropout> m_dropout;
    Tensor m_P;
};

/// Learned positions: y = dropout(X + E[offset : offset + T]) with E an Embedding(max_len,
/// num_hiddens) ("embedding.weight" in the state_dict), initialised N(0, 1) from `gen`.
/// Shapes: X (batch, T, num_hiddens), offset + T ≤ max_len → same.
class LearnedPositionalEmbedding : public Module, public Callable<LearnedPositionalEmbedding> {
public:
    LearnedPositionalEmbedding(SizeArg max_len, SizeArg num_hiddens, double dropout,
                               Generator& gen = default_generator());

    Tensor forward(const Tensor& X, std::size_t offset = 0);

private:
    std::size_t m_max_len;
    std::size_t m_num_hiddens;
    std::shared_ptr<Embedding> m_embedding;
    std::shared_ptr<Dropout> m_dropout;
};

}  // namespace xgrad::nn
