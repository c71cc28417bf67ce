#pragma once
/// One checkpoint holds several states (model, optimizer, schedule...) side by side in one
/// .npz, each under its own name prefix ("model.", "optimizer."): how the examples put a state
/// in and take it back out.
#include <string>

#include "core/io/npz.hpp"

namespace xgrad::examples {

/// Appends every entry of `in` to `out` under `prefix` + its name.
inline void add_prefixed(NamedTensors& out, const std::string& prefix, const NamedTensors& in) {
    for (const auto& [name, t] : in) out.emplace_back(prefix + name, t);
}

/// The entries of `in` whose names start with `prefix`, the prefix taken off.
inline NamedTensors take_prefixed(const NamedTensors& in, const std::string& prefix) {
    NamedTensors out;
    for (const auto& [name, t] : in)
        if (name.compare(0, prefix.size(), prefix) == 0) out.emplace_back(name.substr(prefix.size()), t);
    return out;
}

}  // namespace xgrad::examples
