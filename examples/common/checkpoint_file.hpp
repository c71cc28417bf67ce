#pragma once
/// Reading an example's checkpoint back: one .npz of named entries (config.*, trainer.step,
/// rng.*, model.*, optim.*...), each lookup refused with the file and the entry named, and the
/// settings that change a run's numbers compared with this run's; then the run's parts (model,
/// optimizer, generators...) loaded all or none. seq_train, char_gpt and bahdanau read theirs
/// with it.
///
///   const CheckpointFile file(path, "bahdanau");           // throws for a truncated or corrupt file
///   std::string changed;
///   for (const CheckpointSetting& s : settings) changed += changed_setting(s, file.saved(s));
///   refuse_changed_settings(path, changed, "the same flags");
///   const std::int64_t step = file.step("trainer.step", steps);
///   load_parts(file, {state_dict_part(*model, "model"), state_dict_part(*optimizer, "optim"),
///                     generator_part(data_gen, "rng.data"), default_generator_part("rng.default")});
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/io/npz.hpp"
#include "core/random.hpp"

namespace xgrad::examples {

/// A setting that changes a run's numbers, as a checkpoint records it (entry config.<name>) and
/// metrics.json shows it: a resumed run must have the same ones.
struct CheckpointSetting {
    std::string name;         ///< "d_model"
    std::string flag;         ///< the flag that sets it: "--d-model"
    std::string shown;        ///< as a user types it: "128", "0.002"; a whole_bits one in full
    bool whole_bits = false;  ///< kept as its 64 bits (int64, read as uint64: a seed), not as a double
};

/// The entry config.<name> for `setting`: float64 of its shown value, or int64 of its bits.
Tensor setting_entry(const CheckpointSetting& setting);

/// "\n  name (flag): checkpoint <saved>, this run <shown>", a line of refuse_changed_settings()
/// (empty when `saved` equals setting.shown).
std::string changed_setting(const CheckpointSetting& setting, const std::string& saved);

/// Throws xgrad::Error when `changed` (changed_setting() lines) is not empty: "load checkpoint
/// 'path': it was written with settings that change the numbers, and this run has others
/// (resume with `keep`):" and the lines.
void refuse_changed_settings(const std::string& path, const std::string& changed, const std::string& keep);

/// Copies of a state_dict's tensors (state_dict() aliases them, as torch's does): what a load
/// restores when a later part of the checkpoint is refused.
NamedTensors detached(NamedTensors state);

/// A checkpoint read into memory.
class CheckpointFile {
public:
    /// Reads `path` (load_npz: throws xgrad::Error naming it when it is missing, truncated or
    /// corrupt). `program` names the writer in the message for a missing entry ("not a
    /// bahdanau checkpoint, or one from an older bahdanau"); empty leaves that out.
    CheckpointFile(std::string path, std::string program = "");
    const std::string& path() const { return m_path; }
    const NamedTensors& entries() const { return m_entries; }
    bool has(const std::string& name) const;
    /// The entry `name`; throws naming the file and the entry when it is missing.
    const Tensor& find(const std::string& name) const;
    /// The entry `name`, which must hold one number (shape () or (1,)).
    const Tensor& scalar(const std::string& name) const;
    /// scalar() as a double, which must be finite.
    double number(const std::string& name) const;
    /// The entry `name`, which must be 1-D, as doubles.
    std::vector<double> curve(const std::string& name) const;
    /// The step count `name`: a whole number from 0 to `steps` (named as --steps).
    std::int64_t step(const std::string& name, std::int64_t steps) const;
    /// The value config.<setting.name> holds, shown as setting.shown is (the shortest text
    /// that reads back as the same double; a whole_bits one's 64 bits in full).
    std::string saved(const CheckpointSetting& setting) const;
    /// Throws xgrad::Error "load checkpoint 'path': what".
    [[noreturn]] void fail(const std::string& what) const;

private:
    std::string m_path, m_program;
    NamedTensors m_entries;
};

/// One part of a run's state that a checkpoint restores (a model, an optimizer, a generator...).
struct CheckpointPart {
    /// Copies the part's current state and returns what puts that copy back.
    std::function<std::function<void()>()> snapshot;
    /// Loads the part from the checkpoint; throws to refuse, leaving the part as it was.
    std::function<void(const CheckpointFile&)> load;
};

/// Loads every part from `file`, all or none: each part's state is copied first, then the parts
/// load in order, and if one refuses, every part is put back as it was, so nothing is left
/// half-loaded (a model from the checkpoint beside the optimizer of the run). The refusal is
/// rethrown as xgrad::Error "load checkpoint 'path': " and its message (as it came when it is
/// the file's own, an entry missing, which says that already). When a part cannot be put back
/// (its restore throws), the others still are, and the refusal is still the error thrown, with
/// the parts that could not be put back named after it.
void load_parts(const CheckpointFile& file, const std::vector<CheckpointPart>& parts);

/// A part with state_dict() and load_state_dict() (a module, an optimizer, a schedule), under
/// `prefix` in the checkpoint ("model": its entries model.<name>, as with_prefix writes them and
/// sub_entries reads them). Its snapshot copies the tensors: state_dict() aliases them.
template <class Stateful>
CheckpointPart state_dict_part(Stateful& part, std::string prefix) {
    return {[&part] { return [&part, before = detached(part.state_dict())] { part.load_state_dict(before); }; },
            [&part, prefix = std::move(prefix)](const CheckpointFile& file) {
                part.load_state_dict(sub_entries(file.entries(), prefix));
            }};
}

/// The state of `generator`, in the entry `name` ("rng.data").
CheckpointPart generator_part(Generator& generator, std::string name);
/// The calling thread's default generator's state (get_rng_state), in the entry `name`.
CheckpointPart default_generator_part(std::string name);

}  // namespace xgrad::examples
