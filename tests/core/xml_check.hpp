#pragma once
// A small XML check for the SVG the library writes (plot/svg.hpp) or Graphviz lays out
// (plot/graph.hpp): every tag closes in order, attributes are quoted, '&' starts an entity, and
// no '<' or '>' appears in text. A prolog (<?xml ...?>, <!DOCTYPE ...>) and comments are skipped.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>
#include <vector>

namespace xgrad::test {

/// "" when `s` is well-formed, else what was wrong.
inline std::string xml_problem(const std::string& s) {
    std::vector<std::string> open;
    std::size_t i = 0;
    auto entity_ok = [&](std::size_t at) {
        for (const char* e : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"})
            if (s.compare(at, std::strlen(e), e) == 0) return true;
        // A numeric character reference: &#45; or &#x2d;
        std::size_t k = at + 1;
        if (k >= s.size() || s[k] != '#') return false;
        const bool hex = ++k < s.size() && (s[k] == 'x' || s[k] == 'X');
        if (hex) ++k;
        const std::size_t digits = k;
        while (k < s.size() && (hex ? std::isxdigit(static_cast<unsigned char>(s[k])) : std::isdigit(static_cast<unsigned char>(s[k]))))
            ++k;
        return k > digits && k < s.size() && s[k] == ';';
    };
    while (i < s.size()) {
        if (s.compare(i, 4, "<!--") == 0) {
            const std::size_t end = s.find("-->", i + 4);
            if (end == std::string::npos) return "unterminated comment";
            i = end + 3;
        } else if (s.compare(i, 2, "<?") == 0 || s.compare(i, 2, "<!") == 0) {
            const std::size_t end = s.find('>', i);
            if (end == std::string::npos) return "unterminated prolog";
            if (!open.empty()) return "a prolog inside an element";
            i = end + 1;
        } else if (s[i] == '<') {
            const std::size_t end = s.find('>', i);
            if (end == std::string::npos) return "unterminated tag";
            std::string tag = s.substr(i + 1, end - i - 1);
            // '>' inside an attribute value would end the tag early: quotes must balance.
            if (std::count(tag.begin(), tag.end(), '"') % 2 != 0) return "unbalanced quotes in <" + tag + ">";
            if (tag.find('<') != std::string::npos) return "'<' inside a tag";
            for (std::size_t a = tag.find('&'); a != std::string::npos; a = tag.find('&', a + 1))
                if (!entity_ok(i + 1 + a)) return "bare '&' in a tag";
            if (tag[0] == '/') {
                if (open.empty() || open.back() != tag.substr(1)) return "mismatched </" + tag.substr(1) + ">";
                open.pop_back();
            } else if (tag.back() != '/') {
                open.push_back(tag.substr(0, tag.find_first_of(" \n")));
            }
            i = end + 1;
        } else {
            if (s[i] == '>') return "'>' in text";
            if (s[i] == '&' && !entity_ok(i)) return "bare '&' in text";
            ++i;
        }
    }
    return open.empty() ? "" : "unclosed <" + open.back() + ">";
}

}  // namespace xgrad::test
