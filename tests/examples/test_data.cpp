// The toy task generators of seq_train: targets, padding, lengths, fixed held-out sets.
#include <algorithm>

#include "seq_train/data.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::examples;

TEST_CASE("make_batch: the target is the task applied to the valid part, padding after it") {
    for (Task task : {Task::copy, Task::reverse, Task::sort}) {
        TaskSpec spec{task, 7, 5};
        Generator gen(42);
        const Batch b = make_batch(spec, 200, gen);
        REQUIRE(b.inputs.shape() == Shape{200, 7});
        REQUIRE(b.targets.shape() == Shape{200, 7});
        REQUIRE(b.valid_lens.shape() == Shape{200});
        REQUIRE(b.inputs.dtype() == kInt64);
        const auto X = b.inputs.to_vector<std::int64_t>();
        const auto Y = b.targets.to_vector<std::int64_t>();
        const auto lens = b.valid_lens.to_vector<std::int64_t>();
        std::vector<int> seen_len(8, 0), seen_sym(6, 0);
        for (std::size_t r = 0; r < 200; ++r) {
            const auto len = static_cast<std::size_t>(lens[r]);
            REQUIRE(len >= 1);
            REQUIRE(len <= 7);
            ++seen_len[len];
            std::vector<std::int64_t> in(X.begin() + r * 7, X.begin() + r * 7 + len);
            std::vector<std::int64_t> out(Y.begin() + r * 7, Y.begin() + r * 7 + len);
            for (auto s : in) {
                REQUIRE(s >= 1);
                REQUIRE(s <= 5);
                ++seen_sym[s];
            }
            auto expected = in;
            if (task == Task::reverse) std::reverse(expected.begin(), expected.end());
            if (task == Task::sort) std::sort(expected.begin(), expected.end());
            REQUIRE(out == expected);
            for (std::size_t t = len; t < 7; ++t) {
                REQUIRE(X[r * 7 + t] == kPad);
                REQUIRE(Y[r * 7 + t] == kPad);
            }
            REQUIRE(row_tokens(b.inputs, b.valid_lens, r) == in);
        }
        // every length 1..7 and every symbol turn up in 200 draws
        for (std::size_t len = 1; len <= 7; ++len) CHECK(seen_len[len] > 0);
        for (std::size_t s = 1; s <= 5; ++s) CHECK(seen_sym[s] > 0);
    }
}

TEST_CASE("make_batch: a hand-checked reverse example and the same draws for the same generator state") {
    CHECK(apply_task(Task::reverse, {3, 1, 2}) == std::vector<std::int64_t>{2, 1, 3});
    CHECK(apply_task(Task::sort, {3, 1, 2}) == std::vector<std::int64_t>{1, 2, 3});
    CHECK(apply_task(Task::copy, {3, 1, 2}) == std::vector<std::int64_t>{3, 1, 2});
    TaskSpec spec{Task::reverse, 8, 10};
    Generator a(7), b(7), c(8);
    const Batch x = make_batch(spec, 16, a), y = make_batch(spec, 16, b), z = make_batch(spec, 16, c);
    CHECK(x.inputs.to_vector<std::int64_t>() == y.inputs.to_vector<std::int64_t>());
    CHECK(x.valid_lens.to_vector<std::int64_t>() == y.valid_lens.to_vector<std::int64_t>());
    CHECK(x.inputs.to_vector<std::int64_t>() != z.inputs.to_vector<std::int64_t>());
    CHECK(x.num_tokens() > 0);
}

TEST_CASE("held_out_set: fixed by the seed, different for another seed") {
    TaskSpec spec{Task::reverse, 8, 10};
    const Batch a = held_out_set(spec, 100, 3), b = held_out_set(spec, 100, 3), c = held_out_set(spec, 100, 4);
    CHECK(a.inputs.to_vector<std::int64_t>() == b.inputs.to_vector<std::int64_t>());
    CHECK(a.targets.to_vector<std::int64_t>() == b.targets.to_vector<std::int64_t>());
    CHECK(a.inputs.to_vector<std::int64_t>() != c.inputs.to_vector<std::int64_t>());
    // not the batch a training step with the same seed would draw first
    Generator first(3);
    CHECK(make_batch(spec, 100, first).inputs.to_vector<std::int64_t>() != a.inputs.to_vector<std::int64_t>());
}

TEST_CASE("task names, tokens and bad input") {
    CHECK(parse_task("sort") == Task::sort);
    CHECK(task_name(Task::reverse) == "reverse");
    CHECK_THROWS_WITH(parse_task("shuffle"), Catch::Contains("shuffle") && Catch::Contains("reverse"));
    CHECK(token_str(kPad) == "<pad>");
    CHECK(token_str(1) == "0");
    Generator gen(1);
    CHECK_THROWS_WITH(make_batch(TaskSpec{Task::copy, 0, 10}, 4, gen), Catch::Contains("max_len"));
    CHECK(mix_seed(1, 2, 3) != mix_seed(1, 2, 4));
    CHECK(mix_seed(1, 2, 3) == mix_seed(1, 2, 3));
}

TEST_CASE("shard_batch: contiguous equal slices that put back together make the global batch") {
    TaskSpec spec{Task::reverse, 6, 9};
    Generator gen(3);
    const Batch global = make_batch(spec, 12, gen);
    const auto X = global.inputs.to_vector<std::int64_t>(), Y = global.targets.to_vector<std::int64_t>();
    const auto L = global.valid_lens.to_vector<std::int64_t>();
    for (std::size_t world : {1, 2, 3, 4, 12}) {
        std::vector<std::int64_t> x, y, l;
        std::int64_t tokens = 0;
        for (std::size_t rank = 0; rank < world; ++rank) {
            const Batch s = shard_batch(global, rank, world);
            REQUIRE(s.size() == 12 / world);
            REQUIRE(s.inputs.shape() == Shape{12 / world, 6});
            for (auto v : s.inputs.to_vector<std::int64_t>()) x.push_back(v);
            for (auto v : s.targets.to_vector<std::int64_t>()) y.push_back(v);
            for (auto v : s.valid_lens.to_vector<std::int64_t>()) l.push_back(v);
            tokens += s.num_tokens();
        }
        CHECK(x == X);
        CHECK(y == Y);
        CHECK(l == L);
        CHECK(tokens == global.num_tokens());
    }
}

TEST_CASE("shard_batch: a batch that does not split evenly or a bad rank is refused") {
    TaskSpec spec;
    Generator gen(3);
    const Batch global = make_batch(spec, 10, gen);
    CHECK_THROWS_WITH(shard_batch(global, 0, 4),
                      Catch::Contains("shard_batch") && Catch::Contains("10 sequences") && Catch::Contains("4 ranks"));
    CHECK_THROWS_WITH(shard_batch(global, 2, 2), Catch::Contains("shard_batch") && Catch::Contains("rank 2 of world 2"));
    CHECK_THROWS_WITH(shard_batch(global, 0, 0), Catch::Contains("shard_batch") && Catch::Contains("world 0"));
}
