#pragma once
/// Optimizer: the base of SGD, Adam and AdamW. It holds the parameters by handle (the same
/// nodes the modules registered: a step changes the module's weights, no copies) in parameter
/// groups, each with its own options (learning rate, weight decay...), and per-parameter state
/// kept by the subclasses in vectors aligned with parameters(), the groups' parameters in order.
///
///   opt.zero_grad(); loss.backward(); opt.step();
///
/// step() runs without building a graph and updates each parameter's values in place; a
/// parameter without a gradient is skipped and its state stays as it was (as torch.optim).
///
/// Parameter groups, as torch's (`torch::optim::OptimizerParamGroup`, a Python param_groups
/// dict): each group's options override the optimizer's defaults field by field; a field the
/// group's options never set takes the default's value, as Python's `setdefault` per group.
///
///   optim::AdamW opt({{decay, optim::AdamWOptions().weight_decay(0.1)},
///                     {no_decay, optim::AdamWOptions().weight_decay(0.0)}},
///                    optim::AdamWOptions(3e-4));               // both groups train at lr 3e-4
///   for (auto& group : opt.param_groups()) group.options().lr(1e-4);
///
/// A group's options may be changed between steps (as torch users set group['lr']); step()
/// checks every group's options first, as the constructor does, and throws naming the group.
///
/// Threads: step(), zero_grad(), state_dict(), load_state_dict() and add_param_group() take its
/// optimizer's lock, so calls from several threads run one after the other. A step writes the parameters
/// in place: a graph another thread recorded before it that saved a parameter is refused at
/// its backward (the version counter), as torch's; what a forward running during the step
/// reads is unspecified (README, threads).
#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/io/npz.hpp"
#include "core/tensor.hpp"

namespace xgrad::optim {

class Optimizer {
public:
    virtual ~Optimizer() = default;
    Optimizer(const Optimizer&) = delete;
    Optimizer& operator=(const Optimizer&) = delete;

    /// Applies one update to every parameter that has a gradient.
    virtual void step() = 0;
    /// Drops every parameter's gradient (torch's zero_grad(set_to_none=True)).
    void zero_grad();

    /// The learning rate, shared by every group; throws if the groups' lrs differ (read lr(g)).
    double lr() const;
    /// Sets every group's learning rate; throws unless lr is finite and >= 0.
    void set_lr(double lr);
    std::size_t num_param_groups() const { return m_group_start.size() - 1; }
    /// Group g's learning rate (schedulers read and set each group's); throws for g out of range.
    double lr(std::size_t group) const;
    /// Sets group g's learning rate; throws unless lr is finite and >= 0 and g in range.
    void set_lr(std::size_t group, double lr);
    /// The parameters this optimizer updates, every group's in order (torch's state indices):
    /// the handles themselves (they alias the module's).
    const std::vector<Tensor>& parameters() const { return m_params; }
    /// The group parameter i (an index into parameters()) belongs to.
    std::size_t group_of(std::size_t i) const { return m_group_of[i]; }
    /// "SGD", "Adam", "AdamW": the name used in messages.
    const std::string& name() const { return m_name; }

    /// Everything a resumed run needs to continue bit for bit, by name:
    ///   "<kind>.num_params"       int64 0-d: the number of parameters
    ///   "<kind>.lr", ".momentum"… float64 0-d: the hyper-parameters (flags as 0 / 1)
    ///   "state.<i>.<buffer>"      parameter i's buffers ("state.3.exp_avg"; "state.3.step" is
    ///                             int64 0-d), present only once parameter i has been stepped.
    /// <kind> is "sgd", "adam" or "adamw". With more than one parameter group, torch's layout
    /// (state by parameter index, then each group's options and parameter indices):
    ///   "<kind>.num_groups"                  int64 0-d
    ///   "<kind>.param_groups.<g>.lr", …      float64 0-d: group g's options
    ///   "<kind>.param_groups.<g>.params"     int64 1-D: the indices i of group g's parameters
    /// instead of "<kind>.lr"…; a state of one group is written as before groups existed, so
    /// old files load unchanged. As torch's, the buffer entries (exp_avg, exp_avg_sq,
    /// max_exp_avg_sq, momentum_buffer) alias the optimizer's state: a later step() shows in
    /// them, and a write through one is what the next step reads. What the optimizer keeps as
    /// numbers (the counts, step, lr and the hyper-parameters) comes as new 0-d tensors, copies:
    /// writing one changes nothing (set_lr, or load_state_dict, does). For a snapshot (to
    /// resume from later in the same run) copy each entry with detach().
    NamedTensors state_dict() const;
    /// Restores a state_dict(): hyper-parameters (the learning rates included) and buffers are
    /// copied in, buffers converted to their parameter's float dtype (as torch). Everything is
    /// checked first (names, parameter and group counts, group sizes, shapes, values) and on
    /// any mismatch it throws, naming the entry or group, with the optimizer unchanged.
    void load_state_dict(const NamedTensors& state);

protected:
    /// One group's hyper-parameters by name, lr included; flags as 0 / 1.
    using HyperParameters = std::map<std::string, double>;

    explicit Optimizer(std::string name);

    /// Appends a group's parameters after checking them (non-empty, defined, floating-point
    /// leaves, none twice, none already in another group); throws changing nothing, the message
    /// starting with `op`. `grouped`: messages name "parameter j of group g" (the groups API)
    /// instead of "parameter i".
    void add_group_parameters(const std::string& op, const std::vector<Tensor>& params, bool grouped);

    /// Throws "<name>: invalid <what> <value> (expected <rule>)" unless ok.
    void require(bool ok, const char* what, double value, const char* rule) const;
    /// require() for a hyper-parameter that must be finite ("expected a finite number") and
    /// >= 0 ("expected <rule>"): lr, momentum, weight decay. An infinite one would train into
    /// NaN without a word.
    void require_finite_non_negative(const char* what, double value, const char* rule) const;

    /// Makes parameter i's state buffer `buffer` ("exp_avg"...) fit the parameter again before
    /// a step: converted to the parameter's dtype if that changed since the buffer was made
    /// (Module::to), as torch makes state in the parameter's dtype. A parameter whose shape
    /// changed (set_data or a model's load_state_dict with another shape) throws instead: its
    /// state means nothing for the new shape, and reading it would run out of bounds. `op` is
    /// "Adam.step"... for the message.
    void fit_state(const std::string& op, std::size_t i, Tensor& buffer, const char* buffer_name) const;
    /// Each parameter's gradient (undefined where it has none), taken once at the start of a
    /// step: the handles keep the values alive and the set fixed for the whole step, whatever
    /// another thread does to the parameters' .grad meanwhile.
    std::vector<Tensor> gradients() const;

    // Hooks for state_dict / load_state_dict, implemented by each optimizer.
    /// Group g's hyper-parameters.
    virtual HyperParameters hyper_parameters(std::size_t group) const = 0;
    /// Throws, as the constructor would, if `h` (a complete set) holds a bad value.
    virtual void check_hyper_parameters(const HyperParameters& h) const = 0;
    virtual void set_hyper_parameters(std::size_t group, const HyperParameters& h) = 0;
    /// Names of one parameter's buffers under the hyper-parameters `h`, e.g. {"step", "exp_avg",
    /// "exp_avg_sq"}. "step" is an int64 0-d count >= 1; the others have the parameter's shape
    /// and dtype.
    virtual std::vector<std::string> buffer_names(const HyperParameters& h) const = 0;
    /// Whether a buffer only ever holds values >= 0 (Adam's second moments): a loaded state
    /// with a negative one is refused, since the next step would take its square root.
    virtual bool non_negative_buffer(const std::string& /*name*/) const { return false; }
    /// Parameter i's buffers in buffer_names() order, or empty before its first step.
    virtual std::vector<Tensor> get_state(std::size_t i) const = 0;
    /// Adopts buffers (in buffer_names() order, owned by the optimizer from now on), or resets
    /// parameter i to "never stepped" when `state` is empty.
    virtual void set_state(std::size_t i, std::vector<Tensor> state) = 0;

    /// Group g's lr, and storing one already checked; g in range.
    virtual double group_lr(std::size_t group) const = 0;
    virtual void store_group_lr(std::size_t group, double lr) = 0;

    std::vector<Tensor> m_params;
    /// Held by step() (each optimizer's own, and a subclass's), zero_grad(), state_dict(),
    /// load_state_dict() and add_param_group(): the state vectors are one thread's at a time.
    mutable std::mutex m_use;

private:
    std::string m_name;
    std::vector<std::size_t> m_group_start{0};  ///< group g holds m_params[start[g], start[g + 1])
    std::vector<std::size_t> m_group_of;        ///< aligned with m_params
};

/// A group of parameters and its options (torch::optim::OptimizerParamGroup, typed): fields the
/// options set override the optimizer's defaults for these parameters, the others take them.
/// Brace-initialisable: `{params}` or `{params, AdamWOptions().weight_decay(0)}`.
template <class Options> class OptimizerParamGroup {
public:
    OptimizerParamGroup(std::vector<Tensor> params, Options options = Options())  // NOLINT: implicit, as torch's
        : m_params(std::move(params)), m_options(std::move(options)) {}
    /// The group's parameters; fixed once the optimizer holds the group (its state is aligned
    /// with them).
    const std::vector<Tensor>& params() const { return m_params; }
    /// The group's options. In an optimizer's param_groups(), every field is set (the defaults
    /// filled in) and a change shows at the next step(), which checks it.
    Options& options() { return m_options; }
    const Options& options() const { return m_options; }

private:
    std::vector<Tensor> m_params;
    Options m_options;
};

/// An optimizer's groups, as param_groups() gives them: indexable and iterable, but with no way
/// to add or remove a group behind the optimizer's back (add_param_group does that). Group is
/// const for a const optimizer.
template <class Group> class ParamGroupsView {
    using Groups = std::conditional_t<std::is_const_v<Group>, const std::vector<std::remove_const_t<Group>>,
                                      std::vector<Group>>;

public:
    explicit ParamGroupsView(Groups& groups) : m_groups(&groups) {}
    std::size_t size() const { return m_groups->size(); }
    Group& operator[](std::size_t g) const { return (*m_groups)[g]; }
    /// As operator[], but throws for g out of range.
    Group& at(std::size_t g) const {
        if (g >= size())
            throw Error(fmt::format("param_groups: there is no group {} (the optimizer has {})", g, size()));
        return (*m_groups)[g];
    }
    auto begin() const { return m_groups->begin(); }
    auto end() const { return m_groups->end(); }

private:
    Groups* m_groups;
};

/// The part of every optimizer that knows its options' type: the typed groups, the defaults
/// and add_param_group. Options must provide merged_over(defaults), lr() and lr(double).
template <class Options> class OptimizerWithOptions : public Optimizer {
public:
    using Group = OptimizerParamGroup<Options>;

    /// Every group with its options (every field set), mutable as torch's param_groups.
    ParamGroupsView<Group> param_groups() { return ParamGroupsView<Group>(m_groups); }
    ParamGroupsView<const Group> param_groups() const { return ParamGroupsView<const Group>(m_groups); }
    /// The options a group's unset fields take (the constructor's, every field set).
    const Options& defaults() const { return m_defaults; }
    /// Adds a group (torch's add_param_group): its parameters are checked as the constructor's
    /// and must not be in another group already, its options (over the defaults) as the
    /// constructor's; on any refusal nothing changes.
    void add_param_group(const Group& group) {
        const std::lock_guard<std::mutex> lock(m_use);  // the state vectors grow
        Options merged = group.options().merged_over(m_defaults);
        check_group_options(merged, num_param_groups());
        add_group_parameters(name() + ".add_param_group", group.params(), true);
        m_groups.emplace_back(group.params(), merged);
        grow_state();
    }
    /// The options of the only group (torch's defaults when there is one); throws with more
    /// than one group, whose options param_groups() gives.
    Options options() const {
        if (m_groups.size() != 1)
            throw Error(fmt::format("{}.options: the optimizer has {} parameter groups; read each group's "
                                    "options through param_groups()",
                                    name(), m_groups.size()));
        return m_groups[0].options();
    }

protected:
    OptimizerWithOptions(std::string name, const Options& defaults)
        : Optimizer(std::move(name)), m_defaults(defaults.merged_over(Options::class_defaults())) {}

    /// The constructors' body: the single-list constructor is one group with the defaults'
    /// options, its messages as before groups existed. Call from the derived constructor (the
    /// checks are virtual).
    void add_groups(std::vector<Group> groups, bool grouped) {
        if (grouped && groups.empty()) throw Error(fmt::format("{}: got no parameter groups", name()));
        for (auto& group : groups) {
            Options merged = group.options().merged_over(m_defaults);
            add_group_parameters(name(), group.params(), grouped);
            // torch checks the defaults, then each group; an SGD's defaults may leave lr to the groups
            if (m_groups.empty() && m_defaults.has_lr()) check_options(m_defaults);
            check_group_options(merged, grouped ? num_param_groups() - 1 : SIZE_MAX);
            m_groups.emplace_back(group.params(), merged);
        }
        grow_state();
    }

    /// Throws, naming group g (SIZE_MAX: no group), unless o is a valid set of options.
    virtual void check_options(const Options& o) const = 0;
    /// Makes the per-parameter state vectors as long as m_params (new parameters never stepped).
    virtual void grow_state() = 0;

    /// check_options for every group, before a step moves anything.
    void check_all_groups() const {
        for (std::size_t g = 0; g < m_groups.size(); ++g)
            check_group_options(m_groups[g].options(), m_groups.size() > 1 ? g : SIZE_MAX);
    }

    void check_group_options(const Options& o, std::size_t g) const {
        if (g == SIZE_MAX) return check_options(o);
        try {
            check_options(o);
        } catch (const Error& e) {
            throw Error(fmt::format("{} (in parameter group {})", e.what(), g));
        }
    }

    const Options& group_options(std::size_t i) const { return m_groups[group_of(i)].options(); }

    double group_lr(std::size_t g) const override { return m_groups[g].options().lr(); }
    void store_group_lr(std::size_t g, double lr) override { m_groups[g].options().lr(lr); }

    std::vector<Group> m_groups;
    Options m_defaults;
};

}  // namespace xgrad::optim
