// 1. The minimal training loop: make a batch, run the model, take a loss, backward, step.
//
// One attention layer learns the mean of the valid part of each sequence: a single query
// attends over the keys that valid_lens leaves visible, as in d2l's attention pooling, and a
// linear head reads the result. The mean is exactly learnable, so the loss must get small.
// Next: autograd_demo (what backward() computes), then mha_shapes (the layer used here).
#include <xgrad/xgrad.hpp>

using namespace xgrad;

int main() {
    manual_seed(0);  // the initial weights and the random batches
    // The model: multi-head attention (queries, keys and values of size 1; 8 hidden, 2 heads)
    // and a linear head. The optimizer holds the parameters by handle, not a copy.
    auto attention = std::make_shared<nn::MultiHeadAttention>(1, 1, 1, 8, 2, /*dropout=*/0.0);
    auto head = std::make_shared<nn::Linear>(8, 1);
    std::vector<Tensor> params = attention->parameters();
    for (const Tensor& p : head->parameters()) params.push_back(p);
    optim::Adam opt(params, optim::AdamOptions(1e-2));

    double last = 0;
    for (int step = 1; step <= 300; ++step) {
        // A batch: 64 sequences of 6 numbers, of which the first 1..6 count.
        Tensor x = rand({64, 6, 1});                           // (batch, keys, 1)
        Tensor valid_lens = randint(1, 7, {64});               // 1..6 visible keys
        Tensor visible = lt(arange(6).reshape({1, 6}), valid_lens.unsqueeze(1)).to(kFloat32);
        Tensor target = sum(x.squeeze(2) * visible, {1}, true) / sum(visible, {1}, true);  // (batch, 1)
        // Forward: one query of ones attends over the sequence; the head maps 8 → 1.
        Tensor query = ones({64, 1, 1});
        Tensor y = head->forward(attention->forward(query, x, x, valid_lens)).squeeze(1);   // (batch, 1)
        Tensor loss = nn::mse_loss(y, target);
        // Backward and step: clear the old gradients, fill them from the loss, update the weights.
        opt.zero_grad();
        loss.backward();
        opt.step();
        last = loss.item<double>();
        if (step % 100 == 0) fmt::print("step {:3d}  loss {:.6f}\n", step, last);
    }
    fmt::print("{}\n", *attention);
    return last < 1e-4 ? 0 : 1;  // the exit code says whether it learned
}
