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
        if (n.size() > head.size() && n.compare(0, head.size(), head) == 0) out.emplace_back(n.substr(head.size()), t);
    return out;
}

NamedTensors with_prefix(const std::string& prefix, const NamedTensors& entries) {
    NamedTensors out;
    out.reserve(entries.size());
    for (const auto& [n, t] : entries) out.emplace_back(prefix + "." + n, t);
    return out;
}

}  // namespace xgrad
