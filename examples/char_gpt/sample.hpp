#pragma once
/// Text from a trained char_gpt model, as nanoGPT's generate().
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/random.hpp"
#include "model.hpp"

namespace xgrad::examples {

/// `count` characters drawn after `prompt` (not empty), each from softmax(logits / temperature)
/// of the last position, keeping only the top_k largest logits (0: all; the rest set to -inf,
/// ties with the k-th kept), drawn with multinomial from `gen`. The context is the last
/// block ids. Runs in eval mode without a graph; returns the drawn ids only.
std::vector<std::int64_t> sample_gpt(CharGpt& model, std::vector<std::int64_t> prompt, std::size_t count,
                                     double temperature, std::size_t top_k, Generator& gen);

}  // namespace xgrad::examples
