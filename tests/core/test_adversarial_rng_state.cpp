// Generator state (get_state / set_state, get_rng_state / set_rng_state), probed as a careless
// or hostile user would: a state restored into another generator, one that went through an
// .npz file, and states that get_state() did not make (another dtype, shape or length, a
// wrong tag, one flipped word), each refused before the generator changes. And the recipe
// README gives: a run of 2N steps and a run of N steps, checkpointed to .npz, resumed and run N
// more, with the data order and dropout masks drawn from generators, end bit for bit alike.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/io/npz.hpp"
#include "core/sampling.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using Catch::Contains;

namespace {

std::vector<double> next_values(Generator& gen) {
    std::vector<double> v = rand({3}, kFloat64, gen).to_vector<double>();
    v.push_back(randn({}, kFloat64, gen).item<double>());
    for (const std::int64_t i : randperm(5, gen).to_vector<std::int64_t>()) v.push_back(static_cast<double>(i));
    return v;
}

std::string temp_path(const std::string& name) {
    return (std::filesystem::temp_directory_path() / ("xgrad_rng_" + std::to_string(::getpid()) + "_" + name)).string();
}

}  // namespace

TEST_CASE("Generator state: a 1-D int64 tensor that restores the very next draws", "[rng-state]") {
    Generator gen(123);
    (void)rand({10}, kFloat32, gen);
    const Tensor state = gen.get_state();
    CHECK(state.dtype() == kInt64);
    CHECK(state.dim() == 1);
    CHECK_FALSE(state.requires_grad());
    const std::vector<double> after = next_values(gen);
    gen.set_state(state);
    CHECK(next_values(gen) == after);
    // Into another generator, whatever its seed; and get_state() does not move the generator.
    Generator other(999);
    other.set_state(state);
    (void)other.get_state();
    CHECK(next_values(other) == after);
    // The state is a copy: drawing afterwards does not change it.
    CHECK(state.to_vector<std::int64_t>() == state.clone().to_vector<std::int64_t>());
    Generator fresh(123);
    (void)rand({10}, kFloat32, fresh);
    CHECK(fresh.get_state().to_vector<std::int64_t>() == state.to_vector<std::int64_t>());
}

TEST_CASE("Generator state: through an .npz checkpoint and back", "[rng-state]") {
    Generator gen(7);
    (void)randn({33}, kFloat64, gen);
    const std::string path = temp_path("state.npz");
    save_npz(path, {{"rng.data", gen.get_state()}});
    const std::vector<double> after = next_values(gen);
    Generator back;
    back.set_state(load_npz(path).at(0).second);
    CHECK(next_values(back) == after);
    std::remove(path.c_str());
}

TEST_CASE("Generator state: anything get_state() did not make is refused, the generator unchanged", "[rng-state]") {
    Generator source(1);
    const Tensor good = source.get_state();
    const std::vector<std::int64_t> words = good.to_vector<std::int64_t>();
    Generator gen(55);
    const Tensor before = gen.get_state();
    const auto refused = [&](const Tensor& state, const std::string& what) {
        INFO(what);
        CHECK_THROWS_WITH(gen.set_state(state), Contains("Generator::set_state") && Contains(what));
        CHECK(gen.get_state().to_vector<std::int64_t>() == before.to_vector<std::int64_t>());
    };
    refused(Tensor(), "undefined");
    refused(good.to(kFloat64), "int64");
    refused(good.reshape({1, static_cast<long>(good.numel())}), "1-D");
    refused(from_vector(std::vector<std::int64_t>(words.begin(), words.end() - 1), {words.size() - 1}), "entries");
    refused(zeros({0}).to(kInt64), "entries");
    std::vector<std::int64_t> longer = words;
    longer.push_back(0);
    refused(from_vector(longer, {longer.size()}), "entries");
    for (const std::size_t i : {std::size_t{0}, std::size_t{1}}) {
        std::vector<std::int64_t> bad = words;
        bad[i] ^= 1;
        refused(from_vector(bad, {bad.size()}), "format tag");
    }
    for (const std::size_t i : {std::size_t{2}, words.size() / 2, words.size() - 2, words.size() - 1}) {
        std::vector<std::int64_t> bad = words;
        bad[i] ^= std::int64_t{1} << 40;
        refused(from_vector(bad, {bad.size()}), "checksum");
    }
    // A state of zeros of the right length is not a state either.
    refused(zeros({good.numel()}).to(kInt64), "format tag");
}

TEST_CASE("get_rng_state / set_rng_state: the default generator, dropout-style draws repeat", "[rng-state]") {
    manual_seed(31);
    (void)rand({4});
    const Tensor state = get_rng_state();
    const std::vector<double> mask = bernoulli(full({16}, 0.5)).to_vector<double>();
    const std::vector<double> normals = randn({5}).to_vector<double>();
    set_rng_state(state);
    CHECK(bernoulli(full({16}, 0.5)).to_vector<double>() == mask);
    CHECK(randn({5}).to_vector<double>() == normals);
    CHECK(get_rng_state().to_vector<std::int64_t>() == default_generator().get_state().to_vector<std::int64_t>());
    CHECK_THROWS_WITH(set_rng_state(state.to(kFloat32)), Contains("set_state") && Contains("int64"));
}

namespace {

// A small training run whose every step draws: the data order from `data` (a fresh
// permutation each epoch), the inputs' noise and a dropout mask from the default generator.
struct Run {
    Tensor w = zeros({4, 1}, kFloat64), b = zeros({1}, kFloat64);
    Generator data{2};
    std::int64_t step = 0;
    std::vector<std::int64_t> order;
    std::vector<double> losses;

    void train(std::int64_t steps) {
        const Tensor xs = from_vector(std::vector<double>{1, 2, 3, 4, 0, 1, 0, 1, 2, 2, 1, 0, 5, 1, 1, 2, 3, 1, 0, 0,
                                                          1, 1, 1, 1},
                                      {6, 4}, kFloat64);
        const Tensor ys = from_vector(std::vector<double>{1, 0, 2, 1, 3, 0}, {6, 1}, kFloat64);
        for (std::int64_t k = 0; k < steps; ++k, ++step) {
            if (step % 6 == 0) order = randperm(6, data).to_vector<std::int64_t>();
            const long i = static_cast<long>(order[static_cast<std::size_t>(step % 6)]);
            w.requires_grad_(true);
            b.requires_grad_(true);
            const Tensor x = xs.index({i}).unsqueeze(0) + normal(0.0, 0.1, {1, 4}, kFloat64);
            const Tensor keep = bernoulli(full({1, 4}, 0.75, kFloat64));
            const Tensor pred = matmul(x * keep / 0.75, w) + b;
            const Tensor loss = ((pred - ys.index({i}).unsqueeze(0)) * (pred - ys.index({i}).unsqueeze(0))).sum();
            loss.backward();
            losses.push_back(loss.item<double>());
            NoGradGuard no_grad;
            w = w.detach() - w.grad() * 0.01;
            b = b.detach() - b.grad() * 0.01;
        }
    }
    NamedTensors checkpoint() const {
        return {{"w", w.detach()},
                {"b", b.detach()},
                {"step", from_vector(std::vector<std::int64_t>{step}, {})},
                {"order", from_vector(order, {order.size()})},
                {"rng.default", get_rng_state()},
                {"rng.data", data.get_state()}};
    }
    void resume(const NamedTensors& c) {
        w = c.at(0).second;
        b = c.at(1).second;
        step = c.at(2).second.item<std::int64_t>();
        order = c.at(3).second.to_vector<std::int64_t>();
        set_rng_state(c.at(4).second);
        data.set_state(c.at(5).second);
    }
};

}  // namespace

TEST_CASE("RNG state in a checkpoint: N steps, save, resume, N more is the 2N-step run bit for bit", "[rng-state]") {
    manual_seed(77);
    Run whole;
    whole.train(20);

    manual_seed(77);
    Run first;
    first.train(9);
    const std::string path = temp_path("resume.npz");
    save_npz(path, first.checkpoint());
    // The process goes on drawing (or restarts): nothing of that may reach the resumed run.
    manual_seed(12345);
    (void)rand({100});
    Run resumed;
    resumed.resume(load_npz(path));
    resumed.losses = first.losses;
    resumed.train(11);
    std::remove(path.c_str());

    REQUIRE(resumed.losses.size() == whole.losses.size());
    for (std::size_t i = 0; i < whole.losses.size(); ++i) {
        INFO("step " << i);
        CHECK(std::memcmp(&resumed.losses[i], &whole.losses[i], sizeof(double)) == 0);
    }
    CHECK(resumed.w.to_vector<double>() == whole.w.to_vector<double>());
    // Without the generators' states the resumed run differs: the test can see a lost state.
    manual_seed(77);
    Run blind;
    blind.train(9);
    const NamedTensors c = blind.checkpoint();
    manual_seed(12345);
    Run no_state;
    no_state.w = c.at(0).second;
    no_state.b = c.at(1).second;
    no_state.step = 9;
    no_state.order = c.at(3).second.to_vector<std::int64_t>();
    no_state.train(11);
    CHECK(no_state.w.to_vector<double>() != whole.w.to_vector<double>());
}
