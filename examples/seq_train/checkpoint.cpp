// seq_train's checkpoint: one .npz that numpy reads, with entries config.*, trainer.step,
// model.*, optim.*, sched.* and history.*.
#include <algorithm>
#include <cmath>
#include <utility>

#include "core/creation.hpp"
#include "core/io/npz.hpp"
#include "common/checkpoint_file.hpp"
#include "train.hpp"

namespace xgrad::examples {

namespace {

// The names of a choice's codes, in code order: the checkpoint stores a choice as its index here.
const std::vector<std::string>& choice_names(const std::string& name) {
    static const std::vector<std::string> task = {task_name(Task::copy), task_name(Task::reverse),
                                                  task_name(Task::sort)},
                                          pos = {pos_name(PosEncoding::learned), pos_name(PosEncoding::sinusoidal)},
                                          optimizer = {"sgd", "adam", "adamw"}, autocast = {"none", "bf16"},
                                          on_off = {"off", "on"}, none = {};
    return name == "task" ? task : name == "pos" ? pos : name == "optimizer" ? optimizer
         : name == "autocast" ? autocast : name == "scale_embeddings" ? on_off : none;
}

// A stored number as a user types it: a choice by its name; the shortest text that reads back
// as the same double otherwise, so two values show alike exactly when they are equal.
std::string shown_of(const std::string& name, double v) {
    const std::vector<std::string>& names = choice_names(name);
    if (names.empty()) return fmt::format("{}", v);
    for (std::size_t i = 0; i < names.size(); ++i)
        if (v == static_cast<double>(i)) return names[i];
    return fmt::format("unknown ({})", v);
}

double code_of(const std::string& name, const std::string& shown) {
    const std::vector<std::string>& names = choice_names(name);
    for (std::size_t i = 0; i < names.size(); ++i)
        if (names[i] == shown) return static_cast<double>(i);
    return std::stod(shown);
}

}  // namespace

std::vector<NumericSetting> numeric_settings(const TrainConfig& c) {
    std::vector<NumericSetting> out;
    const auto add = [&](const char* name, const char* flag, std::string shown) {
        out.push_back({name, flag, std::move(shown), !choice_names(name).empty()});
    };
    const auto number = [](double v) { return fmt::format("{}", v); };
    add("task", "--task", task_name(c.task.task));
    add("max_len", "--max-len", number(static_cast<double>(c.task.max_len)));
    add("symbols", "--symbols", number(static_cast<double>(c.task.num_symbols)));
    add("hidden", "--hidden", number(static_cast<double>(c.model.hidden)));
    add("heads", "--heads", number(static_cast<double>(c.model.heads)));
    add("layers", "--layers", number(static_cast<double>(c.model.layers)));
    add("ffn", "--ffn", number(static_cast<double>(c.model.ffn_hidden)));
    add("dropout", "--dropout", number(c.model.dropout));
    add("pos", "--pos", pos_name(c.model.pos));
    add("scale_embeddings", "--scale-embeddings", c.model.scale_embeddings ? "on" : "off");
    add("optimizer", "--optimizer", c.optimizer);
    add("steps", "--steps", number(static_cast<double>(c.steps)));
    add("lr", "--lr", number(c.lr > 0 ? c.lr : default_lr(c.optimizer)));
    add("batch", "--batch", number(static_cast<double>(c.batch)));
    add("warmup", "--warmup", number(static_cast<double>(c.warmup)));
    add("momentum", "--momentum", number(c.momentum));
    add("weight_decay", "--weight-decay", number(c.weight_decay));
    add("clip", "--clip", number(c.clip));
    add("seed", "--seed", std::to_string(c.seed));  // every bit: stored as an int64, not a double
    add("autocast", "--autocast", c.autocast);
    add("held_out", "--held-out", number(static_cast<double>(c.held_out)));
    add("ranks", "mpirun -np", number(static_cast<double>(c.ranks)));
    add("bucket_kb", "--bucket-kb", number(static_cast<double>(c.ranks > 1 ? c.bucket_kb : 0)));
    return out;
}

namespace {

// The history's curves by their names in the checkpoint; H is History or const History.
template <class H>
auto curves(H& h) {
    return std::vector<std::pair<const char*, decltype(&h.step)>>{
        {"step", &h.step},           {"loss", &h.loss},
        {"token_acc", &h.token_acc}, {"eval_step", &h.eval_step},
        {"eval_token_acc", &h.eval_token_acc}, {"eval_seq_acc", &h.eval_seq_acc}};
}

}  // namespace

namespace {

NamedTensors checkpoint_entries(const TrainState& s) {
    NamedTensors all;
    for (const NumericSetting& setting : numeric_settings(s.config)) {
        const std::string entry = "config." + setting.name;
        if (setting.name == "seed")  // the seed's 64 bits, as numpy's int64 (view them as uint64)
            all.emplace_back(entry, from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(s.config.seed)}, {}));
        else
            all.emplace_back(entry, tensor(code_of(setting.name, setting.shown), kFloat64));
    }
    all.emplace_back("trainer.step", from_vector(std::vector<std::int64_t>{s.step}, {}));
    for (const NamedTensors& part : {with_prefix("model", s.model->state_dict()), with_prefix("optim", s.optimizer->state_dict()),
                                     with_prefix("sched", s.schedule->state_dict())})
        all.insert(all.end(), part.begin(), part.end());
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
    const CheckpointFile file(path);  // throws for a truncated or corrupt file

    // Each setting as the checkpoint says the run was trained, beside this run's.
    std::string changed;
    for (const NumericSetting& setting : numeric_settings(s.config)) {
        const std::string entry = "config." + setting.name;
        if (!file.has(entry))
            throw Error(fmt::format("load checkpoint '{}': entry '{}' is missing: it was written by a seq_train that "
                                    "did not record {}, so this run cannot make sure it continues with the same "
                                    "numbers; resume it with that seq_train, or start afresh (--overwrite)",
                                    path, entry, setting.flag));
        std::string saved;
        if (setting.name == "seed") {
            const Tensor& t = file.scalar(entry);
            if (t.dtype() != kInt64)
                throw Error(fmt::format("load checkpoint '{}': entry '{}': expected the seed's 64 bits as int64, got "
                                        "{}: it was written by a seq_train that kept the seed as a double (seeds "
                                        "past 2^53 rounded); start afresh (--overwrite)", path, entry,
                                        t.dtype()));
            saved = std::to_string(static_cast<std::uint64_t>(t.item<std::int64_t>()));
        } else {
            saved = shown_of(setting.name, file.number(entry));
        }
        changed += changed_setting({setting.name, setting.flag, setting.shown}, saved);
    }
    refuse_changed_settings(path, changed, "the same flags");
    (void)file.number("trainer.step");  // finite
    const std::int64_t step = file.step("trainer.step", s.config.steps);
    History h;
    for (const auto& [name, v] : curves(h)) *v = file.curve(std::string("history.") + name);
    // Every training step has a point on the three training curves; the evaluations have one
    // point each on theirs.
    for (const auto& [name, v] : curves(h)) {
        const bool per_step = v == &h.step || v == &h.loss || v == &h.token_acc;
        const std::size_t expected = per_step ? static_cast<std::size_t>(step) : h.eval_step.size();
        if (v->size() != expected)
            file.fail(fmt::format("entry 'history.{}': expected {} values ({}), got {}", name, expected,
                                  per_step ? "one per step" : "one per evaluation", v->size()));
    }

    // Each load_state_dict checks everything before changing anything; if a later one throws,
    // the earlier ones are rolled back so the state stays as it was.
    load_parts(file, {state_dict_part(*s.model, "model"), state_dict_part(*s.optimizer, "optim"),
                      state_dict_part(*s.schedule, "sched")});
    s.step = step;
    s.history = std::move(h);
}

}  // namespace xgrad::examples
