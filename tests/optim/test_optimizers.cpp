// Optimizers against torch.optim, step for step; state_dict round trips; bad hyper-parameters.
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>

#include "core/io/npz.hpp"
#include "helpers.hpp"
#include "optim/adam.hpp"
#include "optim/sgd.hpp"

using namespace xgrad;
using namespace xgrad::optim;
using namespace xgrad::test;

namespace {

// Two parameters, p0 (2, 3) and p1 (4,), and their gradients for three steps; p1 has none at
// step 2, so it must be skipped there (its step count and buffers unchanged), as in torch.
const std::vector<double> P0 = {0.5, -1.0, 2.0, 0.0, 1.5, -0.25};
const std::vector<double> P1 = {1.0, -2.0, 0.3, 4.0};
const std::vector<std::vector<double>> G0 = {{0.1, -0.2, 0.3, -0.4, 0.5, -0.6},
                                             {1.0, 0.001, -0.5, 0.2, -2.0, 0.05},
                                             {-0.05, 0.0005, 0.02, 0.6, 0.1, -1.0}};
const std::vector<std::vector<double>> G1 = {{0.5, -0.5, 2.0, -1.0}, {}, {0.25, 1.0, -3.0, 0.001}};

using Make = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>)>;

template <class Opt, class Options> Make make(Options options) {
    return [options](std::vector<Tensor> params) { return std::make_unique<Opt>(std::move(params), options); };
}

// The values of p0 then p1 after each of the three steps.
std::vector<std::vector<double>> run_three_steps(const Make& make_optimizer, Dtype dtype) {
    Tensor p0 = from_vector(P0, {2, 3}, TensorOptions(dtype).requires_grad(true));
    Tensor p1 = from_vector(P1, {4}, TensorOptions(dtype).requires_grad(true));
    auto opt = make_optimizer({p0, p1});
    std::vector<std::vector<double>> out;
    for (std::size_t s = 0; s < 3; ++s) {
        opt->zero_grad();
        p0.set_grad(from_vector(G0[s], {2, 3}, dtype));
        if (!G1[s].empty()) p1.set_grad(from_vector(G1[s], {4}, dtype));
        opt->step();
        std::vector<double> v = vals(p0);
        for (double x : vals(p1)) v.push_back(x);
        out.push_back(v);
    }
    return out;
}

struct Reference {
    const char* name;
    Make make_optimizer;
    std::vector<std::vector<double>> expected;  // per step: p0 (6 values) then p1 (4)
};

// The expected values were produced once with torch 1.13 (single-tensor implementations),
// printing the parameters after each step:
//
//   P0 = [[0.5, -1.0, 2.0], [0.0, 1.5, -0.25]]; P1 = [1.0, -2.0, 0.3, 4.0]
//   G0 = [[[0.1, -0.2, 0.3], [-0.4, 0.5, -0.6]], [[1.0, 0.001, -0.5], [0.2, -2.0, 0.05]],
//         [[-0.05, 0.0005, 0.02], [0.6, 0.1, -1.0]]]
//   G1 = [[0.5, -0.5, 2.0, -1.0], None, [0.25, 1.0, -3.0, 0.001]]
//   p0 = torch.tensor(P0, dtype=dtype, requires_grad=True)   # dtype float64 or float32
//   p1 = torch.tensor(P1, dtype=dtype, requires_grad=True)
//   opt = torch.optim.SGD([p0, p1], lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)  # etc.
//   for s in range(3):
//       opt.zero_grad(set_to_none=True)
//       p0.grad = torch.tensor(G0[s], dtype=dtype)
//       if G1[s] is not None: p1.grad = torch.tensor(G1[s], dtype=dtype)
//       opt.step()
//       print(p0.flatten().tolist() + p1.flatten().tolist())
//
// with the torch.optim arguments matching each row's options.
const std::vector<Reference> float64_references = {
    {"sgd plain", make<SGD>(SGDOptions(0.1)),
     {{0.49, -0.98, 1.97, 0.04000000000000001, 1.45, -0.19, 0.95, -1.95, 0.09999999999999998, 4.1},
      {0.39, -0.9801, 2.02, 0.020000000000000004, 1.65, -0.195, 0.95, -1.95, 0.09999999999999998, 4.1},
      {0.395, -0.98015, 2.0180000000000002, -0.039999999999999994, 1.64, -0.095, 0.9249999999999999, -2.05, 0.4, 4.0999}}},
    {"sgd momentum", make<SGD>(SGDOptions(0.1).momentum(0.9)),
     {{0.49, -0.98, 1.97, 0.04000000000000001, 1.45, -0.19, 0.95, -1.95, 0.09999999999999998, 4.1},
      {0.38099999999999995, -0.9621, 1.9929999999999999, 0.056000000000000015, 1.605, -0.141, 0.95, -1.95, 0.09999999999999998, 4.1},
      {0.28789999999999993, -0.94604, 2.0117, 0.010400000000000017, 1.7345, 0.003100000000000027, 0.88, -2.005, 0.21999999999999997, 4.1899}}},
    {"sgd momentum dampening wd", make<SGD>(SGDOptions(0.1).momentum(0.9).dampening(0.5).weight_decay(0.1)),
     {{0.485, -0.97, 1.95, 0.04000000000000001, 1.435, -0.1875, 0.94, -1.93, 0.097, 4.06},
      {0.419075, -0.9381999999999999, 1.92025, 0.06580000000000001, 1.469325, -0.1328125, 0.94, -1.93, 0.097, 4.06},
      {0.36014712499999996, -0.9049139999999999, 1.88287375, 0.058691000000000014, 1.487870875, -0.0329296875, 0.8687999999999999, -1.9073499999999999, 0.063815, 4.093649999999999}}},
    {"sgd nesterov wd", make<SGD>(SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.01)),
     {{0.48005, -0.9601, 1.9392, 0.07600000000000001, 1.40215, -0.135525, 0.9031, -1.9012, -0.08057000000000006, 4.1824},
      {0.280632905, -0.94145581, 2.00459552, 0.07025560000000002, 1.737770915, -0.09596500250000002, 0.9031, -1.9012, -0.08057000000000006, 4.1824},
      {0.20055636198049998, -0.923756362961, 2.012588036512, -0.03097944564, 1.8387899087615, 0.13419935625475, 0.81257411, -2.04546772, 0.32734008299999995, 4.25202344}}},
    {"adam default", make<Adam>(AdamOptions(0.01)),
     {{0.4900000009999999, -0.9900000005, 1.9900000003333334, 0.009999999750000004, 1.4900000002, -0.24000000016666667, 0.9900000002, -1.9900000002, 0.29000000005, 4.0099999999},
      {0.48192912358541967, -0.9833367272622484, 1.9929356123098128, 0.012663370062368205, 1.4955950351020055, -0.23394086532793387, 0.9900000002, -1.9900000002, 0.29000000005, 4.0099999999},
      {0.47601561577885615, -0.9782020000218435, 1.994984392619498, 0.008769472254565305, 1.4996052588790931, -0.22605253673883952, 0.9806782040477462, -1.9936610354240565, 0.29247701820162686, 4.016693133905058}}},
    {"adam wd", make<Adam>(AdamOptions(0.01).weight_decay(0.1)),
     {{0.4900000006666666, -0.9900000003333334, 1.9900000002, 0.009999999750000004, 1.4900000001538463, -0.24000000016, 0.9900000001666667, -1.990000000142857, 0.2900000000492611, 4.009999999833333},
      {0.4816854629156943, -0.9813192252534337, 1.98809946665876, 0.012644072522733234, 1.49480234399209, -0.23361466182129903, 0.9900000001666667, -1.990000000142857, 0.2900000000492611, 4.009999999833333},
      {0.47526935715300334, -0.9730196734649095, 1.9844796662842559, 0.008738384545860069, 1.4976785606978256, -0.22559026041331193, 0.980465827519045, -1.9911964549191112, 0.2923661972703453, 4.011422365758573}}},
    {"adam amsgrad", make<Adam>(AdamOptions(0.01).amsgrad(true)),
     {{0.4900000009999999, -0.9900000005, 1.9900000003333334, 0.009999999750000004, 1.4900000002, -0.24000000016666667, 0.9900000002, -1.9900000002, 0.29000000005, 4.0099999999},
      {0.48192912358541967, -0.9833399763998926, 1.9929356123098128, 0.012663370062368205, 1.4955950351020055, -0.23394086532793387, 0.9900000002, -1.9900000002, 0.29000000005, 4.0099999999},
      {0.47601561577885615, -0.9782103036407431, 1.994984392619498, 0.008769472254565305, 1.4996052588790931, -0.22605253673883952, 0.9806782040477462, -1.9936610354240565, 0.29247701820162686, 4.016689789849282}}},
    {"adam betas eps amsgrad wd", make<Adam>(AdamOptions(0.05).betas({0.8, 0.9}).eps(1e-3).amsgrad(true).weight_decay(0.05)),
     {{0.4503968253968254, -0.950199203187251, 1.9501246882793017, 0.04987531172069825, 1.4500868055555556, -0.20008149959250204, 0.9500907441016334, -1.9500831946755408, 0.25002480158730156, 4.049937578027466},
      {0.4086989163806862, -0.9126517222800496, 1.9558204656648366, 0.06030221672246057, 1.4781171556670345, -0.17201369849334247, 0.9500907441016334, -1.9500831946755408, 0.25002480158730156, 4.049937578027466},
      {0.3802842093165204, -0.8801654013657542, 1.9526712018905907, 0.036772375238829924, 1.4949448099202032, -0.13192624130689948, 0.9031840410615941, -1.9652247253398927, 0.26486831221830165, 4.0707932418612485}}},
    {"adamw default", make<AdamW>(AdamWOptions(0.01)),
     {{0.4899500009999999, -0.9899000005, 1.9898000003333334, 0.009999999750000004, 1.4898500002, -0.23997500016666667, 0.9899000002, -1.9898000002, 0.28997000005, 4.0095999999},
      {0.4818301285853197, -0.9831377372621984, 1.9925366323097795, 0.012662370062393204, 1.4952960501019854, -0.2338918678279172, 0.9899000002, -1.9898000002, 0.28997000005, 4.0095999999},
      {0.47586843776589766, -0.9779046962480674, 1.9943861589562337, 0.008767206017584066, 1.4991567442740628, -0.22598015005204006, 0.9804792140477262, -1.9932620554240366, 0.2924180212016219, 4.015892173905068}}},
    {"adamw wd amsgrad", make<AdamW>(AdamWOptions(0.05).weight_decay(0.1).amsgrad(true)),
     {{0.44750000499999953, -0.9450000024999998, 1.9400000016666665, 0.049999998750000024, 1.442500001, -0.19875000083333333, 0.9450000009999999, -1.940000001, 0.24850000025, 4.0299999995},
      {0.4049081179020983, -0.9069748819869627, 1.9449780615407306, 0.06306685031809103, 1.4632626755050278, -0.1674605766355027, 0.9450000009999999, -1.940000001, 0.24850000025, 4.0299999995},
      {0.37331603827977017, -0.8767916437812805, 1.9454970727814531, 0.04328202702748608, 1.4759974810129401, -0.12718163080685346, 0.8936660202337311, -1.9486051771152826, 0.25964259100688436, 4.043298949248915}}},
};

// The same script with dtype=torch.float32.
const std::vector<Reference> float32_references = {
    {"sgd nesterov wd", make<SGD>(SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.01)),
     {{0.4800499975681305, -0.960099995136261, 1.9392000436782837, 0.07599999755620956, 1.40215003490448, -0.13552500307559967, 0.9031000137329102, -1.9012000560760498, -0.08056999742984772, 4.182400226593018},
      {0.280632883310318, -0.9414557814598083, 2.0045955181121826, 0.0702555924654007, 1.737770915031433, -0.09596501290798187, 0.9031000137329102, -1.9012000560760498, -0.08056999742984772, 4.182400226593018},
      {0.20055633783340454, -0.9237563610076904, 2.0125880241394043, -0.030979465693235397, 1.838789939880371, 0.134199321269989, 0.8125741481781006, -2.0454678535461426, 0.3273400664329529, 4.252023696899414}}},
    {"adam betas eps amsgrad wd", make<Adam>(AdamOptions(0.05).betas({0.8, 0.9}).eps(1e-3).amsgrad(true).weight_decay(0.05)),
     {{0.4503968358039856, -0.9501991868019104, 1.950124740600586, 0.04987531155347824, 1.4500868320465088, -0.2000814974308014, 0.950090765953064, -1.9500831365585327, 0.25002479553222656, 4.049937725067139},
      {0.4086989164352417, -0.9126517176628113, 1.9558205604553223, 0.06030222028493881, 1.4781172275543213, -0.17201370000839233, 0.950090765953064, -1.9500831365585327, 0.25002479553222656, 4.049937725067139},
      {0.38028421998023987, -0.8801653981208801, 1.9526712894439697, 0.03677237778902054, 1.4949449300765991, -0.13192623853683472, 0.9031840562820435, -1.9652246236801147, 0.2648683190345764, 4.070793151855469}}},
    {"adamw wd amsgrad", make<AdamW>(AdamWOptions(0.05).weight_decay(0.1).amsgrad(true)),
     {{0.44749999046325684, -0.9449999928474426, 1.940000057220459, 0.05000000074505806, 1.442500114440918, -0.19875000417232513, 0.9449999928474426, -1.940000057220459, 0.2485000044107437, 4.03000020980835},
      {0.40490809082984924, -0.9069749116897583, 1.94497811794281, 0.06306685507297516, 1.4632627964019775, -0.1674605906009674, 0.9449999928474426, -1.940000057220459, 0.2485000044107437, 4.03000020980835},
      {0.3733160197734833, -0.8767917156219482, 1.9454971551895142, 0.04328203201293945, 1.4759975671768188, -0.12718164920806885, 0.8936660289764404, -1.9486052989959717, 0.2596426010131836, 4.043299198150635}}},
};

void check_against(const std::vector<Reference>& references, Dtype dtype, double tolerance) {
    for (const auto& ref : references) {
        const auto got = run_three_steps(ref.make_optimizer, dtype);
        for (std::size_t s = 0; s < 3; ++s) {
            INFO(ref.name << ", " << dtype_name(dtype) << ", after step " << s + 1);
            CHECK_THAT(got[s], Catch::Matchers::Approx(ref.expected[s]).margin(tolerance).epsilon(tolerance));
        }
    }
}

}  // namespace

TEST_CASE("SGD, Adam and AdamW match torch.optim for three steps in float64", "[optim]") {
    check_against(float64_references, kFloat64, 1e-13);
}

TEST_CASE("SGD, Adam and AdamW match torch.optim for three steps in float32", "[optim]") {
    check_against(float32_references, kFloat32, 1e-6);
}

TEST_CASE("step updates the shared parameter in place and builds no graph", "[optim]") {
    Tensor w = from_vector({1.0, 2.0}, {2}, TensorOptions(kFloat64).requires_grad(true));
    Tensor module_handle = w;  // what a module would hold
    Tensor frozen = from_vector({5.0}, {1}, TensorOptions(kFloat64).requires_grad(true));
    SGD opt({w, frozen}, SGDOptions(0.5).momentum(0.9));
    Tensor loss = (w * w).sum();
    loss.backward();
    opt.step();
    CHECK_THAT(vals(module_handle), approx({0.0, 0.0}));  // w − 0.5·2w
    CHECK(module_handle.is_same(opt.parameters()[0]));
    CHECK(w.is_leaf());
    CHECK(w.requires_grad());
    CHECK(w.op_name().empty());
    CHECK_THAT(vals(frozen), approx({5.0}));  // no gradient: skipped
    CHECK(opt.state_dict().size() == 7);      // 2 + 4 hyper-parameters, one momentum buffer
    CHECK(w.grad().defined());
    opt.zero_grad();
    CHECK_FALSE(w.grad().defined());
    CHECK_FALSE(frozen.grad().defined());
}

TEST_CASE("the learning rate can be read and changed", "[optim]") {
    Tensor w = param({3});
    Adam adam({w});
    CHECK(adam.lr() == 1e-3);
    CHECK(adam.options().betas() == std::pair<double, double>(0.9, 0.999));
    CHECK(adam.options().eps() == 1e-8);
    CHECK(adam.options().weight_decay() == 0);
    CHECK_FALSE(adam.options().amsgrad());
    adam.set_lr(0.25);
    CHECK(adam.lr() == 0.25);
    CHECK(adam.options().lr() == 0.25);
    AdamW adamw({w});
    CHECK(adamw.options().weight_decay() == 1e-2);
    CHECK(adamw.name() == "AdamW");
    CHECK_THROWS_WITH(adam.set_lr(-1), Catch::Contains("Adam") && Catch::Contains("learning rate -1"));
}

// --- state_dict ---------------------------------------------------------------------------

namespace {

// Gradients that depend on the current values, so that the trajectory depends on the state.
void set_gradients(std::vector<Tensor>& params, int step) {
    NoGradGuard no_grad;
    for (std::size_t i = 0; i < params.size(); ++i) {
        if (step % 3 == 2 && i == 1) {  // parameter 1 sits out every third step
            params[i].zero_grad();
            continue;
        }
        Tensor& p = params[i];
        p.set_grad(p * p * 0.5 - p * 0.3 + 0.1 * step - 0.05 * static_cast<double>(i));
    }
}

std::vector<Tensor> fresh_params(Dtype dtype, const std::vector<std::vector<double>>& values = {}) {
    const std::vector<Shape> shapes = {{2, 3}, {4}, {1}};
    std::vector<Tensor> params;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
        Generator gen(10 + i);
        params.push_back(values.empty() ? uniform(shapes[i], -1, 1, TensorOptions(dtype).requires_grad(true), gen)
                                        : from_vector(values[i], shapes[i], TensorOptions(dtype).requires_grad(true)));
    }
    return params;
}

std::vector<std::vector<double>> snapshot(const std::vector<Tensor>& params) {
    std::vector<std::vector<double>> out;
    for (const auto& p : params) out.push_back(vals(p));
    return out;
}

void run_steps(Optimizer& opt, std::vector<Tensor>& params, int from, int to) {
    for (int s = from; s < to; ++s) {
        opt.zero_grad();
        set_gradients(params, s);
        opt.step();
    }
}

const Tensor* find(const NamedTensors& state, const std::string& key) {
    for (const auto& [k, t] : state)
        if (k == key) return &t;
    return nullptr;
}

NamedTensors without(NamedTensors state, const std::string& key) {
    state.erase(std::remove_if(state.begin(), state.end(), [&](const auto& e) { return e.first == key; }), state.end());
    return state;
}

NamedTensors replaced(NamedTensors state, const std::string& key, Tensor value) {
    for (auto& [k, t] : state)
        if (k == key) t = value;
    return state;
}

}  // namespace

TEST_CASE("a restored optimizer continues bit for bit", "[optim][state]") {
    const Dtype dtype = GENERATE(kFloat32, kFloat64);
    const std::vector<std::pair<const char*, Make>> optimizers = {
        {"SGD momentum nesterov wd", make<SGD>(SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(1e-3))},
        {"SGD dampening", make<SGD>(SGDOptions(0.05).momentum(0.5).dampening(0.3))},
        {"Adam amsgrad wd", make<Adam>(AdamOptions(0.01).amsgrad(true).weight_decay(0.01))},
        {"AdamW", make<AdamW>(AdamWOptions(0.02).betas({0.85, 0.95}))},
    };
    for (const auto& [name, make_optimizer] : optimizers) {
        INFO(name << " in " << dtype_name(dtype));
        auto params = fresh_params(dtype);
        auto opt = make_optimizer(params);
        run_steps(*opt, params, 0, 3);
        // state_dict() aliases the buffers (as torch's): a snapshot to resume from copies them.
        NamedTensors saved = opt->state_dict();
        for (auto& entry : saved) entry.second = entry.second.detach().clone();  // detach alone shares storage
        const auto saved_values = snapshot(params);
        run_steps(*opt, params, 3, 5);

        // A fresh optimizer, built with other hyper-parameters: load_state_dict restores them.
        auto restored_params = fresh_params(dtype, saved_values);
        auto restored = make_optimizer(restored_params);
        restored->set_lr(123.0);
        restored->load_state_dict(saved);
        CHECK(restored->lr() == opt->lr());
        run_steps(*restored, restored_params, 3, 5);
        for (std::size_t i = 0; i < params.size(); ++i) CHECK(vals(restored_params[i]) == vals(params[i]));

        // The snapshot's tensors are copies: the two extra steps did not write into them.
        auto again = make_optimizer(fresh_params(dtype, saved_values));
        again->load_state_dict(saved);
        const NamedTensors resaved = again->state_dict();
        REQUIRE(resaved.size() == saved.size());
        for (std::size_t k = 0; k < saved.size(); ++k) {
            CHECK(resaved[k].first == saved[k].first);
            CHECK(vals(resaved[k].second) == vals(saved[k].second));
        }
    }
}

TEST_CASE("an optimizer state survives a round trip through an .npz file", "[optim][state]") {
    const Dtype dtype = GENERATE(kFloat32, kFloat64);
    auto params = fresh_params(dtype);
    Adam opt(params, AdamOptions(0.01).amsgrad(true));
    run_steps(opt, params, 0, 3);
    const std::string path =
        (std::filesystem::temp_directory_path() / fmt::format("xgrad_test_optim_{}.npz", dtype_name(dtype))).string();
    save_npz(path, opt.state_dict());
    const auto saved_values = snapshot(params);
    run_steps(opt, params, 3, 5);

    auto restored_params = fresh_params(dtype, saved_values);
    Adam restored(restored_params);
    restored.load_state_dict(load_npz(path));
    std::remove(path.c_str());
    run_steps(restored, restored_params, 3, 5);
    for (std::size_t i = 0; i < params.size(); ++i) CHECK(vals(restored_params[i]) == vals(params[i]));
}

TEST_CASE("state_dict names the hyper-parameters and each stepped parameter's buffers", "[optim][state]") {
    Tensor a = param({2, 2});
    Tensor b = param({3});
    Adam opt({a, b}, AdamOptions(0.1).amsgrad(true));
    a.set_grad(ones({2, 2}, kFloat64));
    opt.step();
    opt.step();
    std::vector<std::string> keys;
    for (const auto& [k, t] : opt.state_dict()) keys.push_back(k);
    CHECK(keys == std::vector<std::string>{"adam.num_params", "adam.lr", "adam.amsgrad", "adam.beta1", "adam.beta2",
                                           "adam.eps", "adam.weight_decay", "state.0.step", "state.0.exp_avg",
                                           "state.0.exp_avg_sq", "state.0.max_exp_avg_sq"});
    const NamedTensors state = opt.state_dict();
    CHECK(find(state, "state.0.step")->dtype() == kInt64);
    CHECK(find(state, "state.0.step")->item<std::int64_t>() == 2);
    CHECK(find(state, "adam.lr")->item<double>() == 0.1);
    CHECK(find(state, "adam.num_params")->item<std::int64_t>() == 2);
    // m after two steps of g = 1: (1 − 0.9²)·1.
    CHECK_THAT(vals(*find(state, "state.0.exp_avg")), approx({0.19, 0.19, 0.19, 0.19}));
}

TEST_CASE("load_state_dict rejects a mismatching state and leaves the optimizer unchanged", "[optim][state][errors]") {
    auto params = fresh_params(kFloat64);
    Adam opt(params, AdamOptions(0.01));
    run_steps(opt, params, 0, 2);
    const NamedTensors good = opt.state_dict();

    auto other_params = fresh_params(kFloat64);
    Adam target(other_params, AdamOptions(0.5).betas({0.5, 0.5}));
    run_steps(target, other_params, 0, 1);
    NamedTensors before = target.state_dict();
    for (auto& entry : before) entry.second = entry.second.detach();  // a snapshot: the entries alias

    auto rejects = [&](const NamedTensors& bad, const std::string& fragment) {
        CHECK_THROWS_WITH(target.load_state_dict(bad),
                          Catch::Contains("Adam.load_state_dict") && Catch::Contains(fragment));
        const NamedTensors after = target.state_dict();
        REQUIRE(after.size() == before.size());
        for (std::size_t k = 0; k < after.size(); ++k) {
            CHECK(after[k].first == before[k].first);
            CHECK(vals(after[k].second) == vals(before[k].second));
        }
    };
    SECTION("a missing buffer") { rejects(without(good, "state.1.exp_avg_sq"), "missing entry 'state.1.exp_avg_sq'"); }
    SECTION("a missing hyper-parameter") { rejects(without(good, "adam.eps"), "missing entry 'adam.eps'"); }
    SECTION("an unknown entry") {
        NamedTensors bad = good;
        bad.emplace_back("state.0.momentum_buffer", zeros({2, 3}, kFloat64));
        rejects(bad, "unexpected entry 'state.0.momentum_buffer'");
    }
    SECTION("a buffer for a parameter that does not exist") {
        NamedTensors bad = good;
        bad.emplace_back("state.7.exp_avg", zeros({2, 3}, kFloat64));
        rejects(bad, "unexpected entry 'state.7.exp_avg'");
    }
    SECTION("a duplicated entry") {
        NamedTensors bad = good;
        bad.push_back(good[1]);
        rejects(bad, "'adam.lr' appears twice");
    }
    SECTION("a wrong shape") {
        rejects(replaced(good, "state.0.exp_avg", zeros({3, 2}, kFloat64)), "'state.0.exp_avg' is float64 (3, 2)");
    }
    SECTION("a wrong dtype") {  // another float dtype is converted (tests/optim/test_adversarial_optim.cpp)
        rejects(replaced(good, "state.1.exp_avg", zeros({4}, kInt64)), "'state.1.exp_avg' is int64 (4,), but "
                                                                        "parameter 1 is float64 (4,)");
    }
    SECTION("a wrong parameter count") {
        rejects(replaced(good, "adam.num_params", from_vector(std::vector<std::int64_t>{4}, {})),
                "the state is for 4 parameters, this optimizer has 3");
    }
    SECTION("a bad step count") {
        rejects(replaced(good, "state.0.step", from_vector(std::vector<std::int64_t>{0}, {})),
                "'state.0.step' must be a 0-d int64 count in [1, 2^53]");
    }
    SECTION("an out-of-range hyper-parameter") {
        CHECK_THROWS_WITH(target.load_state_dict(replaced(good, "adam.beta1", tensor(1.0, kFloat64))),
                          Catch::Contains("invalid beta1 1"));
        CHECK_THROWS_WITH(target.load_state_dict(replaced(good, "adam.lr", tensor(-0.5, kFloat64))),
                          Catch::Contains("invalid learning rate -0.5"));
        CHECK_THROWS_WITH(target.load_state_dict(replaced(good, "adam.amsgrad", tensor(1.0, kFloat64))),
                          Catch::Contains("missing entry 'state.0.max_exp_avg_sq'"));
        CHECK(target.lr() == 0.5);
    }
    SECTION("a state saved by another optimizer") {
        auto adamw_params = fresh_params(kFloat64);
        AdamW adamw(adamw_params);
        rejects(adamw.state_dict(), "saved by another optimizer");
        SGD sgd(fresh_params(kFloat64), SGDOptions(0.1));
        CHECK_THROWS_WITH(sgd.load_state_dict(good), Catch::Contains("SGD.load_state_dict") &&
                                                         Catch::Contains("missing entry 'sgd.num_params'"));
    }
    SECTION("a good state is adopted") {
        target.load_state_dict(good);
        CHECK(target.lr() == 0.01);
        CHECK(target.options().betas() == std::pair<double, double>(0.9, 0.999));
    }
}

// --- bad hyper-parameters -------------------------------------------------------------------

TEST_CASE("out-of-range hyper-parameters throw readable errors", "[optim][errors]") {
    const std::vector<Tensor> ps = {param({2})};
    auto sgd = [&](SGDOptions o) { SGD opt(ps, o); };
    auto adam = [&](AdamOptions o) { Adam opt(ps, o); };
    auto adamw = [&](AdamWOptions o) { AdamW opt(ps, o); };
    CHECK_THROWS_WITH(sgd(SGDOptions(-0.1)), Catch::Contains("SGD: invalid learning rate -0.1 (expected lr >= 0)"));
    CHECK_THROWS_WITH(sgd(SGDOptions(0.1).momentum(-0.5)), Catch::Contains("SGD: invalid momentum -0.5"));
    CHECK_THROWS_WITH(sgd(SGDOptions(0.1).weight_decay(-1)), Catch::Contains("SGD: invalid weight_decay -1"));
    CHECK_THROWS_WITH(sgd(SGDOptions(0.1).nesterov(true)),
                      Catch::Contains("nesterov momentum requires momentum > 0 and dampening = 0"));
    CHECK_THROWS_WITH(sgd(SGDOptions(0.1).momentum(0.9).dampening(0.1).nesterov(true)),
                      Catch::Contains("nesterov") && Catch::Contains("dampening 0.1"));
    CHECK_NOTHROW(sgd(SGDOptions(0.0).momentum(0.9).nesterov(true)));

    CHECK_THROWS_WITH(adam(AdamOptions(-1e-3)), Catch::Contains("Adam: invalid learning rate -0.001"));
    CHECK_THROWS_WITH(adam(AdamOptions().betas({1.0, 0.999})),
                      Catch::Contains("Adam: invalid beta1 1 (expected 0 <= beta1 < 1)"));
    CHECK_THROWS_WITH(adam(AdamOptions().betas({-0.1, 0.999})), Catch::Contains("invalid beta1 -0.1"));
    CHECK_THROWS_WITH(adam(AdamOptions().betas({0.9, 1.0})), Catch::Contains("invalid beta2 1"));
    CHECK_THROWS_WITH(adam(AdamOptions().betas({0.9, -0.5})), Catch::Contains("invalid beta2 -0.5"));
    CHECK_THROWS_WITH(adam(AdamOptions().eps(0)), Catch::Contains("Adam: invalid eps 0 (expected eps > 0)"));
    CHECK_THROWS_WITH(adam(AdamOptions().eps(-1e-8)), Catch::Contains("invalid eps -1e-08"));
    CHECK_THROWS_WITH(adam(AdamOptions().weight_decay(-0.01)), Catch::Contains("invalid weight_decay -0.01"));
    CHECK_THROWS_WITH(adamw(AdamWOptions(-1)), Catch::Contains("AdamW: invalid learning rate -1"));
    CHECK_THROWS_WITH(adamw(AdamWOptions().betas({0.9, 1.5})), Catch::Contains("AdamW: invalid beta2 1.5"));
    CHECK_THROWS_WITH(adamw(AdamWOptions().eps(0)), Catch::Contains("AdamW: invalid eps 0"));
    CHECK_THROWS_WITH(adamw(AdamWOptions().weight_decay(-1)), Catch::Contains("AdamW: invalid weight_decay -1"));
    CHECK_THROWS_WITH(adam(AdamOptions(std::nan(""))), Catch::Contains("invalid learning rate nan"));
}

TEST_CASE("parameter lists are checked", "[optim][errors]") {
    Tensor w = param({2});
    CHECK_THROWS_WITH(SGD({}, 0.1), Catch::Contains("SGD: got an empty parameter list"));
    CHECK_THROWS_WITH(Adam({w, w}), Catch::Contains("parameters 0 and 1 are the same tensor"));
    CHECK_THROWS_WITH(Adam({w * 2.0}), Catch::Contains("parameter 0 is not a leaf") && Catch::Contains("mul"));
    CHECK_THROWS_WITH(Adam({ones({2}, kInt64)}), Catch::Contains("parameter 0 is int64"));
    CHECK_THROWS_WITH(Adam({Tensor()}), Catch::Contains("parameter 0 is an undefined tensor"));
}
