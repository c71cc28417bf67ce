#pragma once
/// Mt19937_64: the 64-bit Mersenne Twister of the C++ standard, drawing exactly
/// std::mt19937_64's sequence (the standard fixes its seeding, twist and tempering), with the
/// bulk draw the standard engine lacks. fill() twists and tempers whole blocks in vector code;
/// one call of std::mt19937_64 per value costs a branch and a scalar tempering each, which made
/// a dropout mask's draws cost more than the dropout's product (tools/bench_gpt_ops).
///
/// It meets UniformRandomBitGenerator, so the standard distributions take it as they take
/// std::mt19937_64. Its state is the 312 words and the position, the numbers libstdc++ writes
/// for a std::mt19937_64 (words() and set_words()): a Generator state saved by a build that
/// held the standard engine loads here, and the reverse.
#include <array>
#include <cstddef>
#include <cstdint>

namespace xgrad {

class Mt19937_64 {
public:
    using result_type = std::uint64_t;
    static constexpr std::size_t state_size = 312;
    static constexpr result_type default_seed = 5489u;
    /// The state words: state_size words, then the position (how many of them are drawn).
    using Words = std::array<std::uint64_t, state_size + 1>;

    explicit Mt19937_64(result_type value = default_seed) { seed(value); }
    void seed(result_type value);

    static constexpr result_type min() { return 0; }
    static constexpr result_type max() { return ~result_type(0); }
    result_type operator()() {
        if (m_pos >= state_size) twist();
        return temper(m_x[m_pos++]);
    }
    void discard(unsigned long long n);
    /// The next n values into out: what n calls of operator() return, in order.
    void fill(result_type* out, std::size_t n);

    Words words() const;
    /// Restores words(); false (and the engine unchanged) for a position above state_size.
    bool set_words(const Words& words);

    friend bool operator==(const Mt19937_64& a, const Mt19937_64& b) { return a.words() == b.words(); }
    friend bool operator!=(const Mt19937_64& a, const Mt19937_64& b) { return !(a == b); }

    static result_type temper(result_type z) {
        z ^= (z >> 29) & 0x5555555555555555ull;
        z ^= (z << 17) & 0x71D67FFFEDA60000ull;
        z ^= (z << 37) & 0xFFF7EEE000000000ull;
        return z ^ (z >> 43);
    }

private:
    void twist();

    std::uint64_t m_x[state_size];
    std::size_t m_pos;
};

}  // namespace xgrad
