// A shared library of the program's own built on xgrad, as a plugin or a Python module is: the
// static libraries it links must have been compiled position-independent.
#include <xgrad/xgrad.hpp>

float plugin_loss() {
    xgrad::Tensor w = xgrad::ones({2, 3}).requires_grad_();
    xgrad::Tensor loss = xgrad::sum(w * w);
    loss.backward();
    return loss.item<float>() + xgrad::sum(w.grad()).item<float>();   // 6 + 12
}
