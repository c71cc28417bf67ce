// 9. A custom op: d2l's masked_softmax (10.3.1) written as an autograd::Function with a
// hand-written backward, as one writes torch.autograd.Function (LibTorch:
// torch::autograd::Function).
//
// forward is d2l's code, line by line: repeat the valid lengths over the queries, mask the keys
// past each length with -1e6 (sequence_mask), softmax over the keys. It runs with gradients
// off; the backward is ours: the softmax's Jacobian-vector product
//     dX = Y ⊙ (dY − Σ_keys dY ⊙ Y),
// where masked keys have Y = 0 and so get no gradient. It is written in xgrad ops on the saved
// output Y, so it is itself differentiable: gradgradcheck checks the second derivatives too.
//
// The program checks the op with gradcheck and gradgradcheck (float64) and against xgrad's own
// fused masked_softmax (values and gradients), prints what it checked, and exits 0 when all
// of it holds.
#include <cmath>
#include <cstdio>

#include <xgrad/xgrad.hpp>

using namespace xgrad;
using autograd::AutogradContext;
using autograd::variable_list;

namespace {

struct MaskedSoftmax : autograd::Function<MaskedSoftmax> {
    static constexpr const char* name = "MaskedSoftmax";

    /// X (batch, queries, keys); valid_lens (batch,) or (batch, queries) int64, or undefined
    /// for every key. Returns the attention weights, of X's shape.
    static Tensor forward(AutogradContext* ctx, const Tensor& X, const Tensor& valid_lens) {
        Tensor Y;
        if (!valid_lens.defined()) {
            Y = softmax(X, -1);
        } else {
            const Shape shape = X.shape();
            const long keys = static_cast<long>(shape[2]);
            Tensor lens = valid_lens.dim() == 1 ? repeat_interleave(valid_lens, shape[1], 0) : valid_lens.reshape({-1});
            // sequence_mask: key j of row i is kept when j < lens[i].
            Tensor mask = arange(keys).unsqueeze(0) < lens.unsqueeze(1);
            Tensor masked = masked_fill(X.reshape({-1, keys}), logical_not(mask), -1e6);
            Y = softmax(masked.reshape({static_cast<long>(shape[0]), static_cast<long>(shape[1]), keys}), -1);
        }
        ctx->save_for_backward({Y});
        return Y;
    }

    static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
        const Tensor Y = ctx->get_saved_variables()[0];
        const Tensor& dY = grad_outputs[0];
        Tensor dX = Y * (dY - (dY * Y).sum({-1}, /*keepdims=*/true));
        return {dX, Tensor()};  // valid_lens gets no gradient
    }
};

double max_abs_diff(const Tensor& a, const Tensor& b) {
    double worst = 0;
    const auto x = a.to_vector<double>(), y = b.to_vector<double>();
    for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
    return worst;
}

}  // namespace

int main() {
    Generator gen(0);
    bool ok = true;
    auto report = [&ok](bool passed, const std::string& what) {
        std::printf("%-70s %s\n", what.c_str(), passed ? "ok" : "FAILED");
        ok = ok && passed;
    };

    // d2l's example: two sequences of 4 keys, 2 queries each, 2 and 3 valid keys.
    Tensor X = uniform({2, 2, 4}, 0.0, 1.0, TensorOptions(kFloat64).requires_grad(true), gen);
    Tensor lens = from_vector(std::vector<std::int64_t>{2, 3}, {2});
    Tensor lens2 = from_vector(std::vector<std::int64_t>{1, 3, 2, 4}, {2, 2});
    Tensor Y = MaskedSoftmax::apply(X, lens);
    std::printf("MaskedSoftmax::apply(X, valid_lens = [2, 3]):\n%s\n", to_string(Y).c_str());

    // 1. Against xgrad's fused masked_softmax: values, and the gradient of a weighted sum.
    for (const Tensor& l : {lens, lens2, Tensor()}) {
        const std::string which = !l.defined() ? "every key" : l.dim() == 1 ? "lens (batch,)" : "lens (batch, queries)";
        Tensor W = uniform({2, 2, 4}, -1.0, 1.0, TensorOptions(kFloat64), gen);
        Tensor mine = MaskedSoftmax::apply(X, l);
        Tensor fused = masked_softmax(X, l);
        report(max_abs_diff(mine, fused) <= 1e-12, "values match xgrad's masked_softmax, " + which);
        Tensor g_mine = autograd::grad({(mine * W).sum()}, {X})[0];
        Tensor g_fused = autograd::grad({(fused * W).sum()}, {X})[0];
        report(max_abs_diff(g_mine, g_fused) <= 1e-12, "gradients match xgrad's masked_softmax, " + which);
    }

    // 2. gradcheck and gradgradcheck, float64: X checked, the lengths passed through.
    auto f = [](const std::vector<Tensor>& in) { return MaskedSoftmax::apply(in[0], in[1]); };
    GradcheckOptions options;
    options.name = "MaskedSoftmax";
    for (const Tensor& l : {lens, lens2}) {
        const std::string which = l.dim() == 1 ? "lens (batch,)" : "lens (batch, queries)";
        GradcheckResult first = gradcheck(f, {X, l}, options);
        report(first.passed, "gradcheck (first derivatives), " + which);
        if (!first.passed) std::printf("%s\n", first.report.c_str());
        GradcheckResult second = gradgradcheck(f, {X, l}, options);
        report(second.passed, "gradgradcheck (second derivatives), " + which);
        if (!second.passed) std::printf("%s\n", second.report.c_str());
    }

    // 3. A wrong backward must fail gradcheck: forgetting the Σ term gives the gradient of
    //    Y ⊙ dY only, which is not softmax's.
    struct Wrong : autograd::Function<Wrong> {
        static Tensor forward(AutogradContext* ctx, const Tensor& X, const Tensor& valid_lens) {
            return MaskedSoftmax::forward(ctx, X, valid_lens);
        }
        static variable_list backward(AutogradContext* ctx, variable_list g) {
            return {ctx->get_saved_variables()[0] * g[0], Tensor()};
        }
    };
    auto wrong = [](const std::vector<Tensor>& in) { return Wrong::apply(in[0], in[1]); };
    report(!gradcheck(wrong, {X, lens}, options).passed, "a backward without the sum term fails gradcheck");

    std::printf("%s\n", ok ? "all checks passed" : "some checks FAILED");
    return ok ? 0 : 1;
}
