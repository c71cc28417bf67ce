// seq_train's agreement check before a data-parallel run (seq_train/agreement.hpp), without MPI:
// the comparison on hand-made per-rank settings, and check_agreement over a simulated group.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "seq_train/agreement.hpp"

using namespace xgrad;
using namespace xgrad::examples;

namespace {

Settings base() {
    return {{"world size", "2"}, {"start", "checkpoint at step 200"}, {"start state hash", "00ab"},
            {"flag --steps", "300"}, {"OPENBLAS_CORETYPE", "(unset)"}, {"XGRAD_NUM_THREADS", "1"}};
}

Settings with(Settings s, const std::string& name, const std::string& value) {
    for (auto& [n, v] : s)
        if (n == name) v = value;
    return s;
}

// A group whose other ranks are simulated: all_gather returns the settings given for them.
struct Group : Replicas {
    explicit Group(std::vector<Settings> ranks) : m_ranks(std::move(ranks)) {}
    std::size_t world_size() const override { return m_ranks.size(); }
    std::vector<std::string> all_gather(const std::string& mine) override {
        std::vector<std::string> all{mine};
        for (std::size_t r = 1; r < m_ranks.size(); ++r) all.push_back(encode_settings(m_ranks[r]));
        return all;
    }
    std::vector<Settings> m_ranks;
};

}  // namespace

TEST_CASE("agreement: settings survive encoding whatever bytes they hold") {
    const Settings s = {{"a", "1"}, {"", ""}, {"name: with 3:colons", std::string("value\nwith\0nul", 14)}, {"x", "5:abc"}};
    CHECK(decode_settings(encode_settings(s)) == s);
    CHECK(decode_settings("").empty());
    for (const std::string bad : {"3:ab", "x:1", "1:a", "1:a9:b", "1:a-1:b", "99999999999:a1:b", ":a1:b"})
        CHECK_THROWS_WITH(decode_settings(bad), Catch::Contains("agreement"));
}

TEST_CASE("agreement: equal settings agree on any number of ranks") {
    CHECK(disagreements({}).empty());
    CHECK(disagreements({base()}).empty());
    CHECK(disagreements({base(), base(), base(), base()}).empty());
}

TEST_CASE("agreement: each differing setting is named with rank 0's value and the other ranks' values") {
    SECTION("one setting on one rank") {
        const std::string d = disagreements({base(), with(base(), "XGRAD_NUM_THREADS", "2")});
        CHECK(d == "\n  XGRAD_NUM_THREADS: rank 0 '1'; rank 1 '2'");
    }
    SECTION("an older checkpoint: the step and the hash") {
        const Settings older = with(with(base(), "start", "checkpoint at step 100"), "start state hash", "77");
        const std::string d = disagreements({base(), base(), older});
        CHECK_THAT(d, Catch::Contains("start: rank 0 'checkpoint at step 200'; rank 2 'checkpoint at step 100'"));
        CHECK_THAT(d, Catch::Contains("start state hash: rank 0 '00ab'; rank 2 '77'"));
        CHECK_THAT(d, !Catch::Contains("rank 1"));
        CHECK_THAT(d, !Catch::Contains("flag --steps"));
    }
    SECTION("several values, ranks grouped by value") {
        const Settings b = with(base(), "OPENBLAS_CORETYPE", "HASWELL");
        const Settings c = with(base(), "OPENBLAS_CORETYPE", "SKYLAKEX");
        const std::string d = disagreements({base(), b, c, b});
        CHECK(d == "\n  OPENBLAS_CORETYPE: rank 0 '(unset)'; ranks 1, 3 'HASWELL'; rank 2 'SKYLAKEX'");
    }
    SECTION("a setting one rank lacks, on rank 0 or another") {
        Settings fewer = base();
        fewer.pop_back();
        CHECK(disagreements({base(), fewer}) == "\n  XGRAD_NUM_THREADS: rank 0 '1'; rank 1 '(missing)'");
        CHECK(disagreements({fewer, base()}) == "\n  XGRAD_NUM_THREADS: rank 0 '(missing)'; rank 1 '1'");
    }
    SECTION("many ranks: at most max_ranks named") {
        std::vector<Settings> world(20, with(base(), "flag --steps", "30"));
        world[0] = base();
        const std::string d = disagreements(world, 3);
        CHECK(d == "\n  flag --steps: rank 0 '300'; ranks 1, 2, 3 and 16 more '30'");
    }
}

TEST_CASE("agreement: an error on any rank stops the run even when every rank has it") {
    Settings failed = base();
    failed.emplace_back(kRankError, "load checkpoint 'b/checkpoint.npz': truncated");
    CHECK(disagreements({base(), failed}) == "\n  rank 1: load checkpoint 'b/checkpoint.npz': truncated");
    const std::string both = disagreements({failed, failed});
    CHECK_THAT(both, Catch::Contains("rank 0: load checkpoint"));
    CHECK_THAT(both, Catch::Contains("rank 1: load checkpoint"));
}

TEST_CASE("agreement: check_agreement throws the differences and passes agreeing ranks") {
    CHECK_NOTHROW(check_agreement(*std::make_unique<Replicas>(), base()));
    Group agree({base(), base(), base()});
    CHECK_NOTHROW(check_agreement(agree, base()));
    Group differ({base(), with(base(), "XGRAD_NUM_THREADS", "(unset)")});
    CHECK_THROWS_AS(check_agreement(differ, base()), Disagreement);
    CHECK_THROWS_WITH(check_agreement(differ, base()),
                      Catch::Contains("2 ranks do not agree") && Catch::Contains("XGRAD_NUM_THREADS: rank 0 '1'; "
                                                                                 "rank 1 '(unset)'") &&
                          Catch::Contains("mpirun -x OPENBLAS_CORETYPE -x XGRAD_NUM_THREADS"));
}

TEST_CASE("agreement: this process's numerics settings name the BLAS, the threads and the build") {
    const Settings s = numerics_settings();
    std::vector<std::string> names;
    for (const auto& [n, v] : s) {
        names.push_back(n);
        CHECK_FALSE(v.empty());
    }
    for (const char* expected : {"OPENBLAS_CORETYPE", "BLAS core", "BLAS threads", "XGRAD_NUM_THREADS",
                                 "thread pool size", "oneDNN", "XGRAD_GEMM", "float32 engine", "build type", "build flags", "build commit"})
        CHECK(std::find(names.begin(), names.end(), expected) != names.end());
    CHECK(numerics_settings() == s);  // the same process twice: the same answer
}
