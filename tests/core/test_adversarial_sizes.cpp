// Sizes and numbers that overflow: every way a shape becomes an element count or an allocation,
// and every conversion of a double to an integer count, index or value. Each must end in an
// xgrad::Error naming the op (and the shape or argument), never a wrapped count, an impossible
// 0-element shape, std::bad_alloc or a crash. Zero-length axes keep the huge shapes free to make.
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/runtime/alloc.hpp"
#include "core/runtime/parallel.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using Catch::Matchers::Contains;

namespace {

constexpr std::size_t P20 = std::size_t(1) << 20, P31 = std::size_t(1) << 31, P32 = std::size_t(1) << 32;
constexpr std::size_t P59 = std::size_t(1) << 59, P61 = std::size_t(1) << 61, P62 = std::size_t(1) << 62,
                      P63 = std::size_t(1) << 63;
const double inf = std::numeric_limits<double>::infinity();

// Shapes whose element count overflows size_t (or wraps to 0 or to a small number), or passes
// 2^60 - 1 (more bytes than a ptrdiff_t holds): the count must not be taken modulo 2^64.
const std::vector<Shape> kTooLarge = {
    {P32, P32},             // 2^64: wraps to 0
    {P62, 4},               // 2^64: wraps to 0
    {P62 + 1, 4},           // wraps to 4, a plausible small count
    {P63, P63},             // wraps to 0
    {P61},                  // fits size_t, but 8 bytes each do not fit a ptrdiff_t
    {kMaxElements + 1},     // the first count past the bound
    {P31, P31, 4, 2},       // 2^65 in four factors
    {3, P62, 5},            // wraps to 4·2^62·... modulo 2^64
};

// Shapes with zero elements whose other axes still multiply past the bound: their strides and
// (outer, n, inner) splits would wrap.
const std::vector<Shape> kTooLargeEmpty = {{P62, 4, 0}, {0, P32, P32}, {P32, 0, P32}, {P63, 0, 2}};

#define CHECK_TOO_LARGE(expr, op)                                                             \
    CHECK_THROWS_WITH(expr, Contains(std::string(op) + ": shape") && Contains("fit in memory"))

}  // namespace

TEST_CASE("checked_numel counts, with the bound and the zero-axis rule", "[sizes]") {
    CHECK(checked_numel("t", {}) == 1);
    CHECK(checked_numel("t", {2, 3, 4}) == 24);
    CHECK(checked_numel("t", {kMaxElements}) == kMaxElements);
    CHECK(checked_numel("t", {P32, 0, P20}) == 0);  // 2^52 without the zero: allowed, 0 elements
    CHECK(checked_numel("t", {0}) == 0);
    for (const Shape& s : kTooLarge) {
        INFO(shape_str(s));
        CHECK_THROWS_WITH(checked_numel("zeros", s),
                          Contains("zeros: shape " + shape_str(s) + " has more elements than fit in memory"));
    }
    for (const Shape& s : kTooLargeEmpty) {
        INFO(shape_str(s));
        CHECK_THROWS_WITH(checked_numel("zeros", s), Contains("zeros: shape " + shape_str(s) + " is too large"));
    }
}

TEST_CASE("every creation function rejects a shape too large to count, naming itself", "[sizes]") {
    Generator gen(0);
    const std::vector<std::pair<const char*, std::function<Tensor(const Shape&)>>> makers = {
        {"zeros", [](const Shape& s) { return zeros(s); }},
        {"zeros", [](const Shape& s) { return zeros(s, kInt64); }},
        {"zeros", [](const Shape& s) { return zeros(s, kBool); }},
        {"ones", [](const Shape& s) { return ones(s, kFloat64); }},
        {"full", [](const Shape& s) { return full(s, 2.5); }},
        {"rand", [&](const Shape& s) { return rand(s, {}, gen); }},
        {"randn", [&](const Shape& s) { return randn(s, {}, gen); }},
        {"uniform", [&](const Shape& s) { return uniform(s, -1, 1, {}, gen); }},
        {"randint", [&](const Shape& s) { return randint(0, 10, s, gen); }},
        {"from_vector", [](const Shape& s) { return from_vector(std::vector<double>{}, s); }},
        {"from_vector", [](const Shape& s) { return from_vector(std::vector<std::int64_t>{}, s); }},
    };
    for (const auto& [op, make] : makers)
        for (const auto& shapes : {kTooLarge, kTooLargeEmpty})
            for (const Shape& s : shapes) {
                INFO(op << " " << shape_str(s));
                CHECK_TOO_LARGE(make(s), op);
            }
    CHECK_TOO_LARGE(eye(P32), "eye");
    CHECK_TOO_LARGE(randperm(P62, gen), "randperm");
    // n is int64, as torch's: a size_t that went below zero is the -1 it came from.
    CHECK_THROWS_WITH(eye(std::size_t(-1)), Contains("eye: n must be non-negative, got -1"));
    CHECK_THROWS_WITH(randperm(std::size_t(-1), gen), Contains("randperm: n must be non-negative, got -1"));
    // The empty shapes that are fine stay fine, with their shape.
    CHECK(zeros({P32, 0, P20}).shape() == Shape{P32, 0, P20});
    CHECK(randint(0, 3, {0, P59}, gen).numel() == 0);
    CHECK(eye(0).numel() == 0);
}

TEST_CASE("a count that fits but cannot be allocated is an Error naming op, shape and bytes", "[sizes]") {
#if defined(__SANITIZE_ADDRESS__)
    // AddressSanitizer's allocator aborts on a request beyond its maximum instead of failing it
    // (allocator_may_return_null=0): the plain build runs this.
    WARN("skipped under AddressSanitizer, which aborts on allocations of petabytes");
    return;
#endif
    // 2^50 floats are 4 PiB: more than the 47-bit address space of any x86-64 or arm64 process.
    const std::size_t n = std::size_t(1) << 50;
    CHECK_THROWS_WITH(zeros({n}), Contains("zeros: out of memory for a result of shape (1125899906842624,)") &&
                                      Contains("4503599627370496 bytes (4.0 PiB)"));
    CHECK_THROWS_WITH(full({2, n / 2}, 1.0, kFloat64), Contains("full: out of memory") && Contains("(8.0 PiB)"));
    CHECK_THROWS_WITH(randint(0, 2, {n}), Contains("randint: out of memory"));
    CHECK_THROWS_WITH(randperm(n), Contains("randperm: out of memory"));
    CHECK_THROWS_WITH(arange(0, static_cast<double>(n)), Contains("arange: out of memory"));
    // expand is a view (nothing is allocated, as torch's); its copy is what does not fit.
    CHECK(expand(ones({1}), {n}).numel() == static_cast<std::int64_t>(n));
    CHECK_THROWS_WITH(expand(ones({1}), {n}).contiguous(), Contains("out of memory") && Contains(shape_str({n})));
    CHECK_THROWS_WITH(ones({P20, 1}) + ones({1, P20 * 1024}), Contains("add: out of memory") &&
                                                                  Contains(shape_str({P20, P20 * 1024})));
    CHECK_THROWS_WITH(lt(ones({P20, 1}), ones({1, P20 * 1024})), Contains("lt: out of memory"));
    CHECK_THROWS_WITH(where(lt(ones({P20, 1}), 2.0), ones({1, P20 * 1024}), ones({1})),
                      Contains("where: out of memory"));
    CHECK_THROWS_WITH(repeat_interleave(ones({2}), n, 0), Contains("repeat_interleave: out of memory"));
    // Attention without features: inputs free to make, results of 1 PiB.
    const std::size_t P48 = std::size_t(1) << 48;
    CHECK_THROWS_WITH(head_attention_weights(zeros({1, 1, 0}), zeros({1, P48, 0}), 1, 1.0),
                      Contains("head_attention_weights: out of memory for a result of shape (1, 1, 281474976710656)"));
    CHECK_THROWS_WITH(head_attention_combine(zeros({1, 1, 0}), zeros({1, 0, P48}), 1),
                      Contains("head_attention_combine: out of memory for a result of shape (1, 1, 281474976710656)"));
    // With no op saying what it makes, the allocator still names the request.
    CHECK_THROWS_WITH(cached_alloc(std::size_t(1) << 52), Contains("allocator: out of memory: cannot allocate "
                                                                   "4503599627370496 bytes (4.0 PiB)"));
    // The failure left nothing behind: a normal allocation still works.
    CHECK(vals(ones({3})) == std::vector<double>{1, 1, 1});
}

TEST_CASE("products whose batch axes broadcast past memory fail with a named Error", "[sizes]") {
    // Operands with K = 0 are free to make, yet multiply to a result of zeros that is not empty:
    // every batch needs its offsets (8 bytes each per operand) as well as its (M, N) block.
    // Counts that wrap size_t name the operands, not only the batch shape they broadcast to.
    CHECK_THROWS_WITH(matmul(zeros({P32, 1, 2, 0}), zeros({1, P32, 0, 2})),
                      Contains("matmul: shape (4294967296, 4294967296, 2, 2) has more elements than fit in memory "
                               "(the product of (4294967296, 1, 2, 0) and (1, 4294967296, 0, 2))"));
    // 2^64 + 2^31 batches: wrapped, a plausible 2^31.
    CHECK_THROWS_WITH(matmul_t(zeros({2 * P32 + 1, 1, 0, 1}), zeros({1, P31, 1, 0}), true, true),
                      Contains("matmul_t: shape (8589934593, 2147483648, 1, 1) has more elements than fit in memory "
                               "(the product of (8589934593, 1, 0, 1) and (1, 2147483648, 1, 0))"));
#if defined(__SANITIZE_ADDRESS__)
    WARN("the rest is skipped under AddressSanitizer, which aborts on allocations of petabytes");
    return;
#endif
    // Counts that fit but whose result (and tables) pass the 47-bit address space: 2^46 floats
    // are 256 TiB. std::bad_alloc used to escape from the tables, built before the result.
    const std::size_t P23 = std::size_t(1) << 23, P46 = std::size_t(1) << 46;
    CHECK_THROWS_WITH(matmul(zeros({P23, 1, 1, 0}), zeros({1, P23, 0, 1})),
                      Contains("matmul: out of memory for a result of shape (8388608, 8388608, 1, 1)"));
    CHECK_THROWS_WITH(matmul(zeros({P23, 1, 1, 0}, kFloat64), zeros({1, P23, 0, 1}, kFloat64)),
                      Contains("matmul: out of memory for a result of shape (8388608, 8388608, 1, 1)"));
    CHECK_THROWS_WITH(bmm(zeros({P46, 1, 0}), zeros({P46, 0, 1})),
                      Contains("bmm: out of memory for a result of shape (70368744177664, 1, 1)"));
    CHECK_THROWS_WITH(matmul_t(zeros({P23, 1, 0, 1}), zeros({1, P23, 1, 0}), true, true),
                      Contains("matmul_t: out of memory for a result of shape (8388608, 8388608, 1, 1)"));
    // Empty results of huge broadcast batches stay legal and cost nothing, gradients included.
    const Tensor a = zeros({P31, 1, 1, 0}).requires_grad_(), b = zeros({1, P20, 0, 0}).requires_grad_();
    const Tensor y = matmul(a, b);
    CHECK(y.shape() == Shape{P31, P20, 1, 0});
    y.sum().backward();
    CHECK(a.grad().shape() == a.shape());
    CHECK(b.grad().shape() == b.shape());
    CHECK(matmul_t(zeros({P31, 1, 0, 1}), zeros({1, P20, 0, 0}), true, false).shape() == Shape{P31, P20, 1, 0});
    // and a small broadcast with K = 0 is zeros, with zero gradients of the operands' shapes
    const Tensor c = ones({2, 1, 3, 0}).requires_grad_(), d = ones({1, 4, 0, 5}).requires_grad_();
    const Tensor z = matmul(c, d);
    CHECK(vals(z) == std::vector<double>(120, 0.0));
    (z * 2.0).sum().backward();
    CHECK(c.grad().shape() == c.shape());
    CHECK(vals(d.grad()) == std::vector<double>(0));
}

TEST_CASE("broadcasting two shapes checks the count of the result", "[sizes]") {
    // Each operand is empty and small to make; the broadcast result's axes multiply past the bound.
    const Tensor a = zeros({P31, 1, 0}), b = zeros({1, P31, 0});
    CHECK_THROWS_WITH(a + b, Contains("add: shape (2147483648, 2147483648, 0) is too large"));
    CHECK_THROWS_WITH(a * b, Contains("mul: shape"));
    CHECK_THROWS_WITH(lt(a, b), Contains("lt: shape"));
    CHECK_THROWS_WITH(eq(a, b), Contains("eq: shape"));
    CHECK_THROWS_WITH(where(lt(a, 1.0), b, zeros({1})), Contains("where: shape"));
    // where broadcasts three shapes: the count of the pair may fit while the triple does not.
    CHECK_THROWS_WITH(where(lt(zeros({P20, 1, 1, 0}), 1.0), zeros({1, P20, 1, 0}), zeros({1, 1, P31, 0})),
                      Contains("where: shape (1048576, 1048576, 2147483648, 0) is too large"));
    // Products broadcast their batch axes, then add (M, N): bmm of two empty operands whose
    // result count wraps to 0 used to write past its buffer.
    CHECK_THROWS_WITH(bmm(zeros({P20, P20, 0}), zeros({P20, 0, P20 * 1024})),
                      Contains("bmm: shape (1048576, 1048576, 1073741824) has more elements than fit in memory"));
    CHECK_THROWS_WITH(matmul(zeros({P20, 1, 4096, 0}), zeros({1, P20, 0, 4096})),
                      Contains("matmul: shape (1048576, 1048576, 4096, 4096) has more"));
    CHECK_THROWS_WITH(matmul_t(zeros({P20, 1, 4096, 0}), zeros({1, P20, 4096, 0}), false, true),
                      Contains("matmul_t: shape (1048576, 1048576, 4096, 4096) has more"));
    CHECK_THROWS_WITH(matmul(zeros({P31, 1, 1, 0}), zeros({1, P31, 0, 1})), Contains("matmul: shape"));
    // Broadcasts that fit keep working, empty or not.
    CHECK((zeros({P20, 1, 0}) + zeros({1, P20, 0})).shape() == Shape{P20, P20, 0});
    CHECK(vals(ones({2, 1}) + ones({1, 3})) == std::vector<double>(6, 2.0));
}

TEST_CASE("attention ops count their results before allocating, num_heads included", "[sizes]") {
    // Queries and keys without features are free to make; their weights (1, 2^32, 2^32) wrap to 0.
    CHECK_THROWS_WITH(head_attention_weights(zeros({1, P32, 0}), zeros({1, P32, 0}), 1, 1.0),
                      Contains("head_attention_weights: shape (1, 1, 4294967296, 4294967296) has more elements than "
                               "fit in memory (the weights' (batch, num_heads, queries, keys) for queries (1, "
                               "4294967296, 0) and keys (1, 4294967296, 0))"));
    // Every num_heads divides 0 features: 2 batches of 2^63 heads wrapped to weights (0, 3, 5).
    CHECK_THROWS_WITH(head_attention_weights(zeros({2, 3, 0}), zeros({2, 5, 0}), P63, 1.0),
                      Contains("head_attention_weights: shape (2, 9223372036854775808, 3, 5) has more elements"));
    CHECK_THROWS_WITH(head_attention_weights(zeros({2, 3, 0}), zeros({2, 5, 0}), P63, 1.0, AttentionMask::causal()),
                      Contains("head_attention_weights: shape (2, 9223372036854775808, 3, 5) has more elements"));
    // ... and head_attention_combine took those weights for them.
    CHECK_THROWS_WITH(head_attention_combine(zeros({0, 3, 5}), zeros({2, 5, 0}), P63),
                      Contains("head_attention_combine: weights must have shape (batch·num_heads, queries, keys) = "
                               "(2·9223372036854775808, queries, 5) for values (2, 5, 0)") &&
                          Contains("got (0, 3, 5)"));
    CHECK_THROWS_WITH(head_attention_combine(zeros({1, P32, 0}), zeros({1, 0, P32}), 1),
                      Contains("head_attention_combine: shape (1, 4294967296, 4294967296) has more elements than fit "
                               "in memory (the result of weights (1, 4294967296, 0) and values (1, 0, 4294967296))"));
    // A mask resolved for scores whose rows wrap: its table was sized 0.
    CHECK_THROWS_WITH(AttentionMask::causal().resolve("attention", P32, P32, P32),
                      Contains("attention: shape (4294967296, 4294967296, 4294967296) has more elements than fit in "
                               "memory (the scores (batch, queries, keys) the mask is resolved for)"));
    // The same arguments with fewer heads are fine: uniform weights over 5 keys, empty gradients.
    const Tensor q = zeros({2, 3, 0}).requires_grad_(), k = zeros({2, 5, 0}).requires_grad_();
    const Tensor w = head_attention_weights(q, k, 3, 1.0);
    CHECK(w.shape() == Shape{6, 3, 5});
    CHECK_THAT(vals(w), approx(std::vector<double>(90, 0.2)));
    (w * w).sum().backward();
    CHECK(q.grad().shape() == q.shape());
    CHECK(k.grad().shape() == k.shape());
}

TEST_CASE("shape ops check the counts they compute", "[sizes]") {
    // reshape: the sizes given, and the -1 inferred from them
    const Tensor four = zeros({4}), none = zeros({0, 4});
    CHECK_THROWS_WITH(four.reshape({static_cast<long>(P62), 4, 1, 1}), Contains("reshape: shape") &&
                                                                           Contains("fit in memory"));
    CHECK_THROWS_WITH(four.reshape({static_cast<long>(P62) + 1, 4, -1}), Contains("reshape: shape") &&
                                                                             Contains("fit in memory"));
    CHECK_THROWS_WITH(none.reshape({static_cast<long>(P32), static_cast<long>(P32), 0}),
                      Contains("reshape: shape (4294967296, 4294967296, 0) is too large"));
    CHECK_THROWS_WITH(none.reshape({static_cast<long>(P32), static_cast<long>(P32), -1}),
                      Contains("reshape: shape") && Contains("fit in memory"));
    // -1 beside a 0: any length fits, so it cannot be inferred (torch refuses too)
    CHECK_THROWS_WITH(none.reshape({-1, 0}), Contains("reshape: cannot infer the -1 in (-1, 0)"));
    CHECK_THROWS_WITH(four.reshape({-1, 0}), Contains("reshape: cannot infer the -1"));
    CHECK(none.reshape({-1, 2}).shape() == Shape{0, 2});
    CHECK_THROWS_WITH(none.reshape({2, 0, -1}), Contains("reshape: cannot infer the -1 in (2, 0, -1)"));
    CHECK_THROWS_WITH(four.reshape({LONG_MIN}), Contains("reshape: invalid size -9223372036854775808"));
    CHECK_THROWS_WITH(four.reshape({-2, -2}), Contains("reshape: invalid size -2"));

    // concat: the summed axis can overflow by itself, or its product with the other axes
    std::vector<Tensor> wide(17, zeros({0, kMaxElements}));
    CHECK_THROWS_WITH(concat(wide, 1), Contains("concat: the lengths along axis 1 add up to more than fit in memory"));
    std::vector<Tensor> many(16, zeros({0, P59 / 2, 2}));
    CHECK_THROWS_WITH(concat(many, 1), Contains("concat: shape (0, 4611686018427387904, 2) is too large"));
    CHECK(concat({zeros({P20, 0}), zeros({P20, 0})}, 0).shape() == Shape{2 * P20, 0});

    // expand, repeat_interleave, index_select: result shapes from the arguments
    CHECK_THROWS_WITH(expand(zeros({1, 1}), {P32, P32}), Contains("expand: shape (4294967296, 4294967296) has more"));
    CHECK_THROWS_WITH(expand(zeros({1, 0}), {P62, 0}), Contains("expand: shape (4611686018427387904, 0) is too large"));
    CHECK_THROWS_WITH(repeat_interleave(zeros({P32, 0}), P32, 0), Contains("repeat_interleave") &&
                                                                      Contains("fit in memory"));
    CHECK_THROWS_WITH(repeat_interleave(zeros({P20, 0}), P20 * P20, 0), Contains("repeat_interleave: shape") &&
                                                                            Contains("too large"));
    CHECK_THROWS_WITH(index_select(zeros({P20, 0, P20}), 1, zeros({P20 * 1024, 0}, kInt64)),
                      Contains("index_select: shape (1048576, 1073741824, 0, 1048576) is too large"));

    // slice: a huge step or bounds must not overflow the element count
    CHECK(vals(slice(arange(5), 0, 1, LONG_MAX, LONG_MAX)) == std::vector<double>{1});
    CHECK(vals(slice(arange(5), 0, LONG_MIN, LONG_MAX, 2)) == std::vector<double>{0, 2, 4});
    CHECK(vals(slice(arange(5), 0, LONG_MIN, LONG_MIN + 1, 1)).empty());
    CHECK(vals(slice(arange(5), 0, -2, LONG_MAX, LONG_MAX - 1)) == std::vector<double>{3});
    CHECK_THROWS_WITH(slice(arange(5), 0, 0, 5, LONG_MIN), Contains("slice: step must be at least 1"));
}

TEST_CASE("arange checks its count before it becomes an integer", "[sizes]") {
    // Spans of 1e30, 2^64, inf (±1e308 bounds) or a tiny step: the conversion to size_t was
    // undefined and gave 0 elements.
    const double huge_cases[][3] = {{0, 1e30, 1},          {0, 18446744073709551616.0, 1}, {0, 1.9e19, 1},
                                    {0, 1, 1e-300},         {-1e308, 1e308, 1e-10},        {-1.7e308, 1.7e308, 1},
                                    {1e30, -1e30, -1e-5},   {0, 1152921504606846976.0, 1}};
    for (const auto& c : huge_cases) {
        INFO(c[0] << " " << c[1] << " " << c[2]);
        CHECK_THROWS_WITH(arange(c[0], c[1], c[2]), Contains("arange: start=") && Contains("more than fit in memory"));
    }
    for (double bad : {0.0, -0.0, kNaN, inf, -inf})
        CHECK_THROWS_WITH(arange(0, 1, bad), Contains("arange: expected finite start, end and a non-zero step"));
    for (double bad : {kNaN, inf, -inf}) {
        CHECK_THROWS_WITH(arange(bad, 1, 1), Contains("arange: expected finite"));
        CHECK_THROWS_WITH(arange(0, bad, 1), Contains("arange: expected finite"));
        CHECK_THROWS_WITH(arange(bad), Contains("arange: expected finite"));
    }
    // Empty in the wrong direction, however far: no count to take.
    CHECK(arange(1e30, 0).numel() == 0);
    CHECK(arange(0, 1e30, -1).numel() == 0);
    CHECK(arange(0, 1e30, 2.5e29).numel() == 4);
    // int64: the values must fit too (the cast of 1e30 is undefined)
    CHECK_THROWS_WITH(arange(0, 1e30, 1e29, kInt64), Contains("arange: the last value must be finite and within "
                                                              "int64's range"));
    CHECK_THROWS_WITH(arange(-1e19, 0, 1e18, kInt64), Contains("arange: the first value"));
    CHECK(arange(-3, 3, 1.5, kInt64).to_vector<std::int64_t>() == std::vector<std::int64_t>{-3, -1, 0, 1});
    CHECK(arange(-9223372036854775808.0, -9223372036854775808.0 + 4096, 2048, kInt64).to_vector<std::int64_t>() ==
          std::vector<std::int64_t>{INT64_MIN, INT64_MIN + 2048});
}

TEST_CASE("doubles stored as int64 are range checked, never cast undefined", "[sizes]") {
    for (double bad : {kNaN, inf, -inf, 1e30, 9223372036854775808.0, -9223372036854777856.0}) {
        INFO(bad);
        CHECK_THROWS_WITH(full({2}, bad, kInt64), Contains("full: the fill value must be finite and within int64's range"));
        CHECK_THROWS_WITH(tensor({1.0, bad}, kInt64), Contains("from_vector: value") && Contains("at index 1") &&
                                                          Contains("int64"));
        CHECK_THROWS_WITH(from_vector({0, 0, bad}, {3}, kInt64), Contains("at index 2"));
        CHECK_THROWS_WITH(checked_int64("op", "arg", bad), Contains("op: arg must be finite and within int64's range"));
    }
    // The edges that fit, and truncation toward zero as a cast (and torch) does
    CHECK(full({1}, -9223372036854775808.0, kInt64).item<std::int64_t>() == INT64_MIN);
    CHECK(full({1}, 9223372036854774784.0, kInt64).item<std::int64_t>() == 9223372036854774784LL);
    CHECK(tensor({2.9, -2.9}, kInt64).to_vector<std::int64_t>() == std::vector<std::int64_t>{2, -2});
    CHECK(full({1}, NAN, kBool).item<bool>());  // bool: any non-zero, NaN included, is true (defined)
    CHECK(std::isnan(full({1}, NAN).item<double>()));
}

TEST_CASE("uniform refuses bounds whose distance overflows", "[sizes]") {
    Generator gen(1);
    const std::vector<std::pair<double, double>> bad = {{-1.7e308, 1.7e308}, {-inf, 0}, {0, inf}, {kNaN, 1},
                                                        {1, kNaN}, {2, 1}};
    for (const auto& [lo, hi] : bad)
        CHECK_THROWS_WITH(uniform({4}, lo, hi, kFloat64, gen), Contains("uniform: expected finite low <= high"));
    const auto v = vals(uniform({64}, -1e307, 1e307, kFloat64, gen));
    for (double x : v) CHECK((x >= -1e307 && x < 1e307));
}

TEST_CASE("randint takes any int64 range, and refuses an empty one", "[sizes]") {
    Generator gen(3);
    CHECK_THROWS_WITH(randint(5, 5, {2}, gen), Contains("randint: expected low < high, got low=5, high=5"));
    CHECK_THROWS_WITH(randint(5, -5, {2}, gen), Contains("randint: expected low < high"));
    CHECK_THROWS_WITH(randint(INT64_MAX, INT64_MIN, {2}, gen), Contains("randint: expected low < high"));
    // The widest range (2^64 - 1 values) must not overflow high - low.
    const Tensor t = randint(INT64_MIN, INT64_MAX, {64}, gen);
    CHECK(t.numel() == 64);
    bool negative = false, positive = false;
    for (std::int64_t v : t.to_vector<std::int64_t>()) (v < 0 ? negative : positive) = true;
    CHECK((negative && positive));
    CHECK(randint(INT64_MAX - 1, INT64_MAX, {3}, gen).to_vector<std::int64_t>() ==
          std::vector<std::int64_t>(3, INT64_MAX - 1));
}

TEST_CASE("valid_lens of any value either resolve to a count of keys or throw", "[sizes]") {
    // d2l's semantics: the first len keys of each row; len >= keys means every key. Lengths
    // that are not whole finite numbers >= 0 throw, naming the op, the argument and the place.
    const Tensor X = tensor({{{1, 2, 3}}}, kFloat64);  // (1, 1, 3)
    const auto all = vals(softmax(X, -1));
    for (Dtype d : {kFloat32, kFloat64}) {
        INFO(dtype_name(d));
        for (double bad : {kNaN, inf, -inf})
            CHECK_THROWS_WITH(masked_softmax(X, tensor({bad}, d)),
                              Contains("masked_softmax: valid_lens must be whole numbers, got") && Contains("at [0]"));
        for (double neg : {-1.0, -1e20, -9223372036854775808.0})
            CHECK_THROWS_WITH(masked_softmax(X, tensor({neg}, d)),
                              Contains("masked_softmax: valid_lens must be non-negative"));
        CHECK_THROWS_WITH(masked_softmax(X, tensor({2.5}, d)), Contains("whole numbers, got 2.5"));
        // beyond the key count, up to and past 2^63 and 2^64: every key
        for (double big : {3.0, 4.0, 1e20, 9223372036854775808.0, 18446744073709551616.0, 1e38}) {
            INFO(big);
            CHECK_THAT(vals(masked_softmax(X, tensor({big}, d))), approx(all));
        }
        CHECK_THAT(vals(masked_softmax(X, tensor({-0.0}, d))), approx({1. / 3, 1. / 3, 1. / 3}));
    }
    CHECK_THAT(vals(masked_softmax(X, from_vector(std::vector<std::int64_t>{INT64_MAX}, {1}))), approx(all));
    CHECK_THROWS_WITH(masked_softmax(X, from_vector(std::vector<std::int64_t>{INT64_MIN}, {1})),
                      Contains("non-negative"));
    // per query (batch, queries), through the attention op too
    const Tensor lens2 = tensor({{1e30, 1}}, kFloat64);
    const Tensor Q = ones({1, 2, 4}, kFloat64), K = ones({1, 3, 4}, kFloat64);
    const auto w = vals(head_attention_weights(Q, K, 2, 1.0, AttentionMask::valid_lens(lens2)));
    CHECK_THAT(w, approx({1. / 3, 1. / 3, 1. / 3, 1, 0, 0, 1. / 3, 1. / 3, 1. / 3, 1, 0, 0}));
    CHECK_THROWS_WITH(head_attention_weights(Q, K, 2, 1.0, AttentionMask::valid_lens(tensor({{1, NAN}}))),
                      Contains("head_attention_weights: valid_lens must be whole numbers, got nan at [0, 1]"));
}

// --- running out of memory in backward and on the pool's threads --------------------------

TEST_CASE("child: backward runs out of memory", "[.child-backward-oom]") {
    // x·x and its sum fit; the backward's two gradients of 256 MiB do not.
    const std::size_t n = std::size_t(1) << 26;
    const Tensor x = ones({n}).requires_grad_();
    Tensor loss = sum(x * x);
    (void)num_threads();  // the pool's threads and stacks exist before the limit
    struct rlimit saved {};
    REQUIRE(::getrlimit(RLIMIT_AS, &saved) == 0);
    struct rlimit low = saved;
    low.rlim_cur = address_space_bytes() + (std::size_t(384) << 20);
    REQUIRE(::setrlimit(RLIMIT_AS, &low) == 0);
    try {
        loss.backward();
        std::printf("no error\n");
    } catch (const Error& e) {
        std::printf("error: %s\n", e.what());
    }
    REQUIRE(::setrlimit(RLIMIT_AS, &saved) == 0);
    // Nothing half-made reached x; a retry says what happened; the engine still works.
    std::printf("grad defined: %d\n", x.grad().defined() ? 1 : 0);
    try {
        loss.backward();
    } catch (const Error& e) {
        std::printf("retry: %s\n", e.what());
    }
    const Tensor z = ones({3}).requires_grad_();
    sum(z * z).backward();
    std::printf("after: %g %g %g\n", vals(z.grad())[0], vals(z.grad())[1], vals(z.grad())[2]);
}

TEST_CASE("child: a pool thread runs out of memory", "[.child-pool-oom]") {
    const Shape shape{7, 9};
    const AllocContext context("pooled_op", shape);
    const auto caller = std::this_thread::get_id();
    std::atomic<bool> worker_started{false};
    try {
        // Only the pool's own threads allocate, so the error comes from one of them; the
        // caller's chunk waits for one to start, as it would otherwise run every chunk itself.
        parallel_for(3, 1, [&](std::size_t, std::size_t) {
            if (std::this_thread::get_id() == caller) {
                const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
                while (!worker_started.load() && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
                return;
            }
            worker_started.store(true);
            cached_alloc(std::size_t(1) << 52);
        });
        std::printf("no error\n");
    } catch (const Error& e) {
        std::printf("error: %s\n", e.what());
    }
}

TEST_CASE("child: each op runs out of memory", "[.child-op-oom]") {
    // Results of 128 MiB with 96 MiB of address space left: each op's first allocation fails.
    const std::size_t rows = std::size_t(1) << 15;
    const Tensor x = ones({rows, 1024}), x1 = ones({1, rows, 1024});
    const Tensor mask = zeros({1024}, kBool);
    (void)num_threads();
    const std::vector<std::pair<const char*, std::function<Tensor()>>> ops{
        {"reshape", [&] { return x.reshape({-1}); }},
        {"permute", [&] { return x.permute({1, 0}); }},
        {"transpose", [&] { return x.transpose(0, 1); }},
        {"unsqueeze", [&] { return x.unsqueeze(0); }},
        {"squeeze", [&] { return x1.squeeze(0); }},
        {"clone", [&] { return x.clone(); }},
        {"detach", [&] { return x.detach(); }},
        {"exp", [&] { return exp(x); }},
        {"neg", [&] { return -x; }},
        {"mul", [&] { return x * 2.0; }},
        {"softmax", [&] { return softmax(x, -1); }},
        {"log_softmax", [&] { return log_softmax(x, -1); }},
        {"cumsum", [&] { return cumsum(x, 1); }},
        {"sort", [&] { return sort(x, 1).values; }},
        {"tril", [&] { return tril(x); }},
        {"cast", [&] { return cast(x, kFloat64); }},
        {"to", [&] { return x.to(kFloat64); }},  // cast inside, named as the call made
        {"masked_fill", [&] { return masked_fill(x, mask, 0.0); }},
        {"slice", [&] { return slice(x, 1, 0, 1023); }},
        {"relu", [&] { return relu(x); }},
        {"var", [&] { return var(x, {0}); }},
    };
    struct rlimit saved {};
    REQUIRE(::getrlimit(RLIMIT_AS, &saved) == 0);
    struct rlimit low = saved;
    low.rlim_cur = address_space_bytes() + (std::size_t(96) << 20);
    REQUIRE(::setrlimit(RLIMIT_AS, &low) == 0);
    for (const auto& [name, f] : ops) {
        try {
            (void)f();
            std::printf("%s -> no error\n", name);
        } catch (const Error& e) {
            std::printf("%s -> %s\n", name, e.what());
        }
    }
    REQUIRE(::setrlimit(RLIMIT_AS, &saved) == 0);
}

namespace {

// What a child test that runs out of memory on purpose writes; nothing under AddressSanitizer,
// which aborts when an allocation fails instead of failing it (the plain build checks these).
std::optional<std::string> out_of_memory_child(const std::string& env, const std::string& tag) {
#if defined(__SANITIZE_ADDRESS__)
    WARN("skipped under AddressSanitizer, which aborts when an allocation fails");
    return std::nullopt;
#else
    return run_this_binary(env, tag);
#endif
}

}  // namespace

TEST_CASE("running out of memory names the op for shape, softmax, sort, scan, unary and moment ops", "[sizes]") {
    const auto out = out_of_memory_child("XGRAD_ALLOC_CACHE_MB=0 XGRAD_NUM_THREADS=1", "[.child-op-oom]");
    if (!out) return;
    INFO(*out);
    for (const char* op : {"clone", "exp", "neg", "mul", "softmax", "log_softmax", "cumsum", "sort", "tril", "cast",
                           "masked_fill", "relu", "var"})
        CHECK_THAT(*out, Contains(fmt::format("{} -> {}: out of memory for a result of shape (", op, op)));
    // The views allocate nothing, as torch's: they succeed where a copy would not fit.
    for (const char* op : {"reshape", "permute", "transpose", "unsqueeze", "squeeze", "detach", "slice"})
        CHECK_THAT(*out, Contains(fmt::format("{} -> no error", op)));
    CHECK_THAT(*out, Contains("to -> to: cast: out of memory for a result of shape ("));  // the call made, then its op
}

TEST_CASE("running out of memory in backward, or on a pool thread, names the op", "[sizes]") {
    const auto backward = out_of_memory_child("XGRAD_ALLOC_CACHE_MB=0 XGRAD_NUM_THREADS=1", "[.child-backward-oom]");
    if (!backward) return;
    INFO(*backward);
    CHECK_THAT(*backward, Contains("error: mul backward: out of memory making the gradients of a result of shape "
                                   "(67108864,): cannot allocate 268435456 bytes (256.0 MiB)"));
    CHECK_THAT(*backward, Contains("grad defined: 0"));
    CHECK_THAT(*backward, Contains("retry: backward: the graph behind this 'sum' result was freed by an earlier "
                                   "backward() that failed part way through; run the forward pass again"));
    CHECK_THAT(*backward, Contains("after: 2 2 2"));
    const auto pooled = out_of_memory_child("XGRAD_NUM_THREADS=3", "[.child-pool-oom]");
    INFO(*pooled);
    CHECK_THAT(*pooled, Contains("error: pooled_op: out of memory for a result of shape (7, 9): cannot allocate "
                                "4503599627370496 bytes"));
}
