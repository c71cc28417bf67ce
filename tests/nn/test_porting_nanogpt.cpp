// The module lines of nanoGPT's model.py and train.py that a line-by-line port writes as torch
// does: nn.GELU, weight tying, a checkpoint's parts by name.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../helpers.hpp"
#include "core/creation.hpp"
#include "core/io/npz.hpp"
#include "core/ops.hpp"
#include "nn/nn.hpp"

using namespace xgrad;
using namespace xgrad::indexing;
using Catch::Matchers::Contains;

TEST_CASE("nn::GELU as torch.nn.GELU, exact and tanh", "[porting-nanogpt]") {
    // torch 1.13, float64: nn.GELU()(x) and nn.GELU(approximate='tanh')(x)
    const Tensor x = tensor({-3.0, -1.0, -0.5, 0.0, 0.25, 1.0, 2.5}, kFloat64);
    const std::vector<double> exact{-0.00404969409489031, -0.15865525393145702, -0.15426876936299344, 0.0,
                                    0.14967658142073093,  0.841344746068543,    2.4844758366855597};
    const std::vector<double> approx{-0.0036373920817729943, -0.15880800939172324, -0.15428599017485606, 0.0,
                                     0.149675350701685,      0.8411919906082768,   2.484915733910001};
    nn::GELU gelu;
    nn::GELU gelu_tanh("tanh");
    const std::vector<double> got = gelu(x).to_vector<double>(), got_tanh = gelu_tanh(x).to_vector<double>();
    for (std::size_t i = 0; i < exact.size(); ++i) {
        CHECK(got[i] == Approx(exact[i]).margin(1e-15));
        CHECK(got_tanh[i] == Approx(approx[i]).margin(1e-15));
    }
    REQUIRE(nn::to_string(gelu) == "GELU(approximate='none')");
    REQUIRE(nn::to_string(gelu_tanh) == "GELU(approximate='tanh')");
    REQUIRE_THROWS_WITH(nn::GELU("erf"), Contains("GELU: approximate must be 'none' or 'tanh', got 'erf'"));
    // float32 in, float32 out; a module of nanoGPT's MLP prints torch's line.
    REQUIRE(gelu_tanh(x.to(kFloat32)).dtype() == kFloat32);
    auto mlp = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(2, 8), std::make_shared<nn::GELU>());
    REQUIRE_THAT(nn::to_string(*mlp), Contains("(1): GELU(approximate='none')"));
    const Tensor leaf = randn({5}, kFloat64).requires_grad_();
    REQUIRE_GRADCHECK([&](const std::vector<Tensor>& in) { return gelu_tanh(in[0]); }, {leaf}, "GELU tanh");
    REQUIRE_GRADGRADCHECK([&](const std::vector<Tensor>& in) { return gelu_tanh(in[0]); }, {leaf}, "GELU tanh");
    REQUIRE_THROWS_WITH(gelu(Tensor()), Contains("GELU"));
}

TEST_CASE("Weight tying as nanoGPT's wte.weight = lm_head.weight, through set_parameter", "[porting-nanogpt]") {
    struct Tied : nn::Module {
        Tied() : nn::Module("Tied") {
            wte = register_module("wte", std::make_shared<nn::Embedding>(5, 3));
            lm_head = register_module("lm_head", std::make_shared<nn::Linear>(3, 5, false));
            set_parameter("wte.weight", lm_head->weight());   // self.wte.weight = self.lm_head.weight
        }
        std::shared_ptr<nn::Embedding> wte;
        std::shared_ptr<nn::Linear> lm_head;
    };
    Tied m;
    REQUIRE(m.wte->weight().is_same(m.lm_head->weight()));
    std::vector<std::string> names;
    for (const auto& [n, p] : m.named_parameters()) names.push_back(n);
    REQUIRE(names == std::vector<std::string>{"wte.weight"});   // once, under its first name, as torch's
    names.clear();
    for (const auto& [n, p] : m.state_dict()) names.push_back(n);
    REQUIRE(names == std::vector<std::string>{"wte.weight", "lm_head.weight"});
    // One tensor, both gradients summed.
    const Tensor ids = from_vector(std::vector<std::int64_t>{1, 1, 4}, {3});
    const Tensor h = randn({2, 3});
    ((*m.wte)(ids).sum() + (*m.lm_head)(h).sum()).backward();
    const Tensor w = m.lm_head->weight().detach().requires_grad_();
    (index_select(w, 0, ids).sum() + matmul_t(h, w, false, true).sum()).backward();
    REQUIRE(m.lm_head->weight().grad().to_vector<float>() == w.grad().to_vector<float>());
}

TEST_CASE("find_entry, sub_entries and with_prefix hold a checkpoint's parts as torch's dict", "[porting-nanogpt]") {
    // checkpoint = {"model": model.state_dict(), "optimizer": ..., "iter_num": 5}; torch.save(...)
    nn::Linear model(2, 3);
    NamedTensors checkpoint = with_prefix("model", model.state_dict());
    REQUIRE(checkpoint[0].first == "model.weight");
    checkpoint.emplace_back("iter_num", tensor(5.0, kInt64));
    checkpoint.emplace_back("modelx.weight", zeros({1}));   // not under "model."
    const std::string path = "/tmp/xgrad_test_porting_nanogpt_" + std::to_string(::getpid()) + ".npz";
    save_npz(path, checkpoint);
    const NamedTensors loaded = load_npz(path);
    REQUIRE(find_entry(loaded, "iter_num").item<std::int64_t>() == 5);
    const NamedTensors model_sd = sub_entries(loaded, "model");   // checkpoint["model"]
    REQUIRE(model_sd.size() == 2);
    nn::Linear other(2, 3);
    other.load_state_dict(model_sd);
    REQUIRE(other.weight().to_vector<float>() == model.weight().to_vector<float>());
    REQUIRE(sub_entries(loaded, "optimizer").empty());
    REQUIRE_THROWS_WITH(find_entry(loaded, "best_val_loss"),
                        Contains("find_entry: there is no entry 'best_val_loss'") && Contains("iter_num"));
    REQUIRE(find_entry(checkpoint, "iter_num").is_same(checkpoint[2].second));   // the entry itself
    std::remove(path.c_str());
}

TEST_CASE("find_entry of a temporary list keeps its tensor alive", "[porting-nanogpt]") {
    const auto entries = [] { return NamedTensors{{"X", tensor({1.0, 2.0, 3.0})}}; };
    const auto& x = find_entry(entries(), "X");  // the list is gone after this line
    CHECK(x.to_vector<double>() == std::vector<double>{1, 2, 3});
}
