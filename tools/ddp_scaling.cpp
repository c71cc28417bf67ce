// tools/ddp_scaling: predicted step time and scaling efficiency of data-parallel training on
// 2–256 ranks, with and without overlapping the gradient all-reduce with backward, from one
// measured run (the `ddp:` line seq_train --distributed prints at the end) and a link's
// bandwidth and latency. The model is in tools/scaling_model.hpp.
//
//   ddp_scaling --compute-ms 41.2 --grad-bytes 3.2e6 --buckets 4 --rate 100mbit --latency 5ms
//               --check 2:290:250          (one command line)
//
// --check RANKS:SERIAL_MS:OVERLAPPED_MS prints a measured point beside the prediction.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "common/flags.hpp"
#include "scaling_model.hpp"

namespace {

using namespace xgrad::examples;
using xgrad::tools::Link;
using xgrad::tools::StepProfile;

struct Check {
    std::size_t ranks = 0;
    double serial_ms = 0, overlapped_ms = 0;
};

// "RANKS:SERIAL_MS:OVERLAPPED_MS", either time may be "-" when it was not measured.
bool parse_check(const std::string& text, Check& out) {
    const auto a = text.find(':');
    const auto b = a == std::string::npos ? a : text.find(':', a + 1);
    if (b == std::string::npos) return false;
    const auto number = [](const std::string& s, double& v) {
        if (s == "-") { v = -1; return true; }
        char* end = nullptr;
        v = std::strtod(s.c_str(), &end);
        return !s.empty() && *end == '\0' && std::isfinite(v) && v > 0;
    };
    double ranks = 0;
    if (!number(text.substr(0, a), ranks) || ranks < 1 || ranks > 1e6 || ranks != std::floor(ranks))
        return false;
    out.ranks = static_cast<std::size_t>(ranks);
    return number(text.substr(a + 1, b - a - 1), out.serial_ms) &&
           number(text.substr(b + 1), out.overlapped_ms);
}

std::string ms(double seconds) { return fmt::format("{:.1f}", seconds * 1e3); }

int body(int argc, char** argv) {
    CLI::App app("Predicted step time and scaling efficiency of data-parallel training, from one "
                 "measured run and a link's bandwidth and latency (ring all-reduce).",
                 "ddp_scaling");
    flags::setup(app);
    StepProfile p;
    double compute_ms = 0;
    std::string rate = "10gbit", latency = "50us";
    std::uint64_t max_ranks = 256;
    bool weak = false;
    std::vector<std::string> checks;
    app.add_option("--compute-ms", compute_ms,
                   "measured compute per step and rank, communication excluded (ddp: compute_ms)")
        ->required()->check(flags::real(1e-6, 1e9));
    app.add_option("--grad-bytes", p.gradient_bytes, "bytes all-reduced per step (ddp: grad_bytes)")
        ->required()->check(flags::real(1, 1e15));
    app.add_option("--buckets", p.buckets, "gradient all-reduces per step (ddp: buckets)")
        ->check(flags::whole(1, 1 << 20));
    app.add_option("--backward-fraction", p.backward_fraction,
                   "share of compute that is backward, which the all-reduce can hide behind")
        ->check(flags::real(0, 1));
    p.backward_fraction = 0.6;
    app.add_option("--small-collectives", p.small_collectives,
                   "latency-bound all-reduces per step besides the gradients (stop flag, metrics)")
        ->check(flags::whole(0, 1 << 20));
    p.small_collectives = 2;
    app.add_option("--measured-ranks", p.measured_ranks, "ranks of the measured run")
        ->check(flags::whole(1, 1 << 20));
    p.measured_ranks = 2;
    app.add_flag("--weak", weak, "each rank keeps its batch (default: the global batch is fixed)");
    app.add_option("--rate", rate, "link bandwidth per direction, as tc writes it (100mbit, 10gbit)");
    app.add_option("--latency", latency, "one-way latency, as tc writes it (5ms, 50us)");
    app.add_option("--max-ranks", max_ranks, "largest rank count, in powers of two from 2")
        ->check(flags::whole(2, 1 << 20));
    app.add_option("--check", checks, "RANKS:SERIAL_MS:OVERLAPPED_MS, a measured point to compare");
    if (const auto code = flags::parse(app, argc, argv)) return *code;

    Link link;
    if (const auto r = xgrad::tools::parse_rate(rate)) link.bytes_per_second = *r;
    else return flags::refuse(app, fmt::format("--rate: expected a rate such as 100mbit, got '{}'", rate));
    if (const auto l = xgrad::tools::parse_duration(latency)) link.latency_seconds = *l;
    else return flags::refuse(app, fmt::format("--latency: expected a duration such as 5ms, got '{}'", latency));
    std::vector<Check> measured;
    for (const auto& c : checks) {
        Check parsed;
        if (!parse_check(c, parsed))
            return flags::refuse(app, fmt::format("--check: expected RANKS:SERIAL_MS:OVERLAPPED_MS "
                                                  "(positive numbers, '-' for none), got '{}'", c));
        measured.push_back(parsed);
    }
    p.compute_seconds = compute_ms * 1e-3;
    p.fixed_global_batch = !weak;

    fmt::print("link {:g} B/s per direction ({}), latency {:g} s ({}); measured on {} ranks: compute "
               "{:g} ms/step, {:g} gradient bytes in {} bucket(s), backward {:.0f}% of compute; {}\n",
               link.bytes_per_second, rate, link.latency_seconds, latency, p.measured_ranks,
               compute_ms, p.gradient_bytes, p.buckets, p.backward_fraction * 100,
               weak ? "weak scaling (batch per rank fixed)" : "strong scaling (global batch fixed)");
    fmt::print("{:>6} {:>11} {:>13} {:>10} {:>12} {:>8} {:>14} {:>8}\n", "ranks", "compute ms",
               "all-reduce ms", "small ms", "serial ms", "eff", "overlapped ms", "eff");
    for (std::size_t n = 2; n <= max_ranks; n *= 2) {
        const auto r = xgrad::tools::predict(p, n, link);
        fmt::print("{:>6} {:>11} {:>13} {:>10} {:>12} {:>7.1f}% {:>14} {:>7.1f}%\n", n, ms(r.compute),
                   ms(r.allreduce), ms(r.small), ms(r.serial), r.efficiency_serial * 100,
                   ms(r.overlapped), r.efficiency_overlapped * 100);
    }
    for (const auto& c : measured) {
        const auto r = xgrad::tools::predict(p, c.ranks, link);
        const auto side = [](double measured_ms, double predicted) {
            if (measured_ms < 0) return fmt::format("predicted {} ms, not measured", ms(predicted));
            return fmt::format("measured {:.1f} ms, predicted {} ms ({:+.0f}%)", measured_ms,
                               ms(predicted), (predicted * 1e3 / measured_ms - 1) * 100);
        };
        fmt::print("check {} ranks: serial {}; overlapped {}\n", c.ranks, side(c.serial_ms, r.serial),
                   side(c.overlapped_ms, r.overlapped));
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) { return flags::run_main("ddp_scaling", body, argc, argv); }
