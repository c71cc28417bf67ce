// Sampling as torch 1.13 does it (multinomial, bernoulli, normal, the in-place uniform_,
// normal_ and bernoulli_), probed as a careless user would: every refused argument with
// torch's rule, weights that overflow a naive sum, zero-weight categories, dtypes, the in-place
// rules (version, aliases, a leaf requiring grad, a write through t[i]), the zero gradient of a
// draw, and a refused call that must not move the generator. Statistics use fixed seeds, so the
// chi-square bounds are deterministic: they hold for these draws and cannot flake.
#include <cmath>
#include <limits>
#include <map>

#include "core/sampling.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using Catch::Contains;
using indexing::Slice;

namespace {

// Pearson's statistic of observed counts against expected probabilities.
double chi_square(const std::vector<double>& counts, const std::vector<double>& probs) {
    double n = 0, x2 = 0;
    for (const double c : counts) n += c;
    for (std::size_t i = 0; i < counts.size(); ++i) {
        const double e = n * probs[i];
        x2 += (counts[i] - e) * (counts[i] - e) / e;
    }
    return x2;
}

// The generator's next draws, without moving it: equal for two generators in the same state.
std::vector<double> peek(const Generator& gen) {
    Generator copy = gen;
    return rand({4}, kFloat64, copy).to_vector<double>();
}

}  // namespace

TEST_CASE("multinomial: shapes, dtype and determinism from a seeded generator", "[sampling]") {
    const Tensor p1 = tensor({0.1, 0.2, 0.3, 0.4});
    Generator a(7), b(7), c(8);
    const Tensor s = multinomial(p1, 3, false, a);
    CHECK(s.dtype() == kInt64);
    CHECK(s.shape() == Shape{3});
    CHECK(s.to_vector<std::int64_t>() == multinomial(p1, 3, false, b).to_vector<std::int64_t>());
    CHECK(multinomial(p1, 50, true, a).to_vector<std::int64_t>() != multinomial(p1, 50, true, c).to_vector<std::int64_t>());
    const Tensor p2 = tensor({{0.5, 0.5, 0.0}, {0.0, 0.0, 2.0}});
    const Tensor s2 = multinomial(p2, 2, true, a);
    CHECK(s2.shape() == Shape{2, 2});
    CHECK(s2.to_vector<std::int64_t>()[2] == 2);
    CHECK(s2.to_vector<std::int64_t>()[3] == 2);
    // An empty batch of rows gives an empty result, as torch's.
    CHECK(multinomial(zeros({0, 3}), 1).shape() == Shape{0, 1});
    // Weights need not sum to 1: scaled by a power of two they give the very same draws.
    Generator d(3), e(3);
    CHECK(multinomial(p1, 40, true, d).to_vector<std::int64_t>() ==
          multinomial(p1 * 4.0, 40, true, e).to_vector<std::int64_t>());
    // The indices never carry a gradient.
    const Tensor pg = tensor({0.5, 0.5}, TensorOptions(kFloat64).requires_grad(true));
    CHECK_FALSE(multinomial(pg, 1).requires_grad());
}

TEST_CASE("multinomial with replacement: frequencies follow the weights (chi-square)", "[sampling]") {
    const std::vector<double> probs{0.1, 0.2, 0.3, 0.4};
    for (const Dtype d : {kFloat32, kFloat64, kBFloat16}) {
        Generator gen(2024);
        const Tensor p = from_vector(probs, {4}, kFloat64).to(d);
        std::vector<double> counts(4);
        for (const std::int64_t i : multinomial(p, 40000, true, gen).to_vector<std::int64_t>()) ++counts.at(i);
        std::vector<double> want = p.to(kFloat64).to_vector<double>();  // bfloat16 rounds 0.1 etc.
        double total = 0;
        for (double w : want) total += w;
        for (double& w : want) w /= total;
        INFO(dtype_name(d));
        CHECK(chi_square(counts, want) < 16.27);  // 3 degrees of freedom, p = 0.001
    }
}

TEST_CASE("multinomial without replacement: distinct picks, later ones in proportion to what is left", "[sampling]") {
    const std::vector<double> w{1, 2, 3, 4};
    Generator gen(11);
    std::map<std::pair<std::int64_t, std::int64_t>, double> pairs;
    const Tensor rows = expand(tensor({1.0, 2.0, 3.0, 4.0}, kFloat64).unsqueeze(0), {20000, 4});
    const std::vector<std::int64_t> s = multinomial(rows, 2, false, gen).to_vector<std::int64_t>();
    for (std::size_t r = 0; r < 20000; ++r) {
        REQUIRE(s[2 * r] != s[2 * r + 1]);
        ++pairs[{s[2 * r], s[2 * r + 1]}];
    }
    std::vector<double> counts, probs;
    for (std::int64_t i = 0; i < 4; ++i)
        for (std::int64_t j = 0; j < 4; ++j)
            if (i != j) {
                counts.push_back(pairs[{i, j}]);
                probs.push_back(w[static_cast<std::size_t>(i)] / 10.0 * w[static_cast<std::size_t>(j)] /
                                (10.0 - w[static_cast<std::size_t>(i)]));
            }
    CHECK(chi_square(counts, probs) < 31.26);  // 11 degrees of freedom, p = 0.001
    // Every category of non-zero weight, each once, never one of zero weight.
    for (int seed = 0; seed < 20; ++seed) {
        Generator g(static_cast<std::uint64_t>(seed));
        std::vector<std::int64_t> all = multinomial(tensor({0.0, 1e-30, 5.0, 0.0, 1.0}), 3, false, g).to_vector<std::int64_t>();
        std::sort(all.begin(), all.end());
        CHECK(all == std::vector<std::int64_t>{1, 2, 4});
    }
}

TEST_CASE("multinomial: weights whose sum overflows, and a tiny weight beside a huge one", "[sampling]") {
    Generator gen(5);
    std::vector<double> counts(2);
    for (const std::int64_t i : multinomial(tensor({1e308, 1e308}, kFloat64), 2000, true, gen).to_vector<std::int64_t>())
        ++counts.at(i);
    CHECK(chi_square(counts, {0.5, 0.5}) < 10.83);
    for (const std::int64_t i : multinomial(tensor({5.0, 1e30, 2.0}), 1000, true, gen).to_vector<std::int64_t>())
        CHECK(i == 1);
    // The smallest subnormal weight alone is still a distribution.
    CHECK(multinomial(tensor({4.9e-324, 0.0}, kFloat64), 3, true, gen).to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{0, 0, 0});
}

TEST_CASE("multinomial: every refused argument, with torch's rule, leaves the generator where it was", "[sampling]") {
    Generator gen(9);
    const std::vector<double> before = peek(gen);
    const auto refused = [&](const Tensor& p, std::int64_t n, bool repl, const std::string& what) {
        INFO(what);
        CHECK_THROWS_WITH(multinomial(p, n, repl, gen), Contains("multinomial") && Contains(what));
        CHECK(peek(gen) == before);
    };
    refused(tensor({0.2, -0.1, 0.5}), 1, true, "element < 0");
    refused(tensor({0.2, kNaN, 0.5}), 1, true, "`nan`");
    refused(tensor({0.2, kInf, 0.5}), 1, true, "`inf`");
    refused(tensor({0.0, 0.0}), 1, true, "sum of probabilities <= 0");
    refused(tensor({{0.2, 0.5}, {0.0, 0.0}}), 1, true, "(row 1)");
    refused(tensor({{0.2, 0.5}, {0.3, -1.0}}), 1, false, "(row 1)");
    refused(tensor(0.5), 1, true, "prob_dist must be 1 or 2 dim");
    refused(ones({2, 2, 2}), 1, true, "prob_dist must be 1 or 2 dim");
    refused(tensor({0.2, 0.3}), 0, true, "n_sample <= 0");
    refused(tensor({0.2, 0.3}), -1, false, "n_sample <= 0");
    refused(tensor({0.2, 0.3, 0.5}), 4, false, "without replacement");
    refused(ones({2, 0}), 1, false, "without replacement");
    refused(tensor({0.2, 0.0, 0.5}), 3, false, "not enough non-negative category");
    refused(ones({3}).to(kInt64), 1, true, "floating-point dtypes");
    refused(ones({3}).to(kBool), 1, true, "floating-point dtypes");
    refused(Tensor(), 1, true, "undefined");
    // With replacement, more samples than categories are fine.
    CHECK(multinomial(tensor({0.2, 0.0, 0.5}), 4, true, gen).shape() == Shape{4});
}

TEST_CASE("bernoulli: 0 and 1 in p's dtype, the frequency p, torch's refusals, a zero gradient", "[sampling]") {
    Generator gen(1);
    const Tensor p = full({20000}, 0.3, kFloat64);
    const Tensor b = bernoulli(p, gen);
    CHECK(b.dtype() == kFloat64);
    double ones_count = 0;
    for (const double v : b.to_vector<double>()) {
        REQUIRE((v == 0.0 || v == 1.0));
        ones_count += v;
    }
    CHECK(std::abs(ones_count - 6000) < 4.5 * std::sqrt(20000 * 0.21));
    CHECK(vals(bernoulli(tensor({0.0, 1.0, 0.0, 1.0}), gen)) == std::vector<double>{0, 1, 0, 1});
    CHECK(bernoulli(zeros({2, 3}, kFloat32), 1.0, gen).to_vector<double>() == std::vector<double>(6, 1.0));
    // Same seed, same draws.
    Generator g1(42), g2(42);
    CHECK(vals(bernoulli(full({50}, 0.5), g1)) == vals(bernoulli(full({50}, 0.5), g2)));

    const std::vector<double> before = peek(gen);
    CHECK_THROWS_WITH(bernoulli(tensor({0.5, 1.5}), gen), Contains("bernoulli") && Contains("[0, 1]") && Contains("1.5"));
    CHECK_THROWS_WITH(bernoulli(tensor({0.5, -0.5}), gen), Contains("[0, 1]"));
    CHECK_THROWS_WITH(bernoulli(tensor({kNaN}), gen), Contains("[0, 1]"));
    CHECK_THROWS_WITH(bernoulli(ones({2}).to(kInt64), gen), Contains("floating-point"));
    CHECK_THROWS_WITH(bernoulli(ones({2}), 1.01, gen), Contains("[0, 1]"));
    CHECK_THROWS_WITH(bernoulli(ones({2}), kNaN, gen), Contains("[0, 1]"));
    CHECK(peek(gen) == before);

    // torch's derivative of a draw: the result requires grad, the gradient to p is zero.
    const Tensor pg = tensor({0.2, 0.7}, TensorOptions(kFloat64).requires_grad(true));
    const Tensor y = bernoulli(pg, gen);
    CHECK(y.requires_grad());
    (y * 3.0).sum().backward();
    CHECK(vals(pg.grad()) == std::vector<double>{0, 0});
}

TEST_CASE("normal: every overload, broadcasting, the values of mean + std * randn, torch's refusals", "[sampling]") {
    Generator a(3), b(3);
    const Tensor mean = tensor({0.0, 10.0, -5.0}, kFloat64).reshape({3, 1});
    const Tensor std = tensor({1.0, 2.0}, kFloat64);
    const Tensor y = normal(mean, std, a);
    CHECK(y.shape() == Shape{3, 2});
    const Tensor want = randn({3, 2}, kFloat64, b) * std + mean;
    CHECK(vals(y) == vals(want));
    // mean's dtype decides (torch: float32 mean, float64 std → float32); an int64 std is read as is.
    CHECK(normal(zeros({3}), ones({3}, kFloat64)).dtype() == kFloat32);
    CHECK(normal(zeros({3}), ones({3}).to(kInt64)).dtype() == kFloat32);
    CHECK(normal(0.0, ones({2}, kFloat64)).dtype() == kFloat64);
    CHECK(normal(zeros({4}), 2.0).shape() == Shape{4});
    CHECK(normal(1.0, 2.0, {2, 5}, kFloat64).shape() == Shape{2, 5});
    CHECK(normal(1.0, 0.0, {3}, kFloat64).to_vector<double>() == std::vector<double>{1, 1, 1});
    // The sample moments of 40000 draws.
    Generator g(8);
    const std::vector<double> v = normal(3.0, 2.0, {40000}, kFloat64, g).to_vector<double>();
    double m = 0, s2 = 0;
    for (double x : v) m += x;
    m /= static_cast<double>(v.size());
    for (double x : v) s2 += (x - m) * (x - m);
    s2 /= static_cast<double>(v.size() - 1);
    CHECK(std::abs(m - 3.0) < 4.5 * 2.0 / 200.0);
    CHECK(std::abs(s2 - 4.0) < 4.5 * 4.0 * std::sqrt(2.0 / 40000.0));

    Generator gen(4);
    const std::vector<double> before = peek(gen);
    CHECK_THROWS_WITH(normal(zeros({3}), tensor({1.0, -1.0, 1.0}), gen),
                      Contains("normal") && Contains("std >= 0.0") && Contains("flat index 1"));
    CHECK_THROWS_WITH(normal(zeros({3}), tensor({1.0, kNaN, 1.0}), gen), Contains("std >= 0.0"));
    CHECK_THROWS_WITH(normal(zeros({3}), -1.0, gen), Contains("std >= 0.0"));
    CHECK_THROWS_WITH(normal(zeros({3}), kInf, gen), Contains("std"));
    CHECK_THROWS_WITH(normal(0.0, -ones({3}), gen), Contains("std >= 0.0"));
    CHECK_THROWS_WITH(normal(kNaN, ones({3}), gen), Contains("mean"));
    CHECK_THROWS_WITH(normal(0.0, -1.0, {2}, kFloat32, gen), Contains("std >= 0.0"));
    CHECK_THROWS_WITH(normal(1e300, 1.0, {2}, kFloat32, gen), Contains("float32's range"));
    CHECK_THROWS_WITH(normal(0.0, 1.0, {2}, kInt64, gen), Contains("floating-point"));
    CHECK_THROWS_WITH(normal(zeros({3}), ones({2}), gen), Contains("normal"));
    CHECK_THROWS_WITH(normal(zeros({3}).to(kInt64), 1.0, gen), Contains("floating-point"));
    CHECK_THROWS_WITH(normal(Tensor(), 1.0, gen), Contains("undefined"));
    CHECK(peek(gen) == before);

    // A zero gradient to a mean and std that require grad, as torch's.
    const Tensor mg = tensor({1.0, 2.0}, TensorOptions(kFloat64).requires_grad(true));
    const Tensor sg = tensor({1.0, 2.0}, TensorOptions(kFloat64).requires_grad(true));
    normal(mg, sg, gen).sum().backward();
    CHECK(vals(mg.grad()) == std::vector<double>{0, 0});
    CHECK(vals(sg.grad()) == std::vector<double>{0, 0});
}

TEST_CASE("uniform_ / normal_ / bernoulli_: the draws of uniform, randn and rand < p, written in place", "[sampling]") {
    for (const Dtype d : {kFloat32, kFloat64}) {
        Generator a(12), b(12);
        const Tensor t = zeros({3, 4}, d);
        const Tensor alias = t;
        const auto v0 = t.version();
        CHECK(&t.uniform_(-2.0, 3.0, a) == &t);
        CHECK(t.version() == v0 + 1);
        CHECK(vals(alias) == vals(uniform({3, 4}, -2.0, 3.0, d, b)));
        t.normal_(1.5, 0.5, a);
        CHECK(vals(t) == vals(randn({3, 4}, d, b) * 0.5 + 1.5));
        t.bernoulli_(0.25, a);
        CHECK(vals(t) == vals(lt(rand({3, 4}, kFloat64, b), 0.25).to(d)));
        t.bernoulli_(tensor({0.0, 1.0, 0.0, 1.0}), a);
        CHECK(vals(t.index({Slice(), 1})) == std::vector<double>{1, 1, 1});
        CHECK(vals(t.index({Slice(), 2})) == std::vector<double>{0, 0, 0});
        CHECK(t.version() == v0 + 4);
    }
    // Defaults as torch's: uniform_ in [0, 1), normal_ standard, bernoulli_ p = 0.5.
    manual_seed(5);
    const Tensor u = zeros({1000}).uniform_();
    for (const double x : vals(u)) REQUIRE((x >= 0.0 && x < 1.0));
    // bfloat16 draws in float32, rounded; bernoulli_ fills any dtype.
    Generator c(1), e(1);
    CHECK(vals(zeros({5}, kBFloat16).uniform_(0.0, 1.0, c)) == vals(uniform({5}, 0.0, 1.0, kFloat32, e).to(kBFloat16)));
    const Tensor ints = zeros({6}, kInt64);
    ints.bernoulli_(1.0, c);
    CHECK(ints.to_vector<std::int64_t>() == std::vector<std::int64_t>(6, 1));
    const Tensor flags = zeros({4}, kBool);
    flags.bernoulli_(tensor({1.0, 0.0, 1.0, 0.0}), c);
    CHECK(flags.to_vector<double>() == std::vector<double>{1, 0, 1, 0});
    // Every value of a wide uniform_ stays below `to`, in float32 too.
    for (const double x : vals(zeros({2000}).uniform_(-1e38, 1e38, c))) REQUIRE(x < 1e38);
}

TEST_CASE("uniform_ / normal_ / bernoulli_: torch's refusals, before anything is drawn or written", "[sampling]") {
    Generator gen(6);
    const Tensor t = zeros({3});
    const std::vector<double> before = peek(gen);
    const auto v0 = t.version();
    CHECK_THROWS_WITH(t.uniform_(2.0, 1.0, gen), Contains("uniform_") && Contains("from=2 > to=1"));
    CHECK_THROWS_WITH(t.uniform_(0.0, kInf, gen), Contains("uniform_") && Contains("to"));
    CHECK_THROWS_WITH(t.uniform_(kNaN, 1.0, gen), Contains("uniform_") && Contains("from"));
    CHECK_THROWS_WITH(t.uniform_(-1e300, 1.0, gen), Contains("float32's range"));
    CHECK_THROWS_WITH(t.uniform_(-3e38, 3e38, gen), Contains("to - from"));
    CHECK_THROWS_WITH(zeros({2}, kFloat64).uniform_(-1e308, 1e308, gen), Contains("to - from"));
    CHECK_THROWS_WITH(zeros({2}).to(kInt64).uniform_(0.0, 1.0, gen), Contains("uniform_") && Contains("int64"));
    CHECK_THROWS_WITH(zeros({2}).to(kBool).normal_(0.0, 1.0, gen), Contains("normal_") && Contains("bool"));
    CHECK_THROWS_WITH(t.normal_(0.0, -1.0, gen), Contains("normal_") && Contains("std >= 0.0"));
    CHECK_THROWS_WITH(t.normal_(0.0, kNaN, gen), Contains("normal_"));
    CHECK_THROWS_WITH(t.normal_(kInf, 1.0, gen), Contains("normal_") && Contains("mean"));
    CHECK_THROWS_WITH(t.bernoulli_(1.5, gen), Contains("bernoulli_") && Contains("p=1.5"));
    CHECK_THROWS_WITH(t.bernoulli_(-0.1, gen), Contains("bernoulli_"));
    CHECK_THROWS_WITH(t.bernoulli_(kNaN, gen), Contains("bernoulli_"));
    CHECK_THROWS_WITH(t.bernoulli_(tensor({0.5, 1.5, 0.2}), gen), Contains("bernoulli_") && Contains("flat index 1"));
    CHECK_THROWS_WITH(t.bernoulli_(tensor({0.5, 0.5}), gen), Contains("bernoulli_") && Contains("broadcast"));
    CHECK_THROWS_WITH(t.bernoulli_(zeros({2, 3}), gen), Contains("broadcast"));
    CHECK_THROWS_WITH(t.bernoulli_(ones({3}).to(kInt64), gen), Contains("floating-point"));
    CHECK_THROWS_WITH(Tensor().uniform_(0.0, 1.0, gen), Contains("uniform_") && Contains("undefined"));
    CHECK_THROWS_WITH(t.bernoulli_(Tensor(), gen), Contains("undefined"));
    // A leaf that requires grad: refused while gradients are recorded, as torch.
    const Tensor w = zeros({3}, TensorOptions(kFloat64).requires_grad(true));
    for (const auto& [name, call] : std::vector<std::pair<std::string, std::function<void()>>>{
             {"uniform_", [&] { w.uniform_(0.0, 1.0, gen); }},
             {"normal_", [&] { w.normal_(0.0, 1.0, gen); }},
             {"bernoulli_", [&] { w.bernoulli_(0.5, gen); }},
             {"bernoulli_", [&] { w.bernoulli_(full({3}, 0.5), gen); }}}) {
        CHECK_THROWS_WITH(call(), Contains(name) && Contains("leaf Variable that requires grad"));
    }
    CHECK(vals(w) == std::vector<double>{0, 0, 0});
    CHECK(peek(gen) == before);
    CHECK(t.version() == v0);
    CHECK(vals(t) == std::vector<double>{0, 0, 0});
    // Under NoGradGuard the leaf may be filled (an initialiser's write).
    {
        NoGradGuard no_grad;
        w.normal_(0.0, 1.0, gen);
    }
    CHECK(vals(w) != std::vector<double>{0, 0, 0});
}

TEST_CASE("uniform_ on a tensor in the graph: recorded, no gradient to the old values", "[sampling]") {
    const Tensor x = tensor({1.0, 2.0, 3.0}, TensorOptions(kFloat64).requires_grad(true));
    Tensor y = x * 2.0;
    const Tensor before = y * 1.0;  // reads the old value
    y.uniform_(0.0, 1.0);
    CHECK(y.requires_grad());
    (y * 3.0 + before).sum().backward();
    // 1 from `before`'s path, nothing through the overwritten value (torch: 2 · 1).
    CHECK(vals(x.grad()) == std::vector<double>{2, 2, 2});
}

TEST_CASE("uniform_ / normal_ / bernoulli_ through t[i] write into t", "[sampling]") {
    Generator a(21), b(21);
    const Tensor t = zeros({2, 3}, kFloat64);
    t[1].uniform_(5.0, 6.0, a);
    const std::vector<double> row0 = vals(t[0]), row1 = vals(t[1]);
    CHECK(row0 == std::vector<double>{0, 0, 0});
    CHECK(row1 == vals(uniform({3}, 5.0, 6.0, kFloat64, b)));
    t.index({Slice(), 0}).normal_(100.0, 0.0, a);
    CHECK(vals(t.index({Slice(), 0})) == std::vector<double>{100, 100});
    t[0].bernoulli_(1.0, a);
    CHECK(vals(t[0]) == std::vector<double>{1, 1, 1});
    t[0].bernoulli_(tensor({0.0, 1.0, 0.0}), a);
    CHECK(vals(t[0]) == std::vector<double>{0, 1, 0});
    const Tensor w = zeros({2, 3}, TensorOptions(kFloat64).requires_grad(true));
    CHECK_THROWS_WITH(w[0].uniform_(0.0, 1.0, a), Contains("uniform_") && Contains("leaf Variable that requires grad"));
}
