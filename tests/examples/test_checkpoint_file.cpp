// examples/common/checkpoint_file: a run's parts (model, optimizer, generators) load from a
// checkpoint all or none, so a refused part leaves none of the others changed.
#include <algorithm>
#include <filesystem>
#include <memory>
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
        NamedTensors all;
        add_prefixed(all, "model.", model->state_dict());
        add_prefixed(all, "optim.", optimizer.state_dict());
        all.emplace_back("rng.data", data_gen.get_state());
        all.emplace_back("rng.default", get_rng_state());
        return all;
    }

    std::vector<CheckpointPart> parts() {
        return {state_dict_part(*model, "model."), state_dict_part(optimizer, "optim."),
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
    REQUIRE(state_values(take_prefixed(good, "model.")) != state_values(run.model->state_dict()));
    REQUIRE(state_values(take_prefixed(good, "optim.")) != state_values(run.optimizer.state_dict()));
    REQUIRE(vals(entry(good, "rng.data")) != vals(run.data_gen.get_state()));
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
