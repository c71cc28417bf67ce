// nn::LayerNorm with torch 2.1's signature LayerNorm(normalized_shape, eps, elementwise_affine,
// bias): nanoGPT's LayerNorm(ndim, bias=False) is a weight without a bias.
#include "nn/nn.hpp"
#include "nn_helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using namespace xgrad::nn;

TEST_CASE("torch's nn.LayerNorm(4, bias=False) has a weight and no bias", "[layernorm][layernorm-bias]") {
    LayerNorm ln(4, 1e-5, true, /*bias=*/false);
    CHECK(ln.weight().defined());
    CHECK_FALSE(ln.bias().defined());
    const auto params = ln.named_parameters();
    REQUIRE(params.size() == 1);
    CHECK(params[0].first == "weight");
    const auto state = ln.state_dict();
    REQUIRE(state.size() == 1);
    CHECK(state[0].first == "weight");
    // torch 2.1 prints the same line with or without a bias.
    CHECK(to_string(ln) == "LayerNorm((4,), eps=1e-05, elementwise_affine=True)");
    // torch: F.layer_norm(x, (4,), w, None, 1e-5) for w = [0.5, -1, 2, 1.5]
    {
        NoGradGuard no_grad;
        ln.weight().copy_(tensor({0.5, -1.0, 2.0, 1.5}));
    }
    const Tensor x = tensor({{1.0, 2.0, 4.0, -1.0}, {0.5, 0.0, 3.0, 2.0}});
    CHECK_THAT(vals(ln(x)), approx({-0.13867482542991638, -0.27734971046447754, 2.7734968662261963, -2.080122470855713,
                                    -0.3668983578681946, 1.1531091928482056, 2.7255311012268066, 0.7862108945846558},
                                   1e-6));
    // The braced and the IntList forms take bias too; bias is moot without elementwise_affine.
    CHECK(LayerNorm({2, 4}, 1e-5, true, false).named_parameters().size() == 1);
    CHECK(LayerNorm(Shape{4}, 1e-6, false, true).named_parameters().empty());
    CHECK(LayerNorm(4, 1e-5, true, true).named_parameters().size() == 2);
    // A state with a bias does not load into one without (strict), as torch's unexpected key.
    LayerNorm with_bias(4);
    CHECK_THROWS_WITH(ln.load_state_dict(with_bias.state_dict()), Catch::Contains("bias"));
}

TEST_CASE("torch's nn.LayerNorm(4, bias=False): gradients in double", "[layernorm][layernorm-bias][gradgrad]") {
    LayerNorm ln(4, 1e-5, true, false);
    ln.to(kFloat64);
    ln.set_parameter("weight", param({4}, 0.5, 1.5, 9));
    REQUIRE_MODULE_GRADCHECK(ln, {param({2, 3, 4}, -2, 2)}, [&](auto& x) { return ln(x[0]); }, "LayerNorm");
    REQUIRE_MODULE_GRADGRADCHECK(ln, {param({2, 4}, -2, 2)}, [&](auto& x) { return ln(x[0]); }, "LayerNorm");
}
