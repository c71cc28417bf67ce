// Parameters, gradients and optimizer state stay float32 (as under torch's autocast): bfloat16
// parameters are refused where they could enter, and bfloat16 buffers and files convert as npz says.
#include <cmath>
#include <cstdio>

#include "nn/nn.hpp"
#include "nn_helpers.hpp"
#include "optim/optim.hpp"

using namespace xgrad;
using namespace xgrad::nn;
using Catch::Matchers::Contains;

namespace {

class WithBuffer : public Module {
public:
    WithBuffer() : Module("WithBuffer") {
        lin = register_module("lin", std::make_shared<Linear>(2, 2));
        register_buffer("scale", ones({3}, kBFloat16));
    }
    std::shared_ptr<Linear> lin;
};

}  // namespace

TEST_CASE("bfloat16 parameters are refused by Module and the optimizers", "[bfloat16][nn]") {
    Linear lin(3, 2);
    const Tensor before = lin.weight().detach();
    CHECK_THROWS_WITH(lin.to(kBFloat16), Contains("Linear: to:") && Contains("bfloat16") && Contains("AutocastGuard"));
    CHECK(lin.weight().dtype() == kFloat32);  // unchanged by the refused call
    CHECK((lin.weight() == before).sum().item<std::int64_t>() == 6);

    struct Holder : Module {
        Holder() : Module("Holder") {}
        void add(const Tensor& t) { register_parameter("w", t); }
    } holder;
    CHECK_THROWS_WITH(holder.add(zeros({2}, kBFloat16)),
                      Contains("Holder: register_parameter: 'w' is bfloat16") && Contains("float32"));
    CHECK(holder.parameters().empty());

    const Tensor p = zeros({2}, TensorOptions(kBFloat16).requires_grad(true));
    CHECK_THROWS_WITH(optim::SGD({p}, 0.1), Contains("SGD") && Contains("parameter 0 is bfloat16") &&
                                                 Contains("stay float32"));
    CHECK_THROWS_WITH(optim::Adam({lin.weight(), p}), Contains("Adam") && Contains("parameter 1 is bfloat16"));
    CHECK_THROWS_WITH(optim::AdamW({p}), Contains("bfloat16"));

    // A parameter turned bfloat16 behind the optimizer's back (set_data) is refused at step().
    Linear lin2(2, 2);
    optim::Adam adam(lin2.parameters(), 1e-3);
    lin2.forward(ones({1, 2})).sum().backward();
    lin2.weight().set_data(lin2.weight().to(kBFloat16));
    Tensor w2 = lin2.weight();
    w2.set_grad(ones({2, 2}, kBFloat16));
    CHECK_THROWS_WITH(adam.step(), Contains("Adam.step") && Contains("bfloat16"));
    CHECK_THROWS_WITH(optim::clip_grad_norm({lin2.weight()}, 1.0), Contains("clip_grad_norm") && Contains("bfloat16"));
}

TEST_CASE("a bfloat16 input to a float32 module says to convert it", "[bfloat16][nn]") {
    Linear lin(3, 2);
    CHECK_THROWS_WITH(lin.forward(ones({4, 3}, kBFloat16)),
                      Contains("Linear: input is bfloat16") && Contains(".to(kFloat32)"));
    try {
        lin.forward(ones({4, 3}, kBFloat16));
    } catch (const Error& e) {
        CHECK_THAT(e.what(), !Contains("module with .to(kBFloat16)"));  // Module::to refuses it
    }
    // Converted, it runs, and the gradient reaches the float32 parameters as float32.
    const Tensor x = ones({4, 3}, kBFloat16);
    lin.forward(x.to(kFloat32)).sum().backward();
    CHECK(lin.weight().grad().dtype() == kFloat32);
}

TEST_CASE("a bfloat16 buffer saves as float32 and loads back rounded to nearest even", "[bfloat16][nn]") {
    WithBuffer m;
    Tensor scale = m.named_buffers().at(0).second;
    REQUIRE(scale.dtype() == kBFloat16);
    {
        NoGradGuard no_grad;
        scale.set_data(tensor({1.1, -0.0, 3e38}).to(kBFloat16));
    }
    const std::string path = "/tmp/xgrad_test_nn_bf16_buffer.npz";
    save(m, path);
    const NamedTensors file = load_npz(path);
    for (const auto& [name, t] : file) {
        INFO(name);
        CHECK(t.dtype() == kFloat32);  // numpy has no bfloat16
    }
    WithBuffer m2;
    load(m2, path);
    const Tensor loaded = m2.named_buffers().at(0).second;
    CHECK(loaded.dtype() == kBFloat16);
    CHECK((loaded.to(kFloat32) == scale.to(kFloat32)).to_vector<bool>() == std::vector<bool>{true, true, true});
    CHECK(std::signbit(loaded[1].item<float>()));
    // float32 values that bfloat16 does not hold round to nearest even into the buffer.
    NamedTensors state = m2.state_dict();
    for (auto& [name, t] : state)
        if (name == "scale") t = tensor({1.0 + std::ldexp(1.0, -8), 1.0 + 3 * std::ldexp(1.0, -8), 0.1});
    m2.load_state_dict(state);
    CHECK(m2.named_buffers().at(0).second.to_vector<float>() ==
          std::vector<float>{1.0f, 1.015625f, bf16_to_float(bf16_from_float(0.1f))});
    // Module::to converts floating buffers, bfloat16 ones too (as torch's module.double()).
    m2.to(kFloat64);
    CHECK(m2.named_buffers().at(0).second.dtype() == kFloat64);
    std::remove(path.c_str());
}
