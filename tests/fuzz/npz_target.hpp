#pragma once
// What the fuzzer does with one input, shared by tests/fuzz/fuzz_npz.cpp (libFuzzer) and the
// regression test that replays every input that once crashed it (tests/core/test_fuzz_regressions.cpp).
//
// The bytes go through the three readers: parse_npy, parse_npz, and parse_npz followed by
// load_state_dict into a small module (the checkpoint path). Refusing the bytes with
// xgrad::Error is the expected answer; any other exception, a crash, a sanitizer report, a
// hang or a large allocation is a bug.
#include <string_view>

#include "core/io/npz.hpp"
#include "core/ops.hpp"
#include "nn/linear.hpp"

namespace xgrad::fuzz {

// Reads every value of what was loaded, so the sanitizers see any array whose shape claims
// more than its buffer holds.
inline double touch(const Tensor& t) {
    double s = 0;
    for (double v : t.to_vector<double>()) s += v == v ? 0.0 : 1.0;
    if (t.to_vector<double>().size() != t.numel()) throw std::logic_error("numel disagrees with data");
    return s;
}

inline void npz_one_input(std::string_view bytes) {
    try {
        touch(parse_npy(bytes, "fuzz.npy"));
    } catch (const Error&) {
    }
    try {
        for (const auto& [name, t] : parse_npz(bytes, "fuzz.npz")) touch(t);
    } catch (const Error&) {
    }
    try {
        nn::Linear layer(3, 2);
        layer.load_state_dict(parse_npz(bytes, "fuzz.npz"));
    } catch (const Error&) {
    }
}

}  // namespace xgrad::fuzz
