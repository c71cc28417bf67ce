// examples/common/checkpoint_file: a run's parts (model, optimizer, generators) load from a
// checkpoint all or none, so a refused part leaves none of the others changed.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/checkpoint_file.hpp"
#include "core/io/npz.hpp"
#include "helpers.hpp"
#include "nn/linear.hpp"
#include "optim/adam.hpp"
#include "programs.hpp"

using namespace xgrad;
using namespace xgrad::examples;
using namespace xgrad::test;

namespace {

// A small run's parts: a model, Adam, a data generator, and the thread's default generator.
struct Run {
    explicit Run(std::uint64_t seed)
        : data_gen(seed), model(std::make_shared<nn::Linear>(3, 2, true, data_gen)),
          optimizer(model->parameters(), optim::AdamOptions(0.1)) {}

    void steps(int n) {
        for (int i = 0; i < n; ++i) {
            optimizer.zero_grad();
            sum(model->forward(rand({4, 3}, {}, data_gen))).backward();
            optimizer.step();
            (void)rand({1}, {});  // a draw from the default generator, as dropout's
        }
    }

    NamedTensors entries() const {
        NamedTensors all = with_prefix("model", model->state_dict());
        for (const auto& e : with_prefix("optim", optimizer.state_dict())) all.push_back(e);
        all.emplace_back("rng.data", data_gen.get_state());
        all.emplace_back("rng.default", get_rng_state());
        return all;
    }

    std::vector<CheckpointPart> parts() {
        return {state_dict_part(*model, "model"), state_dict_part(optimizer, "optim"),
                generator_part(data_gen, "rng.data"), default_generator_part("rng.default")};
    }

    Generator data_gen;
    std::shared_ptr<nn::Linear> model;
    optim::Adam optimizer;
};

}  // namespace

TEST_CASE("load_parts: a checkpoint whose last part is refused leaves every part as it was", "[checkpoint-file]") {
    const std::string dir = test_programs::fresh_dir("checkpoint_parts");
    manual_seed(1);
    Run saved(1);
    saved.steps(3);
    const NamedTensors good = saved.entries();
    NamedTensors all = good;
    for (auto& [name, t] : all)
        if (name == "rng.default") t = zeros_like(t);  // not a generator's state: set_rng_state refuses it
    const std::string path = dir + "/checkpoint.npz";
    save_npz(path, all);

    manual_seed(2);
    Run run(2);
    run.steps(2);  // Adam with moments of its own, generators moved on
    const auto before = state_values(run.entries());
    // Each part differs from the checkpoint's, so a load that went through would show.
    REQUIRE(state_values(sub_entries(good, "model")) != state_values(run.model->state_dict()));
    REQUIRE(state_values(sub_entries(good, "optim")) != state_values(run.optimizer.state_dict()));
    REQUIRE(vals(find_entry(good, "rng.data")) != vals(run.data_gen.get_state()));
    const CheckpointFile file(path, "test");
    CHECK_THROWS_WITH(load_parts(file, run.parts()),
                      Catch::StartsWith("load checkpoint '" + path + "': ") && Catch::Contains("state"));
    // The model, Adam and the data generator had loaded before the refusal: all put back.
    CHECK(state_values(run.entries()) == before);

    // An entry missing: the file's own refusal, not said twice, and again nothing changed.
    all.erase(std::find_if(all.begin(), all.end(), [](const auto& e) { return e.first == "rng.data"; }));
    save_npz(path, all);
    CHECK_THROWS_WITH(load_parts(CheckpointFile(path, "test"), run.parts()),
                      "load checkpoint '" + path + "': entry 'rng.data' is missing (not a test checkpoint, or one "
                      "from an older test)");
    CHECK(state_values(run.entries()) == before);

    // The checkpoint whole: every part loads.
    save_npz(path, good);
    load_parts(CheckpointFile(path, "test"), run.parts());
    CHECK(state_values(run.entries()) == state_values(good));
    std::filesystem::remove_all(dir);
}

namespace {

// Every entry's name, dtype, shape and bits: int64 entries (generator words past 2^53) compared
// as int64, not through doubles.
std::vector<std::string> exact_state(const NamedTensors& all) {
    std::vector<std::string> out;
    for (const auto& [name, t] : all) {
        std::ostringstream s;
        s << name << " " << dtype_name(t.dtype()) << " (";
        for (const std::size_t d : t.shape()) s << d << ",";
        s << "):" << std::hexfloat;
        if (t.dtype() == kInt64)
            for (const std::int64_t v : t.to_vector<std::int64_t>()) s << " " << v;
        else
            for (const double v : t.to_vector<double>()) s << " " << v;
        out.push_back(s.str());
    }
    return out;
}

}  // namespace

TEST_CASE("load_parts: each entry in turn missing, reshaped, retyped or corrupt leaves every part exactly as it was",
          "[checkpoint-file]") {
    const std::string dir = test_programs::fresh_dir("checkpoint_each_part");
    manual_seed(11);
    Run saved(11);
    saved.steps(3);
    const NamedTensors good = saved.entries();
    const std::string path = dir + "/checkpoint.npz";

    // A run whose every part differs from the checkpoint's, made afresh for each trial.
    const auto fresh_run = [] {
        manual_seed(12);
        auto r = std::make_unique<Run>(12);
        r->steps(2);
        return r;
    };
    const std::vector<std::string> before = exact_state(fresh_run()->entries());
    for (std::size_t k = 0; k < good.size(); ++k)
        for (int kind = 0; kind < 4; ++kind) {
            NamedTensors bad = good;
            const Tensor& t = bad[k].second;
            if (kind == 0) bad.erase(bad.begin() + static_cast<long>(k));                    // missing
            else if (kind == 1) bad[k].second = cat({t.reshape({-1}), t.reshape({-1})}, 0);  // wrong shape
            else if (kind == 2) bad[k].second = cast(t, t.dtype() == kInt64 ? kFloat64 : kInt64);  // wrong dtype
            else if (t.dtype() == kInt64 && t.numel() > 3) {  // a generator word flipped: the checksum
                std::vector<std::int64_t> v = t.to_vector<std::int64_t>();
                v[3] ^= 1;
                bad[k].second = from_vector(v, {static_cast<long>(v.size())});
            } else continue;
            INFO("entry " << good[k].first << ", corruption " << kind);
            save_npz(path, bad);
            const auto run = fresh_run();
            REQUIRE(exact_state(run->entries()) == before);
            bool threw = false;
            try {
                load_parts(CheckpointFile(path, "test"), run->parts());
            } catch (const Error& e) {
                threw = true;
                CHECK_THAT(e.what(), Catch::StartsWith("load checkpoint '" + path + "': "));
            }
            // Missing and reshaped entries are always refused; another dtype may convert (torch's
            // load_state_dict copies across dtypes). A refusal must leave every part as it was.
            if (kind < 2 || kind == 3) CHECK(threw);
            if (threw) CHECK(exact_state(run->entries()) == before);
        }

    // The good checkpoint then loads, and the run goes on as the saved one does, bit for bit.
    save_npz(path, good);
    const auto run = fresh_run();
    load_parts(CheckpointFile(path, "test"), run->parts());
    REQUIRE(exact_state(run->entries()) == exact_state(good));
    // Both draw from this thread's default generator: the resumed run's steps, then the saved
    // run's from the same default state.
    run->steps(2);
    const std::vector<std::string> resumed = exact_state(run->entries());
    set_rng_state(find_entry(good, "rng.default"));
    saved.steps(2);
    CHECK(resumed == exact_state(saved.entries()));
    std::filesystem::remove_all(dir);
}

TEST_CASE("load_parts: an entry named a part's prefix and its dot alone is not that part's", "[checkpoint-file]") {
    // "model." holds no name under "model" (torch's load_state_dict under the prefix "model."
    // finds none in it either): the model's part loads its own entries and leaves that one, as
    // it leaves "trainer.step" or any other part's.
    const std::string dir = test_programs::fresh_dir("checkpoint_bare_prefix");
    manual_seed(21);
    Run saved(21);
    saved.steps(2);
    const NamedTensors good = saved.entries();
    NamedTensors all = good;
    all.emplace_back("model.", zeros({2}));
    all.emplace_back("optim", zeros({1}));
    const std::string path = dir + "/checkpoint.npz";
    save_npz(path, all);
    manual_seed(22);
    Run run(22);
    load_parts(CheckpointFile(path, "test"), run.parts());
    CHECK(state_values(run.entries()) == state_values(good));
    std::filesystem::remove_all(dir);
}

TEST_CASE("load_parts: a part that cannot be put back leaves the refusal as the error, and the others are put back",
          "[checkpoint-file]") {
    const std::string dir = test_programs::fresh_dir("checkpoint_failed_restore");
    manual_seed(31);
    Run saved(31);
    saved.steps(3);
    NamedTensors all = saved.entries();
    all.erase(std::find_if(all.begin(), all.end(), [](const auto& e) { return e.first == "rng.data"; }));
    const std::string path = dir + "/checkpoint.npz";
    save_npz(path, all);

    manual_seed(32);
    Run run(32);
    run.steps(2);
    const auto before = state_values(run.entries());
    // A part that loads, then throws when put back; before it the model and after it Adam, both
    // loaded from the file before the data generator's entry is found missing.
    int put_back_calls = 0;
    const CheckpointPart unrestorable{[&put_back_calls] {
                                          return [&put_back_calls] {
                                              ++put_back_calls;
                                              throw Error("the part's snapshot was lost");
                                          };
                                      },
                                      [](const CheckpointFile&) {}};
    std::vector<CheckpointPart> parts = run.parts();
    parts.insert(parts.begin() + 1, unrestorable);
    CHECK_THROWS_WITH(load_parts(CheckpointFile(path, "test"), parts),
                      Catch::StartsWith("load checkpoint '" + path + "': entry 'rng.data' is missing") &&
                          Catch::Contains("putting this run's state back as it was failed too") &&
                          Catch::Contains("part 2 of 5: the part's snapshot was lost"));
    CHECK(put_back_calls == 1);
    // The model (before it) and Adam (after it) are as they were.
    CHECK(state_values(run.entries()) == before);
    std::filesystem::remove_all(dir);
}
