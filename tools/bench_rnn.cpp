// bench_rnn: one forward-backward of nn::GRU and nn::LSTM over a batch of sequences in float32,
// the median over ~S seconds per configuration. tools/bench_rnn_torch.py times the same in
// PyTorch; run both with the same threads (XGRAD_NUM_THREADS, torch.set_num_threads).
//
//   bench_rnn [--seconds S]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include <xgrad/xgrad.hpp>

using namespace xgrad;

namespace {

struct Config {
    const char* name;
    std::size_t T, batch, input, hidden, layers;
};

double median_ms(const std::function<void()>& step, double seconds) {
    step();  // warm up
    std::vector<double> times;
    const auto start = std::chrono::steady_clock::now();
    while (times.size() < 5 || std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
        const auto t0 = std::chrono::steady_clock::now();
        step();
        times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    double seconds = 2.0;
    for (int i = 1; i + 1 < argc; ++i)
        if (!std::strcmp(argv[i], "--seconds")) seconds = std::atof(argv[i + 1]);
    const Config configs[] = {{"d2l", 10, 64, 32, 32, 2}, {"medium", 50, 32, 128, 256, 1}};
    for (const Config& c : configs) {
        manual_seed(0);
        const Tensor x = randn({c.T, c.batch, c.input});
        nn::GRU gru(nn::GRUOptions(c.input, c.hidden).num_layers(c.layers));
        nn::LSTM lstm(nn::LSTMOptions(c.input, c.hidden).num_layers(c.layers));
        const double gru_ms = median_ms([&] {
            auto [out, h] = gru(x);
            (sum(out) + sum(h)).backward();
            gru.zero_grad();
        }, seconds);
        const double lstm_ms = median_ms([&] {
            auto [out, state] = lstm(x);
            (sum(out) + sum(std::get<0>(state))).backward();
            lstm.zero_grad();
        }, seconds);
        std::printf("%-7s T=%zu batch=%zu input=%zu hidden=%zu layers=%zu  GRU %.3f ms  LSTM %.3f ms\n", c.name, c.T,
                    c.batch, c.input, c.hidden, c.layers, gru_ms, lstm_ms);
    }
}
