#include "agreement.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/runtime/blas.hpp"
#include "core/runtime/dnnl.hpp"
#include "core/runtime/parallel.hpp"

// Set by examples/CMakeLists.txt at configure time; a build without them says so.
#ifndef XGRAD_BUILD_TYPE
#define XGRAD_BUILD_TYPE "unknown"
#endif
#ifndef XGRAD_BUILD_FLAGS
#define XGRAD_BUILD_FLAGS "unknown"
#endif
#ifndef XGRAD_BUILD_COMMIT
#define XGRAD_BUILD_COMMIT "unknown"
#endif

namespace xgrad::examples {

std::string encode_settings(const Settings& settings) {
    std::string out;
    for (const auto& [name, value] : settings) out += fmt::format("{}:{}{}:{}", name.size(), name, value.size(), value);
    return out;
}

Settings decode_settings(const std::string& text) {
    Settings out;
    std::size_t at = 0;
    const auto field = [&]() {
        const std::size_t colon = text.find(':', at);
        std::size_t length = 0;
        bool digits = colon != std::string::npos && colon > at && colon - at <= 9;
        for (std::size_t i = at; digits && i < colon; ++i) {
            digits = text[i] >= '0' && text[i] <= '9';
            length = length * 10 + static_cast<std::size_t>(text[i] - '0');
        }
        if (!digits || length > text.size() - colon - 1)
            throw Error(fmt::format("agreement: a rank's settings are malformed at byte {} of {} (expected "
                                    "<length>:<text>)", at, text.size()));
        at = colon + 1 + length;
        return text.substr(colon + 1, length);
    };
    while (at < text.size()) {
        std::string name = field();
        if (at >= text.size())
            throw Error(fmt::format("agreement: a rank's settings end after the name '{}', without its value", name));
        out.emplace_back(std::move(name), field());
    }
    return out;
}

std::string disagreements(const std::vector<Settings>& per_rank, std::size_t max_ranks) {
    // Every name any rank has, in order of first appearance (rank 0's order first).
    std::vector<std::string> names;
    std::vector<std::map<std::string, std::string>> lookup(per_rank.size());
    for (std::size_t r = 0; r < per_rank.size(); ++r)
        for (const auto& [name, value] : per_rank[r]) {
            if (lookup[r].emplace(name, value).second && std::find(names.begin(), names.end(), name) == names.end())
                names.push_back(name);
        }
    const std::string missing = "(missing)";
    const auto value_of = [&](std::size_t r, const std::string& name) -> const std::string& {
        const auto it = lookup[r].find(name);
        return it == lookup[r].end() ? missing : it->second;
    };
    const auto rank_list = [&](const std::vector<std::size_t>& ranks) {
        std::string s = ranks.size() == 1 ? "rank " : "ranks ";
        for (std::size_t i = 0; i < ranks.size() && i < max_ranks; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
        if (ranks.size() > max_ranks) s += fmt::format(" and {} more", ranks.size() - max_ranks);
        return s;
    };
    std::string out;
    for (const std::string& name : names) {
        // Values other than rank 0's, each with the ranks that hold it, in rank order.
        std::vector<std::pair<std::string, std::vector<std::size_t>>> others;
        std::vector<std::size_t> errors;
        for (std::size_t r = 0; r < per_rank.size(); ++r) {
            const std::string& v = value_of(r, name);
            if (name == kRankError && v != missing) errors.push_back(r);
            if (r == 0 || v == value_of(0, name)) continue;
            auto it = std::find_if(others.begin(), others.end(), [&](const auto& o) { return o.first == v; });
            if (it == others.end()) others.push_back({v, {r}});
            else it->second.push_back(r);
        }
        if (name == kRankError) {
            for (std::size_t r : errors) out += fmt::format("\n  rank {}: {}", r, value_of(r, name));
            continue;
        }
        if (others.empty()) continue;
        out += fmt::format("\n  {}: rank 0 '{}'", name, value_of(0, name));
        for (const auto& [v, ranks] : others) out += fmt::format("; {} '{}'", rank_list(ranks), v);
    }
    return out;
}

Settings numerics_settings() {
    const auto env = [](const char* name) {
        const char* v = std::getenv(name);
        return std::string(v ? v : "(unset)");
    };
    const BlasInfo& blas = blas_info();
    return {{"OPENBLAS_CORETYPE", env("OPENBLAS_CORETYPE")},
            {"XGRAD_BLAS_CORETYPE", env("XGRAD_BLAS_CORETYPE")},
            {"BLAS core", blas.core},
            {"BLAS library", fmt::format("{} ({}, {})", blas.vendor, blas.library, blas.backend)},
            {"BLAS threads", std::to_string(blas.num_threads)},
            {"XGRAD_NUM_THREADS", env("XGRAD_NUM_THREADS")},
            {"thread pool size", std::to_string(num_threads())},
            // oneDNN runs the autocast products and, by the float32 engine's rule (blas.hpp,
            // gemm_rule_picks_onednn: the BLAS library above, oneDNN's instruction set and the
            // shape), float32 ones: its version and instruction set decide how they round.
            {"oneDNN", dnnl::available() ? fmt::format("{}, isa {}", dnnl::version(), dnnl::isa()) : "none"},
            {"XGRAD_GEMM", env("XGRAD_GEMM")},
            {"float32 engine", gemm_engine_name(gemm_engine())},
#if defined(__VERSION__)
            {"build compiler", __VERSION__},
#endif
            {"build type", XGRAD_BUILD_TYPE},
            {"build flags", XGRAD_BUILD_FLAGS},
            {"build commit", XGRAD_BUILD_COMMIT}};
}

void check_agreement(Replicas& replicas, const Settings& mine) {
    const std::vector<std::string> gathered = replicas.all_gather(encode_settings(mine));
    if (gathered.size() != replicas.world_size())
        throw Error(fmt::format("agreement: gathered the settings of {} ranks, expected {}", gathered.size(),
                                replicas.world_size()));
    std::vector<Settings> per_rank;
    for (const std::string& text : gathered) per_rank.push_back(decode_settings(text));
    const std::string diff = disagreements(per_rank);
    if (diff.empty()) return;
    throw Disagreement(fmt::format(
        "the {} ranks do not agree on what must be equal before training, so none of them trains (nothing was "
        "run):{}\nGive every rank the same flags and environment (mpirun -x OPENBLAS_CORETYPE -x XGRAD_NUM_THREADS), "
        "the same build, and the same checkpoint (--out on a shared filesystem).",
        replicas.world_size(), diff));
}

}  // namespace xgrad::examples
