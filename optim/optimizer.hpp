#pragma once
/// Optimizer: the base of SGD, Adam and AdamW. It holds the parameters by handle (the same
/// nodes the modules registered: a step changes the module's weights, no copies), the learning
/// rate, and per-parameter state kept by the subclasses in vectors aligned with the parameters.
///
///   opt.zero_grad(); loss.backward(); opt.step();
///
/// step() runs without building a graph and updates each parameter's values in place; a
/// parameter without a gradient is skipped and its state stays as it was (as torch.optim).
///
/// Threads: step(), zero_grad(), state_dict() and load_state_dict() of one optimizer take its
/// lock, so calls from several threads run one after the other. A step writes the parameters
/// in place: a graph another thread recorded before it that saved a parameter is refused at
/// its backward (the version counter), as torch's; what a forward running during the step
/// reads is unspecified (README, threads).
#include <cstddef>
#include <map>
#include <mutex>
#include <string>
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

    double lr() const { return m_lr; }
    /// Sets the learning rate (schedulers call this); throws unless lr is finite and >= 0.
    void set_lr(double lr);
    /// The parameters this optimizer updates: the handles themselves (they alias the module's).
    const std::vector<Tensor>& parameters() const { return m_params; }
    /// "SGD", "Adam", "AdamW": the name used in messages.
    const std::string& name() const { return m_name; }

    /// Everything a resumed run needs to continue bit for bit, by name:
    ///   "<kind>.num_params"       int64 0-d: the number of parameters
    ///   "<kind>.lr", ".momentum"… float64 0-d: the hyper-parameters (flags as 0 / 1)
    ///   "state.<i>.<buffer>"      parameter i's buffers ("state.3.exp_avg"; "state.3.step" is
    ///                             int64 0-d), present only once parameter i has been stepped.
    /// <kind> is "sgd", "adam" or "adamw". As torch's, the buffer entries (exp_avg, exp_avg_sq,
    /// max_exp_avg_sq, momentum_buffer) alias the optimizer's state: a later step() shows in
    /// them, and a write through one is what the next step reads. What the optimizer keeps as
    /// numbers (the counts, step, lr and the hyper-parameters) comes as new 0-d tensors, copies:
    /// writing one changes nothing (set_lr, or load_state_dict, does). For a snapshot (to
    /// resume from later in the same run) copy each entry with detach().
    NamedTensors state_dict() const;
    /// Restores a state_dict(): hyper-parameters (the learning rate included) and buffers are
    /// copied in, buffers converted to their parameter's float dtype (as torch). Everything is
    /// checked first (names, parameter count, shapes, values) and on any mismatch it throws,
    /// naming the entry, with the optimizer unchanged.
    void load_state_dict(const NamedTensors& state);

protected:
    /// Hyper-parameters other than lr, by name; flags as 0 / 1.
    using HyperParameters = std::map<std::string, double>;

    /// Checks the parameters (non-empty, defined, floating-point leaves, no duplicates) and lr.
    Optimizer(std::vector<Tensor> params, double lr, std::string name);

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
    virtual HyperParameters hyper_parameters() const = 0;
    /// Throws, as the constructor would, if `h` (a complete set) holds a bad value.
    virtual void check_hyper_parameters(const HyperParameters& h) const = 0;
    virtual void set_hyper_parameters(const HyperParameters& h) = 0;
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

    std::vector<Tensor> m_params;
    double m_lr;
    /// Held by step() (each optimizer's own, and a subclass's), zero_grad(), state_dict() and
    /// load_state_dict(): the state vectors are one thread's at a time.
    mutable std::mutex m_use;

private:
    std::string m_name;
};

}  // namespace xgrad::optim
