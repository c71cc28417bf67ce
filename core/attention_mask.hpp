#pragma once
/// AttentionMask: which keys each query may attend to, as the attention ops and layers take
/// it; and ResolvedMask, the same checked against one scores shape with its lengths on the
/// host, the form the kernels read. A layer resolves its mask once at entry and passes the
/// resolved form down, so valid_lens crosses to the host once per call.
#include <cstddef>
#include <vector>

#include "core/tensor.hpp"

namespace xgrad {

class ResolvedMask;

/// Positions not attended get weight exactly 0 and no gradient, whatever the kept scores; a
/// row with nothing to attend is uniform, never NaN (d2l's -1e6 fill gives the same bits
/// wherever it gave those positions 0: see masked_softmax in ops.hpp).
///
///   AttentionMask()                    every key (d2l's valid_lens = None).
///   AttentionMask::valid_lens(lens)    d2l: the first lens[b] keys (lens of shape (batch,)),
///                                      or the first lens[b, i] keys for query i (shape
///                                      (batch, queries)). int64 or floating whole numbers ≥ 0;
///                                      a length beyond the number of keys means every key.
///   AttentionMask::attend_where(mask)  bool, of shape (batch, queries, keys) or (queries, keys)
///                                      (shared by the batch).
///                                      >>> TRUE MEANS "MAY ATTEND"; false is masked out. <<<
///                                      This is F.scaled_dot_product_attention's convention and
///                                      the OPPOSITE of torch.nn.MultiheadAttention's bool
///                                      attn_mask (there true = masked out). Other dtypes throw.
///   AttentionMask::causal()            query i attends keys j ≤ i + (keys − queries): the
///                                      usual lower triangle when keys == queries; with more
///                                      keys than queries (keys cached from earlier decoding
///                                      steps) the queries are the last positions and each
///                                      sees every earlier key (bottom-right aligned, as
///                                      flash-attention; torch's is_causal aligns top-left).
///                                      Needs keys ≥ queries.
class AttentionMask {
public:
    enum class Kind { all, valid_lens, attend_where, causal };

    AttentionMask() = default;
    /// An undefined `lens` gives AttentionMask() (every key), as d2l's None.
    static AttentionMask valid_lens(const Tensor& lens);
    static AttentionMask attend_where(const Tensor& mask);
    static AttentionMask causal();

    Kind kind() const { return m_kind; }
    /// The lengths or the bool mask; undefined for all and causal.
    const Tensor& tensor() const { return m_tensor; }

    /// Checks the mask against scores of shape (batch, queries, keys) and resolves it; errors
    /// name `who`: "MultiHeadAttention: valid_lens must have shape (2,) or (2, 4), got (3,)".
    /// Lengths must be whole, finite and ≥ 0; this reads them to the host (once). `arg` names
    /// the lengths in messages (d2l's sequence_mask calls them valid_len).
    ResolvedMask resolve(const char* who, std::size_t batch, std::size_t queries, std::size_t keys,
                         const char* arg = "valid_lens") const;

private:
    AttentionMask(Kind kind, Tensor t) : m_kind(kind), m_tensor(std::move(t)) {}
    Kind m_kind = Kind::all;
    Tensor m_tensor;
};

/// An AttentionMask checked against scores (batch, queries, keys): for every row
/// r = b·queries + i either how many leading keys it keeps (every key, valid lengths, causal)
/// or, for a bool mask, the mask itself. Made only by AttentionMask::resolve.
class ResolvedMask {
public:
    std::size_t batch() const { return m_batch; }
    std::size_t queries() const { return m_queries; }
    std::size_t keys() const { return m_keys; }
    /// A bool mask decides (attend_where); otherwise every row keeps a prefix.
    bool by_mask() const { return m_where.defined(); }
    /// The bool mask, (batch, queries, keys) or (queries, keys); undefined unless by_mask().
    const Tensor& where() const { return m_where; }
    /// Whether the bool mask is (queries, keys), one for the whole batch.
    bool shared() const { return m_shared; }
    /// Keys kept by each row r = b·queries + i, when !by_mask(); empty when there are no keys.
    const std::vector<std::size_t>& prefix() const { return m_prefix; }
    /// Throws unless these are the scores' (batch, queries, keys): "<op>: the mask was
    /// resolved for scores (2, 3, 4), got (2, 3, 5)".
    void check_fits(const char* op, std::size_t batch, std::size_t queries, std::size_t keys) const;

private:
    friend class AttentionMask;
    ResolvedMask() = default;
    std::size_t m_batch = 0, m_queries = 0, m_keys = 0;
    std::vector<std::size_t> m_prefix;
    Tensor m_where;
    bool m_shared = false;  // fixed when resolved, whatever later happens to the mask tensor
};

}  // namespace xgrad
