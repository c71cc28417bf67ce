#pragma once
/// Before the first step of a data-parallel run, the ranks check that they agree on everything
/// that must be equal for them to train one model in lockstep: the state they start from
/// (fresh, or a checkpoint's step and a hash of its content), the flags (all but the per-rank
/// ones), the world size, and what changes the numerics (the BLAS kernels OpenBLAS selected and
/// OPENBLAS_CORETYPE, the thread counts, the build). Otherwise a rank resumed from an older
/// checkpoint trains on other batches and the job hangs at the end, and a host with another
/// OPENBLAS_CORETYPE silently computes with other kernels.
///
/// Each rank describes itself as a list of (name, value) Settings; all_gather gives every rank
/// every rank's list, and every rank computes the same verdict from the same data, so either all
/// go on or all stop with the same message (no rank is left waiting in a collective).
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "distributed.hpp"

namespace xgrad::examples {

/// What one rank says about itself, in a fixed order: (name, value).
using Settings = std::vector<std::pair<std::string, std::string>>;

/// The name of a setting that, on any rank, stops the run whatever the others hold: what went
/// wrong on that rank before the check (e.g. its checkpoint could not be read).
inline const std::string kRankError = "error on this rank";

/// Settings as one string and back (lengths prefixed, so names and values may hold any byte).
/// decode_settings throws xgrad::Error for a string encode_settings did not make.
std::string encode_settings(const Settings& settings);
Settings decode_settings(const std::string& text);

/// Empty when every rank's settings equal rank 0's and none holds kRankError; otherwise one
/// line per difference: the setting, rank 0's value and each other value with its ranks
/// ("  XGRAD_NUM_THREADS: rank 0 '1'; rank 1 '2'"). A setting one rank lacks shows as
/// (missing). At most `max_ranks` ranks are named per value, then "and N more".
std::string disagreements(const std::vector<Settings>& per_rank, std::size_t max_ranks = 8);

/// This process's settings that change numerics: OPENBLAS_CORETYPE and the core OpenBLAS runs,
/// the BLAS library and its threads, XGRAD_NUM_THREADS and the pool size, and the build
/// (compiler, build type, flags, commit). Loads the BLAS and starts the pool if not yet done.
Settings numerics_settings();

/// What check_agreement throws: the same on every rank, so every rank may end normally (no
/// rank is left waiting in a collective). Other errors of the check (MPI failing) are plain
/// xgrad::Errors, which only some ranks may see.
class Disagreement : public Error {
public:
    using Error::Error;
};

/// Gathers every rank's `mine` and throws Disagreement on every rank, the same message, when
/// disagreements() finds any. A collective: every rank calls it, before the first step.
void check_agreement(Replicas& replicas, const Settings& mine);

}  // namespace xgrad::examples
