#pragma once
/// The examples' --out folder, made ready before the first step so that a run never trains for
/// an hour to find it cannot write its results, never replaces an earlier run's files unless
/// asked to, and never shares the folder with another run writing there at the same time.
///
///   const OutFolder folder = prepare_out_folder(o.out, {"checkpoint.npz", "metrics.json"}, start,
///                                               "checkpoint.npz");   // held to the end of main
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

/// The name of the lock file prepare_out_folder() keeps in --out while a run holds it. It is
/// not one of a run's outputs: a folder holding only it (left by a killed run) is not an
/// earlier run.
inline const char* const kOutLockName = ".xgrad-run.lock";

/// An exclusive lock on an --out folder, held from prepare_out_folder() until destroyed (keep
/// it for the whole run). It is an flock() on kOutLockName inside the folder, which records the
/// holder's process id, host and program for the message another run gets: the operating
/// system drops it when the process ends in any way (a SIGKILL, a crash), so a lock is never
/// left behind to block a later run. The same folder named by another path (relative, through
/// a symbolic link) is the same lock. The descriptor is close-on-exec; a forked child shares
/// its parent's lock. Destroying it removes the lock file. Default-constructed: holds nothing.
class OutFolder {
public:
    OutFolder() = default;
    OutFolder(OutFolder&& other) noexcept;
    OutFolder& operator=(OutFolder&& other) noexcept;
    OutFolder(const OutFolder&) = delete;
    OutFolder& operator=(const OutFolder&) = delete;
    ~OutFolder();
    bool locked() const { return m_fd >= 0; }

private:
    friend OutFolder lock_out_folder(const std::string& out);
    void release() noexcept;
    int m_fd = -1;
    int m_owner = 0;  ///< the process that took it
    std::string m_lock_path;
};

/// Takes the lock on the existing folder `out`, or throws xgrad::Error naming --out, the folder
/// and the run that holds it ("in use by seq_train, process 1234 on host h"), or why the lock
/// file cannot be made. Never waits.
[[nodiscard]] OutFolder lock_out_folder(const std::string& out);

/// Makes `out` ready for a run that writes `outputs` (file names inside it) and locks it for
/// the run (lock_out_folder) before looking for an earlier run's files, so that two runs
/// started at once into one folder cannot both pass the check; throws xgrad::Error naming --out
/// (or --resume), the path, what was expected and what is there:
///   - `out` is empty, or exists and is not a folder (a file, a FIFO...), or cannot be created
///     (a path under a file, a folder without write permission);
///   - another run holds the folder (--resume and --overwrite too: they take the same lock);
///   - a new file cannot be created in it (checked by creating and removing one);
///   - one of `outputs` exists and is not a regular file (a folder in its place would make the
///     last write of the run fail);
///   - Start::fresh and one of `outputs` exists: the message says to pass --resume (when the
///     program has a `checkpoint`) or --overwrite;
///   - Start::resume and `checkpoint` does not exist (or the program has none); a missing
///     folder is then not created.
/// Start::overwrite removes the existing `outputs`, and nothing else, once the checks pass.
/// Creates `out` (and its parents) when it is missing.
[[nodiscard]] OutFolder prepare_out_folder(const std::string& out, const std::vector<std::string>& outputs,
                                           Start start, const std::string& checkpoint = "");

/// prepare_out_folder()'s checks without the lock and without removing anything (creating a
/// missing folder): for the processes of a run that do not write --out, such as the ranks of a
/// data-parallel run before they know which of them writes (rank 0 then takes the lock with
/// prepare_out_folder()).
void check_out_folder(const std::string& out, const std::vector<std::string>& outputs, Start start,
                      const std::string& checkpoint = "");

}  // namespace xgrad::examples
