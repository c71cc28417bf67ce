// Mt19937_64 draws std::mt19937_64's sequence: one value at a time, in bulk blocks of every
// size around the 312-word twist, through discard, and from a state moved to or from the
// standard engine. dropout_mask's integer threshold keeps exactly the draws rand's path keeps,
// p equal to a draw included.
#include <random>
#include <sstream>

#include "helpers.hpp"

using namespace xgrad;

namespace {

const std::uint64_t kSeeds[] = {0, 1, 5489, 0x9E3779B97F4A7C15ull, ~std::uint64_t(0)};

// The numbers libstdc++ writes for a std::mt19937_64: its 312 words and its position.
Mt19937_64::Words std_words(const std::mt19937_64& engine) {
    std::ostringstream os;
    os << engine;
    std::istringstream is(os.str());
    Mt19937_64::Words w{};
    std::size_t i = 0;
    for (std::uint64_t v; is >> v; ++i) {
        REQUIRE(i < w.size());
        w[i] = v;
    }
    REQUIRE(i == w.size());
    return w;
}

}  // namespace

TEST_CASE("Mt19937_64 draws std::mt19937_64's sequence one value at a time", "[rng][mt19937]") {
    for (const std::uint64_t seed : kSeeds) {
        INFO("seed " << seed);
        std::mt19937_64 want(seed);
        Mt19937_64 got(seed);
        for (int i = 0; i < 2000; ++i) REQUIRE(got() == want());
    }
    std::mt19937_64 want;
    Mt19937_64 got;
    CHECK(got() == want());  // the default seed
    CHECK(Mt19937_64::min() == std::mt19937_64::min());
    CHECK(Mt19937_64::max() == std::mt19937_64::max());
}

TEST_CASE("Mt19937_64::fill and discard give the values single draws give, across twists", "[rng][mt19937]") {
    for (const std::uint64_t seed : kSeeds) {
        std::mt19937_64 want(seed);
        Mt19937_64 got(seed);
        std::vector<std::uint64_t> block;
        // sizes that end before, on and after a twist, and single draws and discards between them
        for (const std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{304}, std::size_t{312}, std::size_t{0},
                                    std::size_t{313}, std::size_t{1000}, std::size_t{311}, std::size_t{2}}) {
            INFO("seed " << seed << ", block of " << n);
            block.assign(n, 0);
            got.fill(block.data(), n);
            for (const std::uint64_t v : block) REQUIRE(v == want());
            REQUIRE(got() == want());
            got.discard(n);
            want.discard(n);
            REQUIRE(got() == want());
        }
    }
}

TEST_CASE("Mt19937_64's words are libstdc++'s, and a state moves both ways", "[rng][mt19937]") {
#if defined(__GLIBCXX__)
    std::mt19937_64 standard(77);
    Mt19937_64 ours(77);
    for (const int draws : {0, 1, 311, 1, 400}) {
        for (int i = 0; i < draws; ++i) REQUIRE(ours() == standard());
        REQUIRE(ours.words() == std_words(standard));
    }
    // ours from the standard engine's numbers, and the standard engine from ours
    Mt19937_64 restored;
    REQUIRE(restored.set_words(std_words(standard)));
    CHECK(restored == ours);
    std::ostringstream os;
    for (const std::uint64_t w : ours.words()) os << w << ' ';
    std::istringstream is(os.str());
    std::mt19937_64 reloaded;
    REQUIRE(is >> reloaded);
    for (int i = 0; i < 700; ++i) REQUIRE(reloaded() == ours());
#else
    SUCCEED("the standard engine's text is libstdc++'s only on libstdc++");
#endif
}

TEST_CASE("Mt19937_64::set_words refuses a position past the words, the engine unchanged", "[rng][mt19937]") {
    Mt19937_64 engine(3);
    engine.discard(5);
    const Mt19937_64 before = engine;
    for (const std::uint64_t pos : {std::uint64_t{313}, std::uint64_t{1} << 63, ~std::uint64_t(0)}) {
        Mt19937_64::Words w = engine.words();
        w.back() = pos;
        CHECK_FALSE(engine.set_words(w));
        CHECK(engine == before);
    }
    Mt19937_64::Words at_end = engine.words();
    at_end.back() = Mt19937_64::state_size;  // every word drawn: the next draw twists
    CHECK(engine.set_words(at_end));
}

TEST_CASE("dropout_mask keeps the draws rand's path keeps, p equal to a draw included", "[creation][dropout][mt19937]") {
    const std::vector<long> shape{9, 61};  // 549 draws: a twist inside
    for (const Dtype d : {kFloat32, kFloat64}) {
        // ps that equal a draw of the stream as the dtype, and its neighbours, beside round ones
        Generator probe(11);
        const std::vector<double> u = rand(shape, d, probe).to_vector<double>();
        std::vector<double> ps{0.0, 0.25, 1.0 / 3.0, 0.999999999, 1e-300};
        for (const std::size_t i : {std::size_t{3}, std::size_t{100}, std::size_t{400}}) {
            ps.push_back(u[i]);
            ps.push_back(d == kFloat32 ? std::nextafter(static_cast<float>(u[i]), 0.0f) : std::nextafter(u[i], 0.0));
            ps.push_back(d == kFloat32 ? std::nextafter(static_cast<float>(u[i]), 1.0f) : std::nextafter(u[i], 1.0));
        }
        for (const double p : ps) {
            INFO(dtype_name(d) << ", p = " << p);
            Generator g1(11), g2(11);
            const Tensor mask = dropout_mask(shape, p, d, g1);
            const Tensor want = cast(ge(rand(shape, d, g2), full({}, p, d)), d) * (1.0 / (1.0 - p));
            REQUIRE(mask.to_vector<double>() == want.to_vector<double>());
            REQUIRE(g1.next_double() == g2.next_double());
        }
    }
}
