// .npy and .npz. Byte layouts: numpy's NEP 1 (doc/neps/nep-0001-npy-format.rst) and PKWARE's
// APPNOTE.TXT sections 4.3.7 (local header), 4.3.12 (central directory), 4.3.16 (end record).
#include "core/io/npz.hpp"

#define ZLIB_CONST  // zlib's input pointers become const: inflate and deflate never write input
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <map>
#include <new>
#include <set>

#include "core/io/atomic_file.hpp"
#include "core/runtime/alloc.hpp"
#include "core/node.hpp"
#include "core/ops.hpp"

namespace xgrad {

static_assert(sizeof(bool) == 1, "bool arrays are written as one byte per element");
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npz.cpp writes host memory as little-endian data; add byte swapping for this platform"
#endif

namespace {

constexpr std::string_view kNpyMagic("\x93NUMPY", 6);
constexpr std::size_t kArrayAlign = 64;      // numpy's ARRAY_ALIGN
constexpr std::size_t kGrowthDigits = 21;    // numpy's GROWTH_AXIS_MAX_DIGITS

constexpr std::uint32_t kLocalSig = 0x04034b50;
constexpr std::uint32_t kCentralSig = 0x02014b50;
constexpr std::uint32_t kEndSig = 0x06054b50;
constexpr std::uint32_t kZip64LocatorSig = 0x07064b50;
constexpr std::size_t kLocalSize = 30, kCentralSize = 46, kEndSize = 22;
constexpr std::uint16_t kFlagEncrypted = 1u << 0, kFlagDescriptor = 1u << 3, kFlagUtf8 = 1u << 11;
constexpr std::uint16_t kDosDate1980 = (0 << 9) | (1 << 5) | 1;  // 1980-01-01, as np.savez

const char* descr_of(Dtype d) {
    switch (d) {
        case Dtype::Float32: return "<f4";
        case Dtype::Float64: return "<f8";
        case Dtype::Int64: return "<i8";
        case Dtype::Bool: return "|b1";
        case Dtype::BFloat16: break;  // written as float32 (as_stored)
    }
    return "?";
}

std::size_t item_size(Dtype d) {
    switch (d) {
        case Dtype::Float32: return 4;
        case Dtype::Float64: return 8;
        case Dtype::Int64: return 8;
        case Dtype::Bool: return 1;
        case Dtype::BFloat16: break;  // never in a file
    }
    return 0;
}

// Zip's CRC-32 of `bytes`, continuing from `crc` (0 to start), so pieces can be fed in order.
std::uint32_t crc32_update(std::uint32_t crc, std::string_view bytes) {
    // zlib reads a null buffer (an empty tensor's data) as "give the initial value": 0.
    if (bytes.empty()) return crc;
    return static_cast<std::uint32_t>(
        crc32_z(crc, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

// --- little-endian fields -------------------------------------------------------------------

void put16(std::string& s, std::uint16_t v) {
    s += static_cast<char>(v & 0xff);
    s += static_cast<char>(v >> 8);
}
void put32(std::string& s, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}
// Callers have checked that [at, at+2) / [at, at+4) lies inside `b`.
std::uint16_t get16(std::string_view b, std::size_t at) {
    return static_cast<std::uint16_t>(static_cast<unsigned char>(b[at]) |
                                      static_cast<unsigned char>(b[at + 1]) << 8);
}
std::uint32_t get32(std::string_view b, std::size_t at) {
    std::uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<std::size_t>(i)]);
    return v;
}
// Whether [offset, offset+length) lies inside a buffer of `size` bytes, without overflow.
bool fits(std::size_t offset, std::size_t length, std::size_t size) {
    return offset <= size && length <= size - offset;
}

// Up to 8 bytes as a C-style escaped string, for "found ..." in messages.
std::string show_bytes(std::string_view b) {
    std::string out;
    for (unsigned char c : b.substr(0, 8)) {
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"') out += static_cast<char>(c);
        else out += fmt::format("\\x{:02x}", c);
    }
    return '"' + out + '"';
}

// --- .npy writing ---------------------------------------------------------------------------

// What a tensor is written as: itself, or for bfloat16 (numpy has none) its float32 values, which
// hold it exactly; loading that into a bfloat16 destination rounds it back unchanged.
Tensor as_stored(const Tensor& t) { return t.dtype() == kBFloat16 ? cast(t, kFloat32).detach() : t; }

// The raw row-major bytes of a tensor's values (no copy).
std::string_view raw_data(const Tensor& t) {
    return dispatch_all(t.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const auto& a = values<T>(t);  // a view's values, not its base's storage
        return std::string_view(reinterpret_cast<const char*>(a.data()), a.size() * sizeof(T));
    });
}

// Magic, version 1.0, header length and the header dict, laid out as numpy 1.24's
// _write_array_header: sorted keys, room for the first axis to grow to 21 digits, spaces to
// a 64-byte boundary, and a final newline.
std::string npy_header(const Tensor& t) {
    const Shape& shape = t.shape();
    std::string shape_repr = shape.size() == 1 ? fmt::format("({},)", shape[0])
                                               : fmt::format("({})", fmt::join(shape, ", "));
    std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                                   descr_of(t.dtype()), shape_repr);
    if (!shape.empty()) dict.append(kGrowthDigits - fmt::formatted_size("{}", shape[0]), ' ');
    const std::size_t prefix = kNpyMagic.size() + 2 + 2;  // magic, version, u16 length
    const std::size_t pad = kArrayAlign - (prefix + dict.size() + 1) % kArrayAlign;
    const std::size_t header_len = dict.size() + pad + 1;
    if (header_len > 0xffff)
        throw Error(fmt::format("npy: a tensor of rank {} needs a header longer than format 1.0 allows",
                                shape.size()));
    std::string out(kNpyMagic);
    out += '\x01';
    out += '\x00';
    put16(out, static_cast<std::uint16_t>(header_len));
    out += dict;
    out.append(pad, ' ');
    out += '\n';
    return out;
}

void check_defined(const Tensor& t, const std::string& what) {
    if (!t.defined()) throw Error(fmt::format("{}: the tensor is undefined (default-constructed)", what));
}

// --- .npy header parsing --------------------------------------------------------------------

// The header is a Python dict literal, e.g. {'descr': '<f4', 'fortran_order': False,
// 'shape': (2, 3), }. numpy reads it with ast.literal_eval; this accepts the subset numpy
// writes (quotes of either kind, any spacing, a trailing comma, Python 2's 'L' suffix) and
// refuses the rest.
class HeaderParser {
public:
    HeaderParser(std::string_view text, const std::string& what) : m_s(text), m_what(what) {}

    struct Result {
        std::string descr;
        bool fortran_order = false;
        Shape shape;
    };

    Result parse() {
        Result r;
        bool seen_descr = false, seen_order = false, seen_shape = false;
        skip_space();
        expect('{');
        for (;;) {
            skip_space();
            if (peek() == '}') break;
            const std::string key = string_literal("a key");
            skip_space();
            expect(':');
            skip_space();
            if (key == "descr") {
                mark_seen(seen_descr, key);
                if (peek() == '[')
                    fail("dtype is a structured (record) dtype; only plain float32, float64, int64 and "
                         "bool arrays are supported");
                r.descr = string_literal("the 'descr' value");
            } else if (key == "fortran_order") {
                mark_seen(seen_order, key);
                r.fortran_order = boolean();
            } else if (key == "shape") {
                mark_seen(seen_shape, key);
                r.shape = tuple();
            } else {
                fail(fmt::format("unexpected key '{}' in the header (expected 'descr', 'fortran_order', "
                                 "'shape')", key));
            }
            skip_space();
            if (peek() == ',') {
                ++m_pos;
                continue;
            }
            if (peek() != '}') fail(fmt::format("expected ',' or '}}' in the header at byte {}", m_pos));
        }
        ++m_pos;  // '}'
        skip_space();
        if (m_pos != m_s.size())
            fail(fmt::format("unexpected text after the header dict at byte {}", m_pos));
        if (!seen_descr || !seen_order || !seen_shape)
            fail(fmt::format("the header lacks the key '{}'",
                             !seen_descr ? "descr" : !seen_order ? "fortran_order" : "shape"));
        return r;
    }

private:
    [[noreturn]] void fail(const std::string& msg) const { throw Error(fmt::format("{}: {}", m_what, msg)); }

    char peek() const { return m_pos < m_s.size() ? m_s[m_pos] : '\0'; }
    void skip_space() {
        while (m_pos < m_s.size() && (m_s[m_pos] == ' ' || m_s[m_pos] == '\n' || m_s[m_pos] == '\t' ||
                                      m_s[m_pos] == '\r'))
            ++m_pos;
    }
    void expect(char c) {
        if (peek() != c)
            fail(fmt::format("malformed header: expected '{}' at byte {} of the header", c, m_pos));
        ++m_pos;
    }
    void mark_seen(bool& seen, const std::string& key) {
        if (seen) fail(fmt::format("the header repeats the key '{}'", key));
        seen = true;
    }
    std::string string_literal(const char* role) {
        const char q = peek();
        if (q != '\'' && q != '"') fail(fmt::format("malformed header: expected {} in quotes at byte {}", role, m_pos));
        const std::size_t start = ++m_pos;
        while (m_pos < m_s.size() && m_s[m_pos] != q) {
            if (m_s[m_pos] == '\n') break;
            if (m_s[m_pos] == '\\')
                fail(fmt::format("malformed header: unsupported character in a string at byte {}", m_pos));
            ++m_pos;
        }
        if (m_pos == m_s.size() || m_s[m_pos] != q) fail("malformed header: unterminated string");
        return std::string(m_s.substr(start, m_pos++ - start));
    }
    bool boolean() {
        if (m_s.substr(m_pos, 4) == "True") {
            m_pos += 4;
            return true;
        }
        if (m_s.substr(m_pos, 5) == "False") {
            m_pos += 5;
            return false;
        }
        fail(fmt::format("malformed header: 'fortran_order' must be True or False (at byte {})", m_pos));
    }
    std::size_t integer() {
        if (peek() < '0' || peek() > '9')
            fail(fmt::format("malformed header: expected a non-negative integer in 'shape' at byte {}", m_pos));
        std::uint64_t v = 0;
        while (peek() >= '0' && peek() <= '9') {
            const unsigned digit = static_cast<unsigned>(m_s[m_pos++] - '0');
            if (v > (static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) - digit) / 10)
                fail("a dimension in 'shape' does not fit in 64 bits");
            v = v * 10 + digit;
        }
        if (peek() == 'L') ++m_pos;  // Python 2 long, in files written by old numpy
        return static_cast<std::size_t>(v);
    }
    Shape tuple() {
        expect('(');
        Shape shape;
        skip_space();
        if (peek() == ')') {
            ++m_pos;
            return shape;
        }
        for (;;) {
            shape.push_back(integer());
            skip_space();
            if (peek() == ')') {
                // Python spells a 1-tuple (3,): without the comma it is not a tuple.
                if (shape.size() == 1) fail("malformed header: 'shape' (n) is not a tuple; expected (n,)");
                ++m_pos;
                return shape;
            }
            expect(',');
            skip_space();
            if (peek() == ')') {
                ++m_pos;
                return shape;
            }
        }
    }

    std::string_view m_s;
    std::size_t m_pos = 0;
    const std::string& m_what;
};

Dtype dtype_from_descr(const std::string& descr, const std::string& what) {
    if (descr == "<f4") return kFloat32;
    if (descr == "<f8") return kFloat64;
    if (descr == "<i8") return kInt64;
    if (descr == "|b1") return kBool;
    if (!descr.empty() && descr[0] == '>')
        throw Error(fmt::format("{}: dtype '{}' is big-endian; only little-endian data is supported "
                                "(convert with arr.astype(arr.dtype.newbyteorder('<')))",
                                what, descr));
    throw Error(fmt::format("{}: dtype '{}' is not supported; expected float32 '<f4', float64 '<f8', "
                            "int64 '<i8' or bool '|b1' (convert with arr.astype(...))",
                            what, descr));
}

template <class T> Tensor tensor_from_bytes(const Shape& shape, std::string_view data) {
    auto a = xt::xarray<T>::from_shape(shape);
    if constexpr (std::is_same_v<T, bool>) {
        // Any byte other than 0 is true, as numpy's bool; never copy raw bytes into a bool.
        bool* out = a.data();
        for (std::size_t i = 0; i < data.size(); ++i) out[i] = data[i] != 0;
    } else if (!data.empty()) {
        std::memcpy(a.data(), data.data(), data.size());
    }
    return from_array<T>(std::move(a));
}

// --- .npy header reading ---------------------------------------------------------------------

// Where an .npy's header dict lies: after the magic, the version and the length field.
struct NpyHeaderSpan {
    std::size_t start, length;
    std::size_t end() const { return start + length; }
};

// The most bytes an .npy can take before its header dict: magic, version, 4-byte length.
constexpr std::size_t kNpyPrologueMax = 12;

// Reads the magic, version and header length from the first kNpyPrologueMax bytes of an .npy.
NpyHeaderSpan npy_header_span(std::string_view b, const std::string& what) {
    if (b.empty()) throw Error(fmt::format("{}: empty (0 bytes); not an .npy file", what));
    if (b.substr(0, kNpyMagic.size()) != kNpyMagic.substr(0, std::min(b.size(), kNpyMagic.size())))
        throw Error(fmt::format("{}: bad magic: not an .npy file (expected \"\\x93NUMPY\", found {})", what,
                                show_bytes(b)));
    if (b.size() < 10)
        throw Error(fmt::format("{}: truncated: {} bytes, too short for an .npy header", what, b.size()));
    const unsigned major = static_cast<unsigned char>(b[6]), minor = static_cast<unsigned char>(b[7]);
    if (major < 1 || major > 3 || minor != 0)
        throw Error(fmt::format("{}: unsupported .npy format version {}.{} (expected 1.0, 2.0 or 3.0)", what,
                                major, minor));
    const std::size_t len_size = major == 1 ? 2 : 4;
    if (b.size() < 8 + len_size)
        throw Error(fmt::format("{}: truncated: {} bytes, too short for an .npy header", what, b.size()));
    return {8 + len_size, major == 1 ? get16(b, 8) : get32(b, 8)};
}

// What an .npy header declares about the data after it.
struct NpyLayout {
    Dtype dtype;
    Shape shape;
    std::size_t data_offset;  // the bytes before the data: magic, version, length field, header
    std::uint64_t data_bytes;
};

// Parses the header of an .npy whose first bytes are `b` (the data need not be there yet).
NpyLayout parse_npy_header(std::string_view b, const std::string& what) {
    const NpyHeaderSpan span = npy_header_span(b, what);
    if (!fits(span.start, span.length, b.size()))
        throw Error(fmt::format("{}: truncated: the header claims {} bytes but only {} follow", what,
                                span.length, b.size() - span.start));
    const auto h = HeaderParser(b.substr(span.start, span.length), what).parse();
    const Dtype dtype = dtype_from_descr(h.descr, what);
    if (h.fortran_order && h.shape.size() >= 2)
        throw Error(fmt::format("{}: the array is stored in Fortran order; save it in C order "
                                "(np.ascontiguousarray)", what));

    // numpy's own rule: the product of the non-zero dimensions times the item size must fit.
    constexpr std::uint64_t kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    std::uint64_t nonzero_bytes = item_size(dtype);
    bool empty = false;
    for (std::size_t d : h.shape) {
        if (d == 0) {
            empty = true;
            continue;
        }
        if (nonzero_bytes > kMax / d)
            throw Error(fmt::format("{}: shape {} is too large (its byte size overflows 64 bits)", what,
                                    shape_str(h.shape)));
        nonzero_bytes *= d;
    }
    return {dtype, h.shape, span.end(), empty ? 0 : nonzero_bytes};
}

// --- deflate (zlib) -----------------------------------------------------------------------------

// zlib counts in unsigned int: larger buffers go through in pieces of at most this.
constexpr std::size_t kZlibChunk = std::numeric_limits<uInt>::max();

// Deflate's longest match (258 bytes) costs at least 2 bits, so no raw-deflate stream expands
// by more than 1032 times (zlib's FAQ). A declared size beyond that cannot be honest.
constexpr std::size_t kMaxInflateRatio = 1032;

// A raw-deflate stream (zip's method 8) inflated by zlib, in steps the caller sizes: the output
// goes into buffers the caller allocated after checking what it may hold. Errors read
// "<where>: corrupt compressed data: <reason>", with `declared` the size the archive promises.
class Inflater {
public:
    Inflater(std::string_view in, std::size_t declared, std::string where)
        : m_in(in), m_declared(declared), m_where(std::move(where)) {
        if (inflateInit2(&m_z, -MAX_WBITS) != Z_OK)  // negative: raw deflate, no zlib header
            throw Error(fmt::format("{}: zlib cannot start inflating: {}", m_where,
                                    m_z.msg ? m_z.msg : "out of memory"));
    }
    ~Inflater() { inflateEnd(&m_z); }
    Inflater(const Inflater&) = delete;
    Inflater& operator=(const Inflater&) = delete;

    // Appends output to `out` until it holds `size` bytes. The buffer grows in steps of 64 KiB
    // (or into capacity the caller reserved), so memory follows the output, not the claim.
    void fill(std::string& out, std::size_t size) {
        constexpr std::size_t kStep = std::size_t{1} << 16;
        while (out.size() < size) {
            const std::size_t have = out.size();
            out.resize(have + std::min(size - have, std::max(kStep, out.capacity() - have)));
            const std::size_t got = run(out.data() + have, out.size() - have);
            out.resize(have + got);
            if (m_ended && out.size() < size)
                fail(fmt::format("it inflates to {} bytes, but the archive says {}", out.size(), m_declared));
        }
    }

    // Checks that the stream ends where the output reached `declared` bytes.
    void finish() {
        char extra;
        while (!m_ended)
            if (run(&extra, 1) != 0)
                fail(fmt::format("it holds more than the {} bytes the archive says", m_declared));
    }

private:
    [[noreturn]] void fail(const std::string& msg) const {
        throw Error(fmt::format("{}: corrupt compressed data: {}", m_where, msg));
    }

    // Inflates into [dst, dst+room) as far as the input goes; returns the bytes written.
    std::size_t run(char* dst, std::size_t room) {
        std::size_t written = 0;
        while (written < room && !m_ended) {
            const std::size_t in_now = std::min(m_in.size(), kZlibChunk);
            const std::size_t out_now = std::min(room - written, kZlibChunk);
            m_z.next_in = reinterpret_cast<const Bytef*>(m_in.data());
            m_z.avail_in = static_cast<uInt>(in_now);
            m_z.next_out = reinterpret_cast<Bytef*>(dst + written);
            m_z.avail_out = static_cast<uInt>(out_now);
            const int ret = inflate(&m_z, Z_NO_FLUSH);
            m_in.remove_prefix(in_now - m_z.avail_in);
            written += out_now - m_z.avail_out;
            switch (ret) {
                case Z_OK: break;
                case Z_STREAM_END: m_ended = true; break;
                case Z_BUF_ERROR: fail("it ends early (truncated)");  // no input left to progress on
                case Z_MEM_ERROR: throw Error(fmt::format("{}: zlib ran out of memory inflating", m_where));
                default: fail(m_z.msg ? m_z.msg : fmt::format("zlib error {}", ret));
            }
        }
        return written;
    }

    z_stream m_z{};
    std::string_view m_in;
    std::size_t m_declared;
    std::string m_where;
    bool m_ended = false;
};

// The bytes of a deflated .npz member that declares `usize` bytes uncompressed. Nothing is sized
// from the declaration until the member's own .npy header agrees with it, so a small member
// cannot make the reader allocate more than its data can inflate to; the stream must then end
// exactly at `usize` bytes.
// The caller has checked that `usize` is within kMaxInflateRatio of the compressed size.
std::string inflate_npy_member(std::string_view deflated, std::size_t usize, const std::string& where) {
    Inflater z(deflated, usize, where);
    std::string out;
    z.fill(out, std::min(usize, kNpyPrologueMax));
    const NpyHeaderSpan span = npy_header_span(out, where);
    if (span.end() > usize)
        throw Error(fmt::format("{}: the archive says it inflates to {} bytes, fewer than its .npy header "
                                "alone claims ({} bytes)", where, usize, span.end()));
    z.fill(out, span.end());
    const NpyLayout l = parse_npy_header(out, where);
    if (l.data_offset + l.data_bytes != usize)  // data_bytes < 2^63: no overflow
        throw Error(fmt::format("{}: the archive says it inflates to {} bytes, but its .npy header (shape {} "
                                "of {}) makes it {} bytes; refused before inflating the data",
                                where, usize, shape_str(l.shape), dtype_name(l.dtype),
                                l.data_offset + l.data_bytes));
    out.reserve(usize);
    z.fill(out, usize);
    z.finish();
    return out;
}

// The raw-deflate stream (zip's method 8) of `pieces` in order, at zlib's default level, as
// Python's zipfile writes np.savez_compressed's members.
std::string deflate_raw(std::initializer_list<std::string_view> pieces, const std::string& op) {
    z_stream z{};
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        throw Error(fmt::format("{}: zlib cannot start deflating (out of memory)", op));
    struct End {
        z_stream& z;
        ~End() { deflateEnd(&z); }
    } end{z};
    // Sized as the output grows, not to deflateBound: data that compresses well (what one
    // compresses for) would otherwise hold a buffer as large as the uncompressed data.
    std::string out(std::size_t{1} << 16, '\0');
    std::size_t produced = 0;
    std::size_t left = pieces.size();
    for (std::string_view in : pieces) {
        const bool last = --left == 0;
        for (;;) {
            if (produced == out.size()) out.resize(out.size() * 2);
            const std::size_t in_now = std::min(in.size(), kZlibChunk);
            const std::size_t out_now = std::min(out.size() - produced, kZlibChunk);
            z.next_in = reinterpret_cast<const Bytef*>(in.data());
            z.avail_in = static_cast<uInt>(in_now);
            z.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
            z.avail_out = static_cast<uInt>(out_now);
            const bool finishing = last && in_now == in.size();
            const int ret = deflate(&z, finishing ? Z_FINISH : Z_NO_FLUSH);
            if (ret == Z_STREAM_ERROR) throw Error(fmt::format("{}: zlib failed deflating", op));
            in.remove_prefix(in_now - z.avail_in);
            produced += out_now - z.avail_out;
            if (ret == Z_STREAM_END || (!last && in.empty())) break;
        }
    }
    out.resize(produced);
    out.shrink_to_fit();
    return out;
}

// --- .npz writing ---------------------------------------------------------------------------

// A member as its local header and central directory entry describe it. put_entry_fields writes
// the run of fields both hold, in their order: version needed to extract to uncompressed size.
struct ZipEntry {
    std::string name;
    std::uint16_t flags, method;
    std::uint32_t crc, csize, usize, offset;
};
void put_entry_fields(std::string& s, const ZipEntry& e) {
    put16(s, 20);  // version needed: 2.0 (deflate)
    put16(s, e.flags);
    put16(s, e.method);
    put16(s, 0);  // time 00:00
    put16(s, kDosDate1980);
    put32(s, e.crc);
    put32(s, e.csize);
    put32(s, e.usize);
}

Error archive_too_large(const char* op, const std::string& name) {
    return Error(fmt::format("{}: the archive would exceed 4 GiB at array '{}'; zip64 is not supported", op, name));
}

// Whether a member name, unzipped, would land outside the folder it is unzipped into: an
// absolute path, a Windows separator, or a '..' component.
bool escapes_folder(const std::string& name) {
    if (name.front() == '/' || name.find('\\') != std::string::npos) return true;
    std::size_t start = 0;
    while (start <= name.size()) {
        const std::size_t end = std::min(name.find('/', start), name.size());
        if (name.compare(start, end - start, "..") == 0 && end - start == 2) return true;
        start = end + 1;
    }
    return false;
}

// Streams an archive through `out(std::string_view)`: member headers and npy headers are built
// in memory; stored array data goes straight from the tensors, deflated data is compressed into
// memory first, since the local header that precedes it holds its size.
template <class Out> void write_npz(const NamedTensors& arrays, bool compressed, const char* op, Out&& out) {
    std::vector<ZipEntry> entries;
    std::set<std::string> names;
    std::uint64_t offset = 0;
    constexpr std::uint64_t kZipLimit = 0xfffffffe;  // 0xffffffff would mean "see zip64 fields"
    for (const auto& [name, t] : arrays) {
        if (name.empty()) throw Error(fmt::format("{}: array names must be non-empty", op));
        if (name.find('\0') != std::string::npos)
            throw Error(fmt::format("{}: the array name '{}' contains a NUL byte", op, name));
        if (!names.insert(name).second)
            throw Error(fmt::format("{}: the array name '{}' appears twice", op, name));
        if (escapes_folder(name + ".npy"))
            throw Error(fmt::format("{}: the array name '{}' would unzip outside the archive's folder (it is "
                                    "absolute, holds a backslash or a '..' component); numpy would write it, "
                                    "but an unzip of it could overwrite other files",
                                    op, name));
        check_defined(t, fmt::format("{}: array '{}'", op, name));
        const Tensor stored = as_stored(t);
        ZipEntry e;
        e.name = name + ".npy";
        if (e.name.size() > 0xffff) throw Error(fmt::format("{}: the array name '{}...' is too long", op, name.substr(0, 40)));
        const std::string header = npy_header(stored);
        const std::string_view data = raw_data(stored);
        const std::uint64_t usize = header.size() + static_cast<std::uint64_t>(data.size());
        if (usize > kZipLimit) throw archive_too_large(op, name);
        const std::string deflated = compressed ? deflate_raw({header, data}, op) : std::string();
        const std::uint64_t csize = compressed ? deflated.size() : usize;
        if (offset + kLocalSize + e.name.size() + csize > kZipLimit) throw archive_too_large(op, name);
        e.flags = 0;
        for (unsigned char c : e.name)
            if (c >= 0x80) e.flags = kFlagUtf8;
        e.method = compressed ? 8 : 0;
        e.crc = crc32_update(crc32_update(0, header), data);
        e.csize = static_cast<std::uint32_t>(csize);
        e.usize = static_cast<std::uint32_t>(usize);
        e.offset = static_cast<std::uint32_t>(offset);

        std::string local;
        put32(local, kLocalSig);
        put_entry_fields(local, e);
        put16(local, static_cast<std::uint16_t>(e.name.size()));
        put16(local, 0);   // extra field length
        local += e.name;
        out(std::string_view(local));
        if (compressed) {
            out(std::string_view(deflated));
        } else {
            out(std::string_view(header));
            out(data);
        }
        offset += local.size() + csize;
        entries.push_back(std::move(e));
    }
    if (entries.size() > 0xfffe) throw Error(fmt::format("{}: more than 65534 arrays need zip64, which is not supported", op));

    std::string central;
    for (const ZipEntry& e : entries) {
        put32(central, kCentralSig);
        put16(central, 0x0314);  // made by: Unix, zip 2.0 (as Python's zipfile)
        put_entry_fields(central, e);
        put16(central, static_cast<std::uint16_t>(e.name.size()));
        put16(central, 0);  // extra
        put16(central, 0);  // comment
        put16(central, 0);  // disk
        put16(central, 0);  // internal attributes
        put32(central, 0100644u << 16);  // external: a regular file, rw-r--r--
        put32(central, e.offset);
        central += e.name;
    }
    if (offset + central.size() > kZipLimit)
        throw Error(fmt::format("{}: the archive would exceed 4 GiB; zip64 is not supported", op));
    std::string end;
    put32(end, kEndSig);
    put16(end, 0);  // this disk
    put16(end, 0);  // disk with the central directory
    put16(end, static_cast<std::uint16_t>(entries.size()));
    put16(end, static_cast<std::uint16_t>(entries.size()));
    put32(end, static_cast<std::uint32_t>(central.size()));
    put32(end, static_cast<std::uint32_t>(offset));
    put16(end, 0);  // comment length
    out(std::string_view(central));
    out(std::string_view(end));
}

}  // namespace

// --- .npy -------------------------------------------------------------------------------------

std::string npy_bytes(const Tensor& t) {
    check_defined(t, "npy_bytes");
    const Tensor stored = as_stored(t);
    std::string out = npy_header(stored);
    out += raw_data(stored);
    return out;
}

Tensor parse_npy(std::string_view b, const std::string& what) {
    const NpyLayout l = parse_npy_header(b, what);
    const std::string_view data = b.substr(l.data_offset);
    if (data.size() != l.data_bytes)
        throw Error(fmt::format("{}: {}: shape {} of {} needs {} bytes of data, but {} {} present", what,
                                data.size() < l.data_bytes ? "truncated" : "trailing bytes", shape_str(l.shape),
                                dtype_name(l.dtype), l.data_bytes, data.size(), data.size() == 1 ? "is" : "are"));
    try {
        return dispatch_all(l.dtype, [&](auto tag) {
            using T = typename decltype(tag)::type;
            return tensor_from_bytes<T>(l.shape, data);
        });
    } catch (const std::bad_alloc&) {
        throw Error(fmt::format("{}: shape {} of {} ({} bytes) does not fit in the memory left", what,
                                shape_str(l.shape), dtype_name(l.dtype), l.data_bytes));
    }
}

void save_npy(const std::string& path, const Tensor& t) {
    check_defined(t, fmt::format("save_npy: '{}'", path));
    const Tensor stored = as_stored(t);
    const std::string header = npy_header(stored);
    AtomicFile f(path, "save_npy");
    f.write(header);
    f.write(raw_data(stored));
    f.commit();
}

Tensor load_npy(const std::string& path) {
    return parse_npy(read_file(path, "load_npy"), fmt::format("load_npy: '{}'", path));
}

// --- .npz -------------------------------------------------------------------------------------

namespace {

std::string npz_bytes_with(const NamedTensors& arrays, bool compressed, const char* op) {
    std::string out;
    write_npz(arrays, compressed, op, [&out](std::string_view piece) { out += piece; });
    return out;
}

void save_npz_with(const std::string& path, const NamedTensors& arrays, bool compressed, const char* op) {
    const std::string where = fmt::format("{}: '{}'", op, path);
    // A throw part-way (a bad name, a failed write) leaves the old file and no temporary.
    AtomicFile f(path, op);
    write_npz(arrays, compressed, where.c_str(), [&f](std::string_view piece) { f.write(piece); });
    f.commit();
}

}  // namespace

std::string npz_bytes(const NamedTensors& arrays) { return npz_bytes_with(arrays, false, "npz_bytes"); }

std::string npz_compressed_bytes(const NamedTensors& arrays) {
    return npz_bytes_with(arrays, true, "npz_compressed_bytes");
}

void save_npz(const std::string& path, const NamedTensors& arrays) {
    save_npz_with(path, arrays, false, "save_npz");
}

void save_npz_compressed(const std::string& path, const NamedTensors& arrays) {
    save_npz_with(path, arrays, true, "save_npz_compressed");
}

NamedTensors parse_npz(std::string_view b, const std::string& what) {
    auto fail = [&what](const std::string& msg) { throw Error(fmt::format("{}: {}", what, msg)); };
    if (b.empty()) fail("empty (0 bytes); an .npz is a zip archive");
    if (b.substr(0, kNpyMagic.size()) == kNpyMagic)
        fail("this is an .npy file (a single array), not an .npz archive; read it with load_npy");
    if (b.size() < 4 || (get32(b, 0) != kLocalSig && get32(b, 0) != kEndSig))
        fail(fmt::format("bad magic: not a zip archive (expected \"PK\\x03\\x04\", found {})", show_bytes(b)));
    if (b.size() < kEndSize)
        fail(fmt::format("truncated: {} bytes, too short for a zip archive", b.size()));

    // The end record sits at the very end, followed only by its own comment (< 64 KiB).
    std::size_t end = std::string_view::npos;
    const std::size_t lowest = b.size() - kEndSize > 0xffff ? b.size() - kEndSize - 0xffff : 0;
    for (std::size_t at = b.size() - kEndSize + 1; at-- > lowest;) {
        if (get32(b, at) == kEndSig && at + kEndSize + get16(b, at + 20) == b.size()) {
            end = at;
            break;
        }
    }
    if (end == std::string_view::npos)
        fail("no zip end-of-central-directory record: the archive is truncated or corrupt");
    if (end >= 20 && get32(b, end - 20) == kZip64LocatorSig)
        fail("zip64 archives are not supported");
    const std::size_t count = get16(b, end + 10);
    const std::size_t cd_size = get32(b, end + 12), cd_offset = get32(b, end + 16);
    if (get16(b, end + 4) != 0 || get16(b, end + 6) != 0 || get16(b, end + 8) != count)
        fail("multi-disk (split) zip archives are not supported");
    if (count == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff)
        fail("zip64 archives are not supported");
    if (!fits(cd_offset, cd_size, end))
        fail(fmt::format("corrupt: the central directory (offset {}, {} bytes) lies outside the {} bytes "
                         "before the end record", cd_offset, cd_size, end));

    // First the whole directory, checking everything that needs no inflating, so that an
    // archive that cannot be read is refused before any member is allocated.
    struct Member {
        std::string name, where;
        std::uint16_t method;
        std::uint32_t crc;
        std::size_t data_at, csize, usize;
    };
    std::vector<Member> members;
    std::map<std::size_t, std::pair<std::size_t, std::string>> spans;  // start -> (end, member)
    std::set<std::string> seen;
    std::uint64_t total_usize = 0;
    const std::string_view cd = b.substr(cd_offset, cd_size);
    std::size_t pos = 0;
    for (std::size_t i = 0; i < count; ++i) {
        if (!fits(pos, kCentralSize, cd.size()) || get32(cd, pos) != kCentralSig)
            fail(fmt::format("corrupt: central directory entry {} of {} is missing or damaged", i + 1, count));
        const std::uint16_t flags = get16(cd, pos + 8), method = get16(cd, pos + 10);
        const std::uint32_t crc = get32(cd, pos + 16);
        const std::size_t csize = get32(cd, pos + 20), usize = get32(cd, pos + 24);
        const std::size_t name_len = get16(cd, pos + 28), extra_len = get16(cd, pos + 30),
                          comment_len = get16(cd, pos + 32);
        const std::size_t local = get32(cd, pos + 42);
        const std::size_t entry_len = kCentralSize + name_len + extra_len + comment_len;
        if (!fits(pos, entry_len, cd.size()))
            fail(fmt::format("corrupt: central directory entry {} of {} runs past the directory", i + 1, count));
        const std::string member(cd.substr(pos + kCentralSize, name_len));
        pos += entry_len;

        const std::string where = fmt::format("member '{}'", member);
        if (flags & kFlagEncrypted) fail(where + " is encrypted; encrypted archives are not supported");
        if (csize == 0xffffffff || usize == 0xffffffff || local == 0xffffffff)
            fail(where + " uses zip64 fields; zip64 archives are not supported");
        if (method != 0 && method != 8)
            fail(fmt::format("{} uses compression method {}; only stored (np.savez) and deflate "
                             "(np.savez_compressed) members are supported", where, method));
        if (method == 0 && csize != usize)
            fail(fmt::format("corrupt: {} is stored but its sizes differ ({} and {})", where, csize, usize));
        if (method == 8 && usize / kMaxInflateRatio > csize)
            fail(fmt::format("{}: corrupt compressed data: the archive says {} compressed bytes inflate to {}, more "
                             "than deflate can expand them ({} times at most)",
                             where, csize, usize, kMaxInflateRatio));
        if (member.size() <= 4 || member.compare(member.size() - 4, 4, ".npy") != 0)
            fail(where + " is not an .npy array (an .npz holds only NAME.npy members)");
        std::string name = member.substr(0, member.size() - 4);
        if (!seen.insert(name).second) fail(fmt::format("the array '{}' appears twice", name));

        // The local header must repeat the name, and its data must end before the directory.
        if (!fits(local, kLocalSize, cd_offset) || get32(b, local) != kLocalSig)
            fail(fmt::format("corrupt: the local header of {} (offset {}) is missing or damaged", where, local));
        const std::uint16_t local_flags = get16(b, local + 6);
        const std::size_t local_name = get16(b, local + 26), local_extra = get16(b, local + 28);
        const std::size_t data_at = local + kLocalSize + local_name + local_extra;
        if (!fits(local + kLocalSize, local_name + local_extra, cd_offset) || !fits(data_at, csize, cd_offset))
            fail(fmt::format("truncated or corrupt: {} runs past the start of the central directory", where));
        if (b.substr(local + kLocalSize, local_name) != member || get16(b, local + 8) != method)
            fail(fmt::format("corrupt: the local header of {} disagrees with the central directory", where));
        if (!(local_flags & kFlagDescriptor)) {
            const std::uint32_t lcrc = get32(b, local + 14), lcs = get32(b, local + 18), lus = get32(b, local + 22);
            // Writers that add zip64 fields (np.savez does) may leave 0xffffffff here.
            if (lcrc != crc || (lcs != csize && lcs != 0xffffffff) || (lus != usize && lus != 0xffffffff))
                fail(fmt::format("corrupt: the local header of {} disagrees with the central directory", where));
        }
        // Members may not share bytes: overlapping members would let one small compressed
        // stream be counted many times over (the overlapped zip bomb), beyond any ratio check.
        const std::size_t span_end = data_at + csize;
        auto next = spans.lower_bound(local);
        if (next != spans.end() && next->first < span_end)
            fail(fmt::format("corrupt: {} (bytes {} to {}) overlaps member '{}' (from byte {})", where, local, span_end,
                             next->second.second, next->first));
        if (next != spans.begin() && std::prev(next)->second.first > local)
            fail(fmt::format("corrupt: {} (from byte {}) overlaps member '{}' (bytes {} to {})", where, local,
                             std::prev(next)->second.second, std::prev(next)->first, std::prev(next)->second.first));
        spans.emplace(local, std::make_pair(span_end, member));
        total_usize += usize;
        members.push_back({std::move(name), where, method, crc, data_at, csize, usize});
    }
    if (pos != cd.size())
        fail(fmt::format("corrupt: the central directory holds {} bytes after its {} entries", cd.size() - pos, count));
    // Every array needs its declared size in memory at once; more than the machine has cannot
    // be loaded, and trying would end in the out-of-memory killer rather than an error.
    const std::uint64_t memory = physical_memory_bytes();  // 0: unknown, no bound
    if (memory > 0 && total_usize > memory)
        fail(fmt::format("its arrays need {} bytes in all, more than this machine's {} bytes of memory; refused "
                         "before inflating anything",
                         total_usize, memory));

    NamedTensors result;
    for (Member& m : members) {
        try {
            std::string inflated;
            if (m.method == 8)
                inflated = inflate_npy_member(b.substr(m.data_at, m.csize), m.usize, fmt::format("{}: {}", what, m.where));
            const std::string_view data = m.method == 8 ? std::string_view(inflated) : b.substr(m.data_at, m.csize);
            const std::uint32_t actual = crc32_update(0, data);
            if (actual != m.crc)
                fail(fmt::format("corrupt: CRC-32 mismatch in {} (stored {:08x}, computed {:08x})", m.where, m.crc,
                                 actual));
            result.emplace_back(std::move(m.name), parse_npy(data, fmt::format("{}: {}", what, m.where)));
        } catch (const std::bad_alloc&) {
            fail(fmt::format("{} ({} bytes) does not fit in the memory left", m.where, m.usize));
        } catch (const Error& e) {
            // The reader's own errors name the file and the member already; the allocator's
            // ("allocator: out of memory ...") and any other gain them here.
            if (std::string_view(e.what()).rfind(what, 0) == 0) throw;
            fail(fmt::format("{} ({} bytes): {}", m.where, m.usize, e.what()));
        }
    }
    return result;
}

NamedTensors load_npz(const std::string& path) {
    return parse_npz(read_file(path, "load_npz"), fmt::format("load_npz: '{}'", path));
}

}  // namespace xgrad
