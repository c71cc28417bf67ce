#pragma once
// The reverse-task models the example tests run. small_config learns (hidden 32, 2 heads, 2
// layers), seed 11 unless given: test_training.cpp's float32 runs and test_autocast_training.cpp's
// bfloat16 run are held to the same threshold on it. tiny_config (hidden 16, one layer) is for
// tests of what a run does around the numbers: memory checks, refusals, resume.
#include <cstdint>

#include "seq_train/train.hpp"

namespace xgrad::examples {

inline TrainConfig small_config(std::int64_t steps, std::uint64_t seed = 11) {
    TrainConfig c;
    c.task = TaskSpec{Task::reverse, 5, 6};
    c.model.hidden = 32;
    c.model.heads = 2;
    c.model.layers = 2;
    c.model.ffn_hidden = 64;
    c.steps = steps;
    c.batch = 32;
    c.warmup = 10;
    c.seed = seed;
    return c;
}

inline TrainConfig tiny_config(std::int64_t steps, std::uint64_t seed = 3) {
    TrainConfig c;
    c.task = TaskSpec{Task::reverse, 5, 6};
    c.model.hidden = 16;
    c.model.heads = 2;
    c.model.layers = 1;
    c.model.ffn_hidden = 16;
    c.steps = steps;
    c.batch = 8;
    c.warmup = default_warmup(c.optimizer, steps);  // as seq_train without --warmup
    c.seed = seed;
    return c;
}

}  // namespace xgrad::examples
