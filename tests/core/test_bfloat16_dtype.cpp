// kBFloat16 tensors: the dtype's rules (as torch's), conversions with torch's rounding, printing,
// creation, the shape ops, autograd through .to(), .npz, and every op of core/ops.hpp given one.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/creation.hpp"
#include "core/dispatch.hpp"
#include "core/io/npz.hpp"
#include "core/ops.hpp"
#include "core/tensor.hpp"

using namespace xgrad;
using Catch::Matchers::Contains;

namespace {

float bits_to_float(std::uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// The bits of every element of a bfloat16 tensor.
std::vector<std::uint16_t> bits_of(const Tensor& t) {
    std::vector<std::uint16_t> out;
    const bfloat16* p = t.const_data_ptr<bfloat16>();
    for (std::size_t i = 0; i < t.numel(); ++i) out.push_back(p[i].bits);
    return out;
}

// Equal values with NaN equal to NaN (and signed zeros told apart).
bool same_values(const std::vector<double>& a, const std::vector<double>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (std::isnan(a[i]) != std::isnan(b[i])) return false;
        if (!std::isnan(a[i]) && (a[i] != b[i] || std::signbit(a[i]) != std::signbit(b[i]))) return false;
    }
    return true;
}

Tensor bf16(std::initializer_list<double> v) { return tensor(v, kBFloat16); }

}  // namespace

TEST_CASE("bfloat16 dtype: name and fmt and the promotion rules of torch", "[bfloat16]") {
    CHECK(dtype_name(kBFloat16) == "bfloat16");
    CHECK(fmt::format("{}", kBFloat16) == "bfloat16");
    CHECK(dtype_of<bfloat16>() == kBFloat16);
    CHECK(static_cast<int>(kFloat32) == 0);  // the indices of the older dtypes are unchanged
    CHECK(static_cast<int>(kBool) == 3);
    CHECK(is_floating(kBFloat16));
    // torch.promote_types
    CHECK(promote_types(kBFloat16, kFloat32) == kFloat32);
    CHECK(promote_types(kFloat32, kBFloat16) == kFloat32);
    CHECK(promote_types(kBFloat16, kFloat64) == kFloat64);
    CHECK(promote_types(kBFloat16, kInt64) == kBFloat16);
    CHECK(promote_types(kBool, kBFloat16) == kBFloat16);
    CHECK(promote_types(kBFloat16, kBFloat16) == kBFloat16);
    // torch.can_cast
    CHECK(can_cast(kFloat32, kBFloat16));
    CHECK(can_cast(kFloat64, kBFloat16));
    CHECK(can_cast(kInt64, kBFloat16));
    CHECK(can_cast(kBFloat16, kFloat32));
    CHECK_FALSE(can_cast(kBFloat16, kInt64));
    CHECK_FALSE(can_cast(kBFloat16, kBool));
    // torch.result_type (values printed by torch 1.13)
    const Tensor b = bf16({1.0, 2.0});
    CHECK(result_type(b, Scalar(2.5)) == kBFloat16);
    CHECK(result_type(b, Scalar(2)) == kBFloat16);
    CHECK(result_type(tensor({1.0}, kInt64), tensor(2.5, kBFloat16)) == kBFloat16);
    CHECK(result_type(b, tensor(2.5, kFloat64)) == kBFloat16);  // a 0-d float64 does not outrank
    CHECK(result_type(b, tensor({2.5}, kFloat32)) == kFloat32);
    CHECK(result_type(tensor({1.0}, kFloat32), tensor(2.5, kBFloat16)) == kFloat32);
}

TEST_CASE("bfloat16 value type converts explicitly with round to nearest even", "[bfloat16]") {
    STATIC_REQUIRE(!std::is_convertible_v<float, bfloat16>);
    STATIC_REQUIRE(!std::is_convertible_v<bfloat16, float>);
    CHECK(bfloat16(1.0f).bits == 0x3f80);
    CHECK(bfloat16::from_bits(0x3f80) == bfloat16(1));
    CHECK(static_cast<float>(bfloat16(1.0f + std::ldexp(1.0f, -8))) == 1.0f);  // tie to even
    CHECK(static_cast<double>(bfloat16(3.0)) == 3.0);
    // A double or int64 goes through float32 first, as c10::BFloat16: two roundings.
    CHECK(static_cast<float>(bfloat16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30))) == 1.0f);
    CHECK(static_cast<double>(bfloat16(std::int64_t{(1 << 25) + (1 << 17) + 1})) == double(1 << 25));
    const bfloat16 nan(std::numeric_limits<float>::quiet_NaN());
    CHECK_FALSE(nan == nan);
    CHECK(nan != nan);
    CHECK_FALSE(nan < bfloat16(1));
    CHECK(bfloat16(-0.0f) == bfloat16(0.0f));
    CHECK(bfloat16(1) < bfloat16(2));
    CHECK(static_cast<bool>(nan));
    CHECK_FALSE(static_cast<bool>(bfloat16(-0.0f)));
}

TEST_CASE("to bfloat16 and back is torch's rounding for every source dtype", "[bfloat16]") {
    SECTION("every bfloat16 goes to float32 exactly and back unchanged") {
        std::vector<double> all;
        for (std::uint32_t b = 0; b < 0x10000; ++b) all.push_back(bf16_to_float(static_cast<std::uint16_t>(b)));
        const Tensor f = from_vector(all, {all.size()}, kFloat32);
        const Tensor h = f.to(kBFloat16);
        const auto bits = bits_of(h);
        for (std::uint32_t b = 0; b < 0x10000; ++b) {
            const bool is_nan = std::isnan(all[b]);
            if (is_nan) CHECK(std::isnan(bf16_to_float(bits[b])));  // quietened, as torch
            else if (bits[b] != b) FAIL("bfloat16 " << b << " came back as " << bits[b]);
        }
        const auto back32 = h.to(kFloat32).to_vector<double>();
        const auto back64 = h.to(kFloat64).to_vector<double>();
        CHECK(same_values(back32, all));
        CHECK(same_values(back64, all));
    }
    SECTION("float32 rounds as bf16_from_float on random bit patterns and the edges") {
        std::mt19937 rng(7);
        std::vector<float> v;
        for (int i = 0; i < 20000; ++i) v.push_back(bits_to_float(rng()));
        for (std::uint32_t u : {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0xff7fffffu, 0x00000001u, 0x80000001u,
                                0x7f7f8000u, 0x3f807fffu, 0x00008000u, 0x00018000u})
            v.push_back(bits_to_float(u));
        Tensor f = zeros({v.size()});
        std::copy(v.begin(), v.end(), f.data_ptr<float>());
        const auto bits = bits_of(f.to(kBFloat16));
        for (std::size_t i = 0; i < v.size(); ++i)
            if (bits[i] != bf16_from_float(v[i])) FAIL("float " << v[i] << " became " << bits[i]);
    }
    SECTION("float64 and int64 round twice, through float32, as torch 1.13") {
        const Tensor d = tensor({1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30), 1e300, -1e-300, 0.1}, kFloat64);
        const auto got = d.to(kBFloat16).to_vector<double>();
        CHECK(got[0] == 1.0);  // direct rounding would give 1 + 2^-7
        CHECK(got[1] == INFINITY);
        CHECK(got[2] == 0.0);
        CHECK(std::signbit(got[2]));
        CHECK(got[3] == static_cast<double>(bf16_to_float(bf16_from_float(0.1f))));
        // torch: [257, 2**24+1, 16843009, -129, 2**62+2**30, 2**25+2**17+1] -> these
        const Tensor i = from_vector(std::vector<std::int64_t>{257, (1 << 24) + 1, 16843009, -129,
                                                               (std::int64_t{1} << 62) + (1 << 30), (1 << 25) + (1 << 17) + 1},
                                     {6});
        CHECK(i.to(kBFloat16).to_vector<double>() ==
              std::vector<double>{256.0, 16777216.0, 16908288.0, -129.0, 4.611686018427388e+18, 33554432.0});
        CHECK(tensor({1.0, 0.0}, kBool).to(kBFloat16).to_vector<double>() == std::vector<double>{1.0, 0.0});
    }
    SECTION("bfloat16 to int64 truncates and to bool is nonzero, as torch") {
        CHECK(bf16({2.9, -2.9, 300.5}).to(kInt64).to_vector<std::int64_t>() == std::vector<std::int64_t>{2, -2, 300});
        const Tensor b = tensor({0.0, 0.5, NAN, -0.0}, kFloat32).to(kBFloat16).to(kBool);
        CHECK(b.dtype() == kBool);
        CHECK(b.to_vector<bool>() == std::vector<bool>{false, true, true, false});
    }
    SECTION("what has no int64 value is refused, naming the op and the value") {
        for (double bad : {double(NAN), double(INFINITY), -1e30}) {
            const Tensor t = bf16({1.0, bad});
            CHECK_THROWS_WITH(t.to(kInt64), Contains("cast") && Contains("bfloat16") && Contains("flat index 1"));
            CHECK_THROWS_WITH(t[1].item<std::int64_t>(), Contains("item") && Contains("bfloat16"));
            CHECK_THROWS_WITH(t.to_vector<std::int64_t>(), Contains("to_vector"));
        }
    }
}

TEST_CASE("bfloat16 tensors print as torch prints them", "[bfloat16]") {
    // Bodies printed by torch 1.13 for the same values (torch.tensor(v).bfloat16()).
    CHECK(to_string(tensor({1.1, -2.5, 3.14159, 100.7}).to(kBFloat16)) ==
          "tensor([  1.1016,  -2.5000,   3.1406, 100.5000], shape=(4,), dtype=bfloat16)");
    CHECK(to_string(tensor({{1e-5, 1.0}, {3.0, 1e10}}).to(kBFloat16)) ==
          "tensor([[1.0014e-05, 1.0000e+00],\n        [3.0000e+00, 9.9992e+09]], shape=(2, 2), dtype=bfloat16)");
    CHECK(to_string(tensor(2.7).to(kBFloat16)) == "tensor(2.7031, shape=(), dtype=bfloat16)");
    CHECK(to_string(tensor({1.1, -2.5}).to(kBFloat16)) == "tensor([ 1.1016, -2.5000], shape=(2,), dtype=bfloat16)");
    CHECK(tensor({1.1}).to(kBFloat16)[0].item<bfloat16>().bits == 0x3f8d);  // README's example
    CHECK(to_string(tensor({0.5, -1e-3, NAN, INFINITY}).to(kBFloat16)) ==
          "tensor([ 0.5000, -0.0010,     nan,     inf], shape=(4,), dtype=bfloat16)");
    CHECK(to_string(tensor({{0.5, -1e-3}, {1e-2, 20.0}}).to(kBFloat16)) ==
          "tensor([[ 5.0000e-01, -9.9945e-04],\n        [ 1.0010e-02,  2.0000e+01]], shape=(2, 2), dtype=bfloat16)");
    // The same layout as float32 of the same values, but for the dtype (summarised too).
    for (const Tensor& x : {tensor({{0.5, -1e-3}, {NAN, INFINITY}}).to(kBFloat16),
                            (arange(0.0, 2000.0) * 1e-3).to(kBFloat16).reshape({40, 50})}) {
        std::string as32 = to_string(x.to(kFloat32).detach());
        as32.replace(as32.find("float32"), 7, "bfloat16");
        CHECK(to_string(x) == as32);
        CHECK((x.numel() < 1000 || as32.find("...") != std::string::npos));
    }
    Tensor g = tensor({1.5}).requires_grad_().to(kBFloat16);
    CHECK_THAT(to_string(g), Contains("dtype=bfloat16, op=<cast>"));
}

TEST_CASE("bfloat16 creation functions take the dtype", "[bfloat16]") {
    CHECK(zeros({2, 3}, kBFloat16).dtype() == kBFloat16);
    CHECK(bits_of(zeros({2}, kBFloat16)) == std::vector<std::uint16_t>{0, 0});
    CHECK(bits_of(ones({2}, kBFloat16)) == std::vector<std::uint16_t>{0x3f80, 0x3f80});
    CHECK(full({2}, 1.1, kBFloat16).to_vector<float>() == std::vector<float>{1.1015625f, 1.1015625f});
    CHECK(tensor({{1.0, 2.0}}, kBFloat16).shape() == Shape{1, 2});
    CHECK(tensor(0.1, kBFloat16).item<float>() == bf16_to_float(bf16_from_float(0.1f)));
    CHECK(from_vector({1.0, 2.0, 3.0}, {3}, kBFloat16).to_vector<double>() == std::vector<double>{1, 2, 3});
    CHECK(zeros_like(bf16({1.0})).dtype() == kBFloat16);
    CHECK(arange(0.0, 3.0, 1.0, kBFloat16).to_vector<double>() == std::vector<double>{0, 1, 2});
    // Random draws are float32 or float64: the message says how to get bfloat16.
    CHECK_THROWS_WITH(rand({2}, kBFloat16), Contains("rand") && Contains("bfloat16") && Contains(".to(kBFloat16)"));
    CHECK_THROWS_WITH(randn({2}, kBFloat16), Contains("randn") && Contains("bfloat16"));
    // A bfloat16 leaf may require grad, as in torch (is_floating_point).
    CHECK(zeros({2}, TensorOptions(kBFloat16).requires_grad(true)).requires_grad());
}

TEST_CASE("bfloat16 values through item and data_ptr and to_vector", "[bfloat16]") {
    Tensor t = bf16({1.5, -2.0});
    bfloat16* p = t.data_ptr<bfloat16>();
    CHECK(p[0].bits == 0x3fc0);
    p[1] = bfloat16(7.0f);
    CHECK(t.to_vector<float>() == std::vector<float>{1.5f, 7.0f});
    CHECK(t[0].item<float>() == 1.5f);
    CHECK(t[0].item<bfloat16>() == bfloat16(1.5f));
    CHECK(t[1].item<std::int64_t>() == 7);
    CHECK(t.to_vector<bfloat16>()[1].bits == bfloat16(7.0f).bits);
    CHECK(tensor({3.25}).item<bfloat16>().bits == 0x4050);
    CHECK_THROWS_WITH(t.data_ptr<float>(), Contains("bfloat16") && Contains("float32"));
    CHECK_THROWS_WITH(tensor({1.0}).data_ptr<bfloat16>(), Contains("float32") && Contains("bfloat16"));
}

TEST_CASE("bfloat16 shape ops copy the bits as float32 would move the values", "[bfloat16]") {
    using namespace indexing;
    std::vector<double> v;
    for (int i = 0; i < 24; ++i) v.push_back(i * 0.37 - 3.0);
    v[5] = NAN;
    v[7] = -0.0;
    const Tensor x32 = from_vector(v, {2, 3, 4}).to(kBFloat16).to(kFloat32);  // values bfloat16 holds
    const Tensor x = x32.to(kBFloat16);
    const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> ops = {
        {"reshape", [](const Tensor& t) { return t.reshape({4, -1}); }},
        {"permute", [](const Tensor& t) { return t.permute({2, 0, 1}); }},
        {"transpose", [](const Tensor& t) { return t.transpose(0, 2); }},
        {"unsqueeze", [](const Tensor& t) { return t.unsqueeze(1); }},
        {"squeeze", [](const Tensor& t) { return t.unsqueeze(0).squeeze(0); }},
        {"slice", [](const Tensor& t) { return slice(t, 2, 1, 4, 2); }},
        {"concat", [](const Tensor& t) { return concat({t, t}, 1); }},
        {"stack", [](const Tensor& t) { return stack({t, t}, 2); }},
        {"index", [](const Tensor& t) { return t.index({Slice(), 1, Slice(None, None, 2)}); }},
        {"operator[]", [](const Tensor& t) { return t[-1]; }},
        {"clone", [](const Tensor& t) { return t.clone(); }},
        {"detach", [](const Tensor& t) { return t.detach(); }},
        {"expand", [](const Tensor& t) { return expand(t.index({Slice(), Slice(0, 1)}), {2, 3, 4}); }},
        {"split", [](const Tensor& t) { return split(t, 1, 2)[2]; }},
        {"chunk", [](const Tensor& t) { return chunk(t, 2, 2)[1]; }},
        {"tril", [](const Tensor& t) { return tril(t, -1); }},
        {"triu", [](const Tensor& t) { return triu(t); }},
        {"repeat_interleave", [](const Tensor& t) { return repeat_interleave(t, 2, 1); }},
        {"index_select", [](const Tensor& t) { return index_select(t, 2, from_vector(std::vector<std::int64_t>{3, 0, 3}, {3})); }},
        {"gather", [](const Tensor& t) { return gather(t, 0, from_vector(std::vector<std::int64_t>(24, 1), {2, 3, 4})); }},
    };
    for (const auto& [name, op] : ops) {
        INFO(name);
        const Tensor r = op(x);
        const Tensor want = op(x32);
        CHECK(r.dtype() == kBFloat16);
        CHECK(r.shape() == want.shape());
        CHECK(same_values(r.to(kFloat32).to_vector<double>(), want.to_vector<double>()));
    }
    // index_put_ writes into bfloat16, rounding the value as torch does.
    Tensor y = x.clone();
    y.index_put_({0, 0, 0}, Scalar(1.1));
    CHECK(y.index({0, 0, 0}).item<float>() == 1.1015625f);
    y.index_put_({1}, zeros({3, 4}));
    CHECK(y[1].to(kFloat32).sum().item<double>() == 0.0);
}

TEST_CASE("bfloat16 differentiates through to() in both directions", "[bfloat16]") {
    SECTION("float32 to bfloat16 and back: the gradient comes back to float32 through bfloat16") {
        Tensor x = tensor({1.0, 2.0, 3.0}).requires_grad_();
        const Tensor w = tensor({0.1, 1.0 + std::ldexp(1.0, -8), -7.3});
        const Tensor y = x.to(kBFloat16);
        CHECK(y.requires_grad());
        CHECK(y.op_name() == "cast");
        (y.to(kFloat32) * w).sum().backward();
        REQUIRE(x.grad().dtype() == kFloat32);
        // The gradient passed through a bfloat16 node, so it is w rounded to bfloat16 (torch alike).
        CHECK(x.grad().to_vector<float>() == w.to(kBFloat16).to(kFloat32).to_vector<float>());
    }
    SECTION("a bfloat16 output takes a bfloat16 gradient, which reaches float64 exactly") {
        Tensor x = tensor({1.0, -2.0}, kFloat64).requires_grad_();
        const Tensor y = x.to(kBFloat16);
        y.backward(bf16({0.5, 3.0}));
        CHECK(x.grad().dtype() == kFloat64);
        CHECK(x.grad().to_vector<double>() == std::vector<double>{0.5, 3.0});
        // A one-element bfloat16 output needs no gradient: the seed is a bfloat16 one.
        Tensor s = tensor({2.0}).requires_grad_();
        s.to(kBFloat16).backward();
        CHECK(s.grad().item<float>() == 1.0f);
    }
    SECTION("a bfloat16 leaf gets a bfloat16 gradient, rounded to nearest even") {
        Tensor b = bf16({1.0, 2.0}).requires_grad_();
        const Tensor w = tensor({0.1, -3.3});
        (b.to(kFloat32) * w).sum().backward();
        REQUIRE(b.grad().dtype() == kBFloat16);
        CHECK(bits_of(b.grad()) == bits_of(w.to(kBFloat16)));
        // A second backward adds into it: each sum formed in float32, then rounded (convert-add-round).
        (b.to(kFloat32) * w).sum().backward();
        const float g0 = bf16_to_float(bf16_from_float(0.1f));
        CHECK(b.grad()[0].item<float>() == bf16_to_float(bf16_from_float(g0 + g0)));
    }
    SECTION("gradients meeting at a bfloat16 node add in float32 and round once per add") {
        // 1 and 2^-8 meet at y: 1 + 2^-8 is a tie that rounds to even (1), as torch's bfloat16 add.
        Tensor x = tensor({0.0}).requires_grad_();
        const Tensor y = x.to(kBFloat16);
        const Tensor a = y.to(kFloat32) * 1.0;
        const Tensor c = y.to(kFloat32) * std::ldexp(1.0, -8);
        (a + c).sum().backward();
        CHECK(x.grad().item<float>() == 1.0f);
        // 1 + 3·2^-9 is past the half-way point: it rounds up.
        Tensor x2 = tensor({0.0}).requires_grad_();
        const Tensor y2 = x2.to(kBFloat16);
        (y2.to(kFloat32) + y2.to(kFloat32) * (3 * std::ldexp(1.0, -9))).sum().backward();
        CHECK(x2.grad().item<float>() == 1.0f + std::ldexp(1.0f, -7));
    }
    SECTION("retain_grad and clone on a bfloat16 node") {
        Tensor x = tensor({1.0, 2.0}).requires_grad_();
        Tensor y = x.to(kBFloat16);
        y.retain_grad();
        const Tensor z = y.clone();
        CHECK(z.requires_grad());
        (z.to(kFloat32) * 3.0).sum().backward();
        CHECK(y.grad().dtype() == kBFloat16);
        CHECK(y.grad().to_vector<float>() == std::vector<float>{3.0f, 3.0f});
        CHECK(x.grad().to_vector<float>() == std::vector<float>{3.0f, 3.0f});
    }
    SECTION("other ops refuse a bfloat16 tensor in the graph instead of cutting the gradient") {
        Tensor x = tensor({1.0, 2.0}).requires_grad_();
        const Tensor y = x.to(kBFloat16);
        CHECK_THROWS_WITH(y.reshape({2, 1}), Contains("reshape") && Contains("requires grad") && Contains(".to(kFloat32)"));
        CHECK_THROWS_WITH(concat({y, y}, 0), Contains("concat") && Contains("requires grad"));
        CHECK_THROWS_WITH(y[0], Contains("requires grad"));
        // No graph is recorded under NoGradGuard, so there is nothing to cut.
        NoGradGuard no_grad;
        CHECK(y.reshape({2, 1}).shape() == Shape{2, 1});
    }
    SECTION("where and masked_fill select through float32, with the gradient") {
        Tensor x = tensor({1.0, 2.0, 3.0}).requires_grad_();
        const Tensor y = x.to(kBFloat16);
        const Tensor m = tensor({1.0, 0.0, 1.0}, kBool);
        const Tensor r = masked_fill(y, m, 1.1);
        CHECK(r.dtype() == kBFloat16);
        CHECK(r.to_vector<float>() == std::vector<float>{1.1015625f, 2.0f, 1.1015625f});
        const Tensor s = where(m, y, zeros({3}, kBFloat16));
        CHECK(s.to_vector<float>() == std::vector<float>{1.0f, 0.0f, 3.0f});
        (r.to(kFloat32) + s.to(kFloat32)).sum().backward();
        CHECK(x.grad().to_vector<float>() == std::vector<float>{1.0f, 1.0f, 1.0f});
    }
}

TEST_CASE("bfloat16 arithmetic is refused with a message that says what to do", "[bfloat16]") {
    const Tensor b = bf16({1.0, 2.0});
    CHECK_THROWS_WITH(b + b, Contains("add") && Contains("bfloat16") && Contains(".to(kFloat32)") &&
                                 Contains("AutocastGuard"));
    CHECK_THROWS_WITH(b * 2.0, Contains("mul") && Contains("bfloat16"));
    CHECK_THROWS_WITH(exp(b), Contains("exp") && Contains("bfloat16"));
    CHECK_THROWS_WITH(dispatch_floating("myop", kBFloat16, [](auto) { return 0; }),
                      Contains("myop: expected a floating-point tensor (float32 or float64), got bfloat16"));
    // Mixed with float32, bfloat16 promotes to float32 and computes there, as torch.
    const Tensor m = b + tensor({0.5, 0.5});
    CHECK(m.dtype() == kFloat32);
    CHECK(m.to_vector<float>() == std::vector<float>{1.5f, 2.5f});
    // In place, as torch: float32 += bfloat16 computes in float32; bfloat16 += float32 too, and
    // the result rounds back into bfloat16; bfloat16 += bfloat16 would compute in bfloat16.
    Tensor f = tensor({1.0, 1.0});
    f += b;
    CHECK(f.to_vector<float>() == std::vector<float>{2.0f, 3.0f});
    Tensor bb = b.clone();
    bb += tensor({0.1, 1.0});
    CHECK(bb.dtype() == kBFloat16);
    CHECK(bb.to_vector<float>() == std::vector<float>{1.1015625f, 3.0f});
    CHECK_THROWS_WITH(bb += bb, Contains("bfloat16"));
    CHECK_THROWS_WITH(bb *= 2.0, Contains("mul") && Contains("bfloat16"));
    CHECK(bb.to_vector<float>() == std::vector<float>{1.1015625f, 3.0f});  // untouched by the refused writes
}

TEST_CASE("bfloat16 comparisons compare the values", "[bfloat16]") {
    const Tensor a = tensor({1.0, NAN, -0.0, 2.0}).to(kBFloat16);
    const Tensor b = tensor({1.0, NAN, 0.0, 3.0}).to(kBFloat16);
    CHECK((a == b).to_vector<bool>() == std::vector<bool>{true, false, true, false});
    CHECK((a != b).to_vector<bool>() == std::vector<bool>{false, true, false, true});
    CHECK((a < b).to_vector<bool>() == std::vector<bool>{false, false, false, true});
    CHECK((a >= 1.0).to_vector<bool>() == std::vector<bool>{true, false, false, true});
    // 1.1 is compared in bfloat16 (result_type), so it equals full(1.1) in bfloat16, as torch.
    CHECK((full({1}, 1.1, kBFloat16) == 1.1).item<bool>());
    CHECK((a == tensor({1.0, 0.0, 0.0, 2.0})).to_vector<bool>() == std::vector<bool>{true, false, true, true});
}

namespace {

// One op of core/ops.hpp, run on inputs of dtype d (bfloat16, or float32 holding the same values).
struct OpCase {
    const char* name;
    std::function<std::vector<Tensor>(Dtype d)> run;
};

// Whether input() makes leaves that require grad (the walk's second pass).
bool g_inputs_require_grad = false;

// Values bfloat16 holds exactly, with a NaN and signed zeros where `special`.
Tensor input(const Shape& shape, Dtype d, bool special = false, int seed = 1) {
    std::vector<double> v;
    std::size_t n = 1;
    for (auto s : shape) n *= s;
    for (std::size_t i = 0; i < n; ++i) v.push_back(static_cast<double>(bf16_to_float(bf16_from_float(
                                                   static_cast<float>(std::sin(seed * 12.9898 + i * 78.233) * 4.0)))));
    if (special && n > 3) {
        v[1] = NAN;
        v[2] = -0.0;
        v[3] = 0.0;
    }
    Tensor t = from_vector(v, shape, kFloat32).to(d);
    if (g_inputs_require_grad) t.requires_grad_();
    return t;
}

std::vector<OpCase> all_op_cases() {
    using VT = std::vector<Tensor>;
    const Tensor idx = from_vector(std::vector<std::int64_t>{1, 0, 2}, {3});
    const Tensor idx2 = from_vector(std::vector<std::int64_t>{1, 0, 2, 2, 1, 0}, {2, 3});
    const Tensor mask = tensor({{1.0, 0.0, 1.0}, {0.0, 0.0, 1.0}}, kBool);
    const Tensor targets = from_vector(std::vector<std::int64_t>{2, 0}, {2});
    const Tensor lens = from_vector(std::vector<std::int64_t>{1, 2}, {2});
    auto x = [](Dtype d) { return input({2, 3}, d, true); };
    auto y = [](Dtype d) { return input({2, 3}, d, false, 2); };
    auto x3 = [](Dtype d) { return input({2, 2, 4}, d, false, 3); };
    auto one = [](Tensor t) { return VT{std::move(t)}; };
    auto vi = [](ValuesIndices r) { return VT{r.values, r.indices}; };
    return {
        {"add", [=](Dtype d) { return one(add(x(d), y(d))); }},
        {"add", [=](Dtype d) { return one(add(x(d), Scalar(2.5))); }},
        {"sub", [=](Dtype d) { return one(sub(x(d), y(d))); }},
        {"sub", [=](Dtype d) { return one(sub(x(d), Scalar(1))); }},
        {"mul", [=](Dtype d) { return one(mul(x(d), y(d))); }},
        {"mul", [=](Dtype d) { return one(mul(x(d), Scalar(2.0))); }},
        {"div", [=](Dtype d) { return one(div(x(d), y(d))); }},
        {"div", [=](Dtype d) { return one(div(x(d), Scalar(2.0))); }},
        {"neg", [=](Dtype d) { return one(neg(x(d))); }},
        {"pow", [=](Dtype d) { return one(pow(x(d), 2.0)); }},
        {"exp", [=](Dtype d) { return one(exp(x(d))); }},
        {"log", [=](Dtype d) { return one(log(x(d))); }},
        {"sqrt", [=](Dtype d) { return one(sqrt(x(d))); }},
        {"tanh", [=](Dtype d) { return one(tanh(x(d))); }},
        {"sigmoid", [=](Dtype d) { return one(sigmoid(x(d))); }},
        {"relu", [=](Dtype d) { return one(relu(x(d))); }},
        {"gelu", [=](Dtype d) { return one(gelu(x(d))); }},
        {"sin", [=](Dtype d) { return one(sin(x(d))); }},
        {"cos", [=](Dtype d) { return one(cos(x(d))); }},
        {"abs", [=](Dtype d) { return one(abs(x(d))); }},
        {"sign", [=](Dtype d) { return one(sign(x(d))); }},
        {"clamp", [=](Dtype d) { return one(clamp(x(d), -1.0, 1.0)); }},
        {"clamp_min", [=](Dtype d) { return one(clamp_min(x(d), -1.0)); }},
        {"clamp_max", [=](Dtype d) { return one(clamp_max(x(d), 1.0)); }},
        {"maximum", [=](Dtype d) { return one(maximum(x(d), y(d))); }},
        {"minimum", [=](Dtype d) { return one(minimum(x(d), y(d))); }},
        {"rsub", [=](Dtype d) { return one(rsub(Scalar(1.0), x(d))); }},
        {"rdiv", [=](Dtype d) { return one(rdiv(Scalar(1.0), x(d))); }},
        {"cast", [=](Dtype d) { return VT{cast(x(d), kFloat64), cast(x(d), kBool), cast(y(d), kInt64)}; }},
        {"eq", [=](Dtype d) { return VT{eq(x(d), y(d)), eq(x(d), x(d)), eq(x(d), Scalar(0))}; }},
        {"ne", [=](Dtype d) { return VT{ne(x(d), y(d)), ne(x(d), Scalar(0.0))}; }},
        {"lt", [=](Dtype d) { return VT{lt(x(d), y(d)), lt(x(d), Scalar(0.5))}; }},
        {"le", [=](Dtype d) { return VT{le(x(d), y(d)), le(x(d), Scalar(0.5))}; }},
        {"gt", [=](Dtype d) { return VT{gt(x(d), y(d)), gt(x(d), Scalar(0.5))}; }},
        {"ge", [=](Dtype d) { return VT{ge(x(d), y(d)), ge(x(d), Scalar(0.5))}; }},
        {"logical_not", [=](Dtype d) { return one(logical_not(x(d))); }},
        {"logical_and", [=](Dtype d) { return one(logical_and(x(d), y(d))); }},
        {"logical_or", [=](Dtype d) { return one(logical_or(x(d), y(d))); }},
        {"logical_xor", [=](Dtype d) { return one(logical_xor(x(d), y(d))); }},
        {"where", [=](Dtype d) { return one(where(mask, x(d), y(d))); }},
        {"masked_fill", [=](Dtype d) { return one(masked_fill(x(d), mask, -2.5)); }},
        {"sum", [=](Dtype d) { return one(sum(x(d))); }},
        {"sum", [=](Dtype d) { return one(sum(y(d), {1})); }},
        {"mean", [=](Dtype d) { return one(mean(y(d))); }},
        {"mean", [=](Dtype d) { return one(mean(y(d), {0}, true)); }},
        {"argmax", [=](Dtype d) { return VT{argmax(x(d), 1), argmax(y(d), 0, true)}; }},
        {"argmin", [=](Dtype d) { return VT{argmin(x(d), 1), argmin(y(d), 0)}; }},
        {"max", [=](Dtype d) { return vi(max(x(d), 1)); }},
        {"max", [=](Dtype d) { return VT{max(x(d)), max(y(d))}; }},
        {"min", [=](Dtype d) { return vi(min(x(d), 0)); }},
        {"min", [=](Dtype d) { return VT{min(x(d)), min(y(d))}; }},
        {"var", [=](Dtype d) { return one(var(y(d))); }},
        {"var", [=](Dtype d) { return one(var(y(d), {1}, Correction{0})); }},
        {"std", [=](Dtype d) { return one(xgrad::std(y(d))); }},
        {"std", [=](Dtype d) { return one(xgrad::std(y(d), {1}, Correction{0})); }},
        {"cumsum", [=](Dtype d) { return one(cumsum(y(d), 1)); }},
        {"norm", [=](Dtype d) { return one(norm(y(d))); }},
        {"reshape", [=](Dtype d) { return one(reshape(x(d), {3, 2})); }},
        {"permute", [=](Dtype d) { return one(permute(x3(d), {2, 0, 1})); }},
        {"transpose", [=](Dtype d) { return one(transpose(x(d), 0, 1)); }},
        {"unsqueeze", [=](Dtype d) { return one(unsqueeze(x(d), -1)); }},
        {"squeeze", [=](Dtype d) { return one(squeeze(unsqueeze(x(d), 0), 0)); }},
        {"squeeze", [=](Dtype d) { return one(squeeze(unsqueeze(x(d), 0))); }},
        {"flatten", [=](Dtype d) { return one(flatten(x3(d), 1)); }},
        {"diagonal", [=](Dtype d) { return one(diagonal(x(d), 1)); }},
        {"as_strided", [=](Dtype d) { return one(as_strided(x(d), {2, 2}, {1, 2}, 1)); }},
        {"unbind", [=](Dtype d) { return unbind(x(d), 1); }},
        {"concat", [=](Dtype d) { return one(concat({x(d), y(d)}, 1)); }},
        {"slice", [=](Dtype d) { return one(slice(x(d), 1, 0, 3, 2)); }},
        {"expand", [=](Dtype d) { return one(expand(input({1, 3}, d), {4, 3})); }},
        {"repeat", [=](Dtype d) { return one(repeat(x(d), {2, 1, 2})); }},
        {"sum_to", [=](Dtype d) { return one(sum_to(input({4, 3}, d), {1, 3})); }},
        {"stack", [=](Dtype d) { return one(stack({x(d), y(d)}, 1)); }},
        {"split", [=](Dtype d) { return split(x(d), 2, 1); }},
        {"split", [=](Dtype d) { return split(x(d), std::vector<long>{1, 2}, 1); }},
        {"chunk", [=](Dtype d) { return chunk(x(d), 2, 1); }},
        {"tril", [=](Dtype d) { return one(tril(x(d))); }},
        {"triu", [=](Dtype d) { return one(triu(x(d), 1)); }},
        {"matmul", [=](Dtype d) { return one(matmul(x(d), input({3, 2}, d))); }},
        {"bmm", [=](Dtype d) { return one(bmm(x3(d), input({2, 4, 3}, d))); }},
        {"matmul_t", [=](Dtype d) { return one(matmul_t(x(d), y(d), false, true)); }},
        {"linear", [=](Dtype d) { return one(linear(x(d), y(d), input({2}, d, false, 4))); }},
        {"softmax", [=](Dtype d) { return one(softmax(y(d), 1)); }},
        {"log_softmax", [=](Dtype d) { return one(log_softmax(y(d), 1)); }},
        {"masked_softmax", [=](Dtype d) { return one(masked_softmax(x3(d), AttentionMask::causal())); }},
        {"masked_softmax", [=](Dtype d) { return one(masked_softmax(x3(d), lens)); }},
        {"masked_softmax", [=](Dtype d) {
             const Tensor s = x3(d);
             return one(masked_softmax(s, AttentionMask().resolve("test", 2, 2, 4)));
         }},
        {"head_attention_weights", [=](Dtype d) { return one(head_attention_weights(x3(d), x3(d), 2, 0.5)); }},
        {"head_attention_weights", [=](Dtype d) {
             const Tensor q = x3(d);
             return one(head_attention_weights(q, q, 2, 0.5, AttentionMask().resolve("test", 2, 2, 2)));
         }},
        {"head_attention_combine", [=](Dtype d) {
             return one(head_attention_combine(input({4, 2, 2}, d, false, 4), x3(d), 2));
         }},
        {"layer_norm", [=](Dtype d) { return one(layer_norm(y(d), {3})); }},
        {"layer_norm", [=](Dtype d) { return one(layer_norm(y(d), {3}, input({3}, d), input({3}, d))); }},
        {"add_layer_norm", [=](Dtype d) { return one(add_layer_norm(y(d), y(d), {3})); }},
        {"add_layer_norm", [=](Dtype d) { return one(add_layer_norm(x(d), y(d), {3}, input({3}, d), input({3}, d))); }},
        {"cross_entropy", [=](Dtype d) { return one(cross_entropy(y(d), targets)); }},
        {"mse_loss", [=](Dtype d) { return one(mse_loss(x(d), y(d))); }},
        {"repeat_interleave", [=](Dtype d) { return one(repeat_interleave(x(d), 2, 0)); }},
        {"index_select", [=](Dtype d) { return one(index_select(x(d), 1, idx)); }},
        {"gather", [=](Dtype d) { return one(gather(x(d), 1, idx2)); }},
        {"scatter", [=](Dtype d) { return one(scatter(x(d), 1, idx2, y(d))); }},
        {"scatter", [=](Dtype d) { return one(scatter(x(d), 1, idx2, 2.5)); }},
        {"scatter_add", [=](Dtype d) { return one(scatter_add(x(d), 1, idx2, y(d))); }},
        {"narrow", [=](Dtype d) { return one(narrow(x(d), 1, 1, 2)); }},
        {"select", [=](Dtype d) { return one(select(x(d), 1, -1)); }},
        {"one_hot", [=](Dtype d) { return one(one_hot(x(d))); }},
        {"sort", [=](Dtype d) { return vi(sort(x(d), 1)); }},
        {"sort", [=](Dtype d) { return vi(sort(x(d), 0, true)); }},
        {"argsort", [=](Dtype d) { return one(argsort(x(d), 1, true)); }},
        {"topk", [=](Dtype d) { return vi(topk(x(d), 2, 1)); }},
    };
}

}  // namespace

TEST_CASE("every op of ops.hpp given bfloat16 gives the float32 answer or an error naming it", "[bfloat16]") {
    const auto cases = all_op_cases();
    // The table covers every op ops.hpp declares: a new op must be added here.
    std::ifstream header(std::string(XGRAD_TEST_DATA_DIR) + "/../../core/ops.hpp");
    REQUIRE(header);
    std::stringstream text;
    text << header.rdbuf();
    const std::string src = text.str();
    const std::regex decl(R"(\n(?:Tensor|ValuesIndices|std::vector<Tensor>) (\w+)\()");
    std::set<std::string> declared, covered;
    for (std::sregex_iterator it(src.begin(), src.end(), decl), end; it != end; ++it) declared.insert((*it)[1]);
    for (const auto& c : cases) covered.insert(c.name);
    REQUIRE(declared.size() > 60);
    for (const auto& name : declared) {
        INFO("ops.hpp declares " << name);
        CHECK(covered.count(name) == 1);
    }

    int supported = 0, refused = 0;
    for (const auto& c : cases) {
        INFO("op " << c.name);
        std::vector<Tensor> want, got;
        bool float32_refused = false;
        try {
            want = c.run(kFloat32);
        } catch (const Error&) {
            float32_refused = true;  // a float input is wrong for it anyway (one_hot)
        }
        try {
            got = c.run(kBFloat16);
        } catch (const Error& e) {
            ++refused;
            CHECK_THAT(e.what(), Contains(c.name));
            if (!float32_refused) CHECK_THAT(e.what(), Contains("bfloat16"));
            continue;
        }
        REQUIRE_FALSE(float32_refused);
        ++supported;
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
            INFO("result " << i);
            CHECK(got[i].shape() == want[i].shape());
            // A bfloat16 result holds what float32 gave, rounded; other results are the same.
            const Tensor expect = got[i].dtype() == kBFloat16 ? want[i].to(kBFloat16) : want[i];
            CHECK(got[i].dtype() == expect.dtype());
            CHECK(same_values(got[i].to_vector<double>(), expect.to_vector<double>()));
        }
    }
    CHECK(supported >= 30);  // the shape ops, selections, comparisons, sort
    CHECK(refused >= 30);    // the arithmetic

    // Again with bfloat16 leaves that require grad: an op either refuses, naming itself, or its
    // floating results carry the graph and a backward through them reaches the leaves.
    g_inputs_require_grad = true;
    int differentiable = 0;
    for (const auto& c : cases) {
        INFO("op " << c.name << " with inputs that require grad");
        std::vector<Tensor> got;
        try {
            got = c.run(kBFloat16);
        } catch (const Error& e) {
            CHECK_THAT(e.what(), Contains(c.name));
            continue;
        }
        for (const Tensor& r : got) {
            if (!is_floating(r.dtype())) continue;
            REQUIRE(r.requires_grad());
            CHECK_NOTHROW(r.to(kFloat32).sum().backward());
            ++differentiable;
        }
    }
    g_inputs_require_grad = false;
    CHECK(differentiable >= 3);  // cast, where, masked_fill
}

TEST_CASE("bfloat16 is saved to npy and npz as its float32 values", "[bfloat16]") {
    const Tensor b = tensor({{1.1, -0.0}, {NAN, 3e38}}).to(kBFloat16);
    const Tensor f = b.to(kFloat32);
    // Every writer: the bytes are those of the float32 tensor, which numpy reads as '<f4'.
    CHECK(npy_bytes(b) == npy_bytes(f));
    CHECK(npz_bytes({{"w", b}}) == npz_bytes({{"w", f}}));
    CHECK(npz_compressed_bytes({{"w", b}, {"i", tensor({1.0}, kInt64)}}) ==
          npz_compressed_bytes({{"w", f}, {"i", tensor({1.0}, kInt64)}}));
    const Tensor back = parse_npy(npy_bytes(b));
    CHECK(back.dtype() == kFloat32);
    CHECK(same_values(back.to_vector<double>(), f.to_vector<double>()));
    // Back into bfloat16 the values round to themselves: nothing is lost.
    CHECK(bits_of(back.to(kBFloat16)) == bits_of(b));
    const auto files = parse_npz(npz_compressed_bytes({{"w", b}}));
    CHECK(bits_of(files.at(0).second.to(kBFloat16)) == bits_of(b));
    // A float32 array that is not bfloat16 rounds to nearest even on the way in: two ties (to
    // the even neighbour, down then up) and one past the half-way point.
    const Tensor r = parse_npy(npy_bytes(tensor({1.0 + std::ldexp(1.0, -8), 1.0 + 3 * std::ldexp(1.0, -8),
                                                 1.0 + 3 * std::ldexp(1.0, -9)})));
    CHECK(r.to(kBFloat16).to_vector<float>() ==
          std::vector<float>{1.0f, 1.0f + std::ldexp(1.0f, -6), 1.0f + std::ldexp(1.0f, -7)});
}

TEST_CASE("bfloat16 NaN orders as in float32 for max and argmax and sort", "[bfloat16]") {
    const Tensor x32 = tensor({{1.0, NAN, 3.0}, {-1.0, 2.0, -5.0}});
    const Tensor x = x32.to(kBFloat16);
    CHECK(argmax(x, 1).to_vector<std::int64_t>() == argmax(x32, 1).to_vector<std::int64_t>());
    CHECK(std::isnan(max(x).item<float>()));
    CHECK(min(x[1]).item<float>() == -5.0f);
    CHECK(sort(x, 1).indices.to_vector<std::int64_t>() == sort(x32, 1).indices.to_vector<std::int64_t>());
    CHECK(topk(x, 1, 1).indices.to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 1});
}

TEST_CASE("anomaly detection sees a bfloat16 result and gradient", "[bfloat16]") {
    DetectAnomalyGuard on;
    // 3.4e38 is a float32 but rounds past bfloat16's largest: the cast's result is inf, as torch's.
    Tensor x = tensor({1.0, 3.4e38}).requires_grad_();
    CHECK_THROWS_WITH(x.to(kBFloat16), Contains("cast: produced inf") && Contains("flat index 1"));
    // A float32 gradient that overflows bfloat16 on its way back into a bfloat16 leaf.
    Tensor b = tensor({1.0}, kBFloat16).requires_grad_();
    CHECK_THROWS_WITH((b.to(kFloat32) * 3.4e38).sum().backward(), Contains("cast backward: produced inf"));
}
