// Second derivatives of the fused kernels (softmax, log_softmax, masked_softmax, layer_norm,
// add_layer_norm, cross_entropy, mse_loss): gradgradcheck in float64 over their options, and
// Hessian-vector products against torch 1.13.
#include <functional>

#include "core/autograd.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

Shape tail(const Shape& s, std::size_t k) { return Shape(s.end() - static_cast<long>(k), s.end()); }

// Values ((i·a) mod m − (m − 1)/2)/s, i the flat index: the same doubles in C++ and Python, so
// that the torch values below are for these very inputs.
Tensor seq(const Shape& shape, int a, int m, double s) {
    std::size_t n = 1;
    for (std::size_t d : shape) n *= d;
    std::vector<double> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = (static_cast<double>((static_cast<int>(i) * a) % m) - (m - 1) / 2.0) / s;
    return from_vector(v, shape, kFloat64);
}

// With v = seq(out, 5, 11, 4) the gradient flowing into f's output, S = Σ_k ⟨∂⟨f, v⟩/∂x_k, u_k⟩,
// u_k = seq(x_k's shape, u_seed[k], 13, 5): the gradient of S with respect to each x_k and to v
// (zeros where S does not depend on one), as the torch script below computes it.
std::vector<std::vector<double>> second(const Fn& f, std::vector<Tensor> xs, const Shape& out,
                                        const std::vector<int>& u_seed) {
    for (Tensor& x : xs) x = x.detach().requires_grad_();
    Tensor v = seq(out, 5, 11, 4.0).requires_grad_();
    const std::vector<Tensor> g = autograd::grad({f(xs)}, xs, {v}, std::nullopt, /*create_graph=*/true, true);
    Tensor s = zeros({}, kFloat64);
    for (std::size_t k = 0; k < xs.size(); ++k)
        if (g[k].defined()) s = s + sum(g[k] * seq(xs[k].shape(), u_seed[k], 13, 5.0));
    std::vector<Tensor> wrt = xs;
    wrt.push_back(v);
    const std::vector<Tensor> d = autograd::grad({s}, wrt, {}, std::nullopt, false, /*allow_unused=*/true);
    std::vector<std::vector<double>> result;
    for (std::size_t k = 0; k < wrt.size(); ++k) result.push_back(vals(d[k].defined() ? d[k] : zeros_like(wrt[k])));
    return result;
}

// Each of `got` within 1e-9 (absolute or relative) of torch's.
void check_torch(const std::vector<std::vector<double>>& got, const std::vector<std::vector<double>>& torch) {
    REQUIRE(got.size() == torch.size());
    for (std::size_t k = 0; k < got.size(); ++k) {
        INFO("gradient " << k);
        CHECK_THAT(got[k], Catch::Matchers::Approx(torch[k]).margin(1e-9).epsilon(1e-9));
    }
}

// Torch 1.13 (/usr/bin/python3), float64, made by this script (F = torch.nn.functional):
//   def seq(shape, a, m, s): values ((i*a) % m - (m-1)/2) / s over the flat index i, reshaped
//   def second(f, xs, out, u):
//       v = seq(out, 5, 11, 4.0).requires_grad_(); xs requiring grad
//       g = torch.autograd.grad(f(*xs), xs, v, create_graph=True, allow_unused=True)
//       S = sum((g[k] * seq(xs[k].shape, u[k], 13, 5.0)).sum() for each defined g[k])
//       return torch.autograd.grad(S, xs + [v], allow_unused=True)  (None as zeros)
// with the inputs, functions and u of each test below.
// log_softmax (3,4) axis 0: d/dx, d/dv
const std::vector<std::vector<double>> kLogSoftmax0 = {
    {0.042551856958588083, 0.10654291712243338, -0.11209939615665283, 0.04007418296018106,
     -0.04089888638759849, 0.0096099999466337377, 0.063611273556923878, 0.042972564795792659,
     -0.001652970570989586, -0.11615291706906712, 0.048488122599728949, -0.083046747755973677},
    {-2.1690035198942157, 0.28549780176325379, 0.069347783654311185, 0.22696762154916061,
     0.23099648010578433, 0.085497801763253722, -0.13065221634568883, 0.026967621549160659,
     0.030996480105784374, -0.11450219823674623, -0.33065221634568887, -0.17303237845083935},
};
// log_softmax (3,4) axis 1: d/dx, d/dv
const std::vector<std::vector<double>> kLogSoftmax1 = {
    {-0.011624155191908561, -0.021499915228459284, 0.016782215100127264, 0.016341855320240579,
     -0.092224992961180668, 0.022134072358676243, 0.047646417863793367, 0.022444502738711073,
     0.2608198981982035, -0.4961284166759507, -0.0040582773379903439, 0.2393667958157375},
    {-1.1031503528912969, -0.50315035289129706, 0.096849647108702919, 0.6968496471087029,
     0.72114186849179918, -1.2788581315082008, -0.67885813150820074, -0.078858131508200757,
     1.3614020627902428, -0.63859793720975722, -0.038597937209757238, 0.56140206279024274},
};
// softmax (3,4) axis 0: d/dx, d/dv
const std::vector<std::vector<double>> kSoftmax0 = {
    {0.30496778553561599, 0.032228216065360742, -0.017000589639473034, 0.0079591301656008751,
     -0.22254873155307894, -0.0041930844955748873, 0.0015123173072044021, -0.018089322142858615,
     -0.082419053982537072, -0.028035131569785824, 0.015488272332268644, 0.010130191977257732},
    {-0.1702074278343523, 0.071028611414955617, 0.049821953847401255, 0.017810747982302689,
     0.16359554555039396, 0.0064066666310891663, -0.028271677136410607, 0.019098917687018966,
     0.006611882283958345, -0.077435278046044775, -0.021550276710990642, -0.036909665669321641},
};
// masked_softmax (2,2,3) valid_lens (2,1 / 3): d/dx, d/dv
const std::vector<std::vector<double>> kMaskedSoftmax = {
    {0.0719280290711172, -0.0719280290711172, 0, 0.071928029071117158,
     -0.071928029071117186, 0, 0, 0,
     0, 0.032162751337066503, 0.019583799696174131, -0.05174655103324078},
    {-0.095210938497368766, 0.09521093849736878, 0, -0.09521093849736878,
     0.095210938497368766, -0, 0, 0,
     0, -0.26081933210996683, 0.012916957387850857, 0.24790237472211585},
};

}  // namespace

TEST_CASE("softmax and log_softmax are twice differentiable along any axis", "[gradgrad][softmax]") {
    const Tensor x = param({2, 3, 4}, -2, 2, 1);
    for (long axis : {0L, 1L, 2L, -1L}) {
        INFO("axis " << axis);
        REQUIRE_GRADGRADCHECK([axis](const std::vector<Tensor>& in) { return softmax(in[0], axis); }, {x}, "softmax");
        REQUIRE_GRADGRADCHECK([axis](const std::vector<Tensor>& in) { return log_softmax(in[0], axis); }, {x},
                              "log_softmax");
    }
    // One row, and a row of one.
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& in) { return softmax(in[0], 0); }, {param({5}, -2, 2, 2)},
                          "softmax of one row");
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& in) { return log_softmax(in[0], 1); }, {param({3, 1}, -2, 2, 3)},
                          "log_softmax of rows of one");
}

TEST_CASE("softmax and log_softmax second derivatives match torch", "[gradgrad][softmax][torch]") {
    const Tensor x = seq({3, 4}, 7, 17, 5.0);
    check_torch(second([](const std::vector<Tensor>& in) { return log_softmax(in[0], 0); }, {x}, {3, 4}, {3}),
                kLogSoftmax0);
    check_torch(second([](const std::vector<Tensor>& in) { return log_softmax(in[0], 1); }, {x}, {3, 4}, {3}),
                kLogSoftmax1);
    check_torch(second([](const std::vector<Tensor>& in) { return softmax(in[0], 0); }, {x}, {3, 4}, {3}), kSoftmax0);
}

TEST_CASE("masked_softmax is twice differentiable under every kind of mask", "[gradgrad][softmax][masked]") {
    const Tensor x = param({2, 3, 4}, -2, 2, 4);
    const Tensor lens1 = from_vector(std::vector<std::int64_t>{2, 0}, {2});
    const Tensor lens2 = from_vector(std::vector<std::int64_t>{1, 4, 3, 0, 2, 9}, {2, 3});
    const Tensor where = tensor({{{1.0, 0.0, 1.0, 1.0}, {0.0, 0.0, 0.0, 0.0}, {1.0, 1.0, 0.0, 1.0}},
                                 {{0.0, 1.0, 1.0, 0.0}, {1.0, 1.0, 1.0, 1.0}, {0.0, 0.0, 1.0, 0.0}}}) > 0.5;
    const Tensor shared = tensor({{1.0, 0.0, 1.0, 1.0}, {0.0, 1.0, 0.0, 0.0}, {1.0, 1.0, 0.0, 1.0}}) > 0.5;
    const std::vector<std::pair<const char*, AttentionMask>> masks{
        {"valid lengths (batch,)", AttentionMask::valid_lens(lens1)},
        {"valid lengths (batch, queries)", AttentionMask::valid_lens(lens2)},
        {"causal", AttentionMask::causal()},
        {"bool mask (batch, queries, keys)", AttentionMask::attend_where(where)},
        {"bool mask (queries, keys)", AttentionMask::attend_where(shared)},
        {"every key", AttentionMask()},
    };
    for (const auto& [name, mask] : masks) {
        REQUIRE_GRADGRADCHECK([mask = mask](const std::vector<Tensor>& in) { return masked_softmax(in[0], mask); }, {x},
                              name);
    }
    // d2l's signature, lengths as a tensor.
    REQUIRE_GRADGRADCHECK([&](const std::vector<Tensor>& in) { return masked_softmax(in[0], lens2); }, {x},
                          "masked_softmax(X, valid_lens)");
}

TEST_CASE("masked_softmax second derivatives match torch's softmax of the filled scores", "[gradgrad][softmax][torch]") {
    // torch: F.softmax(x.masked_fill(~keep, -1e6), -1), keep the first 2, 2, 1 and 3 keys.
    const Tensor x = seq({2, 2, 3}, 7, 17, 5.0);
    const Tensor lens = from_vector(std::vector<std::int64_t>{2, 2, 1, 3}, {2, 2});
    check_torch(second([&](const std::vector<Tensor>& in) { return masked_softmax(in[0], lens); }, {x}, {2, 2, 3}, {3}),
                kMaskedSoftmax);
}
