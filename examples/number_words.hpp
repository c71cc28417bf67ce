#pragma once
/// The toy translation task of examples/seq2seq: English number words to digits,
/// "three hundred twelve thousand five" → "312005". Source and target differ in length and
/// order ("twelve" is two digits, "thousand" stands for a place, zeros appear from nowhere),
/// so the decoder must attend across the sentence rather than copy position by position.
///
/// Numbers lie in [0, 10^max_digits), max_digits ≤ 6. Samples draw the digit count uniformly
/// first, so short numbers are as common as long ones.
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <xgrad/xgrad.hpp>

namespace number_words {

/// The words of n in [0, 10^6): 0 → "zero", 40 → "forty", 1017 → "one thousand seventeen",
/// 300200 → "three hundred thousand two hundred". No "and", no hyphens.
inline std::vector<std::string> spell(std::int64_t n) {
    static const char* const small[] = {"zero",    "one",     "two",       "three",    "four",
                                        "five",    "six",     "seven",     "eight",    "nine",
                                        "ten",     "eleven",  "twelve",    "thirteen", "fourteen",
                                        "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"};
    static const char* const tens[] = {"", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty",
                                       "ninety"};
    if (n < 0 || n >= 1000000)
        throw std::invalid_argument("spell: n must lie in [0, 1000000), got " + std::to_string(n));
    if (n == 0) return {"zero"};
    std::vector<std::string> words;
    auto below_thousand = [&](std::int64_t k) {  // 1 ≤ k ≤ 999
        if (k >= 100) {
            words.emplace_back(small[k / 100]);
            words.emplace_back("hundred");
            k %= 100;
        }
        if (k >= 20) {
            words.emplace_back(tens[k / 10]);
            k %= 10;
            if (k > 0) words.emplace_back(small[k]);
        } else if (k > 0) {
            words.emplace_back(small[k]);
        }
    };
    if (n >= 1000) {
        below_thousand(n / 1000);
        words.emplace_back("thousand");
    }
    if (n % 1000 > 0) below_thousand(n % 1000);
    return words;
}

/// A token list and its reverse index. Index 0 is "<pad>".
class Vocab {
public:
    explicit Vocab(std::vector<std::string> tokens) : m_tokens(std::move(tokens)) {
        for (std::size_t i = 0; i < m_tokens.size(); ++i) m_index[m_tokens[i]] = static_cast<std::int64_t>(i);
    }
    std::size_t size() const { return m_tokens.size(); }
    std::int64_t operator[](const std::string& token) const {
        const auto it = m_index.find(token);
        if (it == m_index.end()) throw std::invalid_argument("Vocab: unknown token '" + token + "'");
        return it->second;
    }
    const std::string& token(std::int64_t id) const { return m_tokens.at(static_cast<std::size_t>(id)); }

private:
    std::vector<std::string> m_tokens;
    std::map<std::string, std::int64_t> m_index;
};

/// Source: <pad>, <eos> and the 30 number words. Target: <pad>, <bos>, <eos> and the digits.
inline const Vocab& source_vocab() {
    static const Vocab v({"<pad>", "<eos>", "zero", "one", "two", "three", "four", "five", "six", "seven", "eight",
                          "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
                          "eighteen", "nineteen", "twenty", "thirty", "forty", "fifty", "sixty", "seventy",
                          "eighty", "ninety", "hundred", "thousand"});
    return v;
}
inline const Vocab& target_vocab() {
    static const Vocab v({"<pad>", "<bos>", "<eos>", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9"});
    return v;
}

/// A number with a digit count uniform in 1..max_digits, then uniform among those numbers.
inline std::int64_t sample_number(xgrad::Generator& gen, int max_digits) {
    const int digits = 1 + static_cast<int>(gen.next_double() * max_digits);
    std::int64_t lo = 1;
    for (int i = 1; i < digits; ++i) lo *= 10;
    const std::int64_t hi = lo * 10;
    if (digits == 1) lo = 0;
    return lo + static_cast<std::int64_t>(gen.next_double() * static_cast<double>(hi - lo));
}

/// Up to `count` distinct numbers, the fixed held-out set (drawn from its own generator). At
/// most a fifth of the numbers of each length are taken, so that training still sees most of
/// every length (2 of the 10 one-digit numbers, 18 of the 90 two-digit ones, ...). Never 0:
/// it is the only number with the word "zero", which training would then never show.
inline std::vector<std::int64_t> held_out_numbers(std::size_t count, int max_digits, std::uint64_t seed) {
    xgrad::Generator gen(seed);
    std::set<std::int64_t> seen;
    std::vector<std::int64_t> out;
    std::vector<std::size_t> taken(7, 0);
    for (std::size_t tries = 0; out.size() < count && tries < 100 * count; ++tries) {
        const std::int64_t n = sample_number(gen, max_digits);
        const std::size_t len = std::to_string(n).size();
        std::size_t of_length = len == 1 ? 10 : 9;
        for (std::size_t i = 1; i < len; ++i) of_length *= 10;
        if (n != 0 && taken[len] < of_length / 5 && seen.insert(n).second) {
            out.push_back(n);
            ++taken[len];
        }
    }
    return out;
}

/// One padded batch, d2l's layout:
///   src (B, Ts)      source word ids then <eos>, padded with <pad>;  src_valid_len (B,)
///   dec_input (B, T) <bos> then the digits (teacher forcing: the target shifted right)
///   label (B, T)     the digits then <eos>, padded with <pad> (ignored by the loss)
/// Ts and T are the longest in the batch.
struct Batch {
    xgrad::Tensor src, src_valid_len, dec_input, label;
};

inline Batch make_batch(const std::vector<std::int64_t>& numbers) {
    const Vocab& sv = source_vocab();
    const Vocab& tv = target_vocab();
    std::vector<std::vector<std::int64_t>> srcs, tgts;
    std::size_t ts = 0, tt = 0;
    for (std::int64_t n : numbers) {
        std::vector<std::int64_t> s, t;
        for (const auto& w : spell(n)) s.push_back(sv[w]);
        s.push_back(sv["<eos>"]);
        for (char c : std::to_string(n)) t.push_back(tv[std::string(1, c)]);
        t.push_back(tv["<eos>"]);
        ts = std::max(ts, s.size());
        tt = std::max(tt, t.size());
        srcs.push_back(std::move(s));
        tgts.push_back(std::move(t));
    }
    const std::size_t b = numbers.size();
    std::vector<std::int64_t> src(b * ts, sv["<pad>"]), valid(b), dec(b * tt, tv["<pad>"]), label(b * tt, tv["<pad>"]);
    for (std::size_t i = 0; i < b; ++i) {
        valid[i] = static_cast<std::int64_t>(srcs[i].size());
        for (std::size_t j = 0; j < srcs[i].size(); ++j) src[i * ts + j] = srcs[i][j];
        dec[i * tt] = tv["<bos>"];
        for (std::size_t j = 0; j < tgts[i].size(); ++j) {
            label[i * tt + j] = tgts[i][j];
            if (j + 1 < tt) dec[i * tt + j + 1] = tgts[i][j];
        }
    }
    return {xgrad::from_vector(src, {b, ts}), xgrad::from_vector(valid, {b}), xgrad::from_vector(dec, {b, tt}),
            xgrad::from_vector(label, {b, tt})};
}

/// The words joined by spaces.
inline std::string join(const std::vector<std::string>& words) {
    std::string s;
    for (const auto& w : words) s += (s.empty() ? "" : " ") + w;
    return s;
}

}  // namespace number_words
