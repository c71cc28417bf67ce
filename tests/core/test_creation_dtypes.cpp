// The dtype a creation function infers from the numbers it is given, as torch's: torch.arange(5)
// and torch.tensor([1, 2, 3]) are int64, torch.tensor([True]) bool, any float makes float32;
// and torch.randint(high, size).
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <vector>

#include "../helpers.hpp"
#include "core/creation.hpp"
#include "core/ops.hpp"

using namespace xgrad;
using namespace xgrad::test;
using Catch::Matchers::Contains;

TEST_CASE("torch.arange(5) is int64 and torch.arange(0, 5, 0.5) float32", "[arange-dtype]") {
    CHECK(arange(5).dtype() == kInt64);
    CHECK(arange(5).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 2, 3, 4});
    const std::size_t T = 4;
    const long start = 1;
    CHECK(arange(start, T + 1).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 2, 3, 4});  // arange(1, T + 1)
    CHECK(arange(10, 0, -3).to_vector<std::int64_t>() == std::vector<std::int64_t>{10, 7, 4, 1});
    CHECK(arange(true).to_vector<std::int64_t>() == std::vector<std::int64_t>{0});  // torch.arange(True)
    CHECK(arange(0, -3).numel() == 0);
    CHECK(arange(0, 5, -1).numel() == 0);
    // Any floating number makes float32, today's default.
    CHECK(arange(0, 5, 0.5).dtype() == kFloat32);
    CHECK(arange(5.0).dtype() == kFloat32);
    CHECK(arange(0, 5.0).dtype() == kFloat32);
    CHECK(arange(0.0, 1.0, 0.3).to_vector<float>() == std::vector<float>{0.0f, 0.3f, 0.6f, 0.9f});
    // A dtype given wins, with the values the double path always gave.
    CHECK(arange(5, kFloat32).to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4});
    CHECK(arange(0, 4, 2, kFloat64).to_vector<double>() == std::vector<double>{0, 2});
    CHECK(arange(0, 3, kBool).to_vector<bool>() == std::vector<bool>{false, true, true});
    CHECK(arange(0.5, 3.5, kInt64).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 2});
    // torch.arange(5, requires_grad=True) is refused (int64 has no gradient); with a float dtype it is a leaf.
    CHECK(arange(3, TensorOptions(kFloat32).requires_grad(true)).requires_grad());
}

TEST_CASE("torch.arange of integers is exact over all of int64", "[arange-dtype]") {
    const std::int64_t big = std::numeric_limits<std::int64_t>::max();
    // 2^53 + 1 is no double: the double path would give 2^53 twice.
    const std::int64_t p53 = (std::int64_t(1) << 53) + 1;
    CHECK(arange(p53, p53 + 3).to_vector<std::int64_t>() == std::vector<std::int64_t>{p53, p53 + 1, p53 + 2});
    CHECK(arange(big - 2, big).to_vector<std::int64_t>() == std::vector<std::int64_t>{big - 2, big - 1});
    CHECK(arange(big, big - 5, -2).to_vector<std::int64_t>() == std::vector<std::int64_t>{big, big - 2, big - 4});
    CHECK(arange(-big - 1, big, big).to_vector<std::int64_t>() == std::vector<std::int64_t>{-big - 1, -1, big - 1});
}

TEST_CASE("torch.arange refuses a zero step and a count that overflows, naming arange", "[arange-dtype]") {
    CHECK_THROWS_WITH(arange(0, 10, 0), Contains("arange: expected finite start, end and a non-zero step") &&
                                            Contains("step=0"));
    const std::int64_t big = std::numeric_limits<std::int64_t>::max();
    CHECK_THROWS_WITH(arange(-big - 1, big), Contains("arange: start=-9223372036854775808, end=9223372036854775807") &&
                                                 Contains("more than fit in memory"));
    CHECK_THROWS_WITH(arange(big, -big, -1), Contains("arange: ") && Contains("more than fit in memory"));
    CHECK_THROWS_WITH(arange(0, std::int64_t(1) << 60), Contains("more than fit in memory"));
    CHECK_THROWS_WITH(arange(0, std::numeric_limits<double>::quiet_NaN()), Contains("arange: expected finite"));
}

TEST_CASE("torch.tensor([1, 2, 3]) is int64, torch.tensor([True, False]) bool, torch.tensor([1, 2.5]) float32",
          "[tensor-dtype]") {
    CHECK(tensor({1, 2, 3}).dtype() == kInt64);
    CHECK(tensor({1, 2, 3}).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 2, 3});
    const Tensor m = tensor({{1, 2}, {3, 4}});
    CHECK(m.dtype() == kInt64);
    CHECK(m.shape() == Shape{2, 2});
    CHECK(tensor({{{1}, {2}}}).shape() == Shape{1, 2, 1});
    CHECK(tensor({{{{7}}}}).dtype() == kInt64);
    CHECK(tensor(5).dtype() == kInt64);  // torch.tensor(5)
    CHECK(tensor(5).shape() == Shape{});
    CHECK(tensor(5).item<std::int64_t>() == 5);
    CHECK(tensor({true, false}).dtype() == kBool);
    CHECK(tensor({true, false}).to_vector<bool>() == std::vector<bool>{true, false});
    CHECK(tensor({{true}, {false}}).dtype() == kBool);
    CHECK(tensor(true).dtype() == kBool);
    // Every int64 exactly (a double list would round 2^62 + 1).
    const std::int64_t big = (std::int64_t(1) << 62) + 1;
    CHECK(tensor({big, -big}).to_vector<std::int64_t>() == std::vector<std::int64_t>{big, -big});
    // Any floating number makes the float32 default, as today.
    CHECK(tensor({1.0, 2, 3}).dtype() == kFloat32);
    CHECK(tensor({{1, 2}, {3.5, 4}}).dtype() == kFloat32);
    CHECK(tensor({0.5}).dtype() == kFloat32);
    CHECK(tensor(2.0).dtype() == kFloat32);
    // A dtype given wins.
    CHECK(tensor({1, 2}, kFloat32).to_vector<float>() == std::vector<float>{1, 2});
    CHECK(tensor({{1, 0}}, kFloat64).dtype() == kFloat64);
    CHECK(tensor({1, 0, 2}, kBool).to_vector<bool>() == std::vector<bool>{true, false, true});
    CHECK(tensor({true, false}, kInt64).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0});
    CHECK(tensor({1, 2}, TensorOptions(kFloat32).requires_grad(true)).requires_grad());
    CHECK_THROWS_WITH(tensor({{1, 2}, {3}}), Contains("tensor: ragged nested list"));
    CHECK_THROWS_WITH(tensor({std::numeric_limits<std::uint64_t>::max()}), Contains("does not fit int64"));
}

TEST_CASE("torch.tensor([x.size(0), 5]) of mixed integer types is int64, torch.tensor([True, 2]) int64",
          "[tensor-dtype]") {
    const Tensor x = zeros({3, 2});
    const long five = 5;
    // size_t beside int (and beside long): no one C++ type, still integers.
    CHECK(tensor({x.size(0), 5}).dtype() == kInt64);
    CHECK(tensor({x.size(0), 5}).to_vector<std::int64_t>() == std::vector<std::int64_t>{3, 5});
    CHECK(tensor({{x.size(1), five}, {1, 2}}).to_vector<std::int64_t>() == std::vector<std::int64_t>{2, 5, 1, 2});
    CHECK(tensor({true, 2}).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 2});
    CHECK(tensor({1, 2.5}).to_vector<float>() == std::vector<float>{1.0f, 2.5f});
    CHECK(tensor({{1, 2}, {3.5, 4}}).dtype() == kFloat32);
    // One number per row is rows of one, not a flat list: torch.tensor([[1.5], [0.3]]).
    CHECK(tensor({{1.5}, {0.3}}).shape() == Shape{2, 1});
    CHECK(tensor({{1}, {2}}).dtype() == kInt64);
    CHECK(tensor(2.5f).dtype() == kFloat32);
    CHECK(tensor({x.size(0), 5}, kFloat64).to_vector<double>() == std::vector<double>{3, 5});
}

TEST_CASE("torch.randint(10, (3,)) draws from 0 to 9 as torch.randint(0, 10, (3,))", "[randint-high]") {
    Generator a(7), b(7);
    const Tensor x = randint(10, {3, 4}, a);
    CHECK(x.dtype() == kInt64);
    CHECK(x.shape() == Shape{3, 4});
    CHECK(x.to_vector<std::int64_t>() == randint(0, 10, {3, 4}, b).to_vector<std::int64_t>());
    for (std::int64_t v : randint(3, {1000}).to_vector<std::int64_t>()) REQUIRE((v >= 0 && v < 3));
    const long n = 2;
    CHECK(randint(5, {n, 3}).shape() == Shape{2, 3});
    CHECK_THROWS_WITH(randint(0, {3}), Contains("randint: expected low < high, got low=0, high=0"));
    CHECK_THROWS_WITH(randint(-1, {3}), Contains("randint: expected low < high"));
}
