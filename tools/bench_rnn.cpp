// bench_rnn: one forward-backward of nn::GRU and nn::LSTM over a batch of sequences in float32,
// the median over ~S seconds per configuration, in wall time and in the calling thread's CPU
// time. tools/bench_rnn_torch.py times the same in PyTorch with the same configurations, and
// tools/bench_rnn_compare.py runs both side by side, interleaved, and prints the ratios.
//
//   bench_rnn [--seconds S] [--config NAME|all] [--kind gru|lstm|both]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <xgrad/xgrad.hpp>

using namespace xgrad;

namespace {

// The configurations, the same list as bench_rnn_torch.py's.
struct Config {
    const char* name;
    std::size_t T, batch, input, hidden, layers;
    bool bidirectional;
};
const Config kConfigs[] = {
    {"d2l", 10, 64, 32, 32, 2, false},       {"small", 32, 64, 64, 64, 1, false},
    {"medium", 50, 32, 128, 256, 1, false},  {"medium2", 50, 64, 128, 256, 2, false},
    {"bidir", 50, 32, 128, 128, 2, true},    {"large", 50, 64, 256, 512, 1, false},
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
    while (wall.size() < 3 || std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
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
    std::string only = "all", kind = "both";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--seconds")) seconds = std::atof(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--config")) only = argv[i + 1];
        else if (!std::strcmp(argv[i], "--kind")) kind = argv[i + 1];
        else {
            std::fprintf(stderr, "bench_rnn: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    bool any = false;
    for (const Config& c : kConfigs) {
        if (only != "all" && only != c.name) continue;
        any = true;
        manual_seed(0);
        const Tensor x = randn({c.T, c.batch, c.input});
        std::printf("%-8s T=%zu batch=%zu input=%zu hidden=%zu layers=%zu%s", c.name, c.T, c.batch, c.input, c.hidden,
                    c.layers, c.bidirectional ? " bidirectional" : "");
        if (kind != "lstm") {
            nn::GRU gru(nn::GRUOptions(c.input, c.hidden).num_layers(c.layers).bidirectional(c.bidirectional));
            const auto ms = median_ms([&] {
                auto [out, h] = gru(x);
                (sum(out) + sum(h)).backward();
                gru.zero_grad();
            }, seconds);
            std::printf("  GRU %.3f ms (cpu %.3f)", ms.first, ms.second);
        }
        if (kind != "gru") {
            nn::LSTM lstm(nn::LSTMOptions(c.input, c.hidden).num_layers(c.layers).bidirectional(c.bidirectional));
            const auto ms = median_ms([&] {
                auto [out, state] = lstm(x);
                (sum(out) + sum(std::get<0>(state))).backward();
                lstm.zero_grad();
            }, seconds);
            std::printf("  LSTM %.3f ms (cpu %.3f)", ms.first, ms.second);
        }
        std::printf("\n");
        std::fflush(stdout);
    }
    if (!any) {
        std::fprintf(stderr, "bench_rnn: no configuration named %s\n", only.c_str());
        return 2;
    }
}
