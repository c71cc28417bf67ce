#include "sample.hpp"

#include <algorithm>
#include <limits>

#include "core/creation.hpp"
#include "core/error.hpp"
#include "core/ops.hpp"
#include "core/sampling.hpp"

namespace xgrad::examples {

std::vector<std::int64_t> sample_gpt(CharGpt& model, std::vector<std::int64_t> prompt, std::size_t count,
                                     double temperature, std::size_t top_k, Generator& gen) {
    if (prompt.empty()) throw Error("sample_gpt: the prompt must hold at least one character");
    if (!(temperature > 0)) throw Error(fmt::format("sample_gpt: temperature must be > 0, got {}", temperature));
    NoGradGuard no_grad;
    model.eval();
    const std::size_t block = model.spec().block, vocab = model.spec().vocab_size;
    const long k = static_cast<long>(std::min(top_k, vocab));
    std::vector<std::int64_t> out;
    for (std::size_t i = 0; i < count; ++i) {
        const std::size_t n = std::min(prompt.size(), block);
        const std::vector<std::int64_t> context(prompt.end() - static_cast<long>(n), prompt.end());
        // The last position's logits: (1, n, V) → (1, V), scaled by the temperature.
        Tensor logits = model(from_vector(context, {1, n}));
        logits = div(slice(logits, 1, -1, static_cast<long>(n)).reshape({1, -1}), temperature);
        if (k > 0) {
            // torch: v, _ = topk(logits, k); logits[logits < v[:, [-1]]] = -inf
            const Tensor kth = slice(topk(logits, k, -1).values, 1, k - 1, k);
            logits = masked_fill(logits, lt(logits, kth), -std::numeric_limits<double>::infinity());
        }
        const std::int64_t next = multinomial(softmax(logits, -1), 1, false, gen).reshape({-1}).item<std::int64_t>();
        prompt.push_back(next);
        out.push_back(next);
    }
    model.train();
    return out;
}

}  // namespace xgrad::examples
