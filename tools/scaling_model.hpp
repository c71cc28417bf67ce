#pragma once
/// The step time of data-parallel training on N ranks, predicted from one measured run: what
/// tools/ddp_scaling prints, kept apart from the program so the tests can check the arithmetic.
///
/// The all-reduce is a ring (what Open MPI picks for the large gradient buckets): each of the
/// 2(N − 1) rounds sends 1/N of a bucket to the next rank, so a bucket of S bytes over a link of
/// latency α and bandwidth β takes 2(N − 1)·α + 2·(N − 1)/N · S/β. With several ranks per host
/// the ring crosses each link once per direction and moves in lockstep, so the formula holds
/// with the link's α and β. The small per-step collectives (the stop flag, the metrics) are
/// latency-bound: ⌈log₂ N⌉ rounds of α each (recursive doubling).
///
/// Overlap: during backward the buckets become ready one after another, in even steps of the
/// backward time; a bucket's all-reduce starts when it is ready and the previous one is done.
/// What is left of the communication when backward ends is the step's exposed communication;
/// the last bucket is never hidden. With one bucket the overlapped step equals the serial one.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <optional>
#include <string>

namespace xgrad::tools {

struct Link {
    double bytes_per_second = 0;  ///< one direction
    double latency_seconds = 0;   ///< one message, one way
};

/// What one measured run gave, per step and per rank.
struct StepProfile {
    double compute_seconds = 0;    ///< forward, backward and optimizer, without communication
    double backward_fraction = 0;  ///< share of compute_seconds that is backward, in [0, 1]
    double gradient_bytes = 0;     ///< all-reduced per step (the flag slots included)
    std::size_t buckets = 1;       ///< gradient all-reduces per step
    std::size_t small_collectives = 0;
    std::size_t measured_ranks = 1;
    /// true: the global batch is fixed and each rank's compute shrinks as 1/N (seq_train);
    /// false: each rank keeps its batch (weak scaling).
    bool fixed_global_batch = true;
};

struct Prediction {
    std::size_t ranks = 1;
    double compute = 0, allreduce = 0, small = 0;  ///< seconds per step
    double serial = 0, overlapped = 0;             ///< step time without and with overlap
    double efficiency_serial = 0, efficiency_overlapped = 0;
};

/// Seconds for one ring all-reduce of `bytes` over `ranks`.
inline double ring_allreduce_seconds(double bytes, std::size_t ranks, const Link& link) {
    if (ranks <= 1) return 0;
    const double n = static_cast<double>(ranks);
    return 2 * (n - 1) * link.latency_seconds + 2 * (n - 1) / n * bytes / link.bytes_per_second;
}

/// Seconds for one latency-bound all-reduce of a few bytes.
inline double small_allreduce_seconds(std::size_t ranks, const Link& link) {
    if (ranks <= 1) return 0;
    return std::ceil(std::log2(static_cast<double>(ranks))) * link.latency_seconds;
}

inline Prediction predict(const StepProfile& p, std::size_t ranks, const Link& link) {
    Prediction r;
    r.ranks = ranks;
    const double one_rank_compute = p.fixed_global_batch
                                        ? p.compute_seconds * static_cast<double>(p.measured_ranks)
                                        : p.compute_seconds;
    r.compute = p.fixed_global_batch ? one_rank_compute / static_cast<double>(ranks)
                                     : p.compute_seconds;
    const std::size_t buckets = std::max<std::size_t>(p.buckets, 1);
    const double per_bucket =
        ring_allreduce_seconds(p.gradient_bytes / static_cast<double>(buckets), ranks, link);
    r.allreduce = per_bucket * static_cast<double>(buckets);
    r.small = static_cast<double>(p.small_collectives) * small_allreduce_seconds(ranks, link);
    r.serial = r.compute + r.allreduce + r.small;

    // Pipeline of the buckets against backward: bucket i is ready at backward·(i+1)/buckets.
    const double backward = r.compute * std::clamp(p.backward_fraction, 0.0, 1.0);
    double done = 0;
    for (std::size_t i = 0; i < buckets; ++i) {
        const double ready = backward * static_cast<double>(i + 1) / static_cast<double>(buckets);
        done = std::max(done, ready) + per_bucket;
    }
    r.overlapped = (r.compute - backward) + std::max(done, backward) + r.small;

    // Efficiency: the one-rank step (no communication) against N ranks' total time.
    const double n = static_cast<double>(ranks);
    const double ideal = p.fixed_global_batch ? one_rank_compute / n : p.compute_seconds;
    r.efficiency_serial = ideal / r.serial;
    r.efficiency_overlapped = ideal / r.overlapped;
    return r;
}

/// A rate as tc writes it ("100mbit", "1gbit", "12.5mbps" for megabytes, "800kbit", "1e9bit";
/// a bare number is bits per second), in bytes per second; nothing for text that is not one or
/// for a rate that is not finite and positive.
inline std::optional<double> parse_rate(const std::string& text) {
    const char* begin = text.c_str();
    char* end = nullptr;
    const double value = std::strtod(begin, &end);
    if (end == begin) return std::nullopt;
    std::string unit(end);
    for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    struct Unit { const char* name; double bytes; };
    static const Unit units[] = {{"", 1.0 / 8},       {"bit", 1.0 / 8},   {"kbit", 1e3 / 8},
                                 {"mbit", 1e6 / 8},   {"gbit", 1e9 / 8},  {"tbit", 1e12 / 8},
                                 {"bps", 1},          {"kbps", 1e3},      {"mbps", 1e6},
                                 {"gbps", 1e9},       {"tbps", 1e12}};
    for (const auto& u : units)
        if (unit == u.name) {
            const double rate = value * u.bytes;
            if (!std::isfinite(rate) || rate <= 0) return std::nullopt;
            return rate;
        }
    return std::nullopt;
}

/// A duration as tc writes it ("5ms", "50us", "0.2s"; a bare number is microseconds, as tc), in
/// seconds; nothing for text that is not one or for a duration that is negative or not finite.
inline std::optional<double> parse_duration(const std::string& text) {
    const char* begin = text.c_str();
    char* end = nullptr;
    const double value = std::strtod(begin, &end);
    if (end == begin) return std::nullopt;
    const std::string unit(end);
    double scale = 0;
    if (unit.empty() || unit == "us" || unit == "usec") scale = 1e-6;
    else if (unit == "ms" || unit == "msec") scale = 1e-3;
    else if (unit == "s" || unit == "sec") scale = 1;
    else if (unit == "ns" || unit == "nsec") scale = 1e-9;
    else return std::nullopt;
    const double seconds = value * scale;
    if (!std::isfinite(seconds) || seconds < 0) return std::nullopt;
    return seconds;
}

}  // namespace xgrad::tools
