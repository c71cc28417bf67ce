#include "positional_encoding.hpp"

#include <cmath>
#include <new>

#include "core/call_context.hpp"
#include "core/creation.hpp"
#include "core/ops.hpp"

namespace xgrad::nn {

namespace {

void check_positions(const char* who, const Tensor& X, std::size_t num_hiddens, std::size_t offset,
                     std::size_t max_len) {
    if (X.dim() != 3 || X.shape()[2] != num_hiddens)
        throw Error(fmt::format("{}: X must have shape (batch, steps, num_hiddens = {}), got {}", who,
                                num_hiddens, shape_str(X.shape())));
    if (offset + X.size(1) > max_len)
        throw Error(fmt::format("{}: positions {}..{} exceed max_len = {} (X has shape {}, offset {})", who,
                                offset, offset + X.size(1) - 1, max_len, shape_str(X.shape()), offset));
}

}  // namespace

// Both constructed as the user's call (detail::enter_constructor): a refused dropout p, or
// running out of memory for the table, names the module being made.
PositionalEncoding::PositionalEncoding(SizeArg num_hiddens_arg, double dropout, SizeArg max_len_arg) try
    : Module(detail::enter_constructor("PositionalEncoding")),
      m_num_hiddens(num_hiddens_arg.get("PositionalEncoding", "num_hiddens")),
      m_max_len(max_len_arg.get("PositionalEncoding", "max_len")),
      m_dropout(register_module("dropout", std::make_shared<Dropout>(dropout))) {
    const std::size_t num_hiddens = m_num_hiddens, max_len = m_max_len;
    if (num_hiddens == 0 || max_len == 0)
        throw Error(fmt::format("PositionalEncoding: num_hiddens and max_len must be positive, got {} and {}",
                                num_hiddens, max_len));
    // The table is counted before it is sized: max_len·num_hiddens can wrap around.
    const Shape shape{1, max_len, num_hiddens};
    checked_numel("PositionalEncoding", shape);
    std::vector<double> P;
    try {
        P.resize(max_len * num_hiddens);
    } catch (const std::bad_alloc&) {
        throw Error(fmt::format("PositionalEncoding: out of memory for a table of shape {} (max_len {}, "
                                "num_hiddens {})",
                                shape_str(shape), max_len, num_hiddens));
    }
    const double d = static_cast<double>(num_hiddens);
    for (std::size_t i = 0; i < max_len; ++i)
        for (std::size_t j = 0; 2 * j < num_hiddens; ++j) {
            const double angle = static_cast<double>(i) / std::pow(10000.0, static_cast<double>(2 * j) / d);
            P[i * num_hiddens + 2 * j] = std::sin(angle);
            if (2 * j + 1 < num_hiddens) P[i * num_hiddens + 2 * j + 1] = std::cos(angle);
        }
    m_P = from_vector(P, shape);
    detail::leave_call();
} catch (...) {
    detail::leave_constructor("PositionalEncoding");
}

Tensor PositionalEncoding::forward(const Tensor& X, std::size_t offset) {
    return as_call("PositionalEncoding", [&]() -> Tensor {
        check_positions("PositionalEncoding", X, m_num_hiddens, offset, m_max_len);
        const long start = static_cast<long>(offset);
        const Tensor P = slice(m_P, 1, start, start + X.size(1));  // (1, T, d)
        return m_dropout->forward(X + cast(P, X.dtype()));
    });
}

LearnedPositionalEmbedding::LearnedPositionalEmbedding(SizeArg max_len, SizeArg num_hiddens,
                                                       double dropout, Generator& gen) try
    : Module(detail::enter_constructor("LearnedPositionalEmbedding")),
      m_max_len(max_len.get("LearnedPositionalEmbedding", "max_len")),
      m_num_hiddens(num_hiddens.get("LearnedPositionalEmbedding", "num_hiddens")),
      m_embedding(register_module("embedding", std::make_shared<Embedding>(m_max_len, m_num_hiddens, gen))),
      m_dropout(register_module("dropout", std::make_shared<Dropout>(dropout))) {
    detail::leave_call();
} catch (...) {
    detail::leave_constructor("LearnedPositionalEmbedding");
}

Tensor LearnedPositionalEmbedding::forward(const Tensor& X, std::size_t offset) {
    return as_call("LearnedPositionalEmbedding", [&]() -> Tensor {
        check_positions("LearnedPositionalEmbedding", X, m_num_hiddens, offset, m_max_len);
        const Tensor positions = arange(offset, offset + X.size(1));  // int64, as Embedding takes
        const Tensor E = unsqueeze(m_embedding->forward(positions), 0);  // (1, T, d)
        return m_dropout->forward(X + E);
    });
}

}  // namespace xgrad::nn
