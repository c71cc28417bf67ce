#pragma once
/// Decompression of raw deflate data (RFC 1951), as zip archives store it: what
/// np.savez_compressed writes. Input is untrusted: every read is bounds-checked.
#include <cstddef>
#include <string>
#include <string_view>

#include "core/error.hpp"

namespace xgrad {

/// The bytes `deflated` decodes to, which must be exactly `expected` bytes; otherwise, or for
/// any malformed stream, throws xgrad::Error "<what>: corrupt compressed data: <reason>".
/// Memory grows with the decoded output only, never beyond `expected`.
std::string inflate(std::string_view deflated, std::size_t expected, const std::string& what);

}  // namespace xgrad
