// Training the examples' encoder: it learns the reverse task, and checkpoints resume exactly.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/model.hpp"
#include "common/train.hpp"
#include "core/io/atomic_file.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::examples;

namespace {

TrainConfig small_config(std::int64_t steps) {
    TrainConfig c;
    c.task = TaskSpec{Task::reverse, 5, 6};
    c.model.hidden = 32;
    c.model.heads = 2;
    c.model.layers = 2;
    c.model.ffn_hidden = 64;
    c.steps = steps;
    c.batch = 32;
    c.warmup = 10;
    c.seed = 11;
    return c;
}

std::string temp_dir(const std::string& name) {
    const auto dir = std::filesystem::temp_directory_path() / (fmt::format("xgrad_test_examples_{}_{}", name, ::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir.string();
}

}  // namespace

TEST_CASE("SeqEncoder: logits shape, per-layer attention weights, bad sizes") {
    for (PosEncoding pos : {PosEncoding::learned, PosEncoding::sinusoidal})
    for (bool scale : {false, true}) {
        ModelSpec spec;
        spec.vocab_size = 7;
        spec.max_len = 5;
        spec.hidden = 16;
        spec.heads = 4;
        spec.layers = 3;
        spec.ffn_hidden = 8;
        spec.pos = pos;
        spec.scale_embeddings = scale;
        Generator gen(1);
        SeqEncoder model(spec, gen);
        Generator data(2);
        const Batch b = make_batch(TaskSpec{Task::copy, 5, 6}, 3, data);
        const Tensor logits = model(b.inputs, b.valid_lens);
        CHECK(logits.shape() == Shape{3, 5, 7});
        const auto w = model.attention_weights();
        REQUIRE(w.size() == 3);
        CHECK(w[0].shape() == Shape{3, 4, 5, 5});
        // keys past a sequence's valid length get no weight
        const auto lens = b.valid_lens.to_vector<std::int64_t>();
        const auto v = w[1].to_vector<double>();
        for (std::size_t r = 0; r < 3; ++r)
            for (std::size_t k = static_cast<std::size_t>(lens[r]); k < 5; ++k) CHECK(v[r * 100 + 2 * 5 + k] == 0.0);
    }
    ModelSpec bad;
    bad.hidden = 10;
    bad.heads = 4;
    Generator gen(1);
    CHECK_THROWS_WITH(SeqEncoder(bad, gen), Catch::Contains("hidden (10)") && Catch::Contains("heads (4)"));
    CHECK_THROWS_WITH(parse_pos("rotary"), Catch::Contains("rotary"));
}

TEST_CASE("Trainer: a short run learns the reverse task to at least 95% held-out token accuracy") {
    Trainer trainer(small_config(300));
    const Batch held = held_out_set(trainer.config().task, 500, 99);
    const EvalResult before = trainer.evaluate_held_out(held);
    CHECK(before.token_acc < 0.5);
    while (trainer.step() < trainer.config().steps) trainer.train_step();
    const EvalResult after = trainer.evaluate_held_out(held);
    INFO("held-out token accuracy " << after.token_acc << ", sequence accuracy " << after.seq_acc);
    CHECK(after.token_acc >= 0.95);
    CHECK(after.loss < before.loss);
    CHECK(trainer.history().loss.size() == 300);
    CHECK(trainer.history().eval_step == std::vector<double>{0, 300});
}

TEST_CASE("Trainer: resuming from a checkpoint gives bit-identical losses") {
    for (const std::string opt : {"adam", "adamw", "sgd"}) {
        DYNAMIC_SECTION(opt) {
            const std::string dir = temp_dir("resume_" + opt);
            const std::string path = dir + "/checkpoint.npz";
            TrainConfig c = small_config(40);
            c.optimizer = opt;
            c.model.dropout = 0.1;  // dropout masks must come back the same as well
            const int k = 15, m = 10;

            Trainer first(c);
            for (int i = 0; i < k; ++i) first.train_step();
            first.save(path);
            std::vector<double> expected;
            for (int i = 0; i < m; ++i) expected.push_back(first.train_step().loss);

            Trainer resumed(c);
            resumed.train_step();  // a fresh trainer in another state: load replaces all of it
            resumed.load(path);
            REQUIRE(resumed.step() == k);
            std::vector<double> got;
            for (int i = 0; i < m; ++i) got.push_back(resumed.train_step().loss);
            CHECK(got == expected);  // exact equality, not approximate
            CHECK(resumed.history().loss == first.history().loss);
            std::filesystem::remove_all(dir);
        }
    }
}

TEST_CASE("Trainer: a truncated checkpoint fails with a clear error and the earlier one stays intact") {
    const std::string dir = temp_dir("truncated");
    const std::string path = dir + "/checkpoint.npz";
    Trainer trainer(small_config(40));
    for (int i = 0; i < 5; ++i) trainer.train_step();
    trainer.save(path);
    const std::string good = read_file(path, "test");

    // A later save that dies half-way: the destination never sees partial bytes...
    const std::string broken = dir + "/broken.npz";
    write_file_atomic(broken, good.substr(0, good.size() / 2), "test");
    Trainer fresh(small_config(40));
    const auto weights_before = fresh.model().state_dict().front().second.to_vector<double>();
    CHECK_THROWS_WITH(fresh.load(broken), Catch::Contains("broken.npz"));
    // ...and a failed load leaves the trainer untouched
    CHECK(fresh.step() == 0);
    CHECK(fresh.model().state_dict().front().second.to_vector<double>() == weights_before);

    // Saving again over an existing checkpoint goes through a temporary file and a rename, so
    // the earlier checkpoint is whole until the new one is complete; it still loads.
    trainer.train_step();
    trainer.save(path);
    CHECK(read_file(path, "test") != good);
    Trainer reload(small_config(40));
    reload.load(path);
    CHECK(reload.step() == 6);
    for (const auto& entry : std::filesystem::directory_iterator(dir))
        CHECK((entry.path().filename() == "checkpoint.npz" || entry.path().filename() == "broken.npz"));

    // Truncating the real file in place (a disk-full copy, say) is caught on load.
    {
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        f.write(good.data(), static_cast<std::streamsize>(good.size() - 100));
    }
    CHECK_THROWS_WITH(reload.load(path), Catch::Contains("checkpoint.npz"));
    CHECK(reload.step() == 6);
    std::filesystem::remove_all(dir);
}

TEST_CASE("Trainer: a checkpoint from other flags is refused, naming the difference") {
    const std::string dir = temp_dir("mismatch");
    const std::string path = dir + "/checkpoint.npz";
    Trainer a(small_config(40));
    a.train_step();
    a.save(path);
    TrainConfig other = small_config(40);
    other.model.hidden = 16;
    Trainer b(other);
    CHECK_THROWS_WITH(b.load(path), Catch::Contains("hidden") && Catch::Contains("32") && Catch::Contains("16"));
    CHECK_THROWS_WITH(b.load(dir + "/missing.npz"), Catch::Contains("missing.npz"));
    std::filesystem::remove_all(dir);
}

// 0 means "default lr" and "no clipping"; a negative or NaN value once fell silently into that
// meaning (seq_train --lr -1 trained with lr 3e-3).
TEST_CASE("Trainer: a negative or NaN lr or clip is refused, not read as the default") {
    for (double bad : {-1.0, std::nan("")}) {
        TrainConfig c = small_config(10);
        c.lr = bad;
        CHECK_THROWS_WITH(Trainer(c), Catch::Contains("lr"));
        c = small_config(10);
        c.clip = bad;
        CHECK_THROWS_WITH(Trainer(c), Catch::Contains("clip"));
    }
    TrainConfig zero = small_config(10);
    zero.lr = 0;
    zero.clip = 0;
    CHECK_NOTHROW(Trainer(zero));
}

namespace {

// A group of `world` ranks of which this process is rank 0 and the only one: its collectives
// leave the values as they are (what MPI does in a world of one rank).
struct LoneReplica : ReplicaGroup {
    explicit LoneReplica(std::size_t world) : m_world(world) {}
    std::size_t rank() const override { return 0; }
    std::size_t world_size() const override { return m_world; }
    void sum_gradients() override { ++gradient_sums; }
    void sum(std::vector<double>&) override { ++sums; }
    std::size_t m_world;
    int gradient_sums = 0, sums = 0;
};

}  // namespace

TEST_CASE("Trainer: the data-parallel step on one rank matches the single-process step") {
    // With dropout: rank 0 draws the single-process masks.
    TrainConfig c = small_config(20);
    c.model.dropout = 0.1;
    Trainer plain(c);
    Trainer replicated(c);
    auto group = std::make_shared<LoneReplica>(1);
    replicated.set_replicas(group);
    for (int s = 0; s < 8; ++s) {
        const StepResult a = plain.train_step(), b = replicated.train_step();
        // sum / N instead of mean: the same up to the rounding of the division
        CHECK(b.loss == Approx(a.loss).epsilon(1e-6));
        CHECK(b.token_acc == a.token_acc);
        CHECK(b.tokens == a.tokens);
    }
    CHECK(group->gradient_sums == 8);
    CHECK(group->sums == 8);
}

TEST_CASE("Trainer: a global batch that does not split over the ranks is refused") {
    Trainer trainer(small_config(10));  // batch 32
    CHECK_THROWS_WITH(trainer.set_replicas(std::make_shared<LoneReplica>(3)),
                      Catch::Contains("32 sequences") && Catch::Contains("3 ranks"));
    CHECK_NOTHROW(trainer.set_replicas(std::make_shared<LoneReplica>(4)));
}
