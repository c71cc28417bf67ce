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
// layer_norm (2,3,4) ns (4,) with weight and bias: d/dx, d/dw, d/db, d/dv
const std::vector<std::vector<double>> kLayerNormAffine = {
    {0.9882312705530103, 0.14168253387723584, 0.58467183228006403, -1.7145856367103094,
     -0.47863831733038953, 0.15776032585027111, -0.13527486794482035, 0.45615285942493911,
     0.6213840286633816, 0.66520960427839526, -0.22033454005270714, -1.0662590928890701,
     0.45941984872695907, -1.3502176657091356, -0.12253773161709269, 1.0133355485992692,
     0.21468256670906044, 1.1105821840852861, -1.0158509467631638, -0.30941380403118252,
     -0.52666778519365631, -0.78723815143310105, 0.67515742621517882, 0.63874851041157843},
    {0.86135790621760955, 0.2736859351002634, 0.78105677578109223, 0.11305435579104028},
    {0, 0, 0, 0},
    {0.26558891060366618, -0.39161616928845711, 1.5679324785903876, -0.06162678208869915,
     -1.7276120078173198, 0.51249343076297094, 0.61903295023741123, 0.9795487943468455,
     -0.56973455557270902, -1.2519371050778996, -1.285727224893588, 0.78795680126423973,
     -2.6942021508224103, -0.41722576078747486, 0.34868499244197415, -1.2565943322123723,
     -1.7276120078173198, 0.96116176168367495, -0.93306615456053099, 1.3392732450097624,
     -0.56973455557270902, -0.16298329053988486, -0.049697029988458041, -0.17343271698538149},
};
// layer_norm (2,3,4) ns (3,4) no weight or bias: d/dx, d/dv
const std::vector<std::vector<double>> kLayerNormTwoAxes = {
    {0.78918760834889778, 0.087745438612129259, -0.61369673112463929, 0.023866763677952457,
     -0.67757540605881617, 0.47077467644339549, -0.2306674932933731, -0.17912919450419967,
     -0.29454616822754986, 0.26777871826124344, 0.15236174453789308, 0.20390004332706657,
     -0.12851797950253929, -0.060585072181213125, -0.030967676533973469, -0.029271837715856158,
     0.00034555793138350138, 0.0020413967495008269, 0.097895860899949338, -0.12236183841523658,
     0.12920909536530631, -0.091048603949879597, 0.22675939833387213, 0.0065016990186862172},
    {-0.77012153324133681, -0.53313939460287474, -0.29615725596441261, 0.87178255285157757,
     1.1087646914900398, -0.41133864920877772, -0.17435651057031556, 0.062625628068146755,
     1.230565436884137, -1.2204955739922088, -0.052555765176218468, 0.18442637346224378,
     0.67188997080782242, -1.1589909187122069, -0.68241758857254009, 0.10309222261158016,
     0.57966555275124698, 1.365175363935367, -0.77464200662911575, -0.29806867648944874,
     0.4874411346946716, 0.96401446483433828, -0.86686642468569119, -0.39029309454602429},
};
// add_layer_norm (2,3,4) ns (4,) with weight: d/dx, d/dy, d/dw, d/dv
const std::vector<std::vector<double>> kAddLayerNorm = {
    {-0.21552250425904573, -0.12835080941390048, 0.59146994897953586, -0.2475966353065891,
     -0.61270390621441018, 0.40407123848088522, 0.5500977549487811, -0.34146508721525609,
     -0.63389648571845325, 0.46703442984555665, 0.39515633883829426, -0.22829428296539789,
     0.59333368006653009, -0.36934985357457639, 0.016143152350538245, -0.24012697884249184,
     2.2635514444441318, -0.55329074992561977, -2.3822381763646669, 0.67197748184615458,
     0.83928516200706849, -0.42819634799898715, -0.92854208477852995, 0.51745327077044845},
    {-0.21552250425904573, -0.12835080941390048, 0.59146994897953586, -0.2475966353065891,
     -0.61270390621441018, 0.40407123848088522, 0.5500977549487811, -0.34146508721525609,
     -0.63389648571845325, 0.46703442984555665, 0.39515633883829426, -0.22829428296539789,
     0.59333368006653009, -0.36934985357457639, 0.016143152350538245, -0.24012697884249184,
     2.2635514444441318, -0.55329074992561977, -2.3822381763646669, 0.67197748184615458,
     0.83928516200706849, -0.42819634799898715, -0.92854208477852995, 0.51745327077044845},
    {0.28721098070614126, -2.5108008131466582, -0.32916059780433582, 0.74221190330428788},
    {1.8159368945160326, -0.33092187699720382, 0.39445409329960013, 0.5758256905699638,
     0.51610838054666197, -0.44850941078638101, 1.0646573395682659, -0.51299852306267679,
     1.2194332472167788, 0.63539515973415839, -2.8761217966703208, 0.061737152340997289,
     -0.68973507765173236, -1.3477301463930158, 0.74538723733033607, 0.59624719652312252,
     -0.019119860861284914, -0.7156614780291688, -0.82946356491846207, 0.15755194314505622,
     0.12692243542816814, 0.48699373082982333, -0.83296253340612669, -0.58146990108092145},
};
// cross_entropy (3,4,2) targets (3,2) one ignored, mean: d/dlogits, d/dv
const std::vector<std::vector<double>> kCrossEntropyMean = {
    {0.0075998557943900789, 0.0015992202313417545, 0.037201148328781859, -0.0059121174534699028,
     -0.050788809281784829, 0.050332215866407334, 0.0059878051586128847, -0.046019318644279203,
     0, 0.0015992202313417571, 0, -0.005912117453469902,
     0, 0.050332215866407348, 0, -0.046019318644279196,
     -0.058715260971315526, -0.009129321495944042, 0.055210075144060115, 0.0048164242738158933,
     -0.0018714144760584278, -0.051457353951429904, 0.0053766003033138346, 0.055770251173558057},
    {-0.2077792110606648},
};
// cross_entropy (3,4,2) targets (3,2) one ignored, sum: d/dlogits, d/dv
const std::vector<std::vector<double>> kCrossEntropySum = {
    {0.037999278971950393, 0.0079961011567087643, 0.18600574164390929, -0.029560587267349513,
     -0.25394404640892415, 0.25166107933203669, 0.029939025793064424, -0.23009659322139603,
     0, 0.0079961011567087886, 0, -0.029560587267349513,
     0, 0.25166107933203663, 0, -0.23009659322139597,
     -0.29357630485657765, -0.045646607479720221, 0.27605037572030061, 0.024082121369079466,
     -0.0093570723802921339, -0.25728676975714959, 0.026883001516569176, 0.2788512558677903},
    {-1.038896055303324},
};
// cross_entropy (3,4,2) targets (3,2) one ignored, none: d/dlogits, d/dv
const std::vector<std::vector<double>> kCrossEntropyNone = {
    {0.037999278971950393, 0, 0.18600574164390929, 0,
     -0.25394404640892415, 0, 0.029939025793064424, 0,
     0, 0.0015992202313417571, 0, -0.005912117453469902,
     0, 0.050332215866407348, 0, -0.046019318644279196,
     0.23486104388526211, -0.018258642991888084, -0.22084030057624046, 0.0096328485476317866,
     0.0074856579042337111, -0.10291470790285981, -0.021506401213255338, 0.11154050234711611},
    {0.20814595729158236, -0.91368994042980745, 0, 0.086310059570192665,
     -0.12695183035968116, -0.2927103013756106},
};
// cross_entropy (4,5) ignore_index 7, mean: d/dlogits, d/dv
const std::vector<std::vector<double>> kCrossEntropyIgnoreIndex = {
    {0.010059157039855993, 0.019422393592025355, 0.031263403457314758, 0.026452327200618221,
     -0.087197281289814271, 0.019031964349585512, 0.03043737340531676, 0.024846465815454789,
     -0.089824066540826142, 0.015508262970469106, 0, 0,
     0, 0, 0, 0.02892761046081152,
     0.022412314299962734, -0.091901763112346491, 0.014894394140574542, 0.025667444210997658},
    {0.25595647294111862},
};
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
// mse_loss (2,3) mean: d/dinput, d/dtarget, d/dv
const std::vector<std::vector<double>> kMseMean = {
    {0, 0.083333333333333343, 0.16666666666666666, 0.25,
     -0.75, 0.41666666666666663},
    {0, -0.083333333333333343, -0.16666666666666666, -0.25,
     0.75, -0.41666666666666663},
    {1.5566666666666666},
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

TEST_CASE("layer_norm and add_layer_norm are twice differentiable", "[gradgrad][layer_norm]") {
    const Shape shape{2, 3, 4};
    for (std::size_t k = 1; k <= 2; ++k)
        for (int combo = 0; combo < 4; ++combo) {
            INFO("normalized axes " << k << ", weight " << (combo & 1) << ", bias " << (combo >> 1));
            const Shape ns = tail(shape, k);
            const bool has_w = combo & 1, has_b = combo & 2;
            std::vector<Tensor> affine;
            if (has_w) affine.push_back(param(ns, 0.5, 1.5, 7));
            if (has_b) affine.push_back(param(ns, -1, 1, 8));
            // The weight and bias, if any, from position `first` of the inputs on.
            auto w_b = [=](const std::vector<Tensor>& x, std::size_t first) {
                return std::pair{has_w ? x[first] : Tensor(), has_b ? x[first + has_w] : Tensor()};
            };
            std::vector<Tensor> in{param(shape, -1, 1, 5)};
            in.insert(in.end(), affine.begin(), affine.end());
            REQUIRE_GRADGRADCHECK(
                [=](const std::vector<Tensor>& x) {
                    const auto [w, b] = w_b(x, 1);
                    return layer_norm(x[0], ns, w, b, 1e-5);
                },
                in, "layer_norm");
            in.insert(in.begin() + 1, param(shape, -1, 1, 6));
            REQUIRE_GRADGRADCHECK(
                [=](const std::vector<Tensor>& x) {
                    const auto [w, b] = w_b(x, 2);
                    return add_layer_norm(x[0], x[1], ns, w, b, 1e-5);
                },
                in, "add_layer_norm");
        }
}

TEST_CASE("add_layer_norm of one tensor twice is twice differentiable", "[gradgrad][layer_norm]") {
    REQUIRE_GRADGRADCHECK([](const std::vector<Tensor>& x) { return add_layer_norm(x[0], x[0], {4}, x[1]); },
                          {param({3, 4}, -1, 1, 9), param({4}, 0.5, 1.5, 10)}, "add_layer_norm(x, x)");
}

TEST_CASE("layer_norm and add_layer_norm second derivatives match torch", "[gradgrad][layer_norm][torch]") {
    const Tensor x = seq({2, 3, 4}, 7, 17, 5.0), y = seq({2, 3, 4}, 3, 11, 4.0);
    const Tensor w = seq({4}, 3, 7, 3.0) + 1.0, b = seq({4}, 2, 5, 2.0);
    // torch: F.layer_norm(x, (4,), w, b, 1e-5), u seeds 3, 4, 6.
    check_torch(second([](const std::vector<Tensor>& in) { return layer_norm(in[0], {4}, in[1], in[2], 1e-5); },
                       {x, w, b}, {2, 3, 4}, {3, 4, 6}),
                kLayerNormAffine);
    // torch: F.layer_norm(x, (3, 4), None, None, 1e-5), u seed 3.
    check_torch(second([](const std::vector<Tensor>& in) { return layer_norm(in[0], {3, 4}); }, {x}, {2, 3, 4}, {3}),
                kLayerNormTwoAxes);
    // torch: F.layer_norm(x + y, (4,), w, None, 1e-5), u seeds 3, 4, 6.
    check_torch(second([](const std::vector<Tensor>& in) { return add_layer_norm(in[0], in[1], {4}, in[2]); },
                       {x, y, w}, {2, 3, 4}, {3, 4, 6}),
                kAddLayerNorm);
}

TEST_CASE("cross_entropy is twice differentiable for every reduction and ignore_index", "[gradgrad][cross_entropy]") {
    const Tensor logits = param({4, 5}, -2, 2, 11);
    const Tensor targets = from_vector(std::vector<std::int64_t>{4, 0, -100, 2}, {4});
    const Tensor logits3 = param({2, 3, 4}, -2, 2, 12);  // classes on axis 1, not last
    const Tensor targets3 = from_vector(std::vector<std::int64_t>{0, 2, 1, 1, 2, 1, 0, 0}, {2, 4});
    const Tensor unbatched = param({5}, -2, 2, 13);
    for (Reduction r : {Reduction::mean, Reduction::sum, Reduction::none}) {
        INFO("reduction " << static_cast<int>(r));
        REQUIRE_GRADGRADCHECK([&](const std::vector<Tensor>& x) { return cross_entropy(x[0], targets, r); }, {logits},
                              "cross_entropy (N, C), one ignored");
        REQUIRE_GRADGRADCHECK([&](const std::vector<Tensor>& x) { return cross_entropy(x[0], targets3, r, 1); },
                              {logits3}, "cross_entropy (N, C, d), ignore_index 1");
        REQUIRE_GRADGRADCHECK(
            [&](const std::vector<Tensor>& x) { return cross_entropy(x[0], from_vector(std::vector<std::int64_t>{3}, {}), r); },
            {unbatched}, "cross_entropy (C,)");
    }
}

TEST_CASE("cross_entropy second derivatives match torch", "[gradgrad][cross_entropy][torch]") {
    // torch: F.cross_entropy(logits, t, reduction=...), logits (3, 4, 2), t [[1, 3], [-100, 0], [2, 2]].
    const Tensor logits = seq({3, 4, 2}, 7, 19, 4.0);
    const Tensor t = from_vector(std::vector<std::int64_t>{1, 3, -100, 0, 2, 2}, {3, 2});
    const std::vector<std::pair<Reduction, const std::vector<std::vector<double>>*>> cases{
        {Reduction::mean, &kCrossEntropyMean}, {Reduction::sum, &kCrossEntropySum}, {Reduction::none, &kCrossEntropyNone}};
    for (const auto& [r, want] : cases) {
        INFO("reduction " << static_cast<int>(r));
        const Shape out = r == Reduction::none ? Shape{3, 2} : Shape{};
        check_torch(second([&, r = r](const std::vector<Tensor>& in) { return cross_entropy(in[0], t, r); }, {logits},
                           out, {3}),
                    *want);
    }
    // torch: F.cross_entropy(logits, [4, 0, 7, 2], reduction="mean", ignore_index=7), logits (4, 5).
    const Tensor t2 = from_vector(std::vector<std::int64_t>{4, 0, 7, 2}, {4});
    check_torch(second([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t2, Reduction::mean, 7); },
                       {seq({4, 5}, 3, 13, 3.0)}, {}, {3}),
                kCrossEntropyIgnoreIndex);
}

TEST_CASE("mse_loss is twice differentiable in both inputs for every reduction", "[gradgrad][mse_loss]") {
    const Tensor a = param({2, 3}, -1, 1, 14), b = param({2, 3}, -1, 1, 15);
    for (Reduction r : {Reduction::mean, Reduction::sum, Reduction::none}) {
        INFO("reduction " << static_cast<int>(r));
        REQUIRE_GRADGRADCHECK([r](const std::vector<Tensor>& x) { return mse_loss(x[0], x[1], r); }, {a, b}, "mse_loss");
        REQUIRE_GRADGRADCHECK([r, b](const std::vector<Tensor>& x) { return mse_loss(x[0], b.detach(), r); }, {a},
                              "mse_loss, input only");
        REQUIRE_GRADGRADCHECK([r, a](const std::vector<Tensor>& x) { return mse_loss(a.detach(), x[0], r); }, {b},
                              "mse_loss, target only");
    }
    // torch: F.mse_loss(a, b) (mean), a = seq((2, 3), 7, 17, 5), b = seq((2, 3), 3, 11, 4), u seeds 3, 4.
    check_torch(second([](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1]); },
                       {seq({2, 3}, 7, 17, 5.0), seq({2, 3}, 3, 11, 4.0)}, {}, {3, 4}),
                kMseMean);
}
