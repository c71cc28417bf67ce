#pragma once
/// bahdanau's streams of random numbers drawn from --seed, one per use: seeded with
/// mix_seed(seed, stream, 0). tools/bahdanau_twin.py uses the first two too, so that both
/// programs see the same sentences.
#include <cstdint>

namespace xgrad::examples::bahdanau {

enum Stream : std::uint64_t { kHeldOut = 21, kData = 22, kInit = 23, kDropout = 24 };

}  // namespace xgrad::examples::bahdanau
