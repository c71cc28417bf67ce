// seq_train's checkpoint: one .npz that numpy reads, with entries config.*, trainer.step,
// model.*, optim.*, sched.* and history.*.
#include <cmath>
#include <utility>

#include "core/creation.hpp"
#include "core/io/npz.hpp"
#include "train.hpp"

namespace xgrad::examples {

namespace {

double optimizer_code(const std::string& name) { return name == "sgd" ? 0 : name == "adam" ? 1 : 2; }

// The checkpoint stores every setting as a number; the names a user typed for the ones that
// are choices, for messages.
std::string config_value_str(const std::string& name, double v) {
    const auto is = [&](double code) { return v == code; };
    if (name == "task") {
        for (Task t : {Task::copy, Task::reverse, Task::sort})
            if (is(static_cast<double>(t))) return task_name(t);
    } else if (name == "pos") {
        for (PosEncoding p : {PosEncoding::learned, PosEncoding::sinusoidal})
            if (is(static_cast<double>(p))) return pos_name(p);
    } else if (name == "optimizer") {
        for (const char* o : {"sgd", "adam", "adamw"})
            if (is(optimizer_code(o))) return o;
    } else if (name == "scale_embeddings") {
        if (is(0) || is(1)) return is(1) ? "on" : "off";
    } else {
        return fmt::format("{}", v);
    }
    return fmt::format("unknown ({})", v);
}

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

namespace {

NamedTensors checkpoint_entries(const TrainState& s) {
    NamedTensors all;
    for (const auto& [name, v] : config_entries(s.config)) all.emplace_back("config." + name, tensor(v, kFloat64));
    all.emplace_back("trainer.step", from_vector(std::vector<std::int64_t>{s.step}, {}));
    add_prefixed(all, "model.", s.model->state_dict());
    add_prefixed(all, "optim.", s.optimizer->state_dict());
    add_prefixed(all, "sched.", s.schedule->state_dict());
    for (const auto& [name, v] : curves(s.history))
        all.emplace_back(std::string("history.") + name, from_vector(*v, {v->size()}, kFloat64));
    return all;
}

}  // namespace

void save_checkpoint(const std::string& path, const TrainState& s) { save_npz(path, checkpoint_entries(s)); }

std::uint64_t state_hash(const TrainState& s) {
    // FNV-1a over each entry's name, shape and values (as float64 bits: exact for every dtype a
    // checkpoint holds), so two states hash alike exactly when a checkpoint of them would load alike.
    std::uint64_t h = 14695981039346656037ull;
    const auto mix = [&](const void* data, std::size_t n) {
        const auto* p = static_cast<const unsigned char*>(data);
        for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
    };
    for (const auto& [name, t] : checkpoint_entries(s)) {
        mix(name.data(), name.size() + 1);
        for (const std::size_t d : t.shape()) mix(&d, sizeof d);
        const std::vector<double> values = t.to_vector<double>();
        mix(values.data(), values.size() * sizeof(double));
    }
    return h;
}

void load_checkpoint(const std::string& path, TrainState& s) {
    const NamedTensors all = load_npz(path);  // throws for a truncated or corrupt file
    auto find = [&](const std::string& name) -> const Tensor& {
        for (const auto& [n, t] : all)
            if (n == name) return t;
        throw Error(fmt::format("load checkpoint '{}': entry '{}' is missing", path, name));
    };
    auto scalar = [&](const std::string& name) {
        const Tensor& t = find(name);
        if (t.numel() != 1 || t.dim() > 1)
            throw Error(fmt::format("load checkpoint '{}': entry '{}': expected one number, got shape {}", path, name,
                                    shape_str(t.shape())));
        const double v = t.item<double>();
        if (!std::isfinite(v))
            throw Error(fmt::format("load checkpoint '{}': entry '{}': expected a finite number, got {}", path,
                                    name, v));
        return v;
    };
    auto curve = [&](const std::string& name) {
        const Tensor& t = find(name);
        if (t.dim() != 1)
            throw Error(fmt::format("load checkpoint '{}': entry '{}': expected a 1-D array, got shape {}", path,
                                    name, shape_str(t.shape())));
        return t.to_vector<double>();
    };

    std::string mismatches;
    for (const auto& [name, v] : config_entries(s.config)) {
        const double saved = scalar("config." + name);
        if (saved != v)
            mismatches += fmt::format("\n  {}: checkpoint {}, this run {}", name, config_value_str(name, saved),
                                      config_value_str(name, v));
    }
    if (!mismatches.empty())
        throw Error(fmt::format("load checkpoint '{}': it was written with a different configuration "
                                "(resume with the same flags):{}", path, mismatches));
    const double saved_step = scalar("trainer.step");
    if (!(saved_step >= 0 && saved_step <= static_cast<double>(s.config.steps)) ||
        saved_step != std::floor(saved_step))
        throw Error(fmt::format("load checkpoint '{}': entry 'trainer.step': expected a whole number from 0 to {} "
                                "(--steps), got {}", path, s.config.steps, saved_step));
    const auto step = static_cast<std::int64_t>(saved_step);
    History h;
    for (const auto& [name, v] : curves(h)) *v = curve(std::string("history.") + name);
    // Every training step has a point on the three training curves; the evaluations have one
    // point each on theirs.
    for (const auto& [name, v] : curves(h)) {
        const bool per_step = v == &h.step || v == &h.loss || v == &h.token_acc;
        const std::size_t expected = per_step ? static_cast<std::size_t>(step) : h.eval_step.size();
        if (v->size() != expected)
            throw Error(fmt::format("load checkpoint '{}': entry 'history.{}': expected {} values ({}), got {}",
                                    path, name, expected, per_step ? "one per step" : "one per evaluation",
                                    v->size()));
    }

    // Each load_state_dict checks everything before changing anything; if a later one throws,
    // the earlier ones are rolled back so the state stays as it was.
    // state_dict() aliases the tensors (as torch's): the rollback needs copies.
    auto snapshot = [](NamedTensors state) {
        for (auto& entry : state) entry.second = entry.second.detach();
        return state;
    };
    const NamedTensors model_before = snapshot(s.model->state_dict());
    const NamedTensors optim_before = snapshot(s.optimizer->state_dict());
    const NamedTensors sched_before = s.schedule->state_dict();  // numbers: new tensors already
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
