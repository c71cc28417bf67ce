// scatter and scatter_ with torch 1.13's reduce = "add" / "multiply": values pasted from torch,
// its refusals, and its missing derivative.
#include <cstdint>
#include <string>
#include <vector>

#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

namespace {
Tensor ids(const std::vector<std::int64_t>& v, const Shape& shape) { return from_vector(v, shape); }
}  // namespace

TEST_CASE("scatter with reduce adds or multiplies as torch's", "[scatter][scatter-reduce]") {
    const Tensor a = ones({3, 4});
    const Tensor i = ids({3, 0, 3, 1, 1, 2}, {2, 3});
    const Tensor s = arange(1, 13, kFloat32).reshape({3, 4});
    CHECK(scatter(a, 1, i, s, "add").to_vector<float>() ==
          std::vector<float>{3, 1, 1, 5, 1, 12, 8, 1, 1, 1, 1, 1});
    CHECK(scatter(a, 1, i, s, "multiply").to_vector<float>() ==
          std::vector<float>{2, 1, 1, 3, 1, 30, 7, 1, 1, 1, 1, 1});
    const Tensor j = ids({2, 0, 1, 2, 2, 2, 2, 2}, {2, 4});
    CHECK(scatter(a * 2.0, 0, j, 3.0, "multiply").to_vector<float>() ==
          std::vector<float>{2, 6, 2, 2, 2, 2, 6, 2, 18, 6, 6, 18});
    CHECK(scatter(a, 0, j, -1.5, "add").to_vector<float>() ==
          std::vector<float>{1, -0.5, 1, 1, 1, 1, -0.5, 1, -2, -0.5, -0.5, -2});
    // int64 and bool (or, and), as torch's.
    CHECK(scatter(arange(6, kInt64).reshape({2, 3}), 1, ids({2, 2, 0, 1}, {2, 2}), ids({5, 7, 2, 3}, {2, 2}),
                  "multiply")
              .to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 70, 6, 12, 5});
    const Tensor b = gt(tensor({{1.0, 0.0, 0.0}}), 0.5);
    CHECK(scatter(b, 1, ids({1, 2}, {1, 2}), gt(tensor({{1.0, 0.0}}), 0.5), "add").to_vector<bool>() ==
          std::vector<bool>{true, true, false});
    CHECK(scatter(b, 1, ids({0, 1}, {1, 2}), gt(tensor({{0.0, 1.0}}), 0.5), "multiply").to_vector<bool>() ==
          std::vector<bool>{false, false, false});
    // In place: every alias sees it and the version moves.
    Tensor c = a.clone();
    const Tensor alias = c;
    c.scatter_(1, i, s, "multiply");
    CHECK(alias.to_vector<float>() == scatter(a, 1, i, s, "multiply").to_vector<float>());
    CHECK(c.version() == 1);
    c.scatter_(0, j, 2.0, "add");
    CHECK(c.to_vector<float>()[1] == 3.0f);
}

TEST_CASE("scatter with reduce refuses what torch refuses", "[scatter][scatter-reduce]") {
    const Tensor a = ones({3, 4}), i = ids({3, 0, 3, 1, 1, 2}, {2, 3}), s = arange(1, 13, kFloat32).reshape({3, 4});
    CHECK_THROWS_WITH(scatter(a, 1, i, s, "mean"),
                      Catch::Contains("scatter: reduce must be \"add\" or \"multiply\", got \"mean\""));
    CHECK_THROWS_WITH(scatter(a, 1, i, 2.5, "sum"), Catch::Contains("reduce must be \"add\" or \"multiply\""));
    CHECK_THROWS_WITH(a.clone().scatter_(1, i, s, "max"), Catch::Contains("scatter_: reduce must be"));
    CHECK_THROWS_WITH(scatter(a, 1, ids({4}, {1, 1}), s, "add"), Catch::Contains("scatter"));
    CHECK_THROWS_WITH(scatter(a.to(kBFloat16), 1, i, s.to(kBFloat16), "add"),
                      Catch::Contains("scatter: reducing into a bfloat16 tensor"));
    CHECK_THROWS_WITH(scatter(a, 1, i, s.to(kFloat64), "add"), Catch::Contains("dtypes differ"));
}

TEST_CASE("scatter with reduce has no derivative, as in torch 1.13", "[scatter][scatter-reduce]") {
    const Tensor a = ones({3, 4}).requires_grad_(), s = arange(1, 13, kFloat32).reshape({3, 4}).requires_grad_();
    const Tensor i = ids({3, 0, 3, 1, 1, 2}, {2, 3});
    // The forward records (the result requires grad); a backward through it throws.
    const Tensor y = scatter(a, 1, i, s, "add");
    CHECK(y.requires_grad());
    CHECK_THROWS_WITH(sum(y).backward(), Catch::Contains("scatter: with reduce it has no derivative"));
    CHECK_THROWS_WITH(sum(scatter(a, 1, i, 2.0, "multiply")).backward(), Catch::Contains("no derivative"));
    // In place on a non-leaf: recorded, the same at backward; on a leaf that requires grad: refused.
    Tensor b = a * 1.0;
    b.scatter_(1, i, s.detach(), "multiply");
    CHECK_THROWS_WITH(sum(b).backward(), Catch::Contains("scatter_: with reduce it has no derivative"));
    CHECK_THROWS(a.scatter_(1, i, 1.0, "add"));
    // Without gradients nothing is recorded.
    NoGradGuard no_grad;
    CHECK_FALSE(scatter(a, 1, i, s, "add").requires_grad());
}
