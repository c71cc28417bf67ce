// core/distributed and nn/data_parallel under MPI: run by ctest with `mpirun -np 2` and once
// as a single process (a world of one rank). Each case is written for any world size.
#include <cmath>

#include "core/creation.hpp"
#include "nn/distributed/process_group.hpp"
#include "core/ops.hpp"
#include "helpers.hpp"
#include "nn/distributed/data_parallel.hpp"
#include "nn/linear.hpp"

using namespace xgrad;
using namespace xgrad::test;
namespace dist = xgrad::distributed;

namespace {

double r() { return static_cast<double>(dist::rank()); }
double w() { return static_cast<double>(dist::world_size()); }

// A leaf that requires grad, filled with `value`.
Tensor leaf(const Shape& shape, double value, Dtype d) {
    return full(shape, value, TensorOptions(d).requires_grad(true));
}

}  // namespace

TEST_CASE("distributed: rank and world size describe the job") {
    REQUIRE(dist::is_initialized());
    REQUIRE(dist::world_size() >= 1);
    REQUIRE(dist::rank() < dist::world_size());
    REQUIRE(dist::local_world_size() >= 1);
    REQUIRE(dist::local_world_size() <= dist::world_size());
    dist::barrier();
}

TEST_CASE("distributed: all_reduce sums, averages and takes extremes over the ranks") {
    const double total = w() * (w() + 1) / 2;  // Σ (rank + 1)
    for (Dtype d : {kFloat32, kFloat64}) {
        Tensor t = full({2, 3}, r() + 1, d);
        dist::all_reduce(t);
        CHECK_THAT(vals(t), approx(std::vector<double>(6, total)));
        Tensor m = from_vector({r(), 2 * r()}, {2}, d);
        dist::all_reduce(m, dist::ReduceOp::mean);
        CHECK_THAT(vals(m), approx({(w() - 1) / 2, w() - 1}));
    }
    Tensor i = from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(dist::rank()), 5}, {2});
    dist::all_reduce(i, dist::ReduceOp::max);
    CHECK(i.to_vector<std::int64_t>() == std::vector<std::int64_t>{static_cast<std::int64_t>(dist::world_size()) - 1, 5});
    std::vector<double> lo{r(), -r()};
    dist::all_reduce(lo.data(), lo.size(), dist::ReduceOp::min);
    CHECK(lo == std::vector<double>{0.0, -(w() - 1)});
}

TEST_CASE("distributed: all_reduce refuses what it cannot reduce") {
    Tensor b = full({2}, 1.0, kBool);
    CHECK_THROWS_WITH(dist::all_reduce(b), Catch::Contains("all_reduce") && Catch::Contains("bool"));
    Tensor i = from_vector(std::vector<std::int64_t>{1, 2}, {2});
    CHECK_THROWS_WITH(dist::all_reduce(i, dist::ReduceOp::mean), Catch::Contains("mean") && Catch::Contains("floating"));
    CHECK(i.to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 2});  // refused before reducing
    Tensor f = full({1}, 1.0);
    CHECK_THROWS_WITH(dist::broadcast(f, dist::world_size()), Catch::Contains("broadcast") && Catch::Contains("root"));
}

TEST_CASE("distributed: broadcast gives every rank the root's values") {
    const std::size_t root = dist::world_size() - 1;
    Tensor t = full({3, 2}, r(), kFloat64);
    dist::broadcast(t, root);
    CHECK_THAT(vals(t), approx(std::vector<double>(6, static_cast<double>(root))));
    Tensor i = from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(dist::rank()), 7}, {2});
    dist::broadcast(i);
    CHECK(i.to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 7});
}

TEST_CASE("DistributedDataParallel: construction copies rank 0's parameters to every rank") {
    Generator gen(100 + dist::rank());  // a different initialisation on each rank
    nn::Linear lin(3, 4, true, gen);
    Generator gen0(100);
    nn::Linear expected(3, 4, true, gen0);
    nn::DistributedDataParallel ddp(lin);
    CHECK(ddp.parameters().size() == 2);
    CHECK(vals(lin.weight()) == vals(expected.weight()));
    CHECK(vals(lin.bias()) == vals(expected.bias()));
}

TEST_CASE("DistributedDataParallel: gradients of mixed dtypes are averaged in several buckets") {
    // float32 (3, 4), float64 (5), float32 (7): with 80-byte buckets the float32 ones cannot
    // share one (12 + 7 values and 2 slots > 20 floats), so there are three buckets.
    std::vector<Tensor> ps{leaf({3, 4}, 0, kFloat32), leaf({5}, 0, kFloat64), leaf({7}, 0, kFloat32)};
    nn::DataParallelOptions o;
    o.bucket_bytes = 80;
    nn::DistributedDataParallel ddp(ps, o);
    CHECK(ddp.num_buckets() == 3);
    CHECK(ddp.bytes_per_sync() == (12 + 1 + 7 + 1) * 4 + (5 + 1) * 8);
    // rank k's gradient of parameter j, element i: (k + 1) · (i + 1) + j
    std::vector<std::vector<double>> expect;
    for (std::size_t j = 0; j < ps.size(); ++j) {
        std::vector<double> g(ps[j].numel()), mean(ps[j].numel());
        for (std::size_t i = 0; i < g.size(); ++i) {
            g[i] = (r() + 1) * static_cast<double>(i + 1) + static_cast<double>(j);
            mean[i] = (w() + 1) / 2 * static_cast<double>(i + 1) + static_cast<double>(j);
        }
        ps[j].set_grad(from_vector(g, ps[j].shape(), ps[j].dtype()));
        expect.push_back(mean);
    }
    ddp.sync_gradients();
    for (std::size_t j = 0; j < ps.size(); ++j) {
        REQUIRE(ps[j].grad().dtype() == ps[j].dtype());
        CHECK_THAT(vals(ps[j].grad()), approx(expect[j]));
    }
    CHECK(ddp.syncs() == 1);
    CHECK(ddp.sync_seconds() >= ddp.allreduce_seconds());
}

TEST_CASE("DistributedDataParallel: a missing gradient counts as zeros; none anywhere stays none") {
    std::vector<Tensor> ps{leaf({2}, 0, kFloat64), leaf({3}, 0, kFloat64)};
    nn::DistributedDataParallel ddp(ps);
    if (dist::rank() == 0) ps[0].set_grad(from_vector({2.0, 4.0}, {2}, kFloat64));
    ddp.sync_gradients();
    REQUIRE(ps[0].grad().defined());
    CHECK_THAT(vals(ps[0].grad()), approx({2.0 / w(), 4.0 / w()}));
    CHECK_FALSE(ps[1].grad().defined());
}

TEST_CASE("DistributedDataParallel: with average off the gradients are summed") {
    std::vector<Tensor> ps{leaf({2}, 0, kFloat32)};
    nn::DataParallelOptions o;
    o.average = false;
    nn::DistributedDataParallel ddp(ps, o);
    ps[0].set_grad(from_vector({1.0, r()}, {2}, kFloat32));
    ddp.sync_gradients();
    CHECK_THAT(vals(ps[0].grad()), approx({w(), w() * (w() - 1) / 2}));
}

TEST_CASE("DistributedDataParallel: per-rank losses scaled by the global count give the full-batch gradient") {
    // Global batch of 4·world rows; rank k takes rows [4k, 4k + 4). The full-batch loss is the
    // mean over rows of the squared error; each rank divides its own sum by the global row
    // count and the gradients are summed (examples/seq_train/distributed.hpp explains why).
    const long rows = 4 * static_cast<long>(dist::world_size());
    Generator gx(7);
    const Tensor x = uniform({static_cast<std::size_t>(rows), 3}, -1, 1, kFloat64, gx);
    const Tensor y = uniform({static_cast<std::size_t>(rows), 2}, -1, 1, kFloat64, gx);
    auto sq_err = [](const Tensor& W, const Tensor& b, const Tensor& xs, const Tensor& ys) {
        return (matmul(xs, W) + b - ys).pow(2).sum();
    };
    const Tensor W0 = param({3, 2}, -1, 1, 3), b0 = param({2}, -1, 1, 4);
    (sq_err(W0, b0, x, y) / static_cast<double>(rows)).backward();

    const Tensor W = param({3, 2}, -1, 1, 3), b = param({2}, -1, 1, 4);
    nn::DataParallelOptions o;
    o.average = false;
    nn::DistributedDataParallel ddp({W, b}, o);
    const long k = static_cast<long>(dist::rank());
    const Tensor xs = slice(x, 0, 4 * k, 4 * k + 4), ys = slice(y, 0, 4 * k, 4 * k + 4);
    (sq_err(W, b, xs, ys) / static_cast<double>(rows)).backward();
    ddp.sync_gradients();
    CHECK_THAT(vals(W.grad()), approx(vals(W0.grad()), 1e-12));
    CHECK_THAT(vals(b.grad()), approx(vals(b0.grad()), 1e-12));
}

TEST_CASE("DistributedDataParallel: bad options, parameters and a model that differs between ranks") {
    nn::DataParallelOptions zero;
    zero.bucket_bytes = 0;
    CHECK_THROWS_WITH(nn::DistributedDataParallel({leaf({2}, 0, kFloat32)}, zero),
                      Catch::Contains("DistributedDataParallel") && Catch::Contains("bucket_bytes"));
    const Tensor ints = from_vector(std::vector<std::int64_t>{1, 2}, {2, 1});
    CHECK_THROWS_WITH(nn::DistributedDataParallel({ints}),
                      Catch::Contains("float32 or float64") && Catch::Contains("int64 (2, 1)"));
    // Rank 0 holds a (2, 3) parameter, the others a (3, 2): every rank must throw (not hang).
    const Shape shape = dist::rank() == 0 || dist::world_size() == 1 ? Shape{2, 3} : Shape{3, 2};
    if (dist::world_size() > 1) {
        CHECK_THROWS_WITH(nn::DistributedDataParallel({leaf(shape, 0, kFloat32)}),
                          Catch::Contains("different parameters") && Catch::Contains("shapes"));
        // A different count: rank 0 has one more parameter.
        std::vector<Tensor> ps{leaf({2}, 0, kFloat32)};
        if (dist::rank() == 0) ps.push_back(leaf({2}, 0, kFloat32));
        CHECK_THROWS_WITH(nn::DistributedDataParallel(ps), Catch::Contains("different parameters") &&
                                                               Catch::Contains("1..2 parameters"));
        // Only the last rank holds an int64 parameter: it names it, the others name the rank.
        const bool last = dist::rank() + 1 == dist::world_size();
        const Tensor p = last ? ints : leaf({2, 1}, 0, kFloat32);
        CHECK_THROWS_WITH(nn::DistributedDataParallel({p}),
                          last ? Catch::Contains("int64 (2, 1)") : Catch::Contains("another rank's parameters"));
    } else {
        CHECK_NOTHROW(nn::DistributedDataParallel({leaf(shape, 0, kFloat32)}));
    }
}
