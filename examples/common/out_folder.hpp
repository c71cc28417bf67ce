#pragma once
/// The examples' --out folder, made ready before the first step so that a run never trains for
/// an hour to find it cannot write its results, and never replaces an earlier run's files
/// unless asked to.
///
///   prepare_out_folder(o.out, {"checkpoint.npz", "metrics.json", "loss.svg"}, start, "checkpoint.npz");
#include <string>
#include <vector>

namespace xgrad::examples {

/// What a run does with an earlier run's files in its --out folder.
enum class Start {
    fresh,      ///< refuse when any of them is there (the default)
    resume,     ///< continue from the checkpoint, which must be there (--resume)
    overwrite,  ///< remove them first (--overwrite)
};

/// Start::fresh, ::resume or ::overwrite from the two flags; throws xgrad::Error when both are set.
Start start_from_flags(bool resume, bool overwrite);

/// Makes `out` ready for a run that writes `outputs` (file names inside it), or throws
/// xgrad::Error naming --out (or --resume), the path, what was expected and what is there:
///   - `out` is empty, or exists and is not a folder (a file, a FIFO...), or cannot be created
///     (a path under a file, a folder without write permission);
///   - a new file cannot be created in it (checked by creating and removing one);
///   - one of `outputs` exists and is not a regular file (a folder in its place would make the
///     last write of the run fail);
///   - Start::fresh and one of `outputs` exists: the message says to pass --resume (when the
///     program has a `checkpoint`) or --overwrite;
///   - Start::resume and `checkpoint` does not exist (or the program has none).
/// Start::overwrite removes the existing `outputs`, and nothing else, once the checks pass.
/// Creates `out` (and its parents) when it is missing.
void prepare_out_folder(const std::string& out, const std::vector<std::string>& outputs, Start start,
                        const std::string& checkpoint = "");

}  // namespace xgrad::examples
