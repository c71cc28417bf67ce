// where and masked_fill select by blending bits under a mask made from the mask's bytes, in
// every dtype (bfloat16 by its 16 bits). Probed with mask bytes other than 0 and 1 (written raw
// through data_ptr, as a user copying a C array of flags would: nonzero is true, as numpy and
// load_npz read a bool byte), NaN payloads (signalling ones too) and -0.0 in every dtype, masks
// and operands broadcast every way, in-place masked_fill_ on a tensor whose storage another
// handle shares and through t[i], and autograd through both.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/ops_util.hpp"
#include "helpers.hpp"

using namespace xgrad;

namespace {

template <class T> bool same_bits(const T& a, const T& b) { return std::memcmp(&a, &b, sizeof(T)) == 0; }

// A bool tensor of `shape` whose bytes are `bytes`, written raw, as from a C array of flags.
Tensor raw_mask(const std::vector<std::uint8_t>& bytes, const std::vector<long>& shape) {
    Tensor m = zeros(shape, kBool);
    REQUIRE(static_cast<std::size_t>(m.numel()) == bytes.size());
    std::memcpy(m.data_ptr<bool>(), bytes.data(), bytes.size());
    return m;
}

// The operand a, 9 values cycling through `bits`, comes back bit for bit where `on` picks it
// (where either way round, masked_fill of the rest with 2).
template <class T, class Bits, std::size_t N>
void check_kept_bits(const Bits (&bits)[N], Dtype dtype, const Tensor& on, const Tensor& off) {
    std::vector<T> v(9);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = __builtin_bit_cast(T, bits[i % N]);
    Tensor a = zeros({9}, dtype);
    std::memcpy(a.data_ptr<T>(), v.data(), sizeof(T) * v.size());
    const Tensor other = full({9}, 2.0, dtype);
    for (const Tensor& y : {where(on, a, other), where(off, other, a), masked_fill(a, off, 2.0)}) {
        const T* p = y.data_ptr<T>();
        for (std::size_t i = 0; i < 9; ++i) CHECK(same_bits(p[i], i % 2 == 0 ? v[i] : T(2)));
    }
}

}  // namespace

TEST_CASE("where and masked_fill: a mask byte other than 0 and 1 selects as true, every dtype and broadcast",
          "[ops][where][adversarial]") {
    // 37 values: a vector's worth and a tail; every third byte a "true" other than 1
    std::vector<std::uint8_t> bytes(37);
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = i % 3 == 0 ? 0 : i % 3 == 1 ? 1 : static_cast<std::uint8_t>(2 + 51 * (i % 5));
    const Tensor mask = raw_mask(bytes, {37});
    const Tensor row_mask = raw_mask(bytes, {1, 37});
    std::vector<double> av(74), bv(74);
    for (std::size_t i = 0; i < av.size(); ++i) av[i] = static_cast<double>(i) + 0.5, bv[i] = -static_cast<double>(i) - 100.0;
    for (const Dtype d : {kFloat32, kFloat64, kInt64, kBFloat16}) {
        const Tensor a = cast(from_vector(av, {2, 37}, kFloat64), d), b = cast(from_vector(bv, {2, 37}, kFloat64), d);
        for (const Tensor& m : {mask, row_mask}) {
            INFO(dtype_name(d) << ", mask of " << m.dim() << " axes");
            const std::vector<double> w = where(m, a, b).to_vector<double>(), f = masked_fill(a, m, 7.0).to_vector<double>();
            const std::vector<double> as = a.to_vector<double>(), bs = b.to_vector<double>();
            for (std::size_t k = 0; k < w.size(); ++k) {
                const bool on = bytes[k % 37] != 0;
                INFO("element " << k << ", byte " << int(bytes[k % 37]));
                CHECK(w[k] == (on ? as[k] : bs[k]));
                CHECK(f[k] == (on ? 7.0 : as[k]));
            }
            // a scalar operand on either side
            const std::vector<double> ws = where(m, full({}, 3.0, d), b).to_vector<double>();
            for (std::size_t k = 0; k < ws.size(); ++k) CHECK(ws[k] == (bytes[k % 37] != 0 ? 3.0 : bs[k]));
        }
    }
    // bool operands: the result's bytes are 0 or 1 whatever the mask's were
    const Tensor t = gt(from_vector(av, {2, 37}, kFloat64), 30.0), fls = zeros({2, 37}, kBool);
    const Tensor w = where(mask, t, fls);
    const bool* p = w.data_ptr<bool>();
    for (long k = 0; k < w.numel(); ++k) {
        std::uint8_t byte;
        std::memcpy(&byte, p + k, 1);
        CHECK(byte == ((bytes[static_cast<std::size_t>(k) % 37] != 0 && av[static_cast<std::size_t>(k)] > 30.0) ? 1 : 0));
    }
}

TEST_CASE("where and masked_fill: NaN payloads, signalling NaNs, -0.0 and extremes keep their bits, every dtype",
          "[ops][where][adversarial]") {
    const std::uint32_t f32[] = {0x7FC00001u, 0xFFC12345u, 0x7F800001u /* signalling */, 0xFF800002u, 0x80000000u,
                                 0x00000001u, 0x7F7FFFFFu, 0xFF800000u};
    const std::uint64_t f64[] = {0x7FF8000000000001ull, 0xFFF8DEADBEEF0000ull, 0x7FF0000000000001ull,
                                 0x8000000000000000ull, 0x0000000000000001ull, 0xFFF0000000000000ull};
    // bfloat16 selects by its 16 bits too: signalling NaNs (0x7F81, 0xFF81) stay signalling.
    const std::uint16_t b16[] = {0x7FC1u, 0xFFC0u, 0x7F81u /* signalling */, 0xFFC3u, 0xFF81u /* signalling */,
                                 0x7FE1u, 0x8000u, 0x0001u, 0x7F80u};
    const Tensor on = tensor({1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0}) > 0.5, off = logical_not(on);
    SECTION("float32") { check_kept_bits<float>(f32, kFloat32, on, off); }
    SECTION("float64") { check_kept_bits<double>(f64, kFloat64, on, off); }
    SECTION("bfloat16, as torch: where copies each operand's 16 bits, NaN payloads and signalling NaNs included") {
        check_kept_bits<bfloat16>(b16, kBFloat16, on, off);
    }
    SECTION("int64 extremes") {
        const Tensor a = from_vector(std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min(), 0,
                                                               std::numeric_limits<std::int64_t>::max(), -1, 1, 2, -2, 3, 4},
                                     {9});
        const std::vector<std::int64_t> av = a.to_vector<std::int64_t>();
        const std::vector<std::int64_t> w = where(on, a, full({9}, 9.0, kInt64)).to_vector<std::int64_t>();
        Tensor filled = from_vector(av, {9});
        filled.masked_fill_(off, Scalar(std::numeric_limits<std::int64_t>::min()));  // all 64 bits: Scalar, in place
        const std::vector<std::int64_t> f = filled.to_vector<std::int64_t>();
        for (std::size_t i = 0; i < 9; ++i) {
            CHECK(w[i] == (i % 2 == 0 ? av[i] : 9));
            CHECK(f[i] == (i % 2 == 0 ? av[i] : std::numeric_limits<std::int64_t>::min()));
        }
    }
}

TEST_CASE("where: masks and operands broadcast every way, against the expanded element pick", "[ops][where][adversarial]") {
    const std::vector<std::vector<long>> shapes{{}, {1}, {5}, {3, 1}, {1, 5}, {3, 5}, {2, 3, 5}, {2, 1, 1}, {0, 1}};
    long seed = 0;
    for (const auto& ms : shapes)
        for (const auto& as : shapes)
            for (const auto& bs : {std::vector<long>{}, std::vector<long>{1, 5}, std::vector<long>{2, 1, 5}}) {
                const auto make = [&seed](const std::vector<long>& s, Dtype d) {
                    Tensor t = zeros(s, d);
                    Generator gen(static_cast<std::uint64_t>(++seed));
                    const std::vector<double> v = rand(s, kFloat64, gen).to_vector<double>();
                    std::vector<double> w(v.size());
                    for (std::size_t i = 0; i < v.size(); ++i) w[i] = std::floor(v[i] * 100) - 50;
                    return cast(from_vector(w, s, kFloat64), d);
                };
                const Tensor m = gt(make(ms, kFloat64), 0.0);
                for (const Dtype d : {kFloat32, kInt64, kBool}) {
                    const Tensor a = d == kBool ? gt(make(as, kFloat64), 10.0) : make(as, d);
                    const Tensor b = d == kBool ? gt(make(bs, kFloat64), -10.0) : make(bs, d);
                    Tensor y;
                    try {
                        y = where(m, a, b);
                    } catch (const Error& e) {  // shapes torch refuses too ((0, 1) beside (3, 5))
                        REQUIRE_THAT(e.what(), Catch::Contains("cannot be broadcast"));
                        continue;
                    }
                    const Shape out = y.shape();
                    const std::vector<double> got = y.to_vector<double>(), av = a.expand(out).to_vector<double>(),
                                              bv = b.expand(out).to_vector<double>();
                    const std::vector<bool> mv = m.expand(out).to_vector<bool>();
                    INFO("mask " << ms.size() << " axes, a " << as.size() << ", b " << bs.size() << ", " << dtype_name(d));
                    REQUIRE(got.size() == mv.size());
                    for (std::size_t k = 0; k < got.size(); ++k) REQUIRE(got[k] == (mv[k] ? av[k] : bv[k]));
                    if (broadcastable_to(m.shape(), a.shape())) {
                        const std::vector<double> f = masked_fill(a, m, 1.0).to_vector<double>();
                        const std::vector<bool> mm = m.expand(a.shape()).to_vector<bool>();
                        const std::vector<double> aa = a.to_vector<double>();
                        for (std::size_t k = 0; k < f.size(); ++k) REQUIRE(f[k] == (mm[k] ? 1.0 : aa[k]));
                    }
                }
            }
}

TEST_CASE("masked_fill_: on shared storage and through t[i], the one storage written, the mask its own input",
          "[ops][where][inplace][adversarial]") {
    Tensor a = from_vector({1.0, -0.0, 3.0, 4.0, 5.0, 6.0}, {2, 3}, kFloat32);
    const Tensor alias = a;  // another handle on the same storage: sees the write, as torch's
    a.masked_fill_(tensor({1.0, 0.0, 1.0}) > 0.5, -1.0);
    CHECK(alias.to_vector<double>() == std::vector<double>{-1.0, -0.0, -1.0, -1.0, 5.0, -1.0});
    CHECK(std::signbit(alias.to_vector<float>()[1]));
    // through a row: only that row of a changes
    a[1].masked_fill_(tensor({0.0, 1.0, 0.0}) > 0.5, 9.0);
    CHECK(a.to_vector<double>() == std::vector<double>{-1.0, -0.0, -1.0, -1.0, 9.0, -1.0});
    // a bool tensor filled under itself: every set element set again, the others left
    Tensor m = tensor({1.0, 0.0, 1.0, 0.0}) > 0.5;
    m.masked_fill_(m, false);
    CHECK(m.to_vector<bool>() == std::vector<bool>{false, false, false, false});
    Tensor n = tensor({1.0, 0.0, 1.0, 0.0}) > 0.5;
    n.masked_fill_(logical_not(n), true);
    CHECK(n.to_vector<bool>() == std::vector<bool>{true, true, true, true});
}

TEST_CASE("where and masked_fill: gradients with broadcast masks and operands pass gradcheck and gradgradcheck",
          "[ops][where][gradcheck][adversarial]") {
    const Tensor m = tensor({{1.0, 0.0, 1.0, 1.0, 0.0}}) > 0.5;  // (1, 5)
    const Tensor a = from_vector({0.3, -1.2, 2.0, 0.7, -0.4, 1.1, 0.2, -2.2, 0.9, 1.6, -0.8, 0.05, 0.6, -1.5, 2.5},
                                 {3, 5}, kFloat64).requires_grad_(true);
    const Tensor b = from_vector({0.4, -0.6, 1.7, 0.1, -0.9}, {5}, kFloat64).requires_grad_(true);
    REQUIRE_GRADCHECK([m](const std::vector<Tensor>& in) { return where(m, in[0], in[1] * in[1]); }, {a, b}, "where");
    REQUIRE_GRADGRADCHECK([m](const std::vector<Tensor>& in) { return where(m, in[0] * in[0], in[1] * in[1]); }, {a, b},
                          "where");
    REQUIRE_GRADCHECK([m](const std::vector<Tensor>& in) { return masked_fill(in[0] * in[0], m, -3.0); }, {a},
                      "masked_fill");
    REQUIRE_GRADGRADCHECK([m](const std::vector<Tensor>& in) { return masked_fill(in[0] * in[0], m, -3.0); }, {a},
                          "masked_fill");
    // the filled positions get exactly zero, a NaN fill included
    Tensor x = a.detach().requires_grad_(true);
    masked_fill(x, m, std::nan("")).sum().backward();
    const std::vector<double> g = x.grad().to_vector<double>();
    for (std::size_t k = 0; k < g.size(); ++k) CHECK(g[k] == ((k % 5 == 1 || k % 5 == 4) ? 1.0 : 0.0));
}

TEST_CASE("where's gradient follows the forward's pick for a mask byte other than 0 and 1", "[ops][where][adversarial]") {
    // bytes 0, 1, 2 and 255: the values come from a where the byte is not 0, so must the gradient
    const Tensor mask = raw_mask({0, 1, 2, 255}, {4});
    const Tensor a = tensor({1.0, 2.0, 3.0, 4.0}, kFloat64).requires_grad_();
    const Tensor b = tensor({5.0, 6.0, 7.0, 8.0}, kFloat64).requires_grad_();
    const Tensor y = where(mask, a, b);
    CHECK(y.to_vector<double>() == std::vector<double>{5, 2, 3, 4});
    (y * tensor({10.0, 20.0, 30.0, 40.0}, kFloat64)).sum().backward();
    CHECK(a.grad().to_vector<double>() == std::vector<double>{0, 20, 30, 40});
    CHECK(b.grad().to_vector<double>() == std::vector<double>{10, 0, 0, 0});
}

TEST_CASE("where and masked_fill on bfloat16 give the gradients of the same select through float32",
          "[ops][where][adversarial]") {
    const Tensor m = tensor({{1.0, 0.0, 1.0, 1.0, 0.0}}) > 0.5;  // (1, 5)
    Generator gen(5);
    const Tensor a0 = cast(randn({3, 5}, kFloat32, gen), kBFloat16), b0 = cast(randn({5}, kFloat32, gen), kBFloat16);
    const Tensor w = randn({3, 5}, kFloat32, gen);
    const auto grads = [&](bool through_float32) {
        const Tensor a = a0.detach().requires_grad_(), b = b0.detach().requires_grad_();
        const auto f32 = [&](const Tensor& t) { return through_float32 ? cast(t, kFloat32) : t; };
        const auto back = [&](const Tensor& t) { return through_float32 ? cast(t, kBFloat16) : t; };
        const Tensor y = back(where(m, f32(a), f32(b))), z = back(masked_fill(f32(a), m, 3.0));
        CHECK(y.dtype() == kBFloat16);
        ((cast(y, kFloat32) * w).sum() + (cast(z, kFloat32) * w * w).sum()).backward();
        return std::vector<std::vector<float>>{y.to_vector<float>(), z.to_vector<float>(), a.grad().to_vector<float>(),
                                               b.grad().to_vector<float>()};
    };
    CHECK(grads(false) == grads(true));
}
