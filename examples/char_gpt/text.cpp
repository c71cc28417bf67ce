#include "text.hpp"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "core/creation.hpp"
#include "core/error.hpp"

namespace xgrad::examples {

std::string CharText::decode(const std::vector<std::int64_t>& ids) const {
    std::string out;
    out.reserve(ids.size());
    for (const std::int64_t id : ids) {
        if (id < 0 || static_cast<std::size_t>(id) >= vocab.size())
            throw Error(fmt::format("char_gpt: id {} is outside the vocabulary of {} characters", id, vocab.size()));
        out.push_back(static_cast<char>(vocab[static_cast<std::size_t>(id)]));
    }
    return out;
}

std::int64_t CharText::id_of(unsigned char c) const {
    const auto it = std::lower_bound(vocab.begin(), vocab.end(), c);
    return it != vocab.end() && *it == c ? it - vocab.begin() : -1;
}

CharText read_text(const std::string& path, std::size_t min_chars) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
        throw Error(fmt::format("--text: '{}' is a folder: expected a text file", path));
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(fmt::format("--text: cannot read '{}' (missing or not readable)", path));
    std::ostringstream buffer;
    buffer << in.rdbuf();
    if (in.bad()) throw Error(fmt::format("--text: reading '{}' failed", path));
    const std::string bytes = buffer.str();
    if (bytes.empty()) throw Error(fmt::format("--text: '{}' is empty: expected a text to learn from", path));
    std::size_t control = 0;
    for (const char ch : bytes) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == 0)
            throw Error(fmt::format("--text: '{}' looks binary (it holds a NUL byte): expected a text file", path));
        if (c < 32 && c != '\t' && c != '\n' && c != '\r') ++control;
    }
    if (control * 10 > bytes.size())
        throw Error(fmt::format("--text: '{}' looks binary ({} of its {} bytes are control characters): expected a "
                                "text file", path, control, bytes.size()));
    if (bytes.size() < min_chars)
        throw Error(fmt::format("--text: '{}' has {} characters, fewer than the {} this run needs (the --block of "
                                "characters and one target, in both the training and the validation split)",
                                path, bytes.size(), min_chars));
    CharText text;
    text.path = path;
    std::array<bool, 256> seen{};
    std::uint64_t h = 14695981039346656037ull;
    for (const char ch : bytes) {
        seen[static_cast<unsigned char>(ch)] = true;
        h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
    }
    text.checksum = h;
    std::array<std::int64_t, 256> id{};
    for (int c = 0; c < 256; ++c)
        if (seen[static_cast<std::size_t>(c)]) {
            id[static_cast<std::size_t>(c)] = static_cast<std::int64_t>(text.vocab.size());
            text.vocab.push_back(static_cast<unsigned char>(c));
        }
    text.ids.reserve(bytes.size());
    for (const char ch : bytes) text.ids.push_back(id[static_cast<unsigned char>(ch)]);
    return text;
}

Split split_text(const CharText& text, double train_fraction) {
    const auto n = static_cast<std::size_t>(train_fraction * static_cast<double>(text.ids.size()));
    return {{text.ids.begin(), text.ids.begin() + static_cast<long>(n)},
            {text.ids.begin() + static_cast<long>(n), text.ids.end()}};
}

CharBatch draw_batch(const std::vector<std::int64_t>& data, std::size_t batch, std::size_t block, Generator& gen) {
    if (data.size() <= block)
        throw Error(fmt::format("char_gpt: a split of {} characters cannot give a block of {} and its target",
                                data.size(), block));
    const std::uint64_t offsets = data.size() - block;  // start in [0, len - block), as torch.randint
    std::vector<std::int64_t> x, y;
    x.reserve(batch * block);
    y.reserve(batch * block);
    for (std::size_t b = 0; b < batch; ++b) {
        const std::size_t start = static_cast<std::size_t>(gen.engine()() % offsets);
        x.insert(x.end(), data.begin() + static_cast<long>(start), data.begin() + static_cast<long>(start + block));
        y.insert(y.end(), data.begin() + static_cast<long>(start + 1),
                 data.begin() + static_cast<long>(start + block + 1));
    }
    return {from_vector(x, {batch, block}), from_vector(y, {batch, block})};
}

std::string visible_char(unsigned char c) {
    if (c == '\n') return "⏎";
    if (c == ' ') return "␣";
    if (c == '\t') return "⇥";
    if (c < 32 || c >= 127) return fmt::format("\\x{:02x}", c);
    return std::string(1, static_cast<char>(c));
}

}  // namespace xgrad::examples
