// README's "Porting modules from PyTorch" program, as written there: it must compile and learn.
#include <cstdio>

#include "nn/nn.hpp"
#include "nn_helpers.hpp"
#include "optim/optim.hpp"

using namespace xgrad;
using namespace xgrad::test;

namespace {

class Head : public nn::Module, public nn::Callable<Head> {
public:
    Head(std::size_t d, std::size_t h) : nn::Module("Head") {
        q = register_module("q", std::make_shared<nn::Linear>(d, h));
    }
    Tensor forward(const Tensor& x, const Tensor& mask = Tensor()) {
        (void)mask;
        return (*q)(x);
    }
    std::shared_ptr<nn::Linear> q;
};

}  // namespace

TEST_CASE("the README port of a PyTorch training loop compiles and learns", "[porting]") {
    manual_seed(0);
    Head head(4, 2);
    CHECK(head(ones({1, 4})).shape() == Shape{1, 2});
    CHECK(head(ones({1, 4}), ones({1})).shape() == Shape{1, 2});

    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(),
                                                  std::make_shared<nn::Linear>(8, 1));
    model->apply([](nn::Module& m) {
        if (auto* lin = m.as<nn::Linear>()) {
            nn::init::xavier_uniform_(lin->weight());
            nn::init::zeros_(lin->bias());
        }
    });
    CHECK(vals(model->at<nn::Linear>(0).bias()) == std::vector<double>(8, 0.0));
    optim::Adam opt(model->parameters(), 1e-2);
    double first = 0, last = 0;
    for (int step = 0; step < 200; ++step) {
        Tensor x = randn({32, 4});
        Tensor loss = nn::mse_loss((*model)(x), x.sum({1}, true));
        opt.zero_grad();
        loss.backward();
        opt.step();
        (step == 0 ? first : last) = loss.item<double>();
    }
    CHECK(last < 0.1 * first);
    const std::string path = "/tmp/xgrad_test_nn_porting.npz";
    nn::save(*model, path);
    std::vector<std::string> names;
    for (const auto& [n, t] : load_npz(path)) names.push_back(n);
    CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
    auto [missing, unexpected] = model->load_state_dict(load_npz(path), false);
    CHECK(missing.empty());
    CHECK(unexpected.empty());
    std::remove(path.c_str());
}
