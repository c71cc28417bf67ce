// tools/ddp_scaling's model: the ring all-reduce, the overlap pipeline and the units.
#include <catch2/catch.hpp>

#include "tools/scaling_model.hpp"

using namespace xgrad::tools;
using Catch::Matchers::WithinRel;

TEST_CASE("ring all-reduce time: latency per round plus 2(N-1)/N of the bytes", "[ddp-scaling]") {
    const Link link{1e6, 1e-3};  // 1 MB/s, 1 ms
    CHECK(ring_allreduce_seconds(1e6, 1, link) == 0);
    // 2 ranks: 2 rounds of 1 ms, and each rank sends the whole buffer once (2·1/2·1 s).
    CHECK_THAT(ring_allreduce_seconds(1e6, 2, link), WithinRel(0.002 + 1.0, 1e-12));
    // 8 ranks: 14 rounds, 14/8 of the buffer.
    CHECK_THAT(ring_allreduce_seconds(1e6, 8, link), WithinRel(0.014 + 1.75, 1e-12));
    CHECK_THAT(small_allreduce_seconds(8, link), WithinRel(0.003, 1e-12));
    CHECK_THAT(small_allreduce_seconds(5, link), WithinRel(0.003, 1e-12));
    CHECK(small_allreduce_seconds(1, link) == 0);
}

TEST_CASE("one bucket cannot overlap and many buckets hide behind backward", "[ddp-scaling]") {
    const Link link{1e6, 0};
    StepProfile p;
    p.compute_seconds = 1.0;  // per rank, measured on 2 ranks: 2 s on one rank
    p.backward_fraction = 0.5;
    p.gradient_bytes = 0.4e6;  // 0.4 s on 2 ranks
    p.measured_ranks = 2;
    p.buckets = 1;
    auto r = predict(p, 2, link);
    CHECK_THAT(r.compute, WithinRel(1.0, 1e-12));
    CHECK_THAT(r.allreduce, WithinRel(0.4, 1e-12));
    CHECK_THAT(r.serial, WithinRel(1.4, 1e-12));
    CHECK_THAT(r.overlapped, WithinRel(1.4, 1e-12));
    CHECK_THAT(r.efficiency_serial, WithinRel(1.0 / 1.4, 1e-12));

    // 4 buckets of 0.1 s, ready at 0.125, 0.25, 0.375, 0.5 s into backward: the first three
    // finish by 0.475, the last runs 0.5 to 0.6, so 0.1 s shows past backward.
    p.buckets = 4;
    r = predict(p, 2, link);
    CHECK_THAT(r.overlapped, WithinRel(0.5 + 0.6, 1e-12));
    // Communication longer than backward: it runs back to back from the first bucket.
    p.gradient_bytes = 4e6;  // 4 s, 1 s per bucket
    r = predict(p, 2, link);
    CHECK_THAT(r.overlapped, WithinRel(0.5 + 0.125 + 4.0, 1e-12));
    CHECK(r.overlapped < r.serial);
}

TEST_CASE("strong scaling shrinks compute and weak scaling keeps it", "[ddp-scaling]") {
    const Link link{1e9, 1e-5};
    StepProfile p;
    p.compute_seconds = 0.1;
    p.measured_ranks = 2;
    p.gradient_bytes = 1e6;
    p.small_collectives = 2;
    const auto strong = predict(p, 8, link);
    CHECK_THAT(strong.compute, WithinRel(0.025, 1e-12));
    CHECK_THAT(strong.small, WithinRel(2 * 3 * 1e-5, 1e-12));
    p.fixed_global_batch = false;
    const auto weak = predict(p, 8, link);
    CHECK_THAT(weak.compute, WithinRel(0.1, 1e-12));
    CHECK(weak.efficiency_serial > strong.efficiency_serial);
    CHECK(weak.efficiency_serial < 1);
}

TEST_CASE("rates and durations as tc writes them", "[ddp-scaling]") {
    CHECK_THAT(*parse_rate("100mbit"), WithinRel(12.5e6, 1e-12));
    CHECK_THAT(*parse_rate("1Gbit"), WithinRel(125e6, 1e-12));
    CHECK_THAT(*parse_rate("12.5mbps"), WithinRel(12.5e6, 1e-12));
    CHECK_THAT(*parse_rate("800"), WithinRel(100.0, 1e-12));
    for (const char* bad : {"", "fast", "100mbitz", "-1mbit", "0gbit", "nanmbit", "infgbit", "1e400bit"})
        CHECK_FALSE(parse_rate(bad).has_value());
    CHECK_THAT(*parse_duration("5ms"), WithinRel(5e-3, 1e-12));
    CHECK_THAT(*parse_duration("50us"), WithinRel(50e-6, 1e-12));
    CHECK_THAT(*parse_duration("100"), WithinRel(100e-6, 1e-12));
    CHECK(*parse_duration("0s") == 0);
    for (const char* bad : {"", "5 ms", "5min", "-1ms", "nanms", "inf"})
        CHECK_FALSE(parse_duration(bad).has_value());
}
