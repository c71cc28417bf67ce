// Looking up and grouping named entries (core/io/npz.hpp): a checkpoint's parts by prefix.
#include <fmt/format.h>

#include "core/io/npz.hpp"

namespace xgrad {

Tensor find_entry(const NamedTensors& entries, const std::string& name) {
    for (const auto& [n, t] : entries)
        if (n == name) return t;
    std::string names;
    for (std::size_t i = 0; i < entries.size() && i < 20; ++i) names += (i ? ", " : "") + entries[i].first;
    if (entries.size() > 20) names += fmt::format(", ... ({} in all)", entries.size());
    throw Error(fmt::format("find_entry: there is no entry '{}' (the entries: {})", name,
                            entries.empty() ? std::string("none") : names));
}

NamedTensors sub_entries(const NamedTensors& entries, const std::string& prefix) {
    const std::string head = prefix + ".";
    NamedTensors out;
    for (const auto& [n, t] : entries)
        // "<prefix>." with nothing after it names no sub-entry, as torch's load_state_dict under a
        // prefix finds no name in it
        if (n.size() > head.size() && n.compare(0, head.size(), head) == 0) out.emplace_back(n.substr(head.size()), t);
    return out;
}

NamedTensors with_prefix(const std::string& prefix, const NamedTensors& entries) {
    NamedTensors out;
    out.reserve(entries.size());
    for (std::size_t i = 0; i < entries.size(); ++i) {
        // "<prefix>." alone is no entry of sub_entries(..., prefix), so the round trip would lose it.
        if (entries[i].first.empty())
            throw Error(fmt::format("with_prefix: entry {} has an empty name, expected a name such as \"weight\" "
                                    "('{}.' alone would not read back through sub_entries(entries, \"{}\"))",
                                    i, prefix, prefix));
        out.emplace_back(prefix + "." + entries[i].first, entries[i].second);
    }
    return out;
}

}  // namespace xgrad
