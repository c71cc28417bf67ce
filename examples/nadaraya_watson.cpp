// 4. Attention pooling as kernel regression (d2l 10.2, "Nadaraya-Watson Kernel Regression", the
// parametric version). Each test input x is a query; the training inputs are the keys and the
// training outputs the values. The prediction is a softmax-weighted average of the values:
//
//   f(x) = Σ_i softmax_i(-((x - x_i)·w)² / 2) · y_i
//
// with one learnable weight w, the width of the Gaussian kernel. Training fits w by SGD on
// the training set itself, each point predicted from the other 49 (leave-one-out, as d2l).
//
//   nadaraya_watson [--epochs 5] [--lr 0.5] [--seed 0] [--out out/nadaraya_watson] [--overwrite]
//
// Next: seq2seq, whole Transformer blocks.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <xgrad/xgrad.hpp>

#include "common/flags.hpp"
#include "common/interrupt.hpp"
#include "common/out_folder.hpp"

using namespace xgrad;
namespace flags = xgrad::examples::flags;

namespace {

// The function to learn.
double f(double x) { return 2 * std::sin(x) + std::pow(x, 0.8); }

/// d2l's NWKernelRegression: one parameter w, attention weights kept for the heatmap.
class NWKernelRegression : public nn::Module, public nn::Callable<NWKernelRegression> {
public:
    explicit NWKernelRegression(Generator& gen) : nn::Module("NWKernelRegression") {
        register_parameter("w", rand({1}, {}, gen));
    }

    Tensor forward(const Tensor& queries, const Tensor& keys, const Tensor& values) {
        // queries: (n_queries,); keys, values: (n_queries, n_kv). Each query is repeated
        // along its row of keys.
        const long n_kv = keys.size(1);
        const Tensor q = repeat_interleave(queries, keys.size(1), 0).reshape({-1, n_kv});
        m_attention_weights = softmax(-pow((q - keys) * parameter("w"), 2) / 2, 1);
        // (n_queries, 1, n_kv) · (n_queries, n_kv, 1) → (n_queries,)
        return bmm(m_attention_weights.unsqueeze(1), values.unsqueeze(-1)).reshape({-1});
    }

    /// (n_queries, n_kv) from the last forward.
    const Tensor& attention_weights() const { return m_attention_weights; }
    double w() const { return parameter("w").item<double>(); }

private:
    Tensor m_attention_weights;
};

std::vector<double> values_of(const Tensor& t) { return t.to_vector<double>(); }

int run(int argc, char** argv) {
    std::int64_t epochs = 5;
    double lr = 0.5;
    std::uint64_t seed = 0;
    std::string out = "out/nadaraya_watson";
    bool overwrite = false;
    CLI::App app("Fits the kernel width of Nadaraya-Watson attention pooling to 50 noisy samples of\n"
                 "f(x) = 2 sin(x) + x^0.8 (d2l 10.2) and plots the fit and the attention weights.",
                 "nadaraya_watson");
    flags::setup(app);
    app.add_option("--epochs", epochs, "full-batch SGD steps")->check(flags::whole(0, flags::kMaxCount));
    app.add_option("--lr", lr, "learning rate")->check(flags::real(0));
    app.add_option("--seed", seed, "seed for the data and the initial w")->check(flags::seed());
    app.add_option("--out", out, "where the pictures go");
    app.add_flag("--overwrite", overwrite, "replace the pictures of an earlier run in --out");
    if (const auto exit_code = flags::parse(app, argc, argv)) return *exit_code;
    const std::string fit_path = out + "/regression.svg", heat_path = out + "/attention.svg";
    examples::OutFolder folder;  // locked until the program ends
    try {
        folder = examples::prepare_out_folder(out, {"regression.svg", "attention.svg"},
                                     examples::start_from_flags(false, overwrite));
    } catch (const Error& e) {
        return flags::refuse(app, e.what());
    }
    Generator gen(seed);

    // Data: 50 sorted inputs uniform in [0, 5), outputs with N(0, 0.5) noise; test inputs on a grid.
    const std::size_t n_train = 50;
    std::vector<double> x_train(n_train), y_train(n_train);
    for (auto& x : x_train) x = 5 * gen.next_double();
    std::sort(x_train.begin(), x_train.end());
    for (std::size_t i = 0; i < n_train; ++i) y_train[i] = f(x_train[i]) + 0.5 * gen.next_normal();
    const Tensor x_test = arange(0, 5, 0.1);
    const std::size_t n_test = x_test.numel();
    std::vector<double> y_truth;
    for (double x : values_of(x_test)) y_truth.push_back(f(x));

    // Leave-one-out: row i holds every training pair except pair i (d2l's X_tile with the
    // diagonal removed), so a point cannot simply copy its own value.
    std::vector<double> loo_keys, loo_values;
    for (std::size_t i = 0; i < n_train; ++i)
        for (std::size_t j = 0; j < n_train; ++j)
            if (j != i) loo_keys.push_back(x_train[j]), loo_values.push_back(y_train[j]);
    const Tensor keys = from_vector(loo_keys, {n_train, n_train - 1});
    const Tensor values = from_vector(loo_values, {n_train, n_train - 1});
    const Tensor x_tr = from_vector(x_train, {n_train}), y_tr = from_vector(y_train, {n_train});

    // Train w: squared error summed over the training points, full-batch SGD.
    NWKernelRegression net(gen);
    optim::SGD trainer(net.parameters(), lr);
    fmt::print("w at start {:.4f}\n", net.w());
    examples::stop_on_sigint();
    bool stopped = false;
    for (std::int64_t epoch = 0; epoch < epochs; ++epoch) {
        if (examples::interrupted()) {  // Ctrl-C: plot the fit so far instead of losing it
            fmt::print("interrupted: stopped after epoch {} of {}; writing the results so far\n", epoch, epochs);
            stopped = true;
            break;
        }
        trainer.zero_grad();
        const Tensor l = nn::mse_loss(net(x_tr, keys, values), y_tr, nn::Reduction::none);
        const double loss = l.sum().item<double>();
        // Too high a learning rate sends w to infinity: say so instead of plotting NaN.
        if (!std::isfinite(loss))
            throw Error(fmt::format("the training loss is {} at epoch {}: the fit has diverged (lower --lr)", loss,
                                    epoch + 1));
        l.sum().backward();
        trainer.step();
        fmt::print("epoch {}, loss {:.2f}\n", epoch + 1, loss);
    }
    if (!std::isfinite(net.w()))
        throw Error(fmt::format("w is {} after training: the fit has diverged (lower --lr)", net.w()));
    fmt::print("w after training {:.4f}\n", net.w());

    // Predict the test grid from all 50 training pairs.
    NoGradGuard no_grad;
    const Tensor test_keys = expand(x_tr.reshape({1, -1}), {n_test, n_train});
    const Tensor test_values = expand(y_tr.reshape({1, -1}), {n_test, n_train});
    const Tensor y_hat = net(x_test, test_keys, test_values);

    const std::vector<double> xs = values_of(x_test);
    // The training data as dots: NaN between the points leaves each one alone, unjoined.
    svg::Series data{"Training data", {}, {}, "#7f7f7f"};
    for (std::size_t i = 0; i < n_train; ++i) {
        data.x.insert(data.x.end(), {x_train[i], x_train[i]});
        data.y.insert(data.y.end(), {y_train[i], std::nan("")});
    }
    svg::LinePlotOptions plot;
    plot.title = fmt::format("Nadaraya-Watson regression, learned w = {:.2f}", net.w());
    plot.xlabel = "x";
    plot.ylabel = "y";
    plot.xlim = {{0, 5}};
    plot.ylim = {{-1, 5}};
    svg::write_file(fit_path, svg::line_plot({{"Truth", xs, y_truth, "", "none"},
                                              {"Prediction", xs, values_of(y_hat), "", "7,4"},
                                              data},
                                             plot));

    // Row i: how the prediction at test input i weighs each training input.
    svg::HeatmapOptions heat;
    heat.title = "Attention weights";
    heat.xlabel = "Sorted training inputs";
    heat.ylabel = "Sorted testing inputs";
    svg::write_file(heat_path, svg::heatmaps({{net.attention_weights()}}, {}, heat));
    fmt::print("wrote {} and {}\n", fit_path, heat_path);
    return stopped ? 130 : EXIT_SUCCESS;
}

}  // namespace

int main(int argc, char** argv) { return xgrad::examples::flags::run_main("nadaraya_watson", run, argc, argv); }
