// x ** 0.5, -0.5, -1 and -2 as torch computes them: sqrt(x), 1/sqrt(x), 1/x and 1/(x·x), not
// pow(x, p), whose rounding differs from 1/sqrt(x) in the last bit for a quarter of inputs.
// Expected values are torch 1.13's, pasted, compared bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "core/creation.hpp"
#include "core/ops.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

namespace {
const Tolerance kExact{0, 0};
}  // namespace

TEST_CASE("pow by -0.5 and the other exponents torch computes without pow match torch's bits", "[pow-special]") {
    const Tensor x32 = tensor({7.0, 3.0, 0.3, 5.5, 1e-3, 123.456});
    // (x ** -0.5) for the float32 x: the first and fifth differ from a correctly rounded pow.
    check_close_or_both_nan(vals(pow(x32, -0.5)),
                            {0.37796449661254883, 0.5773502588272095, 1.8257417678833008, 0.42640143632888794,
                             31.622774124145508, 0.09000028669834137},
                            kExact);
    check_close_or_both_nan(vals(x32.pow(0.5)),
                            {2.6457512378692627, 1.7320507764816284, 0.547722578048706, 2.345207929611206,
                             0.03162277862429619, 11.111075401306152},
                            kExact);
    check_close_or_both_nan(vals(pow(x32, -1)),
                            {0.1428571492433548, 0.3333333432674408, 3.3333332538604736, 0.1818181872367859,
                             999.9999389648438, 0.008100051432847977},
                            kExact);
    check_close_or_both_nan(vals(pow(x32, -2.0)),
                            {0.020408162847161293, 0.1111111119389534, 11.11111068725586, 0.03305784985423088,
                             999999.875, 6.561083864653483e-05},
                            kExact);
    const Tensor x64 = tensor({7.0, 3.0, 0.3, 5.5, 1e-3, 123.456}, kFloat64);
    check_close_or_both_nan(vals(pow(x64, -0.5)),
                            {0.3779644730092272, 0.5773502691896258, 1.8257418583505538, 0.42640143271122083,
                             31.622776601683796, 0.0900002880013824},
                            kExact);
    // An int64 tensor to -0.5 computes in float32 the same way: torch.tensor([7, 3]) ** -0.5.
    check_close_or_both_nan(vals(pow(tensor({7, 3}), -0.5)), {0.37796449661254883, 0.5773502588272095}, kExact);
}

TEST_CASE("pow by 0.5, -0.5, -1 and -2 keeps torch's signed zeros and infinities", "[pow-special]") {
    // x = [-0.0, 0.0, -inf, inf, -4, nan], torch 1.13, float32 and float64 alike.
    for (const Dtype d : {kFloat32, kFloat64}) {
        const Tensor x = tensor({-0.0, 0.0, -kInf, kInf, -4.0, kNaN}, d);
        const std::vector<double> half = vals(pow(x, 0.5));
        check_close_or_both_nan(half, {-0.0, 0, kNaN, kInf, kNaN, kNaN}, kExact);
        CHECK(std::signbit(half[0]));
        check_close_or_both_nan(vals(pow(x, -0.5)), {-kInf, kInf, kNaN, 0, kNaN, kNaN}, kExact);
        const std::vector<double> inv = vals(pow(x, -1.0));
        check_close_or_both_nan(inv, {-kInf, kInf, -0.0, 0, -0.25, kNaN}, kExact);
        CHECK(std::signbit(inv[2]));
        check_close_or_both_nan(vals(pow(x, -2)), {kInf, kInf, 0, 0, 0.0625, kNaN}, kExact);
    }
}

TEST_CASE("pow by 0.5, -0.5, -1 and -2 passes gradcheck and gradgradcheck", "[pow-special]") {
    const Tensor x = param({2, 3}, 0.5, 2.0, 11);
    for (const double p : {0.5, -0.5, -1.0, -2.0}) {
        INFO("p = " << p);
        REQUIRE_GRADCHECK([p](auto& in) { return pow(in[0], p); }, {x}, "pow(x, p)");
        REQUIRE_GRADGRADCHECK([p](auto& in) { return pow(in[0], p); }, {x}, "pow(x, p)");
    }
}
