// char_gpt's checkpoint: one .npz that numpy reads, with entries config.*, trainer.step, rng.*,
// model.*, optim.*, sched.* and history.*.
#include <algorithm>
#include <cmath>

#include "core/creation.hpp"
#include "core/error.hpp"
#include "core/io/npz.hpp"
#include "common/prefixed.hpp"
#include "train.hpp"

namespace xgrad::examples {

namespace {

// The settings kept as their 64 bits (int64 in the file, read as uint64), not as doubles.
bool whole_bits(const std::string& name) { return name == "seed" || name == "text_checksum"; }

Tensor setting_entry(const GptSetting& s) {
    if (whole_bits(s.name))
        return from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(std::stoull(s.shown))}, {});
    return tensor(std::stod(s.shown), kFloat64);
}

template <class H>
auto curves(H& h) {
    return std::vector<std::pair<const char*, decltype(&h.step)>>{{"step", &h.step},
                                                                  {"loss", &h.loss},
                                                                  {"eval_step", &h.eval_step},
                                                                  {"eval_train", &h.eval_train},
                                                                  {"eval_val", &h.eval_val}};
}

NamedTensors detached(NamedTensors state) {
    for (auto& entry : state) entry.second = entry.second.detach();
    return state;
}

}  // namespace

std::vector<GptSetting> gpt_settings(const GptConfig& c, std::uint64_t text_checksum) {
    const auto n = [](double v) { return fmt::format("{}", v); };
    const auto z = [&](std::size_t v) { return n(static_cast<double>(v)); };
    return {{"text_checksum", "--text", std::to_string(text_checksum)},
            {"train_fraction", "(the 90/10 split)", n(c.train_fraction)},
            {"block", "--block", z(c.model.block)},
            {"d_model", "--d-model", z(c.model.d_model)},
            {"heads", "--heads", z(c.model.heads)},
            {"layers", "--layers", z(c.model.layers)},
            {"dropout", "--dropout", n(c.model.dropout)},
            {"steps", "--steps", n(static_cast<double>(c.steps))},
            {"batch", "--batch", z(c.batch)},
            {"lr", "--lr", n(c.lr)},
            {"min_lr", "--min-lr", n(c.min_lr)},
            {"warmup", "--warmup", n(static_cast<double>(c.warmup))},
            {"weight_decay", "--weight-decay", n(c.weight_decay)},
            {"beta1", "--beta1", n(c.beta1)},
            {"beta2", "--beta2", n(c.beta2)},
            {"clip", "--clip", n(c.clip)},
            {"eval_batches", "--eval-batches", z(c.eval_batches)},
            {"seed", "--seed", std::to_string(c.seed)}};
}

void save_gpt_checkpoint(const std::string& path, const GptState& s) {
    NamedTensors all;
    for (const GptSetting& setting : gpt_settings(s.config, s.text_checksum))
        all.emplace_back("config." + setting.name, setting_entry(setting));
    all.emplace_back("trainer.step", from_vector(std::vector<std::int64_t>{s.step}, {}));
    all.emplace_back("rng.data", s.data_gen.get_state());
    all.emplace_back("rng.default", get_rng_state());
    add_prefixed(all, "model.", s.model->state_dict());
    add_prefixed(all, "optim.", s.optimizer->state_dict());
    add_prefixed(all, "sched.", s.schedule->state_dict());
    for (const auto& [name, v] : curves(s.history))
        all.emplace_back(std::string("history.") + name, from_vector(*v, {v->size()}, kFloat64));
    save_npz(path, all);
}

void load_gpt_checkpoint(const std::string& path, GptState& s) {
    const NamedTensors all = load_npz(path);  // throws for a truncated or corrupt file
    const auto find = [&](const std::string& name) -> const Tensor& {
        for (const auto& [n, t] : all)
            if (n == name) return t;
        throw Error(fmt::format("load checkpoint '{}': entry '{}' is missing (not a char_gpt checkpoint, or one from "
                                "an older char_gpt)", path, name));
    };
    const auto scalar = [&](const std::string& name) -> const Tensor& {
        const Tensor& t = find(name);
        if (t.numel() != 1 || t.dim() > 1)
            throw Error(fmt::format("load checkpoint '{}': entry '{}': expected one number, got shape {}", path, name,
                                    shape_str(t.shape())));
        return t;
    };

    // Each setting as the checkpoint says the run was trained, beside this run's.
    std::string mismatches;
    for (const GptSetting& setting : gpt_settings(s.config, s.text_checksum)) {
        const Tensor& t = scalar("config." + setting.name);
        const std::string saved = whole_bits(setting.name)
                                      ? std::to_string(static_cast<std::uint64_t>(t.item<std::int64_t>()))
                                      : fmt::format("{}", t.item<double>());
        if (saved != setting.shown)
            mismatches += setting.name == "text_checksum"
                              ? fmt::format("\n  the text ({}): checkpoint checksum {}, this run's text {}",
                                            setting.flag, saved, setting.shown)
                              : fmt::format("\n  {} ({}): checkpoint {}, this run {}", setting.name, setting.flag,
                                            saved, setting.shown);
    }
    if (!mismatches.empty())
        throw Error(fmt::format("load checkpoint '{}': it was written with settings that change the numbers, and "
                                "this run has others (resume with the same flags and text):{}", path, mismatches));
    const double saved_step = scalar("trainer.step").item<double>();
    if (!(saved_step >= 0 && saved_step <= static_cast<double>(s.config.steps)) || saved_step != std::floor(saved_step))
        throw Error(fmt::format("load checkpoint '{}': entry 'trainer.step': expected a whole number from 0 to {} "
                                "(--steps), got {}", path, s.config.steps, saved_step));
    const auto step = static_cast<std::int64_t>(saved_step);
    GptHistory h;
    for (const auto& [name, v] : curves(h)) {
        const std::string entry = std::string("history.") + name;
        const Tensor& t = find(entry);
        if (t.dim() != 1)
            throw Error(fmt::format("load checkpoint '{}': entry '{}': expected a 1-D array, got shape {}", path,
                                    entry, shape_str(t.shape())));
        *v = t.to_vector<double>();
    }
    if (h.step.size() != static_cast<std::size_t>(step) || h.loss.size() != h.step.size() ||
        h.eval_train.size() != h.eval_step.size() || h.eval_val.size() != h.eval_step.size())
        throw Error(fmt::format("load checkpoint '{}': the history holds {} training steps and {}/{}/{} evaluation "
                                "points: expected {} steps and equal evaluation curves", path, h.step.size(),
                                h.eval_step.size(), h.eval_train.size(), h.eval_val.size(), step));

    // Everything is checked before anything changes; a later refusal rolls the earlier loads back.
    const NamedTensors model_before = detached(s.model->state_dict());
    const NamedTensors optim_before = detached(s.optimizer->state_dict());
    const NamedTensors sched_before = s.schedule->state_dict();
    const Tensor data_before = s.data_gen.get_state(), default_before = get_rng_state();
    try {
        s.model->load_state_dict(take_prefixed(all, "model."));
        s.optimizer->load_state_dict(take_prefixed(all, "optim."));
        s.schedule->load_state_dict(take_prefixed(all, "sched."));
        s.data_gen.set_state(find("rng.data"));
        set_rng_state(find("rng.default"));
    } catch (const std::exception& e) {
        s.model->load_state_dict(model_before);
        s.optimizer->load_state_dict(optim_before);
        s.schedule->load_state_dict(sched_before);
        s.data_gen.set_state(data_before);
        set_rng_state(default_before);
        throw Error(fmt::format("load checkpoint '{}': {}", path, e.what()));
    }
    s.step = step;
    s.history = std::move(h);
}

}  // namespace xgrad::examples
