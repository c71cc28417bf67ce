#pragma once
/// bahdanau's corpus: a toy translation between two made-up languages, generated from --seed.
///
/// The source reads as English, subject-verb-object with adjectives before their nouns and an
/// optional adverb at the end; the target puts the adverb first, each adjective and determiner
/// after its noun, and the verb last, word for word otherwise:
///
///   the old farmer feeds a small horse today .  =>  oggi kesa vesi ka bodo tiki mi paso .
///
/// Every target word stands for exactly one source word, in another order, so the decoder's
/// attention over the source should show the reordering as a permutation.
///
/// A pair is drawn from a Generator by next_double() alone, in a fixed order (determiner,
/// adjective or none, noun, verb, determiner, adjective or none, noun, adverb or none), so that
/// tools/bahdanau_twin.py, with its own mt19937_64, draws the same pairs from the same seed.
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/random.hpp"
#include "core/tensor.hpp"

namespace xgrad::examples::bahdanau {

/// A sentence as its words.
using Words = std::vector<std::string>;

struct Pair {
    Words source, target;
};

/// The words joined by single spaces: d2l's sentences.
std::string join(const Words& words);

/// Draws one pair.
Pair sample_pair(Generator& gen);

/// `count` distinct pairs from a generator of their own (seeded from `seed`): the held-out set.
/// Throws xgrad::Error when count is more than the language has room for (1/8 of its sentences).
std::vector<Pair> held_out_pairs(std::size_t count, std::uint64_t seed);

/// How many pairs held_out_pairs() may hold back.
std::size_t held_out_capacity();

/// Tokens and their ids, d2l's Vocab without frequencies: "<pad>" is 0, "<bos>" 1, "<eos>" 2.
class Vocab {
public:
    explicit Vocab(const Words& words);
    std::size_t size() const { return m_tokens.size(); }
    /// The id of `token`; throws xgrad::Error for a token it does not hold.
    std::int64_t operator[](const std::string& token) const;
    const std::string& token(std::int64_t id) const;

private:
    Words m_tokens;
    std::map<std::string, std::int64_t> m_index;
};

/// The two vocabularies: the special tokens, then every word of that language.
const Vocab& source_vocab();
const Vocab& target_vocab();

/// d2l's batch of `num_steps` tokens per sentence (truncate_pad: each sentence then <eos>,
/// padded with <pad>):
///   src (B, num_steps) int64, src_valid_len (B,) the source's tokens with <eos>;
///   dec_input (B, num_steps) <bos> then the target shifted right (teacher forcing);
///   label (B, num_steps) the target then <eos>, label_valid_len (B,).
struct Batch {
    Tensor src, src_valid_len, dec_input, label, label_valid_len;
};
Batch make_batch(const std::vector<Pair>& pairs, std::size_t num_steps);

/// The longest sentence, <eos> included: the smallest num_steps that truncates nothing.
constexpr std::size_t kLongestSentence = 10;

/// Draws `n` training pairs, skipping the held-out ones (`held_out` holds their joined sources).
std::vector<Pair> training_pairs(std::size_t n, const std::set<std::string>& held_out, Generator& gen);

/// d2l's bleu(pred_seq, label_seq, k): exp(min(0, 1 − len_label/len_pred)) times the product
/// over n = 1..k of p_n^(1/2^n), p_n the clipped n-gram precision, on space-separated tokens.
/// Where d2l divides by zero (a prediction with fewer than n tokens), p_n is taken as 0.
double bleu(const std::string& pred, const std::string& label, std::size_t k);

}  // namespace xgrad::examples::bahdanau
