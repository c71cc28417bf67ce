// 2. What backward() computes: build a small graph, run backward, print values and gradients,
// then draw the graphs backward walks (as micrograd's draw_dot): this small one, and the loss of
// one multi-head attention layer. Each is written as Graphviz DOT text, and as an SVG laid out
// by Graphviz when xgrad was built with it (libgraphviz-dev).
//
//   autograd_demo [--out out/autograd_demo] [--overwrite]
//
// Next: mha_shapes.
#include <string>
#include <vector>

#include <xgrad/xgrad.hpp>

#include "common/flags.hpp"
#include "common/out_folder.hpp"

using namespace xgrad;
namespace flags = xgrad::examples::flags;

namespace {

// Writes root's graph as <out>/<name>.dot, and .svg when xgrad has Graphviz; prints where.
void draw(const Tensor& root, const std::string& out, const std::string& name, const GraphOptions& opts) {
    save_graph(root, out + "/" + name + ".dot", opts);
    if (has_graphviz()) {
        save_graph(root, out + "/" + name + ".svg", opts);
        fmt::print("graph: {}/{}.svg (and .dot)\n", out, name);
    } else {
        fmt::print("graph: {}/{}.dot (lay it out with: dot -Tsvg {}/{}.dot -o {}/{}.svg)\n", out, name, out, name, out,
                   name);
    }
}

int run(int argc, char** argv) {
    std::string out = "out/autograd_demo";
    bool overwrite = false;
    CLI::App app("Builds a small graph, runs backward, prints values and gradients, and draws the graphs\n"
                 "backward walks as Graphviz DOT (and SVG when xgrad was built with Graphviz).",
                 "autograd_demo");
    flags::setup(app);
    app.add_option("--out", out, "where the graph pictures go");
    app.add_flag("--overwrite", overwrite, "replace the pictures of an earlier run in --out");
    if (const auto exit_code = flags::parse(app, argc, argv)) return *exit_code;
    std::vector<std::string> outputs{"tanh.dot", "attention.dot"};
    if (has_graphviz()) outputs.insert(outputs.end(), {"tanh.svg", "attention.svg"});
    examples::OutFolder folder;  // locked until the program ends
    try {
        folder = examples::prepare_out_folder(out, outputs, examples::start_from_flags(false, overwrite));
    } catch (const Error& e) {
        return flags::refuse(app, e.what());
    }

    Tensor w = tensor({{0.5, -1.0}, {2.0, 0.25}}).requires_grad_();
    Tensor x = tensor({1.0, 2.0});
    Tensor y = tanh(w * x);  // x broadcasts over w's rows
    Tensor loss = y.sum();
    loss.backward({}, /*retain_graph=*/true);  // keep the graph, to draw it below
    fmt::print("w = {}\ny = {}\nloss = {}\ndloss/dw = {}\n", w, y, loss, w.grad());
    // Boxes are tensors (w a parameter, x a constant), ellipses the ops and what they saved.
    draw(loss, out, "tanh", {{{"w", w}, {"x", x}, {"y", y}, {"loss", loss}}});

    // One multi-head attention layer (train_loop's model, smaller): 2 heads of 2 over 3 tokens,
    // the last one masked out, and a squared-error loss. The projections are matmul_t ops; the
    // heads are read in place by the fused head_attention ops (the lengths go in as a mask, not
    // as a tensor of the graph). Parameters are named as the module names them; top to bottom
    // suits the deeper graph.
    Generator gen(0);
    nn::MultiHeadAttention attention(nn::MultiHeadAttentionOptions(4, 2), gen);
    const Tensor X = rand({1, 3, 4}, {}, gen);
    const Tensor valid_lens = from_vector(std::vector<std::int64_t>{2}, {1});
    Tensor mse = mse_loss(attention(X, X, X, valid_lens), zeros({1, 3, 4}));
    mse.backward({}, /*retain_graph=*/true);
    GraphOptions opts{attention.named_parameters()};
    opts.names.insert(opts.names.end(), {{"X", X}, {"loss", mse}});
    opts.left_to_right = false;
    fmt::print("\nattention loss = {:.6f}\n", mse.item<double>());
    draw(mse, out, "attention", opts);
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return flags::run_main("autograd_demo", run, argc, argv); }
