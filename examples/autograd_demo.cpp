// 2. What backward() computes: build a small graph, run backward, print values and gradients.
// Next: mha_shapes.
#include <xgrad/xgrad.hpp>

using namespace xgrad;

int main() {
    Tensor w = tensor({{0.5, -1.0}, {2.0, 0.25}}).requires_grad_();
    Tensor x = tensor({1.0, 2.0});
    Tensor y = tanh(w * x);  // x broadcasts over w's rows
    Tensor loss = y.sum();
    loss.backward();
    fmt::print("w = {}\ny = {}\nloss = {}\ndloss/dw = {}\n", w, y, loss, w.grad());
}
