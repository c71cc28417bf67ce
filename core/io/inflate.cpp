// A raw-deflate decoder in the manner of Mark Adler's puff.c: canonical Huffman codes decoded
// bit by bit. Every read is bounds-checked, and the output grows with what is decoded (never
// sized up front from the caller's claim), stopping with an error beyond `expected` bytes.
#include "core/io/inflate.hpp"

#include <array>
#include <cstdint>

#include <fmt/format.h>

namespace xgrad {

namespace {

class Inflater {
public:
    Inflater(std::string_view in, std::size_t expected, const std::string& where)
        : m_in(in), m_expected(expected), m_where(where) {}

    std::string run() {
        bool last = false;
        while (!last) {
            last = bits(1) != 0;
            switch (bits(2)) {
                case 0: stored(); break;
                case 1: fixed(); break;
                case 2: dynamic(); break;
                default: fail("invalid block type 3");
            }
        }
        if (m_out.size() != m_expected)
            fail(fmt::format("decompressed to {} bytes, but the archive says {}", m_out.size(), m_expected));
        return std::move(m_out);
    }

private:
    static constexpr int kMaxBits = 15, kMaxLit = 286, kMaxDist = 30, kFixedLit = 288;

    struct Huffman {
        std::array<std::uint16_t, kMaxBits + 1> count{};  // codes of each length
        std::array<std::uint16_t, kFixedLit> symbol{};     // symbols ordered by code
    };

    [[noreturn]] void fail(const std::string& msg) const {
        throw Error(fmt::format("{}: corrupt compressed data: {}", m_where, msg));
    }

    unsigned bits(int need) {
        std::uint32_t val = m_bitbuf;
        while (m_bitcnt < need) {
            if (m_pos == m_in.size()) fail("it ends early (truncated)");
            val |= static_cast<std::uint32_t>(static_cast<unsigned char>(m_in[m_pos++])) << m_bitcnt;
            m_bitcnt += 8;
        }
        m_bitbuf = val >> need;
        m_bitcnt -= need;
        return val & ((1u << need) - 1);
    }

    void put(char c) {
        if (m_out.size() == m_expected) fail(fmt::format("it holds more than the {} bytes the archive says", m_expected));
        m_out += c;
    }

    void stored() {
        m_bitbuf = 0;  // a stored block starts on a byte boundary
        m_bitcnt = 0;
        if (m_in.size() - m_pos < 4) fail("it ends early (truncated)");
        const unsigned len = static_cast<unsigned char>(m_in[m_pos]) | static_cast<unsigned char>(m_in[m_pos + 1]) << 8;
        const unsigned nlen = static_cast<unsigned char>(m_in[m_pos + 2]) | static_cast<unsigned char>(m_in[m_pos + 3]) << 8;
        m_pos += 4;
        if (len != (~nlen & 0xffffu)) fail("a stored block's length check fails");
        if (m_in.size() - m_pos < len) fail("it ends early (truncated)");
        if (m_expected - m_out.size() < len) fail(fmt::format("it holds more than the {} bytes the archive says", m_expected));
        m_out.append(m_in.substr(m_pos, len));
        m_pos += len;
    }

    // Builds a canonical code from code lengths. Returns 0 for a complete code, > 0 for an
    // incomplete one, < 0 for an over-subscribed one.
    static int construct(Huffman& h, const std::uint16_t* length, int n) {
        h.count.fill(0);
        for (int s = 0; s < n; ++s) ++h.count[length[s]];
        if (h.count[0] == n) return 0;  // no codes: complete, but decoding will fail
        int left = 1;
        for (int len = 1; len <= kMaxBits; ++len) {
            left <<= 1;
            left -= h.count[len];
            if (left < 0) return left;
        }
        std::array<std::uint16_t, kMaxBits + 1> offs{};
        for (int len = 1; len < kMaxBits; ++len) offs[len + 1] = offs[len] + h.count[len];
        for (int s = 0; s < n; ++s)
            if (length[s] != 0) h.symbol[offs[length[s]]++] = static_cast<std::uint16_t>(s);
        return left;
    }

    int decode(const Huffman& h) {
        int code = 0, first = 0, index = 0;
        for (int len = 1; len <= kMaxBits; ++len) {
            code |= static_cast<int>(bits(1));
            const int count = h.count[len];
            if (code - count < first) return h.symbol[index + (code - first)];
            index += count;
            first += count;
            first <<= 1;
            code <<= 1;
        }
        fail("an invalid Huffman code");
    }

    void codes(const Huffman& lit, const Huffman& dist) {
        static constexpr std::uint16_t len_base[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                                       31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
        static constexpr std::uint8_t len_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                                       2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
        static constexpr std::uint16_t dist_base[30] = {1,    2,    3,    4,    5,    7,     9,     13,    17,  25,
                                                        33,   49,   65,   97,   129,  193,   257,   385,   513, 769,
                                                        1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
        static constexpr std::uint8_t dist_extra[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                                        6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
        for (;;) {
            int symbol = decode(lit);
            if (symbol < 256) {
                put(static_cast<char>(symbol));
            } else if (symbol == 256) {
                return;
            } else {
                symbol -= 257;
                if (symbol >= 29) fail("an invalid length code");
                const std::size_t len = len_base[symbol] + bits(len_extra[symbol]);
                const int ds = decode(dist);
                if (ds >= 30) fail("an invalid distance code");
                const std::size_t d = dist_base[ds] + bits(dist_extra[ds]);
                if (d > m_out.size()) fail("a distance reaches before the start of the data");
                if (m_expected - m_out.size() < len)
                    fail(fmt::format("it holds more than the {} bytes the archive says", m_expected));
                for (std::size_t i = 0; i < len; ++i) m_out += m_out[m_out.size() - d];  // may overlap
            }
        }
    }

    void fixed() {
        static const auto tables = [] {
            std::array<std::uint16_t, kFixedLit + kMaxDist> len{};
            int s = 0;
            for (; s < 144; ++s) len[s] = 8;
            for (; s < 256; ++s) len[s] = 9;
            for (; s < 280; ++s) len[s] = 7;
            for (; s < kFixedLit; ++s) len[s] = 8;
            for (; s < kFixedLit + kMaxDist; ++s) len[s] = 5;
            std::pair<Huffman, Huffman> h;
            construct(h.first, len.data(), kFixedLit);
            construct(h.second, len.data() + kFixedLit, kMaxDist);
            return h;
        }();
        codes(tables.first, tables.second);
    }

    void dynamic() {
        static constexpr std::uint8_t order[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
        const int nlen = static_cast<int>(bits(5)) + 257, ndist = static_cast<int>(bits(5)) + 1;
        const int ncode = static_cast<int>(bits(4)) + 4;
        if (nlen > kMaxLit || ndist > kMaxDist) fail("too many length or distance codes");
        std::array<std::uint16_t, kMaxLit + kMaxDist> lengths{};
        for (int i = 0; i < ncode; ++i) lengths[order[i]] = static_cast<std::uint16_t>(bits(3));
        Huffman lencode, distcode;
        if (construct(lencode, lengths.data(), 19) != 0) fail("an incomplete code-length code");
        int index = 0;
        while (index < nlen + ndist) {
            int symbol = decode(lencode);
            if (symbol < 16) {
                lengths[index++] = static_cast<std::uint16_t>(symbol);
                continue;
            }
            std::uint16_t len = 0;
            int repeat;
            if (symbol == 16) {
                if (index == 0) fail("a repeat with no previous length");
                len = lengths[index - 1];
                repeat = 3 + static_cast<int>(bits(2));
            } else if (symbol == 17) {
                repeat = 3 + static_cast<int>(bits(3));
            } else {
                repeat = 11 + static_cast<int>(bits(7));
            }
            if (index + repeat > nlen + ndist) fail("too many code lengths");
            while (repeat--) lengths[index++] = len;
        }
        if (lengths[256] == 0) fail("no end-of-block code");
        // An incomplete code is allowed only when it is a single code of length 1 (as puff.c).
        int err = construct(lencode, lengths.data(), nlen);
        if (err < 0 || (err > 0 && nlen != lencode.count[0] + lencode.count[1])) fail("an invalid literal/length code");
        err = construct(distcode, lengths.data() + nlen, ndist);
        if (err < 0 || (err > 0 && ndist != distcode.count[0] + distcode.count[1])) fail("an invalid distance code");
        codes(lencode, distcode);
    }

    std::string_view m_in;
    std::size_t m_pos = 0;
    std::uint32_t m_bitbuf = 0;
    int m_bitcnt = 0;
    std::size_t m_expected;
    std::string m_out;
    const std::string& m_where;
};

}  // namespace

std::string inflate(std::string_view deflated, std::size_t expected, const std::string& what) {
    return Inflater(deflated, expected, what).run();
}

}  // namespace xgrad
