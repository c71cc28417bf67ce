// The number-words task of examples/seq2seq: spelling, vocabularies and batch layout.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "number_words.hpp"

using namespace xgrad;
using number_words::join;
using number_words::spell;

TEST_CASE("spell writes numbers below a million in words", "[seq2seq]") {
    CHECK(join(spell(0)) == "zero");
    CHECK(join(spell(7)) == "seven");
    CHECK(join(spell(13)) == "thirteen");
    CHECK(join(spell(40)) == "forty");
    CHECK(join(spell(99)) == "ninety nine");
    CHECK(join(spell(100)) == "one hundred");
    CHECK(join(spell(312)) == "three hundred twelve");
    CHECK(join(spell(1017)) == "one thousand seventeen");
    CHECK(join(spell(20000)) == "twenty thousand");
    CHECK(join(spell(300200)) == "three hundred thousand two hundred");
    CHECK(join(spell(999999)) == "nine hundred ninety nine thousand nine hundred ninety nine");
    CHECK_THROWS_WITH(spell(1000000), Catch::Contains("spell") && Catch::Contains("got 1000000"));
    CHECK_THROWS(spell(-1));
}

TEST_CASE("every spelled word is in the source vocabulary", "[seq2seq]") {
    const auto& sv = number_words::source_vocab();
    CHECK(sv["<pad>"] == 0);
    for (std::int64_t n = 0; n < 1000000; n += 997)
        for (const auto& w : spell(n)) CHECK_NOTHROW(sv[w]);
    CHECK_THROWS_WITH(sv["eleventy"], Catch::Contains("eleventy"));
}

TEST_CASE("make_batch pads sources and shifts targets right behind bos", "[seq2seq]") {
    const auto& sv = number_words::source_vocab();
    const auto& tv = number_words::target_vocab();
    const auto b = number_words::make_batch({312, 5});
    REQUIRE(b.src.shape() == Shape{2, 4});  // "three hundred twelve <eos>"
    REQUIRE(b.dec_input.shape() == Shape{2, 4});  // 3 digits + <eos>
    CHECK(b.src.to_vector<std::int64_t>() == std::vector<std::int64_t>{sv["three"], sv["hundred"], sv["twelve"],
                                                                          sv["<eos>"], sv["five"], sv["<eos>"],
                                                                          sv["<pad>"], sv["<pad>"]});
    CHECK(b.src_valid_len.to_vector<std::int64_t>() == std::vector<std::int64_t>{4, 2});
    CHECK(b.label.to_vector<std::int64_t>() == std::vector<std::int64_t>{tv["3"], tv["1"], tv["2"], tv["<eos>"],
                                                                            tv["5"], tv["<eos>"], tv["<pad>"],
                                                                            tv["<pad>"]});
    CHECK(b.dec_input.to_vector<std::int64_t>() == std::vector<std::int64_t>{tv["<bos>"], tv["3"], tv["1"], tv["2"],
                                                                                tv["<bos>"], tv["5"], tv["<eos>"],
                                                                                tv["<pad>"]});
}

TEST_CASE("samples cover every digit count and the held-out set is fixed", "[seq2seq]") {
    Generator gen(1);
    std::set<std::size_t> lengths;
    for (int i = 0; i < 600; ++i) {
        const std::int64_t n = number_words::sample_number(gen, 4);
        REQUIRE(n >= 0);
        REQUIRE(n < 10000);
        lengths.insert(std::to_string(n).size());
    }
    CHECK(lengths == std::set<std::size_t>{1, 2, 3, 4});

    const auto a = number_words::held_out_numbers(200, 6, 7);
    CHECK(a.size() == 200);
    CHECK(std::set<std::int64_t>(a.begin(), a.end()).size() == 200);
    CHECK(a == number_words::held_out_numbers(200, 6, 7));
    CHECK(a != number_words::held_out_numbers(200, 6, 8));
    // At most a fifth of each length: 2 one-digit and 18 two-digit numbers.
    std::size_t one_digit = 0, two_digits = 0;
    for (std::int64_t n : a) one_digit += n < 10, two_digits += n >= 10 && n < 100;
    CHECK(one_digit == 2);
    CHECK(two_digits == 18);
    CHECK(number_words::held_out_numbers(500, 2, 7).size() == 20);
    for (std::uint64_t seed = 0; seed < 20; ++seed) {
        const auto small = number_words::held_out_numbers(2, 1, seed);
        CHECK(std::find(small.begin(), small.end(), 0) == small.end());  // "zero" stays in training
    }
}
