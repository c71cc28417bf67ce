// Data-parallel use of the installed package, built when it has xgrad::distributed: one step
// of a Linear layer with gradients summed over the ranks (here run as a world of one rank).
#include <xgrad/xgrad.hpp>

#include <xgrad/nn/distributed/process_group.hpp>
#include <xgrad/nn/distributed/data_parallel.hpp>

using namespace xgrad;

int main(int argc, char** argv) {
    distributed::Environment mpi(argc, argv);
    auto layer = std::make_shared<nn::Linear>(3, 1);
    nn::DistributedDataParallel ddp(*layer);
    Tensor loss = layer->forward(ones({4, 3})).sum();
    loss.backward();
    ddp.sync_gradients();
    fmt::print("rank {} of {}: {} bucket(s), bias gradient {}\n", distributed::rank(), distributed::world_size(),
               ddp.num_buckets(), layer->bias().grad().item<double>());
    return layer->bias().grad().item<double>() == 4.0 ? 0 : 1;
}
