// Operators as torch: type promotion (a table generated from torch 1.13), comparisons giving
// bool tensors, scalars on either side, unary minus and ~, and compound assignment in place.
#include <cmath>
#include <limits>
#include <string>

#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

namespace {

struct PromotionRow {
    const char* op;
    Dtype a, b;
    bool b_zero_dim;
    const char* expected;  // a dtype name, or "error" where torch raises
    std::vector<double> values;
};
struct ScalarRow {
    const char* op;
    Dtype a;
    const char* scalar;  // "bool" True, "int" 2, "float" 2.5
    bool scalar_left;
    const char* expected;
    std::vector<double> values;
};

#include "promotion_table.inc"

// The inputs the table was made from: bool [True, False], int64 [3, -2], float [1.5, -2.0];
// 0-d: True, 3, 1.5.
Tensor operand(Dtype d, bool zero_dim) {
    switch (d) {
        case kBool: return zero_dim ? tensor(1.0).to(kBool) : tensor({1.0, 0.0}).to(kBool);
        case kInt64: return zero_dim ? tensor(3.0).to(kInt64) : tensor({3.0, -2.0}).to(kInt64);
        default: return zero_dim ? tensor(1.5, d) : tensor({1.5, -2.0}, d);
    }
}

Tensor apply(const std::string& op, const Tensor& a, const Tensor& b) {
    if (op == "add") return a + b;
    if (op == "sub") return a - b;
    if (op == "mul") return a * b;
    if (op == "div") return a / b;
    if (op == "lt") return a < b;
    if (op == "eq") return a == b;
    throw std::logic_error(op);
}

template <class S> Tensor apply(const std::string& op, const Tensor& a, S s, bool left) {
    if (op == "add") return left ? s + a : a + s;
    if (op == "sub") return left ? s - a : a - s;
    if (op == "mul") return left ? s * a : a * s;
    if (op == "div") return left ? s / a : a / s;
    if (op == "lt") return left ? s < a : a < s;
    if (op == "eq") return left ? s == a : a == s;
    throw std::logic_error(op);
}

void check_values(const Tensor& r, const std::vector<double>& expected) {
    const auto got = vals(r);
    REQUIRE(got.size() == expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        if (std::isnan(expected[i]))
            CHECK(std::isnan(got[i]));
        else
            CHECK(got[i] == Approx(expected[i]).epsilon(1e-6));
    }
}

}  // namespace

TEST_CASE("tensor-tensor operators promote dtypes as torch", "[operators][promotion]") {
    for (const auto& row : kTensorTensor) {
        INFO(row.op << " " << dtype_name(row.a) << " " << dtype_name(row.b) << (row.b_zero_dim ? " (0-d)" : ""));
        const Tensor a = operand(row.a, false), b = operand(row.b, row.b_zero_dim);
        if (std::string(row.expected) == "error") {
            CHECK_THROWS_AS(apply(row.op, a, b), Error);
            continue;
        }
        const Tensor r = apply(row.op, a, b);
        CHECK(dtype_name(r.dtype()) == row.expected);
        CHECK(r.shape() == Shape{2});
        check_values(r, row.values);
        if (std::string(row.op) == "add" || std::string(row.op) == "mul" || std::string(row.op) == "eq")
            CHECK(apply(row.op, b, a).dtype() == r.dtype());  // symmetric
    }
}

TEST_CASE("tensor-scalar operators promote as torch on either side", "[operators][promotion]") {
    for (const auto& row : kTensorScalar) {
        const std::string kind = row.scalar;
        INFO(row.op << " " << dtype_name(row.a) << " with a " << kind << (row.scalar_left ? " on the left" : ""));
        const Tensor a = operand(row.a, false);
        auto run = [&] {
            if (kind == "bool") return apply(row.op, a, true, row.scalar_left);
            if (kind == "int") return apply(row.op, a, 2, row.scalar_left);
            return apply(row.op, a, 2.5, row.scalar_left);
        };
        if (std::string(row.expected) == "error") {
            CHECK_THROWS_AS(run(), Error);
            continue;
        }
        const Tensor r = run();
        CHECK(dtype_name(r.dtype()) == row.expected);
        check_values(r, row.values);
    }
}

TEST_CASE("promotion errors name the op and say what to do", "[operators][promotion][errors]") {
    const Tensor mask = tensor({1.0, 0.0}).to(kBool);
    CHECK_THROWS_WITH(mask - mask, Catch::Contains("sub") && Catch::Contains("bool") && Catch::Contains("logical_not"));
    CHECK_THROWS_WITH(1.0 - mask, Catch::Contains("sub") && Catch::Contains("bool"));
    CHECK_THROWS_WITH(-mask, Catch::Contains("neg") && Catch::Contains("bool"));
    CHECK_THROWS_WITH(Tensor() + mask, Catch::Contains("add") && Catch::Contains("undefined"));
    CHECK_THROWS_WITH(zeros({2, 3}) + zeros({4}), Catch::Contains("add") && Catch::Contains("(2, 3) and (4,)"));
    CHECK_THROWS_WITH(~zeros({2}), Catch::Contains("~") && Catch::Contains("float32"));
}

TEST_CASE("result_type follows torch's dimension priority", "[operators][promotion]") {
    CHECK(result_type(zeros({2}), zeros({}, kFloat64)) == kFloat32);         // 0-d does not widen
    CHECK(result_type(zeros({2}, kInt64), zeros({}, kFloat64)) == kFloat64); // but lifts a category
    CHECK(result_type(zeros({}, kInt64), zeros({}, kFloat64)) == kFloat64);
    CHECK(result_type(zeros({2}, kInt64), 2.5) == kFloat32);                 // a double is the default
    CHECK(result_type(zeros({2}, kFloat64), 2.5) == kFloat64);
    CHECK(result_type(zeros({2}, kBool), 2) == kInt64);
    CHECK(result_type(zeros({2}, kBool), true) == kBool);
    CHECK(result_type(zeros({}, kBool), zeros({3}, kInt64)) == kInt64);
    // int64 arithmetic keeps all 64 bits, where a round trip through double would not.
    const std::int64_t big = (std::int64_t{1} << 53) + 1;
    CHECK((from_vector(std::vector<std::int64_t>{big}, {1}) + 0).to_vector<std::int64_t>()[0] == big);
    CHECK((from_vector(std::vector<std::int64_t>{0}, {1}) + big).to_vector<std::int64_t>()[0] == big);
}

TEST_CASE("gradients flow through a promoted operand in its own dtype", "[operators][promotion][gradcheck]") {
    const Tensor a = tensor({1.0, 2.0}).requires_grad_();               // float32
    const Tensor b = tensor({3.0, 4.0}, kFloat64).requires_grad_();     // float64
    const Tensor idx = tensor({2.0, 5.0}).to(kInt64);
    const Tensor y = a * b + idx;
    CHECK(y.dtype() == kFloat64);
    y.sum().backward();
    CHECK(a.grad().dtype() == kFloat32);
    CHECK(b.grad().dtype() == kFloat64);
    CHECK_THAT(vals(a.grad()), approx({3, 4}));
    CHECK_THAT(vals(b.grad()), approx({1, 2}));
    // An int tensor beside a float parameter: the parameter's gradient is as without it.
    const Tensor w = param({2, 3});
    REQUIRE_GRADCHECK([idx](auto& v) { return v[0] * idx.reshape({2, 1}) + (2 - v[0]) / 3; }, {w}, "int times float");
    REQUIRE_GRADCHECK([](auto& v) { return 1.5 / (v[0] * v[0] + 1) - v[0] * 2; }, {w}, "scalar on the left");
    REQUIRE_GRADCHECK([](auto& v) { return -v[0].permute({1, 0}) / 2; }, {w}, "neg of a permuted input");
}

TEST_CASE("comparisons give bool tensors without gradient", "[operators]") {
    const Tensor x = tensor({0.2, 0.5, 0.9}).requires_grad_();
    const Tensor y = tensor({0.5, 0.5, 0.5});
    const Tensor m = x > 0.5;
    CHECK(m.dtype() == kBool);
    CHECK_FALSE(m.requires_grad());
    CHECK(m.to_vector<bool>() == std::vector<bool>{false, false, true});
    CHECK((0.5 < x).to_vector<bool>() == std::vector<bool>{false, false, true});
    CHECK((x >= 0.5).to_vector<bool>() == std::vector<bool>{false, true, true});
    CHECK((0.5 >= x).to_vector<bool>() == std::vector<bool>{true, true, false});
    CHECK((x <= y).to_vector<bool>() == std::vector<bool>{true, true, false});
    CHECK((x == y).to_vector<bool>() == std::vector<bool>{false, true, false});
    CHECK((x != y).to_vector<bool>() == std::vector<bool>{true, false, true});
    CHECK((0.5 == x).to_vector<bool>() == std::vector<bool>{false, true, false});
    CHECK((0.5 != x).to_vector<bool>() == std::vector<bool>{true, false, true});
    CHECK((x < 0.5).to_vector<bool>() == std::vector<bool>{true, false, false});
    CHECK((0.5 > x).to_vector<bool>() == std::vector<bool>{true, false, false});
    CHECK((0.5 <= x).to_vector<bool>() == std::vector<bool>{false, true, true});
    // Broadcasting, and an int tensor against a fraction (torch compares in float32).
    CHECK((x.reshape({3, 1}) < y).shape() == Shape{3, 3});
    CHECK((tensor({2.0, 3.0}).to(kInt64) < 2.5).to_vector<bool>() == std::vector<bool>{true, false});
    // ~ inverts a mask; on int64 it is the bitwise not.
    CHECK((~m).to_vector<bool>() == std::vector<bool>{true, true, false});
    CHECK((~tensor({0.0, 5.0}).to(kInt64)).to_vector<std::int64_t>() == std::vector<std::int64_t>{-1, -6});
    CHECK((-tensor({0.0, 5.0}).to(kInt64)).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, -5});
}

TEST_CASE("masks combine with & | ^ and logical_and/or/xor as torch's", "[operators]") {
    const Tensor a = tensor({1.0, 0.0, 1.0}) > 0.5;    // [true, false, true]
    const Tensor b = (tensor({1.0, 0.0}) > 0.5).reshape({2, 1});   // [[true], [false]]
    using B = std::vector<bool>;
    // torch: (a & b), (a | b), (a ^ b) broadcast to (2, 3)
    CHECK((a & b).shape() == Shape{2, 3});
    CHECK((a & b).to_vector<bool>() == B{true, false, true, false, false, false});
    CHECK((a | b).to_vector<bool>() == B{true, true, true, true, false, true});
    CHECK((a ^ b).to_vector<bool>() == B{false, true, false, true, false, true});
    CHECK(logical_and(a, b).to_vector<bool>() == (a & b).to_vector<bool>());
    CHECK(logical_or(a, b).to_vector<bool>() == (a | b).to_vector<bool>());
    CHECK(logical_xor(a, b).to_vector<bool>() == (a ^ b).to_vector<bool>());
    // The masked accuracy of a decoder: right answers among the valid steps.
    const Tensor x = tensor({0.2, 0.5, 0.9}).requires_grad_();
    const Tensor both = (x > 0.3) & a;
    CHECK(both.dtype() == kBool);
    CHECK_FALSE(both.requires_grad());
    CHECK(both.to_vector<bool>() == B{false, false, true});
    // The logical ops take any dtype: non-zero (NaN too) is true.
    CHECK(logical_and(tensor({0.0, NAN, 2.0}), from_vector(std::vector<std::int64_t>{1, 1, 0}, {3})).to_vector<bool>() ==
          B{false, true, false});
    // On int64 the operators are bitwise, a mask counting as 0 and 1.
    const Tensor i = from_vector(std::vector<std::int64_t>{6, 3, -1}, {3});
    using I = std::vector<std::int64_t>;
    CHECK((i & from_vector(I{3, 5, 7}, {3})).to_vector<std::int64_t>() == I{2, 1, 7});
    CHECK((i | a).to_vector<std::int64_t>() == I{7, 3, -1});
    CHECK((i ^ a).dtype() == kInt64);
    CHECK((i ^ a).to_vector<std::int64_t>() == I{7, 3, -2});
    CHECK_THROWS_WITH(tensor({1.0}) & a,
                      "bitwise_and: the `&` operator needs bool or int64 tensors (as in torch), got float32 and bool");
    CHECK_THROWS_WITH(a | Tensor(), Catch::Contains("bitwise_or") && Catch::Contains("other"));
    CHECK_THROWS_WITH(logical_xor(a, ones({4})), Catch::Contains("logical_xor"));
}

TEST_CASE("compound assignment writes in place as torch", "[operators][inplace]") {
    Tensor a = tensor({1.0, 2.0});
    const Tensor alias = a;
    const auto v0 = a.version();
    a += 1;
    a *= tensor({2.0, 3.0});
    a -= 0.5;
    a /= 2;
    CHECK_THAT(vals(alias), approx({1.75, 4.25}));  // every handle sees it
    CHECK(a.version() == v0 + 4);
    CHECK(a.dtype() == kFloat32);
    a += tensor({1.0}, kFloat64);  // the float64 result is cast back to float32, as torch
    CHECK(a.dtype() == kFloat32);
    CHECK_THAT(vals(alias), approx({2.75, 5.25}));

    Tensor counts = tensor({1.0, 2.0}).to(kInt64);
    counts += 2;
    CHECK(counts.to_vector<std::int64_t>() == std::vector<std::int64_t>{3, 4});
    CHECK_THROWS_WITH(counts += 2.5, Catch::Contains("add_") && Catch::Contains("float32") &&
                                         Catch::Contains("int64"));
    CHECK_THROWS_WITH(counts /= 2, Catch::Contains("div_") && Catch::Contains("can't be cast"));
    CHECK_THROWS_WITH(a += zeros({2, 2}), Catch::Contains("add_") && Catch::Contains("(2, 2)"));
    CHECK(counts.to_vector<std::int64_t>() == std::vector<std::int64_t>{3, 4});  // a refused write changes nothing

    // A parameter: refused while recording (as torch), allowed under NoGradGuard.
    Tensor w = tensor({1.0, 2.0}).requires_grad_();
    CHECK_THROWS_WITH(w -= 0.1, Catch::Contains("sub_") && Catch::Contains("leaf") && Catch::Contains("NoGradGuard"));
    {
        NoGradGuard no_grad;
        w -= 0.5;
    }
    CHECK_THAT(vals(w), approx({0.5, 1.5}));
    CHECK(w.requires_grad());
    // A tensor in the graph: the op is recorded, as torch's (test_inplace.cpp has the rest).
    Tensor h = w * 2;
    h += 1;
    CHECK(h.op_name() == "add_");
    Tensor acc = zeros({2});
    acc += w;
    CHECK(acc.requires_grad());
    // An op that saved a tensor sees the write at backward, as torch.
    Tensor u = tensor({1.0, 2.0});
    Tensor prod = w * u;
    u += 1;
    CHECK_THROWS_WITH(prod.sum().backward(), Catch::Contains("modified in place"));
}
