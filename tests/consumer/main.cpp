// Builds against the installed package only: one umbrella header, one target.
#include <xgrad/xgrad.hpp>

int main() {
    xgrad::Tensor w = xgrad::tensor({2.0}).requires_grad_();
    xgrad::Tensor loss = (w * w).sum();
    loss.backward();
    // d(w²)/dw = 2w = 4
    const float g = w.grad().item<float>();
    fmt::print("consumer: grad {}\n", g);
    return g == 4.0f ? 0 : 1;
}
