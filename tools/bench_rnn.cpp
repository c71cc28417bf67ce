// bench_rnn: one forward-backward of nn::GRU and nn::LSTM over a batch of sequences in float32,
// the median over ~S seconds per configuration, in wall time and in the calling thread's CPU
// time (the fairer figure on a loaded machine, with XGRAD_NUM_THREADS=1). tools/bench_rnn_torch.py
// times the same in PyTorch (one thread by default).
//
//   bench_rnn [--seconds S]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include <xgrad/xgrad.hpp>

using namespace xgrad;

namespace {

struct Config {
    const char* name;
    std::size_t T, batch, input, hidden, layers;
};

double thread_cpu_ms() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// Median wall and CPU milliseconds of one step.
std::pair<double, double> median_ms(const std::function<void()>& step, double seconds) {
    step();  // warm up
    std::vector<double> wall, cpu;
    const auto start = std::chrono::steady_clock::now();
    while (wall.size() < 5 || std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
        const auto t0 = std::chrono::steady_clock::now();
        const double c0 = thread_cpu_ms();
        step();
        cpu.push_back(thread_cpu_ms() - c0);
        wall.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(wall.begin(), wall.end());
    std::sort(cpu.begin(), cpu.end());
    return {wall[wall.size() / 2], cpu[cpu.size() / 2]};
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
        const auto gru_ms = median_ms([&] {
            auto [out, h] = gru(x);
            (sum(out) + sum(h)).backward();
            gru.zero_grad();
        }, seconds);
        const auto lstm_ms = median_ms([&] {
            auto [out, state] = lstm(x);
            (sum(out) + sum(std::get<0>(state))).backward();
            lstm.zero_grad();
        }, seconds);
        std::printf("%-7s T=%zu batch=%zu input=%zu hidden=%zu layers=%zu  GRU %.3f ms (cpu %.3f)  LSTM %.3f ms (cpu %.3f)\n",
                    c.name, c.T, c.batch, c.input, c.hidden, c.layers, gru_ms.first, gru_ms.second, lstm_ms.first,
                    lstm_ms.second);
    }
}
