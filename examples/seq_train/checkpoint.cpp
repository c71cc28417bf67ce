// seq_train's checkpoint: one .npz that numpy reads, with entries config.*, trainer.step,
// model.*, optim.*, sched.* and history.*.
#include <utility>

#include "core/creation.hpp"
#include "core/io/npz.hpp"
#include "train.hpp"

namespace xgrad::examples {

namespace {

double optimizer_code(const std::string& name) { return name == "sgd" ? 0 : name == "adam" ? 1 : 2; }

// Everything that shapes the trajectory: a checkpoint resumes only into the same configuration.
std::vector<std::pair<std::string, double>> config_entries(const TrainConfig& c) {
    return {{"task", static_cast<double>(c.task.task)},
            {"max_len", static_cast<double>(c.task.max_len)},
            {"symbols", static_cast<double>(c.task.num_symbols)},
            {"hidden", static_cast<double>(c.model.hidden)},
            {"heads", static_cast<double>(c.model.heads)},
            {"layers", static_cast<double>(c.model.layers)},
            {"ffn", static_cast<double>(c.model.ffn_hidden)},
            {"dropout", c.model.dropout},
            {"pos", static_cast<double>(c.model.pos)},
            {"scale_embeddings", c.model.scale_embeddings ? 1.0 : 0.0},
            {"optimizer", optimizer_code(c.optimizer)},
            {"steps", static_cast<double>(c.steps)},
            {"lr", c.lr > 0 ? c.lr : default_lr(c.optimizer)},
            {"batch", static_cast<double>(c.batch)},
            {"warmup", static_cast<double>(c.warmup)},
            {"momentum", c.momentum},
            {"weight_decay", c.weight_decay},
            {"clip", c.clip},
            // a double holds every seed a user types; larger ones are compared modulo rounding
            {"seed", static_cast<double>(c.seed)}};
}

// The history's curves by their names in the checkpoint; H is History or const History.
template <class H>
auto curves(H& h) {
    return std::vector<std::pair<const char*, decltype(&h.step)>>{
        {"step", &h.step},           {"loss", &h.loss},
        {"token_acc", &h.token_acc}, {"eval_step", &h.eval_step},
        {"eval_token_acc", &h.eval_token_acc}, {"eval_seq_acc", &h.eval_seq_acc}};
}

void add_prefixed(NamedTensors& out, const std::string& prefix, const NamedTensors& in) {
    for (const auto& [name, t] : in) out.emplace_back(prefix + name, t);
}

NamedTensors take_prefixed(const NamedTensors& in, const std::string& prefix) {
    NamedTensors out;
    for (const auto& [name, t] : in)
        if (name.compare(0, prefix.size(), prefix) == 0) out.emplace_back(name.substr(prefix.size()), t);
    return out;
}

}  // namespace

void save_checkpoint(const std::string& path, const TrainState& s) {
    NamedTensors all;
    for (const auto& [name, v] : config_entries(s.config)) all.emplace_back("config." + name, tensor(v, kFloat64));
    all.emplace_back("trainer.step", from_vector(std::vector<std::int64_t>{s.step}, {}));
    add_prefixed(all, "model.", s.model->state_dict());
    add_prefixed(all, "optim.", s.optimizer->state_dict());
    add_prefixed(all, "sched.", s.schedule->state_dict());
    for (const auto& [name, v] : curves(s.history))
        all.emplace_back(std::string("history.") + name, from_vector(*v, {v->size()}, kFloat64));
    save_npz(path, all);
}

void load_checkpoint(const std::string& path, TrainState& s) {
    const NamedTensors all = load_npz(path);  // throws for a truncated or corrupt file
    auto find = [&](const std::string& name) -> const Tensor& {
        for (const auto& [n, t] : all)
            if (n == name) return t;
        throw Error(fmt::format("load checkpoint '{}': entry '{}' is missing", path, name));
    };

    std::string mismatches;
    for (const auto& [name, v] : config_entries(s.config)) {
        const double saved = find("config." + name).item<double>();
        if (saved != v) mismatches += fmt::format("\n  {}: checkpoint {}, this run {}", name, saved, v);
    }
    if (!mismatches.empty())
        throw Error(fmt::format("load checkpoint '{}': it was written with a different configuration "
                                "(resume with the same flags):{}", path, mismatches));
    const std::int64_t step = find("trainer.step").item<std::int64_t>();
    History h;
    for (const auto& [name, v] : curves(h)) *v = find(std::string("history.") + name).to_vector<double>();
    if (step < 0 || step > s.config.steps || h.step.size() != static_cast<std::size_t>(step))
        throw Error(fmt::format("load checkpoint '{}': step {} does not fit (steps {}, history of {})", path, step,
                                s.config.steps, h.step.size()));

    // Each load_state_dict checks everything before changing anything; if a later one throws,
    // the earlier ones are rolled back so the state stays as it was.
    const NamedTensors model_before = s.model->state_dict();
    const auto optim_before = s.optimizer->state_dict();
    const auto sched_before = s.schedule->state_dict();
    try {
        s.model->load_state_dict(take_prefixed(all, "model."));
        s.optimizer->load_state_dict(take_prefixed(all, "optim."));
        s.schedule->load_state_dict(take_prefixed(all, "sched."));
    } catch (const std::exception& e) {
        s.model->load_state_dict(model_before);
        s.optimizer->load_state_dict(optim_before);
        s.schedule->load_state_dict(sched_before);
        throw Error(fmt::format("load checkpoint '{}': {}", path, e.what()));
    }
    s.step = step;
    s.history = std::move(h);
}

}  // namespace xgrad::examples
