#include "core/mt19937_64.hpp"

#include <algorithm>

#include "core/runtime/simd_dispatch.hpp"

namespace xgrad {

namespace {

// The standard's parameters of mt19937_64 ([rand.predef]).
constexpr std::size_t kN = Mt19937_64::state_size, kM = 156;
constexpr std::uint64_t kMatrix = 0xB5026F5AA96619E9ull;
constexpr std::uint64_t kUpper = ~std::uint64_t(0) << 31, kLower = ~kUpper;
constexpr std::uint64_t kSeedMultiplier = 6364136223846793005ull;

// One twist step: word k from words k, k + 1 and the one m ahead (all mod n).
inline std::uint64_t twisted(std::uint64_t xk, std::uint64_t xk1, std::uint64_t xkm) {
    const std::uint64_t y = (xk & kUpper) | (xk1 & kLower);
    return xkm ^ (y >> 1) ^ ((0 - (y & 1)) & kMatrix);  // the matrix where y is odd, without a branch
}

}  // namespace

void Mt19937_64::seed(result_type value) {
    m_x[0] = value;
    for (std::size_t i = 1; i < kN; ++i) m_x[i] = kSeedMultiplier * (m_x[i - 1] ^ (m_x[i - 1] >> 62)) + i;
    m_pos = kN;
}

void Mt19937_64::twist() {
    std::uint64_t* x = m_x;
    // The first n - m words read words not yet rewritten, the rest read the new ones m behind:
    // either way a read never waits on a write of the same vector, so both loops vectorise.
    simd_dispatch([x]() XGRAD_SIMD_BODY {
        for (std::size_t k = 0; k < kN - kM; ++k) x[k] = twisted(x[k], x[k + 1], x[k + kM]);
        for (std::size_t k = kN - kM; k < kN - 1; ++k) x[k] = twisted(x[k], x[k + 1], x[k - (kN - kM)]);
        return 0;
    });
    x[kN - 1] = twisted(x[kN - 1], x[0], x[kM - 1]);
    m_pos = 0;
}

void Mt19937_64::discard(unsigned long long n) {
    while (n > 0) {
        if (m_pos >= kN) twist();
        const auto step = static_cast<std::size_t>(std::min<unsigned long long>(n, kN - m_pos));
        m_pos += step;
        n -= step;
    }
}

void Mt19937_64::fill(result_type* out, std::size_t n) {
    while (n > 0) {
        if (m_pos >= kN) twist();
        const std::size_t count = std::min(n, kN - m_pos);
        const std::uint64_t* from = m_x + m_pos;
        // Locals marked restrict: otherwise each store to out may have changed the captures,
        // and the loop stays scalar.
        simd_dispatch([from, out, count]() XGRAD_SIMD_BODY {
            const std::uint64_t* __restrict src = from;
            std::uint64_t* __restrict dst = out;
            const std::size_t n = count;
            for (std::size_t i = 0; i < n; ++i) dst[i] = temper(src[i]);
            return 0;
        });
        m_pos += count;
        out += count;
        n -= count;
    }
}

Mt19937_64::Words Mt19937_64::words() const {
    Words w;
    std::copy(m_x, m_x + kN, w.begin());
    w[kN] = m_pos;
    return w;
}

bool Mt19937_64::set_words(const Words& words) {
    if (words[kN] > kN) return false;
    std::copy(words.begin(), words.begin() + kN, m_x);
    m_pos = static_cast<std::size_t>(words[kN]);
    return true;
}

}  // namespace xgrad
