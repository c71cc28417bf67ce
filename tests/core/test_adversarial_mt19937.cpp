// Mt19937_64 and what draws from it, probed as a hostile user would: random interleavings of
// single draws, bulk fills, discards, copies and assignments against std::mt19937_64; Generator
// states crafted by hand (positions at both ends and past them, odd or all-zero words with a
// valid checksum, a state written from std::mt19937_64's own text as the old build did); and
// dropout_mask at every edge of p and of the shape, against rand's path from the same seed.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "core/sampling.hpp"
#include "helpers.hpp"

using namespace xgrad;
using Catch::Contains;

namespace {

// get_state()'s layout, as a user could learn it from one state: tag, length, the 313 words
// (312 state words and the position), and a checksum over all before it (splitmix64's
// finaliser folded over the entries: core/random.cpp).
constexpr std::int64_t kTag = 0x7867726E67000001;

std::uint64_t checksum(const std::vector<std::int64_t>& entries) {
    std::uint64_t h = 0;
    for (const std::int64_t e : entries) {
        std::uint64_t z = h ^ (static_cast<std::uint64_t>(e) + 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        h = z ^ (z >> 31);
    }
    return h;
}

// A state tensor holding `words` (312 state words and the position), with a valid checksum.
Tensor state_of(const std::vector<std::uint64_t>& words) {
    std::vector<std::int64_t> e{kTag, static_cast<std::int64_t>(words.size())};
    for (const std::uint64_t w : words) e.push_back(static_cast<std::int64_t>(w));
    e.push_back(static_cast<std::int64_t>(checksum(e)));
    return from_vector(e, {static_cast<long>(e.size())});
}

// The numbers std::mt19937_64 writes of itself (libstdc++: the 312 words, then the position).
std::vector<std::uint64_t> std_text_words(const std::mt19937_64& engine) {
    std::ostringstream os;
    os << engine;
    std::istringstream is(os.str());
    std::vector<std::uint64_t> w;
    for (std::uint64_t v; is >> v;) w.push_back(v);
    return w;
}

std::vector<std::int64_t> ints(const Tensor& t) { return t.to_vector<std::int64_t>(); }

}  // namespace

TEST_CASE("Mt19937_64 follows std::mt19937_64 through any interleaving of draws, fills, discards and copies",
          "[rng][mt19937][adversarial]") {
    for (const std::uint64_t seed : {std::uint64_t{0}, std::uint64_t{42}, ~std::uint64_t{0}}) {
        std::mt19937 plan(static_cast<std::uint32_t>(seed ^ 0x5bd1e995u));
        std::mt19937_64 want(seed);
        Mt19937_64 got(seed);
        std::vector<std::uint64_t> block;
        for (int step = 0; step < 400; ++step) {
            const unsigned kind = plan() % 6;
            INFO("seed " << seed << ", step " << step << ", kind " << kind);
            if (kind == 0) {
                REQUIRE(got() == want());
            } else if (kind == 1 || kind == 2) {
                // every size from 0 to 2000, and sizes that end on, just before and after a twist
                const std::size_t n = kind == 1 ? plan() % 2001 : 312 * (1 + plan() % 3) - 1 + plan() % 3;
                block.assign(n + 1, 0xDEADBEEFull);
                got.fill(block.data(), n);
                for (std::size_t i = 0; i < n; ++i) REQUIRE(block[i] == want());
                REQUIRE(block[n] == 0xDEADBEEFull);  // nothing past n written
            } else if (kind == 3) {
                const unsigned long long n = plan() % 3 == 0 ? 0 : plan() % 5000;
                got.discard(n);
                want.discard(n);
            } else if (kind == 4) {
                Mt19937_64 copy(got);  // a copy draws what the original draws, and leaves it alone
                std::mt19937_64 want_copy(want);
                for (int i = 0; i < 5; ++i) REQUIRE(copy() == want_copy());
                got = copy;  // assignment: the copy's position now
                want = want_copy;
            } else {
                Mt19937_64 other(seed + 1);
                other = got;  // assignment over a differently seeded engine
                REQUIRE(other == got);
                REQUIRE(other() == got());
                want();
            }
#if defined(__GLIBCXX__)
            const Mt19937_64::Words w = got.words();
            REQUIRE(std::vector<std::uint64_t>(w.begin(), w.end()) == std_text_words(want));
#endif
        }
        // a discard of many twists' worth, and one of a whole twist from the end of one
        got.discard(1000003);
        want.discard(1000003);
        REQUIRE(got() == want());
        got.discard(311);
        want.discard(311);
        got.discard(312);
        want.discard(312);
        REQUIRE(got() == want());
    }
}

TEST_CASE("Generator state: one written from std::mt19937_64's text is get_state() entry for entry and draws on",
          "[rng][rng-state][adversarial]") {
#if defined(__GLIBCXX__)
    // What a build that held std::mt19937_64 wrote: the format must not have moved.
    for (const int draws : {0, 1, 311, 312, 313, 1000}) {
        INFO(draws << " draws");
        std::mt19937_64 standard(2024);
        Generator gen(2024);
        for (int i = 0; i < draws; ++i) REQUIRE(gen.engine()() == standard());
        const Tensor old_state = state_of(std_text_words(standard));
        REQUIRE(ints(gen.get_state()) == ints(old_state));
        Generator restored(7);
        restored.set_state(old_state);
        for (int i = 0; i < 700; ++i) REQUIRE(restored.engine()() == standard());
    }
#else
    SUCCEED("the standard engine's text is libstdc++'s only on libstdc++");
#endif
}

TEST_CASE("Generator state: positions 0 and 312 load, 313 and beyond are refused with a valid checksum",
          "[rng][rng-state][adversarial]") {
    Generator source(99);
    (void)source.engine()();
    const Mt19937_64::Words base = source.engine().words();
    std::vector<std::uint64_t> words(base.begin(), base.end());

    for (const std::uint64_t pos : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{311}, std::uint64_t{312}}) {
        INFO("position " << pos);
        words.back() = pos;
        Generator gen(1);
        gen.set_state(state_of(words));
        // std::mt19937_64 read from the same numbers draws the same values
        std::ostringstream os;
        for (const std::uint64_t w : words) os << w << ' ';
        std::istringstream is(os.str());
        std::mt19937_64 standard;
        REQUIRE(is >> standard);
        for (int i = 0; i < 1000; ++i) REQUIRE(gen.engine()() == standard());
        // and the state reads back as it was written
        Generator again(1);
        again.set_state(state_of(words));
        CHECK(ints(again.get_state()) == ints(state_of(words)));
    }
    for (const std::uint64_t pos : {std::uint64_t{313}, std::uint64_t{1000}, std::uint64_t{1} << 63, ~std::uint64_t{0}}) {
        INFO("position " << pos);
        words.back() = pos;
        Generator gen(5);
        (void)gen.engine()();
        const std::vector<std::int64_t> before = ints(gen.get_state());
        CHECK_THROWS_WITH(gen.set_state(state_of(words)),
                          Contains("set_state") && Contains("position") && Contains("not a generator state"));
        CHECK(ints(gen.get_state()) == before);
    }
}

TEST_CASE("Generator state: all-zero words load as std::mt19937_64 reads them, and no draw hangs on them",
          "[rng][rng-state][adversarial]") {
    // std::mt19937_64 takes this state from its text (it draws zeros for ever), and so does
    // torch's set_state for its own engine: loaded as the standard engine loads it. Every
    // sampler must still return, whatever the draws are.
    std::vector<std::uint64_t> words(313, 0);
    words.back() = 312;
    Generator gen(3);
    gen.set_state(state_of(words));
    for (int i = 0; i < 1000; ++i) REQUIRE(gen.engine()() == 0);
    const Tensor state = gen.get_state();
    CHECK(rand({5}, kFloat32, gen).to_vector<double>() == std::vector<double>(5, 0.0));
    CHECK(randn({5}, kFloat64, gen).to_vector<double>() == std::vector<double>(5, 0.0));
    CHECK(randint(0, 10, {5}, gen).to_vector<std::int64_t>() == std::vector<std::int64_t>(5, 0));
    CHECK(randint(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(), {3}, gen)
              .to_vector<std::int64_t>() == std::vector<std::int64_t>(3, std::numeric_limits<std::int64_t>::min()));
    CHECK(randperm(6, gen).numel() == 6);
    CHECK(dropout_mask({7}, 0.5, kFloat32, gen).to_vector<double>() == std::vector<double>(7, 0.0));
    CHECK(dropout_mask({7}, 0.0, kFloat64, gen).to_vector<double>() == std::vector<double>(7, 1.0));
    CHECK(uniform({4}, -1.0, 1.0, kFloat64, gen).to_vector<double>() == std::vector<double>(4, -1.0));
    CHECK(multinomial(tensor({0.0, 1.0, 2.0}), 2, false, gen).numel() == 2);
    CHECK(multinomial(tensor({0.5, 1.0, 2.0}), 5, true, gen).numel() == 5);
    CHECK(bernoulli(full({4}, 0.5, kFloat32), gen).numel() == 4);
    (void)state;
}

TEST_CASE("dropout_mask at every edge of p is cast(ge(rand, p)) * 1/(1 - p) from the same seed",
          "[creation][dropout][adversarial]") {
    const double below_one = std::nextafter(1.0, 0.0);
    const float below_one_f = std::nextafter(1.0f, 0.0f);
    for (const Dtype d : {kFloat32, kFloat64}) {
        Generator probe(31);
        const std::vector<double> u = rand({4, 300}, d, probe).to_vector<double>();
        std::vector<double> ps{0.0,
                               -0.0,
                               std::numeric_limits<double>::denorm_min(),
                               std::numeric_limits<double>::min(),
                               std::numeric_limits<float>::denorm_min(),
                               1e-40,  // a float32 denormal
                               std::numeric_limits<float>::min(),
                               0x1.0p-53,  // the least draw above 0
                               0x1.8p-53,
                               0.5,
                               std::nextafter(0.5, 0.0),
                               std::nextafter(0.5, 1.0),
                               below_one,  // rounds to 1 in float32: nothing kept there
                               static_cast<double>(below_one_f),
                               static_cast<double>(std::nextafter(below_one_f, 0.0f)),
                               1.0 - 0x1.0p-53};
        for (const std::size_t i : {std::size_t{0}, std::size_t{311}, std::size_t{312}, std::size_t{999}}) {
            ps.push_back(u[i]);
            ps.push_back(std::nextafter(u[i], 0.0));
            ps.push_back(std::nextafter(u[i], 1.0));
            // the double halfway between two float32 values: rounds one way as p, the draw's
            // own rounding another way
            const float f = static_cast<float>(u[i]);
            ps.push_back((static_cast<double>(f) + static_cast<double>(std::nextafter(f, 1.0f))) / 2);
        }
        for (const double p : ps) {
            if (!(p < 1.0)) continue;
            INFO(dtype_name(d) << ", p = " << p);
            Generator g1(31), g2(31);
            const Tensor mask = dropout_mask({4, 300}, p, d, g1);
            const Tensor want = cast(ge(rand({4, 300}, d, g2), full({}, p, d)), d) * (1.0 / (1.0 - p));
            REQUIRE(mask.dtype() == d);
            REQUIRE(mask.to_vector<double>() == want.to_vector<double>());
            REQUIRE(g1.engine() == g2.engine());
        }
    }
}

TEST_CASE("dropout_mask refuses p outside 0 <= p < 1, other dtypes and huge shapes before drawing, and draws nothing for none",
          "[creation][dropout][adversarial]") {
    Generator gen(8);
    (void)gen.engine()();
    const Mt19937_64 before = gen.engine();
    for (const double p : {std::nan(""), -std::nan(""), -1e-300, -0.5, 1.0, 1.5, std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity()}) {
        INFO("p = " << p);
        CHECK_THROWS_WITH(dropout_mask({3}, p, kFloat32, gen), Contains("dropout_mask: p must be in [0, 1)"));
        CHECK(gen.engine() == before);
    }
    for (const Dtype d : {kBFloat16, kInt64, kBool}) {
        CHECK_THROWS_WITH(dropout_mask({3}, 0.5, d, gen), Contains("dropout_mask: expected dtype float32 or float64"));
        CHECK(gen.engine() == before);
    }
    for (const std::vector<long>& shape : {std::vector<long>{1L << 62}, std::vector<long>{1L << 32, 1L << 32},
                                          std::vector<long>{1L << 40, 1L << 40, 2}, std::vector<long>{-1}}) {
        INFO("shape of " << shape.size() << " axes, first " << shape[0]);
        CHECK_THROWS_WITH(dropout_mask(shape, 0.5, kFloat32, gen), Contains("dropout_mask"));
        CHECK(gen.engine() == before);
    }
    for (const std::vector<long>& shape : {std::vector<long>{0}, std::vector<long>{3, 0}, std::vector<long>{0, 1L << 40}}) {
        const Tensor m = dropout_mask(shape, 0.5, kFloat64, gen);
        CHECK(m.numel() == 0);
        CHECK(m.dim() == static_cast<long>(shape.size()));
        CHECK(gen.engine() == before);  // rand draws nothing for no elements either
    }
    const Tensor scalar = dropout_mask({}, 0.25, kFloat32, gen);
    Generator twin(8);
    (void)twin.engine()();
    CHECK(scalar.dim() == 0);
    CHECK(scalar.item<double>() == (rand({}, kFloat32, twin).item<double>() >= 0.25f ? static_cast<double>(1.0f / 0.75f) : 0.0));
}

TEST_CASE("dropout_mask from the default generator: threads seeded alike draw alike, each from its own generator",
          "[creation][dropout][adversarial]") {
    manual_seed(77);
    const std::vector<double> here = dropout_mask({1000}, 0.3, kFloat32).to_vector<double>();
    std::vector<double> a, b;
    auto run = [](std::vector<double>& out) {
        manual_seed(77);
        std::vector<double> first = dropout_mask({1000}, 0.3, kFloat32).to_vector<double>();
        // a second mask on this thread goes on from its own generator
        (void)dropout_mask({5}, 0.3, kFloat32);
        out = std::move(first);
    };
    std::thread t1(run, std::ref(a)), t2(run, std::ref(b));
    t1.join();
    t2.join();
    CHECK(a == here);
    CHECK(b == here);
}
