// bahdanau's run state and its checkpoint: one .npz that numpy reads.
#include "state.hpp"

#include "core/creation.hpp"
#include "core/error.hpp"
#include "corpus.hpp"
#include "seq_train/data.hpp"  // mix_seed
#include "streams.hpp"

namespace xgrad::examples::bahdanau {

namespace {

ModelSpec with_vocabularies(ModelSpec spec) {
    spec.src_vocab = source_vocab().size();
    spec.tgt_vocab = target_vocab().size();
    return spec;
}

std::shared_ptr<EncoderDecoder> build_model(Config& c) {
    c.model = with_vocabularies(c.model);
    Generator init(mix_seed(c.seed, kInit, 0));
    return std::make_shared<EncoderDecoder>(c.model, init);
}

// The history's curves by their names in the checkpoint; H is History or const History.
template <class H>
auto curves(H& h) {
    return std::vector<std::pair<const char*, decltype(&h.step)>>{{"step", &h.step},
                                                                  {"loss", &h.loss},
                                                                  {"eval_step", &h.eval_step},
                                                                  {"eval_loss", &h.eval_loss},
                                                                  {"eval_seconds", &h.eval_seconds}};
}

}  // namespace

std::vector<CheckpointSetting> settings(const Config& c) {
    const auto n = [](double v) { return fmt::format("{}", v); };
    const auto z = [&](std::size_t v) { return n(static_cast<double>(v)); };
    return {{"embed", "--embed", z(c.model.embed)},
            {"hidden", "--hidden", z(c.model.hidden)},
            {"layers", "--layers", z(c.model.layers)},
            {"dropout", "--dropout", n(c.model.dropout)},
            {"num_steps", "--num-steps", z(c.num_steps)},
            {"steps", "--steps", n(static_cast<double>(c.steps))},
            {"batch", "--batch", z(c.batch)},
            {"lr", "--lr", n(c.lr)},
            {"clip", "--clip", n(c.clip)},
            {"held_out", "--held-out", z(c.held_out)},
            {"seed", "--seed", std::to_string(c.seed), true}};
}

RunState::RunState(Config c)
    : config(c), net(build_model(config)), optimizer(std::make_unique<optim::Adam>(net->parameters(), c.lr)),
      data_gen(mix_seed(c.seed, kData, 0)) {
    manual_seed(mix_seed(c.seed, kDropout, 0));  // dropout; its state goes into the checkpoint
}

void save_checkpoint(const std::string& path, const RunState& s) {
    NamedTensors all;
    for (const CheckpointSetting& setting : settings(s.config))
        all.emplace_back("config." + setting.name, setting_entry(setting));
    all.emplace_back("trainer.step", from_vector(std::vector<std::int64_t>{s.step}, {}));
    all.emplace_back("trainer.train_seconds", tensor(s.train_seconds, kFloat64));
    all.emplace_back("rng.data", s.data_gen.get_state());
    all.emplace_back("rng.default", get_rng_state());
    for (const NamedTensors& part : {with_prefix("model", s.net->state_dict()), with_prefix("optim", s.optimizer->state_dict())})
        all.insert(all.end(), part.begin(), part.end());
    for (const auto& [name, v] : curves(s.history))
        all.emplace_back(std::string("history.") + name, from_vector(*v, {v->size()}, kFloat64));
    save_npz(path, all);
}

void load_checkpoint(const std::string& path, RunState& s) {
    const CheckpointFile file(path, "bahdanau");  // throws for a missing, truncated or corrupt file
    std::string changed;
    for (const CheckpointSetting& setting : settings(s.config)) changed += changed_setting(setting, file.saved(setting));
    refuse_changed_settings(path, changed, "the same flags");
    const std::int64_t step = file.step("trainer.step", s.config.steps);
    const double train_seconds = file.number("trainer.train_seconds");
    History h;
    for (const auto& [name, v] : curves(h)) *v = file.curve(std::string("history.") + name);
    if (h.step.size() != static_cast<std::size_t>(step) || h.loss.size() != h.step.size() ||
        h.eval_loss.size() != h.eval_step.size() || h.eval_seconds.size() != h.eval_step.size() ||
        h.eval_step.empty())
        file.fail(fmt::format("the history holds {} training steps and {}/{}/{} evaluation points: expected {} steps "
                              "and at least one evaluation, equal curves", h.step.size(), h.eval_step.size(),
                              h.eval_loss.size(), h.eval_seconds.size(), step));

    // Everything is checked before anything changes; a later refusal rolls the earlier loads back.
    load_parts(file, {state_dict_part(*s.net, "model"), state_dict_part(*s.optimizer, "optim"),
                      generator_part(s.data_gen, "rng.data"), default_generator_part("rng.default")});
    s.step = step;
    s.train_seconds = train_seconds;
    s.history = std::move(h);
}

}  // namespace xgrad::examples::bahdanau
