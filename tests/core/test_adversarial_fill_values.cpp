// A number stored into a tensor that cannot hold it. torch 1.13 refuses a finite fill value
// beyond the dtype's largest finite one ("value cannot be converted to type float without
// overflow") instead of storing inf, and NaN, ±inf and out-of-range values into int64; it stores
// inf and NaN into floating tensors as they are, and anything into bool. Every fill, in every
// dtype, with every edge value, must do the same through check_fill_value, leave the tensor
// untouched when it refuses, and name the call. A number in arithmetic (x + 1e300) stays IEEE.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/fill_value.hpp"
#include "helpers.hpp"
#include "nn/init.hpp"

using namespace xgrad;
using namespace xgrad::test;
using Catch::Matchers::Contains;

namespace {

const double kF32Max = std::numeric_limits<float>::max();  // 3.4028234663852886e+38
const double kBF16Max = 3.3895313892515355e+38;             // torch.finfo(torch.bfloat16).max
const double kF64Max = std::numeric_limits<double>::max();

struct Edge {
    const char* name;
    double value;
};

// Each dtype's largest finite value and the next double above it, both signs; 1e300 and 1e39
// (the issue's); the infinities and NaN; the smallest denormal; int64's edges and a fraction.
const std::vector<Edge> kEdges = {
    {"float32 max", kF32Max},
    {"just above float32 max", std::nextafter(kF32Max, kInf)},
    {"-float32 max", -kF32Max},
    {"just below -float32 max", -std::nextafter(kF32Max, kInf)},
    {"bfloat16 max", kBF16Max},
    {"just above bfloat16 max", std::nextafter(kBF16Max, kInf)},
    {"just below -bfloat16 max", -std::nextafter(kBF16Max, kInf)},
    {"a value bfloat16 would round up to inf", 3.3961e38},
    {"float64 max", kF64Max},
    {"1e39", 1e39},
    {"1e300", 1e300},
    {"-1e300", -1e300},
    {"inf", kInf},
    {"-inf", -kInf},
    {"NaN", kNaN},
    {"denormal", 5e-324},
    {"-denormal", -5e-324},
    {"2^63", 0x1p63},
    {"-2^63", -0x1p63},
    {"just below -2^63", -0x1.0000000000001p63},
    {"2.5", 2.5},
    {"-2.5", -2.5},
};

const std::vector<Dtype> kDtypes = {kFloat32, kFloat64, kBFloat16, kInt64, kBool};

// What torch 1.13 stores for `v` in a tensor of dtype d (read back as a double), or nothing when
// it refuses: c10's overflow rule (finite and beyond the type's range), written out on its own.
// One difference: torch lets 2^63 into int64 (and gets INT64_MIN from an undefined cast); xgrad
// refuses it with every other value outside [-2^63, 2^63).
std::optional<double> stored(Dtype d, double v) {
    switch (d) {
        case Dtype::Float64: return v;
        case Dtype::Float32:
            if (std::isfinite(v) && std::fabs(v) > kF32Max) return std::nullopt;
            return static_cast<double>(static_cast<float>(v));
        case Dtype::BFloat16:
            if (std::isfinite(v) && std::fabs(v) > kBF16Max) return std::nullopt;
            return static_cast<double>(bfloat16(v));
        case Dtype::Int64:
            if (!(v >= -0x1p63 && v < 0x1p63)) return std::nullopt;
            return static_cast<double>(static_cast<std::int64_t>(v));
        case Dtype::Bool: return v != 0 ? 1.0 : 0.0;  // NaN is nonzero: true
    }
    return std::nullopt;
}

bool same(double got, double want) { return std::isnan(want) ? std::isnan(got) : got == want; }

// A fill: writes `v` into element 0 of a 2-element tensor of dtype d (more where it fills all),
// returns the tensor. `op` is the name its error must carry; `all` whether element 1 is written too.
struct Fill {
    const char* op;
    bool all;
    std::function<Tensor(Dtype, double)> run;
};

Tensor first_only() { return gt(tensor({1.0, 0.0}), 0.0); }

const std::vector<Fill> kFills = {
    {"full", true, [](Dtype d, double v) { return full({2}, v, d); }},
    {"fill_", true, [](Dtype d, double v) { const Tensor t = zeros({2}, d); t.fill_(v); return t; }},
    {"fill_", true, [](Dtype d, double v) {  // the rvalue `= number`, LibTorch's f() = v
         const Tensor t = zeros({2}, d);
         Tensor{t} = v;
         return t;
     }},
    {"masked_fill", false, [](Dtype d, double v) { return masked_fill(zeros({2}, d), first_only(), v); }},
    {"masked_fill_", false, [](Dtype d, double v) {
         const Tensor t = zeros({2}, d);
         t.masked_fill_(first_only(), v);
         return t;
     }},
    {"index_put_", false, [](Dtype d, double v) { const Tensor t = zeros({2}, d); t.index_put_({0}, v); return t; }},
    {"", false, [](Dtype d, double v) {  // t[0] = v (its error names fill_ on the part it writes)
         const Tensor t = zeros({2}, d);
         t[0] = v;
         return t;
     }},
    {"init.constant_", true, [](Dtype d, double v) { return nn::init::constant_(zeros({2}, d), v); }},
};

}  // namespace

TEST_CASE("every fill, every dtype, every edge value: stored as torch or refused naming the fill", "[fill-values]") {
    for (const Fill& f : kFills)
        for (Dtype d : kDtypes)
            for (const Edge& e : kEdges) {
                INFO((*f.op ? f.op : "t[0] =") << " into " << dtype_name(d) << " of " << e.name << " ("
                                               << e.value << ")");
                const std::optional<double> want = stored(d, e.value);
                if (!want) {
                    CHECK_THROWS_AS(f.run(d, e.value), Error);
                    CHECK_THROWS_WITH(f.run(d, e.value), Contains(f.op) && Contains(std::string(dtype_name(d))));
                    continue;
                }
                Tensor t;
                REQUIRE_NOTHROW(t = f.run(d, e.value));
                REQUIRE(t.dtype() == d);
                const auto got = t.to(kFloat64).to_vector<double>();
                CHECK(same(got[0], *want));
                CHECK(same(got[1], f.all ? *want : 0.0));
            }
}

TEST_CASE("a refused in-place fill leaves the tensor as it was", "[fill-values]") {
    for (Dtype d : {kFloat32, kBFloat16, kInt64}) {
        INFO(dtype_name(d));
        const Tensor t = full({2}, 7, d);
        const auto version = t.version();
        const double bad = d == kInt64 ? kNaN : 1e300;
        CHECK_THROWS_AS(t.fill_(bad), Error);
        CHECK_THROWS_AS(t.masked_fill_(first_only(), bad), Error);
        CHECK_THROWS_AS(t.index_put_({1}, bad), Error);
        CHECK_THROWS_AS(t[1] = bad, Error);
        CHECK_THROWS_AS(nn::init::constant_(t, bad), Error);
        CHECK_THROWS_AS(Tensor{t} = bad, Error);
        CHECK(t.to(kFloat64).to_vector<double>() == std::vector<double>{7, 7});
        CHECK(t.version() == version);
    }
}

TEST_CASE("fill errors say the value, the dtype and what fits", "[fill-values]") {
    CHECK_THROWS_WITH(full({2}, 1e300, kFloat32), Contains("full: the fill value 1e+300 cannot be converted to float32 "
                                                           "without overflow") &&
                                                      Contains("3.4028234663852886e+38"));
    CHECK_THROWS_WITH(zeros({2}, kBFloat16).index_put_({0}, 1e39),
                      Contains("index_put_: value 1e+39 cannot be converted to bfloat16") &&
                          Contains("3.3895313892515355e+38"));
    CHECK_THROWS_WITH(masked_fill(zeros({2}), first_only(), -1e300), Contains("masked_fill: value -1e+300"));
    CHECK_THROWS_WITH(zeros({2}, kInt64).fill_(kNaN), Contains("fill_: value must be finite and within int64's range, "
                                                               "got nan"));
    CHECK_THROWS_WITH(nn::init::constant_(zeros({2}, kBFloat16), 1e39), Contains("init.constant_: value 1e+39"));
    CHECK_THROWS_WITH(check_fill_value("my_fill", "the value", 1e300, kFloat32), Contains("my_fill: the value 1e+300"));
}

TEST_CASE("integer fill values are stored exactly, and fit every dtype", "[fill-values]") {
    for (std::int64_t s : {INT64_MIN, INT64_MIN + 1, std::int64_t{-1}, std::int64_t{0}, INT64_MAX - 1, INT64_MAX}) {
        INFO(s);
        for (Dtype d : kDtypes) {
            CHECK_NOTHROW(check_fill_value("fill", "value", s, d));
            const Tensor t = zeros({1}, d);
            t.fill_(s);
            if (d == kInt64) CHECK(t.item<std::int64_t>() == s);
            if (d == kBool) CHECK(t.item<bool>() == (s != 0));
            if (d == kFloat32) CHECK(t.item<float>() == static_cast<float>(s));
        }
        const Tensor m = zeros({1}, kInt64);
        m.masked_fill_(gt(ones({1}), 0.0), s);
        CHECK(m.item<std::int64_t>() == s);
    }
    CHECK_NOTHROW(check_fill_value("fill", "value", true, kFloat32));
}

TEST_CASE("the scalars torch checks as fill values: clamp bounds and alpha", "[fill-values]") {
    // torch 1.13: clamp(float32, min=1e300) and add_(x, alpha=1e300) refuse, as a fill would.
    const Tensor x = zeros({2});
    for (double bad : {1e300, -1e300, 1e39, std::nextafter(kF32Max, kInf)}) {
        INFO(bad);
        CHECK_THROWS_WITH(clamp(x, bad), Contains("clamp: min") && Contains("float32"));
        CHECK_THROWS_WITH(clamp(x, std::nullopt, bad), Contains("clamp: max") && Contains("float32"));
        CHECK_THROWS_WITH(zeros({2}).clamp_(bad), Contains("clamp"));
        CHECK_THROWS_WITH(zeros({2}).add_(ones({2}), bad), Contains("add_: alpha") && Contains("float32"));
        CHECK_THROWS_WITH(zeros({2}).sub_(ones({2}), bad), Contains("sub_: alpha"));
        // float64 holds them.
        CHECK(clamp(zeros({2}, kFloat64), bad).to_vector<double>()[0] == std::max(bad, 0.0));
        CHECK(zeros({1}, kFloat64).add_(ones({1}, kFloat64), bad).item<double>() == bad);
    }
    CHECK(clamp(x, -kInf, kInf).to_vector<float>() == std::vector<float>{0, 0});
    CHECK(clamp(x, kF32Max).to_vector<float>()[0] == static_cast<float>(kF32Max));
    CHECK(std::isinf(zeros({1}).add_(ones({1}), kInf).item<float>()));
}

TEST_CASE("a number in arithmetic follows IEEE, as torch: inf, not an error", "[fill-values]") {
    // torch 1.13: zeros(float32) + 1e300 is inf, and so are *, -, /, the reversed forms and the
    // in-place ones; comparisons compare with the rounded value.
    const Tensor z = zeros({1}), o = ones({1});
    CHECK(std::isinf((z + 1e300).item<float>()));
    CHECK(std::isinf((o * 1e300).item<float>()));
    CHECK((z - 1e300).item<float>() == -INFINITY);
    CHECK(std::isinf((o / 1e-300).item<float>()));
    CHECK(std::isinf((1e300 - z).item<float>()));
    CHECK(std::isinf((1e300 / o).item<float>()));
    CHECK(std::isinf(zeros({1}).add_(1e300).item<float>()));
    CHECK(std::isinf(ones({1}).mul_(1e300).item<float>()));
    CHECK((z < 1e300).item<bool>());
    CHECK_FALSE((z == 1e300).item<bool>());
    // torch.tensor([1e300], dtype=float32) and a cast are IEEE too.
    CHECK(std::isinf(tensor({1e300}, kFloat32).item<float>()));
    CHECK(std::isinf(tensor({1e300}, kFloat64).to(kFloat32).item<float>()));
    CHECK(std::isinf(tensor({1e39}, kFloat64).to(kBFloat16).to(kFloat32).item<float>()));
    // A tensor value through index_put_ is a cast: IEEE as well (torch's t[0] = tensor(1e300)).
    const Tensor t = zeros({2});
    t.index_put_({0}, tensor(1e300, kFloat64));
    CHECK(std::isinf(t.to_vector<float>()[0]));
}
