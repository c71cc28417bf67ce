#include "train.hpp"

#include <cmath>
#include <utility>

#include "core/creation.hpp"
#include "core/io/npz.hpp"
#include "core/ops.hpp"
#include "nn/loss.hpp"
#include "optim/adam.hpp"
#include "optim/clip_grad.hpp"
#include "optim/sgd.hpp"

namespace xgrad::examples {

double default_lr(const std::string& optimizer) {
    if (optimizer == "sgd") return 0.1;
    return 3e-3;
}

namespace {

// Targets for cross_entropy: padding positions become the ignore index.
constexpr std::int64_t kIgnore = -1;

Tensor loss_targets(const Batch& b) {
    auto t = b.targets.to_vector<std::int64_t>();
    for (auto& v : t)
        if (v == kPad) v = kIgnore;
    return from_vector(t, b.targets.shape());
}

// Correct valid tokens and fully correct sequences of `logits` against the batch.
std::pair<std::int64_t, std::int64_t> count_correct(const Tensor& logits, const Batch& b) {
    const auto pred = argmax(logits, 2).to_vector<std::int64_t>();
    const auto truth = b.targets.to_vector<std::int64_t>();
    const auto lens = b.valid_lens.to_vector<std::int64_t>();
    const std::size_t T = b.targets.size(1);
    std::int64_t tokens = 0, seqs = 0;
    for (std::size_t r = 0; r < lens.size(); ++r) {
        bool all = true;
        for (std::size_t t = 0; t < static_cast<std::size_t>(lens[r]); ++t) {
            const bool ok = pred[r * T + t] == truth[r * T + t];
            tokens += ok;
            all = all && ok;
        }
        seqs += all;
    }
    return {tokens, seqs};
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, std::vector<Tensor> params) {
    const double lr = c.lr > 0 ? c.lr : default_lr(c.optimizer);
    if (c.optimizer == "adam") return std::make_unique<optim::Adam>(std::move(params), optim::AdamOptions(lr));
    if (c.optimizer == "adamw")
        return std::make_unique<optim::AdamW>(std::move(params),
                                              optim::AdamWOptions(lr).weight_decay(c.weight_decay));
    if (c.optimizer == "sgd")
        return std::make_unique<optim::SGD>(std::move(params), optim::SGDOptions(lr).momentum(c.momentum));
    throw Error(fmt::format("unknown optimizer '{}' (expected sgd, adam or adamw)", c.optimizer));
}

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

void add_prefixed(NamedTensors& out, const std::string& prefix, const NamedTensors& in) {
    for (const auto& [name, t] : in) out.emplace_back(prefix + name, t);
}

NamedTensors take_prefixed(const NamedTensors& in, const std::string& prefix) {
    NamedTensors out;
    for (const auto& [name, t] : in)
        if (name.compare(0, prefix.size(), prefix) == 0) out.emplace_back(name.substr(prefix.size()), t);
    return out;
}

Tensor vector_tensor(const std::vector<double>& v) { return from_vector(v, {v.size()}, kFloat64); }

}  // namespace

EvalResult evaluate(SeqEncoder& model, const Batch& data) {
    NoGradGuard no_grad;
    const bool was_training = model.is_training();
    model.eval();
    const Tensor logits = model(data.inputs, data.valid_lens);
    model.train(was_training);
    const double loss = nn::cross_entropy(logits, loss_targets(data), nn::Reduction::mean, kIgnore).item<double>();
    const auto [tokens, seqs] = count_correct(logits, data);
    return {loss, static_cast<double>(tokens) / static_cast<double>(data.num_tokens()),
            static_cast<double>(seqs) / static_cast<double>(data.size())};
}

Trainer::Trainer(TrainConfig config) : m_config(std::move(config)) {
    auto& c = m_config;
    c.model.vocab_size = c.task.vocab_size();
    c.model.max_len = c.task.max_len;
    if (c.steps < 1 || c.batch < 1 || c.warmup < 0 || c.warmup > c.steps)
        throw Error(fmt::format("train: need steps >= 1, batch >= 1 and 0 <= warmup <= steps (got steps {}, "
                                "batch {}, warmup {})", c.steps, c.batch, c.warmup));
    // lr and clip use 0 for "default" and "none": a negative or NaN value must not fall into that.
    if (!(c.lr >= 0) || !(c.clip >= 0))
        throw Error(fmt::format("train: need lr >= 0 (0: the optimizer's default) and clip >= 0 (0: none), "
                                "got lr {} and clip {}", c.lr, c.clip));
    Generator init(mix_seed(c.seed, 3, 0));
    m_model = std::make_shared<SeqEncoder>(c.model, init);
    m_optimizer = make_optimizer(c, m_model->parameters());
    m_scheduler = std::make_unique<optim::WarmupCosineLR>(*m_optimizer, c.warmup, c.steps);
}

Trainer::~Trainer() = default;

void Trainer::set_replicas(std::shared_ptr<ReplicaGroup> group) {
    if (group && m_config.batch % group->world_size() != 0)
        throw Error(fmt::format("train: the global batch of {} sequences does not split evenly over {} ranks "
                                "(use a --batch that is a multiple of {})", m_config.batch, group->world_size(),
                                group->world_size()));
    m_replicas = std::move(group);
}

StepResult Trainer::train_step() {
    const auto step = static_cast<std::uint64_t>(m_step);
    Generator data_gen(mix_seed(m_config.seed, 1, step));
    const Batch global = make_batch(m_config.task, m_config.batch, data_gen);
    const std::size_t rank = m_replicas ? m_replicas->rank() : 0;
    const std::size_t world = m_replicas ? m_replicas->world_size() : 1;
    // Rank 0 keeps the single-process dropout stream; the others get streams of their own.
    manual_seed(rank == 0 ? mix_seed(m_config.seed, 2, step) : mix_seed(m_config.seed, 100 + rank, step));
    const Batch batch = shard_batch(global, rank, world);
    const std::int64_t global_tokens = global.num_tokens();

    m_model->train();
    const Tensor logits = (*m_model)(batch.inputs, batch.valid_lens);
    // Distributed: this rank's share of the global mean (see ReplicaGroup), summed over ranks.
    const Tensor loss = m_replicas ? nn::cross_entropy(logits, loss_targets(batch), nn::Reduction::sum, kIgnore) /
                                         static_cast<double>(global_tokens)
                                   : nn::cross_entropy(logits, loss_targets(batch), nn::Reduction::mean, kIgnore);
    m_optimizer->zero_grad();
    loss.backward();
    if (m_replicas) m_replicas->sum_gradients();
    if (m_config.clip > 0) optim::clip_grad_norm(m_optimizer->parameters(), m_config.clip);
    StepResult r;
    r.lr = m_optimizer->lr();
    m_optimizer->step();
    m_scheduler->step();

    std::vector<double> sums{loss.item<double>(), static_cast<double>(count_correct(logits, batch).first)};
    if (m_replicas) m_replicas->sum(sums);
    r.loss = sums[0];
    r.tokens = global_tokens;
    r.token_acc = sums[1] / static_cast<double>(r.tokens);
    ++m_step;
    m_history.step.push_back(static_cast<double>(m_step));
    m_history.loss.push_back(r.loss);
    m_history.token_acc.push_back(r.token_acc);
    return r;
}

EvalResult Trainer::evaluate_held_out(const Batch& data) {
    const EvalResult r = evaluate(*m_model, data);
    m_history.eval_step.push_back(static_cast<double>(m_step));
    m_history.eval_token_acc.push_back(r.token_acc);
    m_history.eval_seq_acc.push_back(r.seq_acc);
    return r;
}

void Trainer::save(const std::string& path) const {
    NamedTensors all;
    for (const auto& [name, v] : config_entries(m_config)) all.emplace_back("config." + name, tensor(v, kFloat64));
    all.emplace_back("trainer.step", from_vector(std::vector<std::int64_t>{m_step}, {}));
    add_prefixed(all, "model.", m_model->state_dict());
    add_prefixed(all, "optim.", m_optimizer->state_dict());
    add_prefixed(all, "sched.", m_scheduler->state_dict());
    const History& h = m_history;
    for (const auto& [name, v] : {std::pair{"step", &h.step}, {"loss", &h.loss}, {"token_acc", &h.token_acc},
                                  {"eval_step", &h.eval_step}, {"eval_token_acc", &h.eval_token_acc},
                                  {"eval_seq_acc", &h.eval_seq_acc}})
        all.emplace_back(std::string("history.") + name, vector_tensor(*v));
    save_npz(path, all);
}

void Trainer::load(const std::string& path) {
    const NamedTensors all = load_npz(path);  // throws for a truncated or corrupt file
    auto find = [&](const std::string& name) -> const Tensor& {
        for (const auto& [n, t] : all)
            if (n == name) return t;
        throw Error(fmt::format("load checkpoint '{}': entry '{}' is missing", path, name));
    };

    std::string mismatches;
    for (const auto& [name, v] : config_entries(m_config)) {
        const double saved = find("config." + name).item<double>();
        if (saved != v) mismatches += fmt::format("\n  {}: checkpoint {}, this run {}", name, saved, v);
    }
    if (!mismatches.empty())
        throw Error(fmt::format("load checkpoint '{}': it was written with a different configuration "
                                "(resume with the same flags):{}", path, mismatches));
    const std::int64_t step = find("trainer.step").item<std::int64_t>();
    History h;
    for (const auto& [name, v] : {std::pair{"step", &h.step}, {"loss", &h.loss}, {"token_acc", &h.token_acc},
                                  {"eval_step", &h.eval_step}, {"eval_token_acc", &h.eval_token_acc},
                                  {"eval_seq_acc", &h.eval_seq_acc}})
        *v = find(std::string("history.") + name).to_vector<double>();
    if (step < 0 || step > m_config.steps || h.step.size() != static_cast<std::size_t>(step))
        throw Error(fmt::format("load checkpoint '{}': step {} does not fit (steps {}, history of {})", path, step,
                                m_config.steps, h.step.size()));

    // Each load_state_dict checks everything before changing anything; if a later one throws,
    // the earlier ones are rolled back so the trainer stays as it was.
    const NamedTensors model_before = m_model->state_dict();
    const auto optim_before = m_optimizer->state_dict();
    const auto sched_before = m_scheduler->state_dict();
    try {
        m_model->load_state_dict(take_prefixed(all, "model."));
        m_optimizer->load_state_dict(take_prefixed(all, "optim."));
        m_scheduler->load_state_dict(take_prefixed(all, "sched."));
    } catch (const std::exception& e) {
        m_model->load_state_dict(model_before);
        m_optimizer->load_state_dict(optim_before);
        m_scheduler->load_state_dict(sched_before);
        throw Error(fmt::format("load checkpoint '{}': {}", path, e.what()));
    }
    m_step = step;
    m_history = std::move(h);
}

}  // namespace xgrad::examples
