// seq_train's training loop: it learns the reverse task, and checkpoints resume exactly.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include "core/io/atomic_file.hpp"
#include "examples/small_config.hpp"
#include "helpers.hpp"
#include "seq_train/model.hpp"
#include "seq_train/train.hpp"

using namespace xgrad;
using namespace xgrad::examples;

namespace {

std::string temp_dir(const std::string& name) {
    const auto dir = std::filesystem::temp_directory_path() / (fmt::format("xgrad_test_examples_{}_{}", name, ::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir.string();
}

LoopOptions no_eval() {
    LoopOptions o;
    o.eval_every = 0;
    return o;
}

// `steps` steps of seq_train's loop, printing nowhere. By default the held-out set is evaluated
// only at the configuration's last step.
LoopStats run_steps(TrainState& state, std::int64_t steps, Replicas& replicas, LoopOptions options = no_eval()) {
    const Batch held = held_out_set(state.config.task, 50, 99);
    const std::unique_ptr<std::FILE, int (*)(std::FILE*)> sink(std::tmpfile(), &std::fclose);
    REQUIRE(sink);
    Progress progress(state.config.steps, 1, sink.get());
    options.stop_after = steps;
    return train(state, replicas, held, progress, options);
}

LoopStats run_steps(TrainState& state, std::int64_t steps) {
    Replicas one_process;
    return run_steps(state, steps, one_process);
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
        const auto w = model.attention_weights_copy();
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

TEST_CASE("train: a short run learns the reverse task to at least 95% held-out token accuracy") {
    TrainState state(small_config(300));
    const Batch held = held_out_set(state.config.task, 500, 99);
    const EvalResult before = evaluate_held_out(state, held);
    CHECK(before.token_acc < 0.5);
    const LoopStats stats = run_steps(state, 300);
    CHECK(stats.steps == 300);
    CHECK_FALSE(stats.interrupted);
    const EvalResult after = evaluate(*state.model, held);
    INFO("held-out token accuracy " << after.token_acc << ", sequence accuracy " << after.seq_acc);
    CHECK(after.token_acc >= 0.95);
    CHECK(after.loss < before.loss);
    CHECK(state.step == 300);
    CHECK(state.history.loss.size() == 300);
    CHECK(state.history.eval_step == std::vector<double>{0, 300});  // the loop evaluates at the last step
}

TEST_CASE("train: held-out evaluations and checkpoints every N steps, and a stop after N steps") {
    const std::string dir = temp_dir("every");
    TrainState state(small_config(12));
    Replicas one_process;
    LoopOptions o;
    o.eval_every = 5;
    o.checkpoint_every = 5;
    o.checkpoint = dir + "/checkpoint.npz";
    CHECK(run_steps(state, 7, one_process, o).steps == 7);
    CHECK(state.step == 7);
    CHECK(run_steps(state, 100, one_process, o).steps == 5);  // the configuration ends at 12
    CHECK(state.history.eval_step == std::vector<double>{0, 5, 10, 12});
    TrainState reloaded(small_config(12));
    load_checkpoint(o.checkpoint, reloaded);
    CHECK(reloaded.step == 10);
    std::filesystem::remove_all(dir);
}

TEST_CASE("train: a target accuracy stops the loop at the first held-out evaluation that reaches it") {
    LoopOptions o;
    o.eval_every = 5;
    // The reference run, without a target: its curve says where each accuracy is first reached.
    TrainState reference(small_config(60));
    Replicas one_process;
    const LoopStats whole = run_steps(reference, 60, one_process, o);
    CHECK_FALSE(whole.target_reached());
    const std::vector<double>& acc = reference.history.eval_token_acc;
    REQUIRE(acc.size() == 13);  // steps 0, 5, ..., 60
    REQUIRE(acc[0] > 0);
    const auto best = static_cast<std::size_t>(std::max_element(acc.begin(), acc.end()) - acc.begin());
    REQUIRE(best > 0);  // the run learns something in 60 steps
    SECTION("reached part-way: the run stops there, with the seconds of the steps up to it") {
        o.target_accuracy = acc[best];
        TrainState state(small_config(60));
        const LoopStats stats = run_steps(state, 60, one_process, o);
        CHECK(stats.target_step == static_cast<std::int64_t>(5 * best));
        CHECK(state.step == stats.target_step);
        CHECK(stats.steps == stats.target_step);
        CHECK(stats.target_seconds == stats.seconds);
        CHECK(stats.target_seconds > 0);
        CHECK(state.history.eval_token_acc == std::vector<double>(acc.begin(), acc.begin() + best + 1));
    }
    SECTION("reached by the untrained model: no step runs") {
        o.target_accuracy = acc[0];
        TrainState state(small_config(60));
        const LoopStats stats = run_steps(state, 60, one_process, o);
        CHECK(stats.target_step == 0);
        CHECK(stats.steps == 0);
        CHECK(stats.target_seconds == 0);
    }
    SECTION("never reached, or none: the run goes to its end") {
        for (const double target : {0.0, 1.0}) {
            if (target == 1.0) REQUIRE(acc.back() < 1.0);
            o.target_accuracy = target;
            TrainState state(small_config(60));
            const LoopStats stats = run_steps(state, 60, one_process, o);
            CHECK_FALSE(stats.target_reached());
            CHECK(stats.target_step == -1);
            CHECK(state.step == 60);
            CHECK(state.history.eval_token_acc == acc);
        }
    }
    SECTION("a target outside [0, 1] is refused before any step") {
        for (const double target : {-0.1, 1.5, std::nan(""), HUGE_VAL}) {
            o.target_accuracy = target;
            TrainState state(small_config(60));
            CHECK_THROWS_WITH(run_steps(state, 60, one_process, o), Catch::Contains("target_accuracy must be in [0, 1]"));
            CHECK(state.step == 0);
        }
    }
}

TEST_CASE("train: a SIGINT stops the loop before the next step") {
    TrainState state(small_config(10));
    run_steps(state, 3);
    g_interrupted = 1;
    const LoopStats stats = run_steps(state, 3);
    g_interrupted = 0;
    CHECK(stats.interrupted);
    CHECK(stats.steps == 0);
    CHECK(state.step == 3);
}

TEST_CASE("train: resuming from a checkpoint gives bit-identical losses") {
    for (const std::string opt : {"adam", "adamw", "sgd"}) {
        DYNAMIC_SECTION(opt) {
            const std::string dir = temp_dir("resume_" + opt);
            const std::string path = dir + "/checkpoint.npz";
            TrainConfig c = small_config(40);
            c.optimizer = opt;
            c.model.dropout = 0.1;  // dropout masks must come back the same as well
            const int k = 15, m = 10;

            TrainState first(c);
            run_steps(first, k);
            save_checkpoint(path, first);
            run_steps(first, m);

            TrainState resumed(c);
            run_steps(resumed, 1);  // a fresh state in another step: load replaces all of it
            load_checkpoint(path, resumed);
            REQUIRE(resumed.step == k);
            run_steps(resumed, m);
            REQUIRE(resumed.history.loss.size() == k + m);
            CHECK(resumed.history.loss == first.history.loss);  // exact equality, not approximate
            CHECK(resumed.history.token_acc == first.history.token_acc);
            std::filesystem::remove_all(dir);
        }
    }
}

TEST_CASE("checkpoint: a truncated one fails with a clear error and the earlier one stays intact") {
    const std::string dir = temp_dir("truncated");
    const std::string path = dir + "/checkpoint.npz";
    TrainState state(small_config(40));
    run_steps(state, 5);
    save_checkpoint(path, state);
    const std::string good = read_file(path, "test");

    // A later save that dies half-way: the destination never sees partial bytes...
    const std::string broken = dir + "/broken.npz";
    write_file_atomic(broken, good.substr(0, good.size() / 2), "test");
    TrainState fresh(small_config(40));
    const auto weights_before = fresh.model->state_dict().front().second.to_vector<double>();
    CHECK_THROWS_WITH(load_checkpoint(broken, fresh), Catch::Contains("broken.npz"));
    // ...and a failed load leaves the state untouched
    CHECK(fresh.step == 0);
    CHECK(fresh.model->state_dict().front().second.to_vector<double>() == weights_before);

    // Saving again over an existing checkpoint goes through a temporary file and a rename, so
    // the earlier checkpoint is whole until the new one is complete; it still loads.
    run_steps(state, 1);
    save_checkpoint(path, state);
    CHECK(read_file(path, "test") != good);
    TrainState reload(small_config(40));
    load_checkpoint(path, reload);
    CHECK(reload.step == 6);
    for (const auto& entry : std::filesystem::directory_iterator(dir))
        CHECK((entry.path().filename() == "checkpoint.npz" || entry.path().filename() == "broken.npz"));

    // Truncating the real file in place (a disk-full copy, say) is caught on load.
    {
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        f.write(good.data(), static_cast<std::streamsize>(good.size() - 100));
    }
    CHECK_THROWS_WITH(load_checkpoint(path, reload), Catch::Contains("checkpoint.npz"));
    CHECK(reload.step == 6);
    std::filesystem::remove_all(dir);
}

TEST_CASE("checkpoint: one from other flags is refused, naming the difference") {
    const std::string dir = temp_dir("mismatch");
    const std::string path = dir + "/checkpoint.npz";
    TrainState a(small_config(40));
    run_steps(a, 1);
    save_checkpoint(path, a);
    TrainConfig other = small_config(40);
    other.model.hidden = 16;
    TrainState b(other);
    CHECK_THROWS_WITH(load_checkpoint(path, b),
                      Catch::Contains("hidden") && Catch::Contains("32") && Catch::Contains("16"));
    CHECK_THROWS_WITH(load_checkpoint(dir + "/missing.npz", b), Catch::Contains("missing.npz"));
    std::filesystem::remove_all(dir);
}

// 0 means "default lr" and "no clipping"; a negative or NaN value once fell silently into that
// meaning (seq_train --lr -1 trained with lr 3e-3). The flags refuse them too; this is the
// check for programs that build a TrainConfig themselves.
TEST_CASE("TrainState: a negative or NaN lr or clip is refused, not read as the default") {
    for (double bad : {-1.0, std::nan("")}) {
        TrainConfig c = small_config(10);
        c.lr = bad;
        CHECK_THROWS_WITH(TrainState(c), Catch::Contains("lr"));
        c = small_config(10);
        c.clip = bad;
        CHECK_THROWS_WITH(TrainState(c), Catch::Contains("clip"));
    }
    TrainConfig zero = small_config(10);
    zero.lr = 0;
    zero.clip = 0;
    CHECK_NOTHROW(TrainState(zero));
}

namespace {

// A group of `world` ranks of which this process is rank 0 and the only one: its collectives
// leave the values as they are (what MPI does in a world of one rank), and count the calls.
struct LoneReplica : Replicas {
    explicit LoneReplica(std::size_t world) : m_world(world) {}
    std::size_t world_size() const override { return m_world; }
    void sum_gradients() override { ++gradient_sums; }
    void sum(std::vector<double>&) override { ++sums; }
    std::size_t m_world;
    int gradient_sums = 0, sums = 0;
};

}  // namespace

TEST_CASE("train: the data-parallel loop on one rank is the single-process loop") {
    // With dropout: rank 0 draws the single-process masks.
    TrainConfig c = small_config(20);
    c.model.dropout = 0.1;
    TrainState plain(c), replicated(c);
    LoneReplica group(1);
    run_steps(plain, 8);
    run_steps(replicated, 8, group);
    CHECK(replicated.history.loss == plain.history.loss);  // the same loss formula: exactly equal
    CHECK(replicated.history.token_acc == plain.history.token_acc);
    CHECK(replicated.model->state_dict().front().second.to_vector<double>() ==
          plain.model->state_dict().front().second.to_vector<double>());
    CHECK(group.gradient_sums == 8);
    CHECK(group.sums == 2 * 8);  // per step: the stop flag, then the loss and accuracy
}

TEST_CASE("train: a global batch that does not split over the ranks is refused") {
    TrainState state(small_config(10));  // batch 32
    LoneReplica three(3), four(4);
    CHECK_THROWS_WITH(run_steps(state, 1, three), Catch::Contains("--batch 32") && Catch::Contains("3 ranks"));
    CHECK(state.step == 0);
    CHECK_NOTHROW(run_steps(state, 1, four));
}

namespace {

// Rank `rank` of a world of `world` whose other ranks are simulated: sum() records what this
// rank gave, then adds what the others gave (`others`, by the length of the vector summed).
struct SimulatedRank : Replicas {
    SimulatedRank(std::size_t rank, std::size_t world) : m_rank(rank), m_world(world) {}
    std::size_t rank() const override { return m_rank; }
    std::size_t world_size() const override { return m_world; }
    void sum(std::vector<double>& values) override {
        given.push_back(values);
        const auto it = others.find(values.size());
        if (it == others.end()) return;
        for (std::size_t i = 0; i < values.size(); ++i) values[i] += it->second[i];
    }
    std::size_t m_rank, m_world;
    std::map<std::size_t, std::vector<double>> others;
    std::vector<std::vector<double>> given;
};

}  // namespace

TEST_CASE("evaluate: held-out metrics over ranks are ratios of counts summed over the ranks") {
    TrainState state(small_config(10));
    run_steps(state, 5);
    const Batch held = held_out_set(state.config.task, 37, 5);  // 37 rows: the shards are uneven
    const EvalResult single = evaluate(*state.model, held);
    REQUIRE(single.token_acc > 0);
    for (const std::size_t world : {2, 3, 50}) {  // 50 ranks: some hold no row at all
        std::vector<double> rest(5, 0.0);
        for (std::size_t r = 1; r < world; ++r) {
            SimulatedRank other(r, world);
            evaluate(*state.model, held, other);
            REQUIRE(other.given.size() == 1);
            for (std::size_t i = 0; i < rest.size(); ++i) rest[i] += other.given[0][i];
        }
        SimulatedRank first(0, world);
        first.others[5] = rest;
        const EvalResult e = evaluate(*state.model, held, first);
        INFO("world " << world);
        REQUIRE(first.given.size() == 1);
        CHECK(first.given[0][1] < static_cast<double>(held.num_tokens()));  // only its own rows
        CHECK(first.given[0][3] == static_cast<double>(37 / world));
        CHECK(e.token_acc == single.token_acc);  // whole counts: exactly the single-process ratio
        CHECK(e.seq_acc == single.seq_acc);
        CHECK(e.loss == Approx(single.loss).epsilon(1e-5));
    }
}

TEST_CASE("evaluate: accuracies are at most 1 whatever the other ranks counted") {
    EvalCounts n;
    n.tokens = 40;
    n.correct_tokens = 40;
    n.sequences = 5;
    n.correct_sequences = 5;
    n.loss_sum = 2;
    EvalResult r = eval_result(n);
    CHECK(r.token_acc == 1.0);
    CHECK(r.seq_acc == 1.0);
    CHECK(r.loss == 0.05);
    CHECK(eval_result(EvalCounts{}).token_acc == 0.0);  // an empty set: zeros, not NaN
    CHECK(eval_result(EvalCounts{}).loss == 0.0);
}

TEST_CASE("train: the training accuracy is correct tokens over the tokens the ranks held") {
    // The other rank reports 1000 tokens, all correct, as a rank at another step (a batch of
    // other lengths) would: the old formula divided by this rank's global batch and gave > 100%.
    TrainState state(small_config(10));
    SimulatedRank first(0, 2);
    first.others[3] = {0.0, 1000.0, 1000.0};
    run_steps(state, 4, first);
    REQUIRE(state.history.token_acc.size() == 4);
    for (const double acc : state.history.token_acc) {
        CHECK(acc <= 1.0);
        CHECK(acc > 0.5);  // 1000 of the tokens were correct: the other rank's count is in it
    }
}

TEST_CASE("state_hash: equal states hash alike, through a checkpoint too, and any change shows") {
    TrainState a(small_config(10)), b(small_config(10));
    CHECK(state_hash(a) == state_hash(b));
    run_steps(a, 3);
    CHECK(state_hash(a) != state_hash(b));
    run_steps(b, 3);
    CHECK(state_hash(a) == state_hash(b));
    const std::string path = temp_dir("state_hash") + "/checkpoint.npz";
    save_checkpoint(path, a);
    TrainState loaded(small_config(10));
    load_checkpoint(path, loaded);
    CHECK(state_hash(loaded) == state_hash(a));
    // One bit of one parameter, the step, the seed: each changes the hash.
    Tensor p = loaded.model->parameters().front();
    auto v = p.to_vector<double>();
    v[0] = static_cast<double>(std::nextafter(static_cast<float>(v[0]), 1.0f));
    p.set_data(from_vector(v, p.shape(), p.dtype()));
    CHECK(state_hash(loaded) != state_hash(a));
    ++b.step;
    CHECK(state_hash(b) != state_hash(a));
    TrainState other_seed = [] {
        TrainConfig c = small_config(10);
        c.seed = 12;
        return TrainState(c);
    }();
    CHECK(state_hash(other_seed) != state_hash(TrainState(small_config(10))));
}
