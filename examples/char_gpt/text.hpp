#pragma once
/// char_gpt's data: a text file as a sequence of characters (bytes), its vocabulary, the
/// train/validation split and the batches drawn from it, as nanoGPT's shakespeare_char.
#include <cstdint>
#include <string>
#include <vector>

#include "core/random.hpp"
#include "core/tensor.hpp"

namespace xgrad::examples {

/// The text every Debian machine has (base-files), char_gpt's default.
inline const char* const kDefaultText = "/usr/share/common-licenses/GPL-3";

/// A text and its character vocabulary: the distinct bytes in ascending order (nanoGPT's
/// sorted(set(data))), each byte's id its position there.
struct CharText {
    std::string path;
    std::vector<unsigned char> vocab;   ///< id → byte
    std::vector<std::int64_t> ids;      ///< the whole text as ids
    std::uint64_t checksum = 0;         ///< FNV-1a of the bytes: a checkpoint records which text it learned

    std::size_t vocab_size() const { return vocab.size(); }
    /// Ids back to text; an id outside the vocabulary throws.
    std::string decode(const std::vector<std::int64_t>& ids) const;
    /// A byte's id, or -1 when the text never has it.
    std::int64_t id_of(unsigned char c) const;
};

/// Reads `path` whole. Throws xgrad::Error naming --text, the file and what is wrong when it
/// cannot be read, is empty, looks binary (a NUL byte, or more than a tenth of its bytes control
/// characters other than tab, newline and carriage return), or has fewer than `min_chars`
/// characters (the model needs a block and a target in both splits).
CharText read_text(const std::string& path, std::size_t min_chars);

/// The first `train_fraction` of the ids (nanoGPT: 0.9) and the rest.
struct Split {
    std::vector<std::int64_t> train, val;
};
Split split_text(const CharText& text, double train_fraction);

/// `batch` windows of `block` + 1 characters from random offsets of `data` (drawn from `gen`,
/// one randint per row, as nanoGPT's get_batch): inputs the first `block`, targets the last
/// `block`, both int64 (batch, block). data must hold more than `block` ids.
struct CharBatch {
    Tensor inputs, targets;
};
CharBatch draw_batch(const std::vector<std::int64_t>& data, std::size_t batch, std::size_t block, Generator& gen);

/// The characters as a reader would see them in a plot's tick labels: newline as ⏎, space as
/// ␣, tab as ⇥, other control bytes as \xNN.
std::string visible_char(unsigned char c);

}  // namespace xgrad::examples
