// softmax and log_softmax: values, stability at large inputs, gradients along every axis.
#include <cmath>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "core/softmax_row.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

TEST_CASE("softmax rows sum to one and match the formula", "[softmax]") {
    Tensor x = tensor({{1, 2, 3}, {0, 0, 0}}, kFloat64);
    const double z = std::exp(1) + std::exp(2) + std::exp(3);
    CHECK_THAT(vals(softmax(x, -1)), approx({std::exp(1) / z, std::exp(2) / z, std::exp(3) / z, 1. / 3, 1. / 3, 1. / 3}));
    CHECK_THAT(vals(softmax(x, 0)), approx({1 / (1 + std::exp(-1)), 1 / (1 + std::exp(-2)), 1 / (1 + std::exp(-3)),
                                             1 / (1 + std::exp(1)), 1 / (1 + std::exp(2)), 1 / (1 + std::exp(3))}));
    CHECK_THAT(vals(log_softmax(x, 1)), approx({1 - std::log(z), 2 - std::log(z), 3 - std::log(z),
                                                 -std::log(3), -std::log(3), -std::log(3)}));
}

TEST_CASE("softmax is stable for large inputs", "[softmax]") {
    Tensor x = tensor({1000, 1001, -1e6});
    CHECK_THAT(vals(softmax(x, 0)), approx({1 / (1 + std::exp(1.0)), 1 / (1 + std::exp(-1.0)), 0}, 1e-6));
    auto l = vals(log_softmax(x, 0));
    CHECK(std::isfinite(l[0]));
    CHECK(l[1] == Approx(-std::log1p(std::exp(-1.0))).margin(1e-4));  // float32 ulp at 1000 is 6e-5
}

TEST_CASE("softmax and log_softmax pass gradcheck along any axis", "[softmax][gradcheck]") {
    auto [shape, axis] = GENERATE(table<Shape, long>({
        {{5}, 0}, {{2, 3}, -1}, {{2, 3}, 0}, {{2, 3, 4}, 1}, {{1, 4, 1}, 1}, {{3, 1}, 1},
    }));
    Tensor x = param(shape, -2, 2);
    REQUIRE_GRADCHECK([axis = axis](auto& v) { return softmax(v[0], axis); }, {x}, "softmax");
    REQUIRE_GRADCHECK([axis = axis](auto& v) { return log_softmax(v[0], axis); }, {x}, "log_softmax");
}

TEST_CASE("softmax rejects a bad axis and integer input", "[softmax][errors]") {
    CHECK_THROWS_WITH(softmax(ones({2, 3}), 2), Catch::Contains("softmax: axis 2 is out of range") &&
                                                    Catch::Contains("(2, 3)"));
    CHECK_THROWS_WITH(log_softmax(ones({2}, kInt64), 0), Catch::Contains("log_softmax") && Catch::Contains("int64"));
}

TEST_CASE("every softmax runs one kernel: float32 along an inner axis matches float64", "[softmax]") {
    // The last axis runs the rows in place, other axes gather each line first: both paths, in
    // float32 (the vectorised exp) against float64 (std::exp).
    const Tensor x = param({3, 5, 4}, -4, 4);
    for (long axis : {0L, 1L, 2L}) {
        INFO("axis " << axis);
        CHECK_THAT(vals(softmax(x.to(kFloat32), axis)), approx(vals(softmax(x, axis)), 1e-6));
        CHECK_THAT(vals(log_softmax(x.to(kFloat32), axis)), approx(vals(log_softmax(x, axis)), 1e-5));
    }
}

TEST_CASE("NaN propagates through every softmax in every dtype", "[softmax][nan]") {
    // A NaN score poisons its row (as torch), never gets weight 0; the other rows are untouched.
    for (Dtype d : {kFloat32, kFloat64}) {
        INFO(dtype_name(d));
        Tensor x = tensor({{{1, NAN, 3, 0.5}, {1, 2, 3, 4}}}, d);  // (1, 2, 4)
        const auto lens = from_vector(std::vector<std::int64_t>{4}, {1});
        for (const Tensor& y : {softmax(x, -1), log_softmax(x, -1), masked_softmax(x, lens),
                                masked_softmax(x, AttentionMask::causal())}) {
            const auto v = vals(y);
            INFO(y.op_name());
            for (int j = 0; j < 4; ++j) CHECK(std::isnan(v[j]));
            for (int j = 4; j < 8; ++j) CHECK(std::isfinite(v[j]));
        }
        const auto w = vals(softmax(x, 1));  // along the other axis only column 1 is NaN
        CHECK(std::isnan(w[1]));
        CHECK(std::isnan(w[5]));
        CHECK(std::isfinite(w[0]));
    }
}

TEST_CASE("a resolved mask fits only the scores it was resolved for", "[softmax][errors]") {
    const ResolvedMask m = AttentionMask::causal().resolve("attend", 2, 3, 4);
    CHECK(masked_softmax(zeros({2, 3, 4}), m).shape() == Shape{2, 3, 4});
    CHECK_THROWS_WITH(masked_softmax(zeros({2, 3, 5}), m),
                      Catch::Contains("masked_softmax: the mask was resolved for scores (2, 3, 4), got (2, 3, 5)"));
    CHECK_THROWS_WITH(head_attention_weights(zeros({1, 3, 4}), zeros({1, 4, 4}), 2, 1.0, m),
                      Catch::Contains("head_attention_weights: the mask was resolved for scores (2, 3, 4), got (1, 3, 4)"));
    CHECK_THROWS_WITH(AttentionMask::causal().resolve("attend", 2, 4, 3),
                      Catch::Contains("attend: a causal mask needs at least as many keys as queries"));
}

TEST_CASE("masked softmax rows taken together give the bits of one row at a time", "[softmax]") {
    // kernel::softmax_prefix_rows takes the exps of many short rows at once (groups of 32 rows)
    auto run = [](auto tag) {  // std::common_type<T>: a type as a value
        using T = typename decltype(tag)::type;
        std::mt19937 gen(5);
        std::uniform_real_distribution<T> score(-30, 10);
        for (std::size_t n : {1, 2, 7, 8, 9, 16, 17, 40})
            for (std::size_t rows : {1, 3, 31, 32, 33, 70}) {
                std::vector<T> x(rows * n);
                for (T& v : x) v = gen() % 11 == 0 ? T(1e30) * (gen() % 2 ? 1 : -1) : score(gen);
                std::vector<std::size_t> L(rows);
                for (auto& l : L) l = gen() % (n + 1);  // 0: every key masked, a uniform row
                std::vector<T> want(x.size()), got(x.size()), in_place = x;
                for (std::size_t i = 0; i < rows; ++i) kernel::softmax_prefix(x.data() + i * n, want.data() + i * n, n, L[i]);
                kernel::softmax_prefix_rows(x.data(), got.data(), n, L.data(), rows);
                kernel::softmax_prefix_rows(in_place.data(), in_place.data(), n, L.data(), rows);
                INFO("n " << n << ", rows " << rows);
                CHECK(std::memcmp(got.data(), want.data(), want.size() * sizeof(T)) == 0);
                CHECK(std::memcmp(in_place.data(), want.data(), want.size() * sizeof(T)) == 0);
            }
    };
    run(std::common_type<float>{});
    run(std::common_type<double>{});
}
