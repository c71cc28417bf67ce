// 8. Second derivatives: a loss that contains a gradient, and a Hessian-vector product.
//
// Part 1, Sobolev training: a small network learns sin(x) from its values *and* its slope.
// The slope of the network, d net / dx, comes from autograd::grad with create_graph = true, so
// it is itself a tensor with a graph; the loss compares it with cos(x), and backward() goes
// through the gradient computation to the weights (torch.autograd.grad(..., create_graph=True)).
//
// Part 2: the Hessian of a multi-head attention model's loss applied to a direction v, by double
// backward (gradient, dot with v, gradient again), checked against finite differences of the
// gradient: (∇L(θ + εv) − ∇L(θ − εv)) / 2ε.
//
// Exit code 0 when the network learned both the values and the slope, and H·v matches.
#include <cmath>

#include <xgrad/xgrad.hpp>

using namespace xgrad;

namespace {

// Part 1. A 1 → 32 → 32 → 1 tanh network fit to sin and its derivative.
bool sobolev_training() {
    manual_seed(0);
    auto l1 = std::make_shared<nn::Linear>(1, 32);
    auto l2 = std::make_shared<nn::Linear>(32, 32);
    auto l3 = std::make_shared<nn::Linear>(32, 1);
    auto net = [&](const Tensor& x) { return l3->forward(tanh(l2->forward(tanh(l1->forward(x))))); };
    std::vector<Tensor> params;
    for (auto* m : {static_cast<nn::Module*>(l1.get()), static_cast<nn::Module*>(l2.get()), static_cast<nn::Module*>(l3.get())})
        for (const Tensor& p : m->parameters()) params.push_back(p);
    optim::Adam opt(params, optim::AdamOptions(1e-2));

    double value_loss = 0, slope_loss = 0;
    for (int step = 1; step <= 1500; ++step) {
        // x must require grad: the slope is the gradient with respect to it.
        Tensor x = uniform({64, 1}, -3.0, 3.0).requires_grad_();
        Tensor y = net(x);                                                   // (64, 1)
        // d y_i / d x_i for every sample at once: the rows are independent, so the gradient of
        // the sum is each row's own slope. create_graph keeps it differentiable.
        Tensor slope = autograd::grad({y.sum()}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
        Tensor target = sin(x.detach()), target_slope = cos(x.detach());
        Tensor loss_values = nn::mse_loss(y, target), loss_slope = nn::mse_loss(slope, target_slope);
        Tensor loss = loss_values + loss_slope;
        opt.zero_grad();
        loss.backward();  // through the network and through its gradient
        opt.step();
        value_loss = loss_values.item<double>();
        slope_loss = loss_slope.item<double>();
        if (step % 250 == 0)
            fmt::print("sobolev step {:4d}  value loss {:.6f}  slope loss {:.6f}\n", step, value_loss, slope_loss);
    }
    return value_loss < 1e-3 && slope_loss < 1e-3;
}

// Part 2. H·v for an attention model's loss, by double backward and by finite differences.
bool hessian_vector_product() {
    manual_seed(1);
    // float64, so that the finite differences are accurate to about 1e-8.
    auto attention = std::make_shared<nn::MultiHeadAttention>(4, 4, 4, 8, 2, /*dropout=*/0.0);
    auto head = std::make_shared<nn::Linear>(8, 1);
    attention->to(kFloat64);
    head->to(kFloat64);
    std::vector<Tensor> params = attention->parameters();
    for (const Tensor& p : head->parameters()) params.push_back(p);

    Tensor queries = uniform({3, 2, 4}, -1.0, 1.0, kFloat64);
    Tensor keys = uniform({3, 5, 4}, -1.0, 1.0, kFloat64);
    Tensor valid_lens = from_vector(std::vector<std::int64_t>{5, 2, 3}, {3});
    Tensor target = uniform({3, 2, 1}, -1.0, 1.0, kFloat64);
    auto loss_fn = [&] { return nn::mse_loss(head->forward(attention->forward(queries, keys, keys, valid_lens)), target); };

    // A random direction v, one tensor per parameter.
    std::vector<Tensor> v;
    for (const Tensor& p : params) v.push_back(uniform(p.shape(), -1.0, 1.0, kFloat64));

    // Double backward: g = ∇L with a graph, then ∇(g·v) = H v.
    std::vector<Tensor> g = autograd::grad({loss_fn()}, params, {}, std::nullopt, /*create_graph=*/true);
    Tensor g_dot_v = zeros({}, kFloat64);
    for (std::size_t i = 0; i < g.size(); ++i) g_dot_v = g_dot_v + (g[i] * v[i]).sum();
    std::vector<Tensor> hv = autograd::grad({g_dot_v}, params);

    // Finite differences of the gradient along v.
    const double eps = 1e-6;
    auto gradient_at = [&](double t) {
        std::vector<Tensor> saved;
        {
            NoGradGuard no_grad;
            for (std::size_t i = 0; i < params.size(); ++i) {
                saved.push_back(params[i].clone());
                params[i].set_data(params[i] + v[i] * t);
            }
        }
        std::vector<Tensor> grads = autograd::grad({loss_fn()}, params);
        NoGradGuard no_grad;
        for (std::size_t i = 0; i < params.size(); ++i) params[i].set_data(saved[i]);
        return grads;
    };
    const auto up = gradient_at(eps), down = gradient_at(-eps);
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < params.size(); ++i) {
        const auto a = hv[i].to_vector<double>();
        const auto u = up[i].to_vector<double>(), d = down[i].to_vector<double>();
        for (std::size_t k = 0; k < a.size(); ++k) {
            worst = std::max(worst, std::abs(a[k] - (u[k] - d[k]) / (2 * eps)));
            scale = std::max(scale, std::abs(a[k]));
        }
    }
    fmt::print("H·v of the attention model's loss: {} parameters, largest |H·v| {:.4g}, largest difference "
               "from finite differences {:.3g}\n",
               params.size(), scale, worst);
    return worst < 1e-6 * std::max(1.0, scale);
}

}  // namespace

int main() {
    const bool learned = sobolev_training();
    const bool matches = hessian_vector_product();
    fmt::print("{}\n", learned && matches ? "ok" : "FAILED");
    return learned && matches ? 0 : 1;
}
