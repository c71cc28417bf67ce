#include "checkpoint_file.hpp"

#include <cmath>
#include <utility>

#include "core/creation.hpp"
#include "core/error.hpp"

namespace xgrad::examples {

Tensor setting_entry(const CheckpointSetting& s) {
    if (s.whole_bits)
        return from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(std::stoull(s.shown))}, {});
    return tensor(std::stod(s.shown), kFloat64);
}

std::string changed_setting(const CheckpointSetting& s, const std::string& saved) {
    if (saved == s.shown) return "";
    return fmt::format("\n  {} ({}): checkpoint {}, this run {}", s.name, s.flag, saved, s.shown);
}

void refuse_changed_settings(const std::string& path, const std::string& changed, const std::string& keep) {
    if (changed.empty()) return;
    throw Error(fmt::format("load checkpoint '{}': it was written with settings that change the numbers, and this run "
                            "has others (resume with {}):{}", path, keep, changed));
}

NamedTensors detached(NamedTensors state) {
    for (auto& entry : state) entry.second = entry.second.detach().clone();  // detach alone shares storage
    return state;
}

CheckpointFile::CheckpointFile(std::string path, std::string program)
    : m_path(std::move(path)), m_program(std::move(program)), m_entries(load_npz(m_path)) {}

bool CheckpointFile::has(const std::string& name) const {
    for (const auto& entry : m_entries)
        if (entry.first == name) return true;
    return false;
}

void CheckpointFile::fail(const std::string& what) const {
    throw Error(fmt::format("load checkpoint '{}': {}", m_path, what));
}

const Tensor& CheckpointFile::find(const std::string& name) const {
    for (const auto& [n, t] : m_entries)
        if (n == name) return t;
    fail(m_program.empty() ? fmt::format("entry '{}' is missing", name)
                           : fmt::format("entry '{}' is missing (not a {} checkpoint, or one from an older {})", name,
                                         m_program, m_program));
}

const Tensor& CheckpointFile::scalar(const std::string& name) const {
    const Tensor& t = find(name);
    if (t.numel() != 1 || t.dim() > 1)
        fail(fmt::format("entry '{}': expected one number, got shape {}", name, shape_str(t.shape())));
    return t;
}

double CheckpointFile::number(const std::string& name) const {
    const double v = scalar(name).item<double>();
    if (!std::isfinite(v)) fail(fmt::format("entry '{}': expected a finite number, got {}", name, v));
    return v;
}

std::vector<double> CheckpointFile::curve(const std::string& name) const {
    const Tensor& t = find(name);
    if (t.dim() != 1) fail(fmt::format("entry '{}': expected a 1-D array, got shape {}", name, shape_str(t.shape())));
    return t.to_vector<double>();
}

std::int64_t CheckpointFile::step(const std::string& name, std::int64_t steps) const {
    const double v = scalar(name).item<double>();
    if (!(v >= 0 && v <= static_cast<double>(steps)) || v != std::floor(v))
        fail(fmt::format("entry '{}': expected a whole number from 0 to {} (--steps), got {}", name, steps, v));
    return static_cast<std::int64_t>(v);
}

std::string CheckpointFile::saved(const CheckpointSetting& s) const {
    const Tensor& t = scalar("config." + s.name);
    if (!s.whole_bits) return fmt::format("{}", t.item<double>());
    if (t.dtype() != kInt64)
        fail(fmt::format("entry 'config.{}': expected its 64 bits as int64, got {}", s.name, t.dtype()));
    return std::to_string(static_cast<std::uint64_t>(t.item<std::int64_t>()));
}

void load_parts(const CheckpointFile& file, const std::vector<CheckpointPart>& parts) {
    // Every snapshot is taken before the first load, so a refusal can put back each part.
    std::vector<std::function<void()>> restore;
    restore.reserve(parts.size());
    for (const CheckpointPart& part : parts) restore.push_back(part.snapshot());
    try {
        for (const CheckpointPart& part : parts) part.load(file);
    } catch (const std::exception& e) {
        // Every part is put back even when one cannot be; the refusal stays the error thrown,
        // since it says which part or entry of the file was wrong, and a failed put-back is added.
        std::string unrestored;
        for (std::size_t i = 0; i < restore.size(); ++i) {
            try {
                restore[i]();
            } catch (const std::exception& r) {
                unrestored += fmt::format("{}part {} of {}: {}", unrestored.empty() ? "" : "; ", i + 1, restore.size(),
                                          r.what());
            }
        }
        std::string what = e.what();
        if (!unrestored.empty())
            what += fmt::format(" (and putting this run's state back as it was failed too, so it is now partly the "
                                "checkpoint's: {})", unrestored);
        // A refusal of the file's own (an entry missing) names the file already.
        if (what.rfind(fmt::format("load checkpoint '{}': ", file.path()), 0) == 0) {
            if (unrestored.empty()) throw;
            throw Error(what);
        }
        file.fail(what);
    }
}

CheckpointPart generator_part(Generator& generator, std::string name) {
    return {[&generator] { return [&generator, before = generator.get_state()] { generator.set_state(before); }; },
            [&generator, name = std::move(name)](const CheckpointFile& file) { generator.set_state(file.find(name)); }};
}

CheckpointPart default_generator_part(std::string name) {
    return {[] { return [before = get_rng_state()] { set_rng_state(before); }; },
            [name = std::move(name)](const CheckpointFile& file) { set_rng_state(file.find(name)); }};
}

}  // namespace xgrad::examples
