// size(), dim() and numel() as int64 and Shape as torch.Size, used as a hostile or careless
// porter would: counts computed from sizes that go below zero, and Shape in every habit a
// std::vector<std::size_t> had.
#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <vector>

#include "core/creation.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using Catch::Contains;

TEST_CASE("A count from size() that went below zero is refused as negative, not read as 2^64 - 1",
          "[adversarial-shape]") {
    const Tensor x = zeros({2, 3});
    const Tensor empty = zeros({0});
    // repeat_interleave(valid_lens, X.size(1) - 2) at size 1: on an empty input a wrapped count
    // made an empty result and passed.
    REQUIRE_THROWS_WITH(repeat_interleave(empty, x.size(0) - 3),
                        Contains("repeat_interleave: repeats must be non-negative, got -1"));
    REQUIRE_THROWS_WITH(repeat_interleave(empty, x.size(0) - 3, 0),
                        Contains("repeat_interleave: repeats must be non-negative, got -1"));
    REQUIRE_THROWS_WITH(repeat_interleave(x, x.size(0) - 3, 1),
                        Contains("repeat_interleave: repeats must be non-negative, got -1"));
    // An unsigned size that wrapped below zero is the same -1.
    REQUIRE_THROWS_WITH(repeat_interleave(x, x.shape()[0] - 3),
                        Contains("repeat_interleave: repeats must be non-negative, got -1"));
    REQUIRE_THROWS_WITH(eye(x.size(0) - 3), Contains("eye: n must be non-negative, got -1"));
    REQUIRE_THROWS_WITH(randperm(x.size(0) - 3), Contains("randperm: n must be non-negative, got -1"));
    // Counts of zero and up keep working, from any integer type.
    REQUIRE(repeat_interleave(arange(3.0), x.size(0)).to_vector<float>() == std::vector<float>{0, 0, 1, 1, 2, 2});
    REQUIRE(repeat_interleave(x, std::size_t{0}, 1).shape() == Shape{2, 0});
    REQUIRE(repeat_interleave(empty, 0).shape() == Shape{0});
    REQUIRE(eye(x.size(0)).shape() == Shape{2, 2});
    REQUIRE(eye(0).shape() == Shape{0, 0});
    REQUIRE(randperm(x.numel()).shape() == Shape{6});
    REQUIRE(randperm(0).shape() == Shape{0});
}

TEST_CASE("Shape keeps std::vector's constructors, comparisons and containers", "[adversarial-shape]") {
    // Parentheses count, braces list, as std::vector's.
    REQUIRE(Shape(3) == std::vector<std::size_t>{0, 0, 0});
    REQUIRE(Shape(2, 7) == std::vector<std::size_t>{7, 7});
    REQUIRE(Shape{3} == std::vector<std::size_t>{3});
    REQUIRE(Shape{2, 7} == std::vector<std::size_t>{2, 7});
    const std::vector<std::size_t> v{4, 5};
    REQUIRE(Shape(v.begin(), v.end()) == v);
    REQUIRE(Shape{v.begin(), v.end()} == v);
    REQUIRE(v == Shape{4, 5});
    REQUIRE(Shape{4, 4} < Shape{4, 5});
    const std::map<Shape, int> by_shape{{Shape{2, 3}, 1}, {{4}, 2}};
    REQUIRE(by_shape.at(zeros({2, 3}).shape()) == 1);
    REQUIRE(std::set<Shape>{Shape{1}, Shape{1}, Shape{}}.size() == 2);
    REQUIRE(Catch::Detail::stringify(Shape{2, 3}) == "{ 2, 3 }");
    // A signed index in a loop over dim() reads each size; a size_t index as std::vector's.
    const Tensor x = zeros({2, 3, 4});
    std::int64_t product = 1;
    for (int d = 0; d < x.dim(); ++d) product *= static_cast<std::int64_t>(x.shape()[d]);
    for (long d = -1; d >= -x.dim(); --d) product *= static_cast<std::int64_t>(x.shape()[d]);
    REQUIRE(product == x.numel() * x.numel());
}

TEST_CASE("Shape::at with a signed index counts from the end as operator[] does", "[adversarial-shape]") {
    // x.shape.at(-1) has no torch spelling; a port writes it as it would x.shape[-1].
    const Tensor x = zeros({2, 3, 4});
    REQUIRE(x.shape().at(-1) == 4);
    REQUIRE(x.shape().at(-3) == 2);
    REQUIRE(x.shape().at(1) == 3);
    const std::int64_t last = x.dim() - 1;
    REQUIRE(x.shape().at(last) == 4);
    Shape s = x.shape();
    s.at(-2) = 7;
    REQUIRE(s == Shape{2, 7, 4});
    // Past either end: xgrad::Error naming Shape, never a read past the vector.
    REQUIRE_THROWS_AS(x.shape().at(-4), Error);
    REQUIRE_THROWS_WITH(x.shape().at(-4), Contains("Shape: index -4 is out of range for a shape of 3 sizes (2, 3, 4)"));
    REQUIRE_THROWS_WITH(x.shape().at(3), Contains("Shape: index 3 is out of range"));
    REQUIRE_THROWS_WITH(Shape{}.at(-1), Contains("Shape: index -1 is out of range"));
    // An unsigned index is std::vector's at(): in range reads, out of range std::out_of_range.
    REQUIRE(x.shape().at(std::size_t{2}) == 4);
    REQUIRE_THROWS_AS(x.shape().at(std::size_t{3}), std::out_of_range);
}
