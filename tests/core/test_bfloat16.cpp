// bfloat16 conversions (torch's rounding) and oneDNN's matmul against a plain loop.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "../autocast_helpers.hpp"
#include "core/error.hpp"
#include "core/runtime/alloc.hpp"
#include "core/runtime/bfloat16.hpp"
#include "core/runtime/dnnl.hpp"

using namespace xgrad;

TEST_CASE("float32 to bfloat16 rounds to nearest with ties to even", "[bfloat16]") {
    CHECK(bf16_from_float(1.0f) == 0x3f80);
    CHECK(bf16_from_float(-2.0f) == 0xc000);
    // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa, 1.
    CHECK(bf16_from_float(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
    // 1 + 3·2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up.
    CHECK(bf16_from_float(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
    // Just above halfway rounds up.
    CHECK(bf16_from_float(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)) == 0x3f81);
    CHECK(bf16_from_float(0.0f) == 0x0000);
    CHECK(bf16_from_float(-0.0f) == 0x8000);
    CHECK(bf16_from_float(std::numeric_limits<float>::infinity()) == 0x7f80);
    CHECK(bf16_from_float(-std::numeric_limits<float>::infinity()) == 0xff80);
    // The largest float32 rounds past the largest bfloat16 (0x7f7f): infinity, as torch.
    CHECK(bf16_from_float(std::numeric_limits<float>::max()) == 0x7f80);
    // NaN stays NaN whatever its payload, quiet, with its sign; a payload only in the low
    // bits must not truncate to infinity.
    const float low_payload_nan = [] { std::uint32_t u = 0x7f800001u; float f; std::memcpy(&f, &u, 4); return f; }();
    CHECK(std::isnan(bf16_to_float(bf16_from_float(low_payload_nan))));
    CHECK(std::isnan(bf16_to_float(bf16_from_float(std::nanf("")))));
    CHECK(std::signbit(bf16_to_float(bf16_from_float(-std::nanf("")))));
    // Subnormals round like any other value.
    CHECK(bf16_to_float(bf16_from_float(std::numeric_limits<float>::denorm_min())) == 0.0f);
    CHECK(bf16_to_float(bf16_from_float(std::ldexp(1.0f, -133))) == std::ldexp(1.0f, -133));
}

TEST_CASE("bfloat16 to float32 is exact and the round trip is the identity", "[bfloat16]") {
    std::vector<std::uint16_t> all(65536);
    for (std::uint32_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
    std::vector<float> wide(all.size());
    bf16_to_float(all.data(), wide.data(), all.size());
    std::vector<std::uint16_t> back(all.size());
    bf16_from_float(wide.data(), back.data(), wide.size());
    for (std::size_t i = 0; i < all.size(); ++i) {
        if (std::isnan(wide[i])) continue;  // NaN payloads may be quietened
        REQUIRE(back[i] == all[i]);
    }
}

namespace {

// C = op(A)·op(B) per batch, in double.
std::vector<double> reference(const dnnl::Matmul& p, const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<double> c(p.batch * p.m * p.n);
    for (std::size_t z = 0; z < p.batch; ++z)
        for (std::size_t i = 0; i < p.m; ++i)
            for (std::size_t j = 0; j < p.n; ++j) {
                double s = 0;
                for (std::size_t l = 0; l < p.k; ++l) {
                    const float x = a[z * p.stride_a + (p.trans_a ? l * p.m + i : i * p.k + l)];
                    const float y = b[z * p.stride_b + (p.trans_b ? j * p.k + l : l * p.n + j)];
                    s += double(x) * double(y);
                }
                c[(z * p.m + i) * p.n + j] = s;
            }
    return c;
}

}  // namespace

TEST_CASE("oneDNN matmul matches a plain loop for every layout", "[bfloat16][dnnl]") {
    if (!dnnl::available()) {
        dnnl::Matmul p;
        p.m = p.n = p.k = 2;
        float x[4] = {};
        CHECK_THROWS_AS(dnnl::matmul(p, x, x, x), Error);
        return;
    }
    // Forced widened, the bfloat16 products take the path of a CPU where oneDNN has no bfloat16
    // matmul (dnnl::bf16_path()), whatever this one offers.
    const bool widened = GENERATE(false, true);
    CAPTURE(widened);
    const autocast_test::WidenedBf16 force(widened);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> uniform(-1, 1);
    for (bool trans_a : {false, true})
        for (bool trans_b : {false, true})
            for (bool shared_b : {false, true})
                for (auto input : {dnnl::Input::f32, dnnl::Input::bf16}) {
                    dnnl::Matmul p;
                    p.input = input, p.trans_a = trans_a, p.trans_b = trans_b;
                    p.batch = 3, p.m = 5, p.n = 7, p.k = 33;
                    p.stride_a = p.m * p.k;
                    p.stride_b = shared_b ? 0 : p.k * p.n;
                    std::vector<float> a(p.batch * p.m * p.k), b((shared_b ? 1 : p.batch) * p.k * p.n);
                    for (auto& v : a) v = uniform(rng);
                    for (auto& v : b) v = uniform(rng);
                    std::vector<float> c(p.batch * p.m * p.n, 0.5f);
                    if (input == dnnl::Input::bf16) {
                        // The reference multiplies the same bfloat16 values, so only the
                        // float32 accumulation differs.
                        std::vector<std::uint16_t> a16(a.size()), b16(b.size());
                        bf16_from_float(a.data(), a16.data(), a.size());
                        bf16_from_float(b.data(), b16.data(), b.size());
                        bf16_to_float(a16.data(), a.data(), a.size());
                        bf16_to_float(b16.data(), b.data(), b.size());
                        dnnl::matmul(p, a16.data(), b16.data(), c.data());
                    } else {
                        dnnl::matmul(p, a.data(), b.data(), c.data());
                    }
                    const auto want = reference(p, a, b);
                    INFO("trans_a " << trans_a << " trans_b " << trans_b << " shared_b " << shared_b
                                    << " bf16 " << (input == dnnl::Input::bf16));
                    for (std::size_t i = 0; i < c.size(); ++i) REQUIRE(std::abs(c[i] - want[i]) < 1e-4);
                    // accumulate adds to what C holds.
                    p.accumulate = true;
                    std::vector<float> acc(c.size(), 1.0f);
                    if (input == dnnl::Input::bf16) {
                        std::vector<std::uint16_t> a16(a.size()), b16(b.size());
                        bf16_from_float(a.data(), a16.data(), a.size());
                        bf16_from_float(b.data(), b16.data(), b.size());
                        dnnl::matmul(p, a16.data(), b16.data(), acc.data());
                    } else {
                        dnnl::matmul(p, a.data(), b.data(), acc.data());
                    }
                    for (std::size_t i = 0; i < acc.size(); ++i) REQUIRE(std::abs(acc[i] - 1.0 - want[i]) < 1e-4);
                }
    dnnl::Matmul empty;
    float x[1] = {};
    CHECK_THROWS_AS(dnnl::matmul(empty, x, x, x), Error);
}

TEST_CASE("bfloat16 products widened to float32 are the float32 products of the same values, every layout",
          "[bfloat16][dnnl]") {
    if (!dnnl::available()) return;
    // Where the CPU multiplies bfloat16 itself, its products stay on oneDNN's bfloat16 kernels.
    if (dnnl::native_bf16()) CHECK(dnnl::bf16_path() == dnnl::Bf16Path::onednn);
    // The layouts autocast's products use: batches with a shared operand, transposes, alpha and
    // accumulate; heads read in place from a packed projection (rows of heads·k) and written into
    // one, heads sharing one matrix; products large enough to be split over the pool by batches
    // or by rows. Buffers are larger than any layout reaches, and C starts at 0.5 everywhere, so
    // a product that read or wrote out of place shows.
    struct Case {
        const char* what;
        dnnl::Matmul p;
    };
    std::vector<Case> cases;
    auto add = [&](const char* what, auto&& set) {
        dnnl::Matmul p;
        p.input = dnnl::Input::bf16;
        set(p);
        cases.push_back({what, p});
    };
    add("one matrix", [](dnnl::Matmul& p) { p.m = 5, p.n = 7, p.k = 33; });
    add("batches, A transposed, B shared, alpha, accumulate", [](dnnl::Matmul& p) {
        p.batch = 3, p.m = 6, p.n = 10, p.k = 20, p.trans_a = true, p.stride_a = 6 * 20, p.stride_b = 0;
        p.alpha = 0.375f, p.accumulate = true;
    });
    add("heads in place in packed projections, B transposed", [](dnnl::Matmul& p) {
        const std::size_t H = 3;
        p.batch = 2, p.heads = H, p.m = 8, p.n = 6, p.k = 16, p.trans_b = true;
        p.lda = H * 16, p.head_a = 16, p.stride_a = 8 * H * 16;
        p.head_b = 6 * 16, p.stride_b = H * 6 * 16;
        p.ldc = H * 6, p.head_c = 6, p.stride_c = 8 * H * 6;
    });
    add("one A shared by every head, accumulate", [](dnnl::Matmul& p) {
        p.batch = 2, p.heads = 4, p.m = 9, p.n = 5, p.k = 12, p.head_a = 0, p.stride_a = 9 * 12;
        p.head_b = 12 * 5, p.stride_b = 4 * 12 * 5, p.accumulate = true;
    });
    add("one large matrix, split by rows", [](dnnl::Matmul& p) { p.m = 512, p.n = 96, p.k = 64, p.trans_a = true; });
    add("large batches, split by batch", [](dnnl::Matmul& p) {
        p.batch = 6, p.m = 64, p.n = 96, p.k = 96, p.stride_a = 64 * 96, p.stride_b = 96 * 96;
    });
    const std::size_t size = std::size_t(1) << 16;
    std::mt19937 rng(4);
    std::uniform_real_distribution<float> uniform(-1, 1);
    for (const auto& [what, p] : cases) {
        INFO(what);
        std::vector<float> a(size), b(size);
        for (auto& v : a) v = uniform(rng);
        for (auto& v : b) v = uniform(rng);
        std::vector<std::uint16_t> a16(size), b16(size);
        bf16_from_float(a.data(), a16.data(), size);
        bf16_from_float(b.data(), b16.data(), size);
        bf16_to_float(a16.data(), a.data(), size);
        bf16_to_float(b16.data(), b.data(), size);
        std::vector<float> got(size, 0.5f), want(size, 0.5f);
        {
            const autocast_test::WidenedBf16 force(true);
            CHECK(dnnl::bf16_path() == dnnl::Bf16Path::widened);
            dnnl::matmul(p, a16.data(), b16.data(), got.data());
        }
        dnnl::Matmul f32 = p;
        f32.input = dnnl::Input::f32;
        dnnl::matmul(f32, a.data(), b.data(), want.data());
        REQUIRE(std::memcmp(got.data(), want.data(), size * sizeof(float)) == 0);
    }
}

TEST_CASE("oneDNN's failures reach the caller as Errors, out of memory naming the op", "[bfloat16][dnnl]") {
    using Catch::Matchers::Contains;
    if (dnnl::available()) {
        // Rows 1 apart, closer than a row is long: a layout oneDNN refuses with a dnnl::error.
        dnnl::Matmul p;
        p.m = p.n = p.k = 8;
        p.lda = 1;
        std::vector<float> a(64, 1.0f), b(64, 1.0f), c(64);
        CHECK_THROWS_AS(dnnl::matmul(p, a.data(), b.data(), c.data()), Error);
        CHECK_THROWS_WITH(dnnl::matmul(p, a.data(), b.data(), c.data()),
                          Contains("dnnl matmul: oneDNN failed") && Contains("m 8 n 8 k 8"));
    }
    // Memory oneDNN could not get (its out_of_memory status) is reported as the allocator's own.
    const Shape shape{3, 4};
    const AllocContext context("some_op", shape);
    CHECK_THROWS_WITH(throw_out_of_memory(std::string("oneDNN's kernels or working memory")),
                      "some_op: out of memory for a result of shape (3, 4): cannot allocate oneDNN's kernels or "
                      "working memory");
}
