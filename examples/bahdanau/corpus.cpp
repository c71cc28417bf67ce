#include "corpus.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/creation.hpp"
#include "core/error.hpp"

namespace xgrad::examples::bahdanau {

namespace {

// Each word class as (source word, target word) pairs.
using Lexicon = std::vector<std::pair<std::string, std::string>>;
const Lexicon kDeterminers = {{"the", "ka"}, {"a", "mi"}};
const Lexicon kNouns = {{"cat", "miro"},     {"dog", "taku"},   {"bird", "pila"},  {"fish", "sunu"},
                        {"child", "reba"},   {"teacher", "lomi"}, {"farmer", "kesa"}, {"horse", "bodo"},
                        {"king", "vara"},    {"girl", "nia"}};
const Lexicon kAdjectives = {{"big", "ona"}, {"small", "tiki"}, {"red", "ruba"},
                             {"old", "vesi"}, {"happy", "lalu"}, {"quiet", "semo"}};
const Lexicon kVerbs = {{"sees", "mira"},  {"likes", "amo"}, {"follows", "segi"}, {"feeds", "paso"},
                        {"helps", "juva"}, {"finds", "trova"}, {"calls", "voka"},  {"hears", "odi"}};
const Lexicon kAdverbs = {{"today", "oggi"}, {"again", "ankor"}, {"quickly", "lesto"}, {"often", "spes"}};

// Sentences the language holds: (2 determiners · 7 adjective-or-none · 10 nouns)² · 8 verbs · 5 adverb-or-none.
constexpr std::size_t kSentences = (2 * 7 * 10) * (2 * 7 * 10) * 8 * 5;

std::size_t pick(Generator& gen, std::size_t n) {
    return std::min(n - 1, static_cast<std::size_t>(gen.next_double() * static_cast<double>(n)));
}

// One index into `words`, or none (with probability 1/2) when `optional`.
const std::pair<std::string, std::string>* draw(Generator& gen, const Lexicon& words, bool optional) {
    if (optional && gen.next_double() < 0.5) return nullptr;
    return &words[pick(gen, words.size())];
}

Words all_words(bool source) {
    Words words = {"<pad>", "<bos>", "<eos>", "."};
    for (const Lexicon* lexicon : {&kDeterminers, &kNouns, &kAdjectives, &kVerbs, &kAdverbs})
        for (const auto& [s, t] : *lexicon) words.push_back(source ? s : t);
    return words;
}

// Python's str.split(' '): "" gives one empty token, as d2l's bleu counts it.
Words split_spaces(const std::string& text) {
    Words out(1);
    for (const char ch : text) {
        if (ch == ' ') out.emplace_back();
        else out.back() += ch;
    }
    return out;
}

}  // namespace

std::string join(const Words& words) {
    std::string s;
    for (const std::string& w : words) s += (s.empty() ? "" : " ") + w;
    return s;
}

Pair sample_pair(Generator& gen) {
    const auto* det1 = draw(gen, kDeterminers, false);
    const auto* adj1 = draw(gen, kAdjectives, true);
    const auto* noun1 = draw(gen, kNouns, false);
    const auto* verb = draw(gen, kVerbs, false);
    const auto* det2 = draw(gen, kDeterminers, false);
    const auto* adj2 = draw(gen, kAdjectives, true);
    const auto* noun2 = draw(gen, kNouns, false);
    const auto* adv = draw(gen, kAdverbs, true);
    Pair p;
    // Source: det [adj] noun verb det [adj] noun [adv] .
    p.source.push_back(det1->first);
    if (adj1) p.source.push_back(adj1->first);
    p.source.push_back(noun1->first);
    p.source.push_back(verb->first);
    p.source.push_back(det2->first);
    if (adj2) p.source.push_back(adj2->first);
    p.source.push_back(noun2->first);
    if (adv) p.source.push_back(adv->first);
    p.source.push_back(".");
    // Target: [adv] noun [adj] det noun [adj] det verb .
    if (adv) p.target.push_back(adv->second);
    p.target.push_back(noun1->second);
    if (adj1) p.target.push_back(adj1->second);
    p.target.push_back(det1->second);
    p.target.push_back(noun2->second);
    if (adj2) p.target.push_back(adj2->second);
    p.target.push_back(det2->second);
    p.target.push_back(verb->second);
    p.target.push_back(".");
    return p;
}

std::size_t held_out_capacity() { return kSentences / 8; }

std::vector<Pair> held_out_pairs(std::size_t count, std::uint64_t seed) {
    if (count > held_out_capacity())
        throw Error(fmt::format("--held-out {}: the language has {} sentences, and at most an eighth of them ({}) "
                                "may be held out", count, kSentences, held_out_capacity()));
    Generator gen(seed);
    std::set<std::string> seen;
    std::vector<Pair> out;
    while (out.size() < count) {
        Pair p = sample_pair(gen);
        if (seen.insert(join(p.source)).second) out.push_back(std::move(p));
    }
    return out;
}

std::vector<Pair> training_pairs(std::size_t n, const std::set<std::string>& held_out, Generator& gen) {
    std::vector<Pair> out;
    while (out.size() < n) {
        Pair p = sample_pair(gen);
        if (!held_out.count(join(p.source))) out.push_back(std::move(p));
    }
    return out;
}

Vocab::Vocab(const Words& words) : m_tokens(words) {
    for (std::size_t i = 0; i < m_tokens.size(); ++i) m_index[m_tokens[i]] = static_cast<std::int64_t>(i);
}

std::int64_t Vocab::operator[](const std::string& token) const {
    const auto it = m_index.find(token);
    if (it == m_index.end()) throw Error(fmt::format("bahdanau: the vocabulary has no token '{}'", token));
    return it->second;
}

const std::string& Vocab::token(std::int64_t id) const { return m_tokens.at(static_cast<std::size_t>(id)); }

const Vocab& source_vocab() {
    static const Vocab v(all_words(true));
    return v;
}

const Vocab& target_vocab() {
    static const Vocab v(all_words(false));
    return v;
}

Batch make_batch(const std::vector<Pair>& pairs, std::size_t num_steps) {
    const Vocab &sv = source_vocab(), &tv = target_vocab();
    const std::size_t b = pairs.size();
    std::vector<std::int64_t> src(b * num_steps, sv["<pad>"]), src_len(b), dec(b * num_steps, tv["<pad>"]),
        label(b * num_steps, tv["<pad>"]), label_len(b);
    // d2l's truncate_pad of the sentence and its <eos>, as ids.
    const auto ids = [&](const Vocab& v, const Words& words) {
        std::vector<std::int64_t> out;
        for (const std::string& w : words) out.push_back(v[w]);
        out.push_back(v["<eos>"]);
        out.resize(std::min(out.size(), num_steps));
        return out;
    };
    for (std::size_t i = 0; i < b; ++i) {
        const std::vector<std::int64_t> s = ids(sv, pairs[i].source), t = ids(tv, pairs[i].target);
        std::copy(s.begin(), s.end(), src.begin() + static_cast<long>(i * num_steps));
        std::copy(t.begin(), t.end(), label.begin() + static_cast<long>(i * num_steps));
        src_len[i] = static_cast<std::int64_t>(s.size());
        label_len[i] = static_cast<std::int64_t>(t.size());
        dec[i * num_steps] = tv["<bos>"];
        for (std::size_t j = 0; j + 1 < num_steps; ++j) dec[i * num_steps + j + 1] = label[i * num_steps + j];
    }
    return {from_vector(src, {b, num_steps}), from_vector(src_len, {b}), from_vector(dec, {b, num_steps}),
            from_vector(label, {b, num_steps}), from_vector(label_len, {b})};
}

double bleu(const std::string& pred, const std::string& label, std::size_t k) {
    const Words p = split_spaces(pred), l = split_spaces(label);
    const double len_pred = static_cast<double>(p.size()), len_label = static_cast<double>(l.size());
    double score = std::exp(std::min(0.0, 1.0 - len_label / len_pred));
    const auto gram = [](const Words& w, std::size_t i, std::size_t n) {  // ' '.join(w[i:i + n])
        std::string key = w[i];
        for (std::size_t j = i + 1; j < i + n; ++j) key += " " + w[j];
        return key;
    };
    for (std::size_t n = 1; n <= k; ++n) {
        if (p.size() < n) return 0.0;  // d2l divides 0 by 0 here
        std::map<std::string, int> label_subs;
        for (std::size_t i = 0; i + n <= l.size(); ++i)
            ++label_subs[gram(l, i, n)];
        double matches = 0;
        for (std::size_t i = 0; i + n <= p.size(); ++i) {
            const auto it = label_subs.find(gram(p, i, n));
            if (it != label_subs.end() && it->second > 0) {
                matches += 1;
                --it->second;
            }
        }
        score *= std::pow(matches / (len_pred - static_cast<double>(n) + 1), std::pow(0.5, static_cast<double>(n)));
    }
    return score;
}

}  // namespace xgrad::examples::bahdanau
