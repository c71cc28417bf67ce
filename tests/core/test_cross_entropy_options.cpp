// cross_entropy's weight, label_smoothing and probability targets, with ignore_index and every
// reduction: torch 1.13's values (pasted from F.cross_entropy in float64), both derivatives in
// float64, and the argument checks.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "core/creation.hpp"
#include "core/ops.hpp"
#include "helpers.hpp"

using namespace xgrad;
using namespace xgrad::test;
using Catch::Matchers::Contains;

namespace {

const TensorOptions f64(kFloat64);

Tensor logits4() {
    return from_vector({0.3, -1.2, 2.0, 1.5, 0.1, -0.7, -0.4, 0.9, 0.2, 2.2, -0.3, 0.5}, {4, 3}, f64);
}
Tensor targets4() { return from_vector(std::vector<std::int64_t>{0, 2, -100, 1}, {4}); }
Tensor weight3() { return from_vector({0.5, 2.0, 1.5}, {3}, f64); }
Tensor probs4() {
    return from_vector({0.2, 0.5, 0.3, 1, 0, 0, 0.1, 0.1, 0.8, 0.3, 0.3, 0.4}, {4, 3}, f64);
}

void require_close(const Tensor& got, const std::vector<double>& want) {
    const std::vector<double> g = got.to_vector<double>();
    REQUIRE(g.size() == want.size());
    for (std::size_t i = 0; i < g.size(); ++i) REQUIRE(g[i] == Approx(want[i]).epsilon(1e-14).margin(1e-15));
}

CrossEntropyOptions opts(Reduction r, bool weighted, double eps) {
    CrossEntropyOptions o;
    o.reduction(r).label_smoothing(eps);
    if (weighted) o.weight(weight3());
    return o;
}

}  // namespace

TEST_CASE("cross_entropy with class weights and label smoothing gives torch's values for every reduction",
          "[cross-entropy-options]") {
    const Tensor x = logits4(), t = targets4();
    // F.cross_entropy(x, t, weight=w / label_smoothing=0.2 / both, reduction=...) in torch 1.13.
    require_close(cross_entropy(x, t, opts(Reduction::none, true, 0)), {0.9508356224763953, 3.758356793083707, 0.0, 5.469778238818242});
    require_close(cross_entropy(x, t, opts(Reduction::none, false, 0.2)), {1.8883379116194572, 2.3055711953891382, 0.0, 2.5148891194091214});
    require_close(cross_entropy(x, t, opts(Reduction::none, true, 0.2)), {1.2977808299685272, 3.4948377532374026, 0.0, 4.941793022897026});
    require_close(cross_entropy(x, t, opts(Reduction::mean, true, 0)), {2.5447426635945862});
    require_close(cross_entropy(x, t, opts(Reduction::mean, false, 0.2)), {2.2362660754725723});
    require_close(cross_entropy(x, t, opts(Reduction::mean, true, 0.2)), {2.433602901525739});
    require_close(cross_entropy(x, t, opts(Reduction::sum, true, 0)), {10.178970654378345});
    require_close(cross_entropy(x, t, opts(Reduction::sum, false, 0.2)), {6.708798226417717});
    require_close(cross_entropy(x, t, opts(Reduction::sum, true, 0.2)), {9.734411606102956});
    // (N, C, d) with an ignored position: the weighted, smoothed mean.
    const Tensor x3 = x.reshape({2, 3, 2});
    const Tensor t3 = from_vector(std::vector<std::int64_t>{0, 2, -100, 1}, {2, 2});
    require_close(cross_entropy(x3, t3, CrossEntropyOptions().weight(weight3()).label_smoothing(0.1)), {1.3139116410801983});
    // Every target ignored: the weighted mean is 0/0, NaN, as torch's.
    const Tensor none = from_vector(std::vector<std::int64_t>{-100, -100, -100, -100}, {4});
    REQUIRE(std::isnan(cross_entropy(x, none, CrossEntropyOptions().weight(weight3()).label_smoothing(0.1)).item<double>()));
}

TEST_CASE("cross_entropy with probability targets gives torch's values, with weights and smoothing",
          "[cross-entropy-options]") {
    const Tensor x = logits4(), p = probs4();
    require_close(cross_entropy(x, p, Reduction::none), {2.141671244952791, 0.30557119538913796, 1.260480606783104, 1.6648891194091213});
    require_close(cross_entropy(x, p, opts(Reduction::none, true, 0)), {3.682590429676826, 0.15278559769456898, 1.7321968798355007, 2.8371003112023137});
    require_close(cross_entropy(x, p, opts(Reduction::none, false, 0.2)), {2.0803379116194574, 0.545571195389138, 1.2558139401164374, 1.6588891194091213});
    require_close(cross_entropy(x, p, opts(Reduction::none, true, 0.2)), {3.483184675728871, 0.6103807969260919, 1.651218999010562, 2.8356506808042834});
    require_close(cross_entropy(x, p), {1.3431530416335384});
    require_close(cross_entropy(x, p, opts(Reduction::mean, true, 0)), {2.101168304602302});
    require_close(cross_entropy(x, p, opts(Reduction::mean, false, 0.2)), {1.3851530416335385});
    require_close(cross_entropy(x, p, opts(Reduction::mean, true, 0.2)), {2.145108788117452});
    require_close(cross_entropy(x, p, Reduction::sum), {5.372612166534154});
    require_close(cross_entropy(x, p, opts(Reduction::sum, true, 0)), {8.404673218409208});
    require_close(cross_entropy(x, p, opts(Reduction::sum, false, 0.2)), {5.540612166534154});
    require_close(cross_entropy(x, p, opts(Reduction::sum, true, 0.2)), {8.580435152469809});
}

TEST_CASE("cross_entropy's options pass gradcheck and gradgradcheck in float64", "[cross-entropy-options]") {
    const Tensor x = param({4, 3}, -2, 2, 7);
    const Tensor t = targets4();
    for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum})
        for (bool weighted : {false, true})
            for (double eps : {0.0, 0.3}) {
                if (!weighted && eps == 0) continue;  // the fused op, checked elsewhere
                const CrossEntropyOptions o = opts(r, weighted, eps);
                const std::string what = "cross_entropy options " + std::to_string(static_cast<int>(r)) +
                                         (weighted ? " weighted" : "") + " eps " + std::to_string(eps);
                REQUIRE_GRADCHECK([&](const std::vector<Tensor>& v) { return cross_entropy(v[0], t, o); }, {x}, what);
                REQUIRE_GRADGRADCHECK([&](const std::vector<Tensor>& v) { return cross_entropy(v[0], t, o); }, {x},
                                      what);
                // Probability targets get a gradient too (torch's soft targets are differentiable).
                const Tensor p = param({4, 3}, 0.1, 1, 11);
                REQUIRE_GRADCHECK([&](const std::vector<Tensor>& v) { return cross_entropy(v[0], v[1], o); }, {x, p},
                                  what + " probabilities");
                REQUIRE_GRADGRADCHECK([&](const std::vector<Tensor>& v) { return cross_entropy(v[0], v[1], o); },
                                      {x, p}, what + " probabilities");
            }
}

TEST_CASE("cross_entropy's options refuse what torch refuses, naming the argument", "[cross-entropy-options]") {
    const Tensor x = logits4(), t = targets4(), p = probs4();
    for (double eps : {-0.1, 1.5, std::nan("")})
        REQUIRE_THROWS_WITH(cross_entropy(x, t, CrossEntropyOptions().label_smoothing(eps)),
                            Contains("label_smoothing must be between 0.0 and 1.0"));
    REQUIRE_THROWS_WITH(cross_entropy(x, t, CrossEntropyOptions().weight(ones({4}, f64))),
                        Contains("weight must be a 1-D tensor of the 3 classes"));
    REQUIRE_THROWS_WITH(cross_entropy(x, t, CrossEntropyOptions().weight(ones({3}))),
                        Contains("weight must be a 1-D tensor of the 3 classes in logits' dtype float64"));
    REQUIRE_THROWS_WITH(cross_entropy(x, t, CrossEntropyOptions().weight(from_vector({1.0, std::nan(""), 1.0}, {3}, f64))),
                        Contains("weight must be finite"));
    REQUIRE_THROWS_WITH(cross_entropy(x, p, CrossEntropyOptions().ignore_index(0)),
                        Contains("ignore_index (0) is not supported for probability targets"));
    REQUIRE_THROWS_WITH(cross_entropy(x, p.reshape({3, 4}), Reduction::mean),
                        Contains("or probabilities of logits' shape and dtype"));
    REQUIRE_THROWS_WITH(cross_entropy(x, ones({4, 3}), Reduction::mean),
                        Contains("or probabilities of logits' shape and dtype"));
    // The class index checks of the fused op hold with the options too.
    const Tensor bad = from_vector(std::vector<std::int64_t>{0, 3, 1, 1}, {4});
    REQUIRE_THROWS_WITH(cross_entropy(x, bad, CrossEntropyOptions().label_smoothing(0.1)),
                        Contains("target 3 at position (1,) is out of range for 3 classes"));
    // The defaults are the fused op, bit for bit.
    REQUIRE(cross_entropy(x, t, CrossEntropyOptions()).item<double>() == cross_entropy(x, t).item<double>());
}
