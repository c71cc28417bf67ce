// seq_train built without MPI: --distributed says so.
#include "core/error.hpp"
#include "distributed.hpp"

namespace xgrad::examples {

std::unique_ptr<Replicas> start_data_parallel(const DataParallelSettings&) {
    throw Error("--distributed needs MPI, and this seq_train was built without it (install libopenmpi-dev and "
                "reconfigure with -DXGRAD_WITH_MPI=ON)");
}

void end_job_on_error(const std::string&, const std::exception&) {}

}  // namespace xgrad::examples
