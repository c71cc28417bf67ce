// char_gpt's checkpoint: one .npz that numpy reads, with entries config.*, trainer.step, rng.*,
// model.*, optim.*, sched.* and history.*.
#include <algorithm>
#include <cmath>

#include "core/creation.hpp"
#include "core/error.hpp"
#include "core/io/npz.hpp"
#include "train.hpp"

namespace xgrad::examples {

namespace {

template <class H>
auto curves(H& h) {
    return std::vector<std::pair<const char*, decltype(&h.step)>>{{"step", &h.step},
                                                                  {"loss", &h.loss},
                                                                  {"eval_step", &h.eval_step},
                                                                  {"eval_train", &h.eval_train},
                                                                  {"eval_val", &h.eval_val}};
}

}  // namespace

std::vector<GptSetting> gpt_settings(const GptConfig& c, std::uint64_t text_checksum) {
    const auto n = [](double v) { return fmt::format("{}", v); };
    const auto z = [&](std::size_t v) { return n(static_cast<double>(v)); };
    return {{"text_checksum", "--text", std::to_string(text_checksum), true},
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
            {"seed", "--seed", std::to_string(c.seed), true}};
}

void save_gpt_checkpoint(const std::string& path, const GptState& s) {
    NamedTensors all;
    for (const GptSetting& setting : gpt_settings(s.config, s.text_checksum))
        all.emplace_back("config." + setting.name, setting_entry(setting));
    all.emplace_back("trainer.step", from_vector(std::vector<std::int64_t>{s.step}, {}));
    all.emplace_back("rng.data", s.data_gen.get_state());
    all.emplace_back("rng.default", get_rng_state());
    for (const NamedTensors& part : {with_prefix("model", s.model->state_dict()), with_prefix("optim", s.optimizer->state_dict()),
                                     with_prefix("sched", s.schedule->state_dict())})
        all.insert(all.end(), part.begin(), part.end());
    for (const auto& [name, v] : curves(s.history))
        all.emplace_back(std::string("history.") + name, from_vector(*v, {v->size()}, kFloat64));
    save_npz(path, all);
}

void load_gpt_checkpoint(const std::string& path, GptState& s) {
    const CheckpointFile file(path, "char_gpt");  // throws for a truncated or corrupt file

    // Each setting as the checkpoint says the run was trained, beside this run's.
    std::string changed;
    for (const GptSetting& setting : gpt_settings(s.config, s.text_checksum)) {
        const std::string saved = file.saved(setting);
        if (setting.name == "text_checksum" && saved != setting.shown)
            changed += fmt::format("\n  the text ({}): checkpoint checksum {}, this run's text {}", setting.flag,
                                   saved, setting.shown);
        else
            changed += changed_setting(setting, saved);
    }
    refuse_changed_settings(path, changed, "the same flags and text");
    const std::int64_t step = file.step("trainer.step", s.config.steps);
    GptHistory h;
    for (const auto& [name, v] : curves(h)) *v = file.curve(std::string("history.") + name);
    if (h.step.size() != static_cast<std::size_t>(step) || h.loss.size() != h.step.size() ||
        h.eval_train.size() != h.eval_step.size() || h.eval_val.size() != h.eval_step.size())
        file.fail(fmt::format("the history holds {} training steps and {}/{}/{} evaluation points: expected {} steps "
                              "and equal evaluation curves", h.step.size(), h.eval_step.size(), h.eval_train.size(),
                              h.eval_val.size(), step));

    // Everything is checked before anything changes; a later refusal rolls the earlier loads back.
    load_parts(file, {state_dict_part(*s.model, "model"), state_dict_part(*s.optimizer, "optim"),
                      state_dict_part(*s.schedule, "sched"), generator_part(s.data_gen, "rng.data"),
                      default_generator_part("rng.default")});
    s.step = step;
    s.history = std::move(h);
}

}  // namespace xgrad::examples
