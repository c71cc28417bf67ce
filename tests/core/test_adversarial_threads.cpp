// Threads: the process-wide state a user's threads share (the default generators, grad and
// anomaly modes, the pool, the allocator cache, the BLAS) must neither race nor make a result
// depend on what another thread does; XGRAD_NUM_THREADS is read strictly.
//
// Catch2's assertions are not thread-safe: the threads record what they saw, the test thread
// checks it after joining them.
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/runtime/alloc.hpp"
#include "core/runtime/parallel.hpp"
#include "concurrently.hpp"
#include "helpers.hpp"
#include "nn/dropout.hpp"
#include "nn/linear.hpp"
#include "optim/adam.hpp"

using namespace xgrad;
using namespace xgrad::test;

namespace {

// A small model with dropout, built from the default generator.
struct Model {
    std::shared_ptr<nn::Linear> l1 = std::make_shared<nn::Linear>(6, 32);
    std::shared_ptr<nn::Dropout> drop = std::make_shared<nn::Dropout>(0.3);
    std::shared_ptr<nn::Linear> l2 = std::make_shared<nn::Linear>(32, 1);
    std::vector<Tensor> parameters() const {
        std::vector<Tensor> ps = l1->parameters();
        for (const Tensor& p : l2->parameters()) ps.push_back(p);
        return ps;
    }
    Tensor forward(const Tensor& x) { return l2->forward(drop->forward(relu(l1->forward(x)))); }
};

// Trains `model` for a few steps on batches from the default generator; returns every
// parameter value and the losses, in order.
std::vector<float> train(Model& model) {
    optim::Adam opt(model.parameters(), optim::AdamOptions(1e-2));
    std::vector<float> out;
    for (int step = 0; step < 15; ++step) {
        const Tensor x = rand({16, 6});
        const Tensor y = sum(x, {1}, true);
        const Tensor d = model.forward(x) - y;
        const Tensor loss = mean(d * d);
        opt.zero_grad();
        loss.backward();
        opt.step();
        out.push_back(loss.item<float>());
    }
    for (const Tensor& p : model.parameters())
        for (float v : p.to_vector<float>()) out.push_back(v);
    return out;
}

// Seeds this thread, builds a model and trains it.
std::vector<float> seeded_run(std::uint64_t seed) {
    manual_seed(seed);
    Model model;
    return train(model);
}

// Runs every job on its own thread at once (they start together), returning their results;
// a job that threw fails the test.
template <class R> std::vector<R> concurrently(const std::vector<std::function<R()>>& jobs) {
    std::vector<R> results(jobs.size());
    std::vector<std::function<void()>> runs;
    for (std::size_t i = 0; i < jobs.size(); ++i) runs.push_back([&, i] { results[i] = jobs[i](); });
    for (const auto& e : test_threads::run_together(runs)) REQUIRE(e.empty());
    return results;
}

}  // namespace

TEST_CASE("two models trained on two threads match training them one after the other", "[threads]") {
    const std::vector<float> first = seeded_run(11);
    const std::vector<float> second = seeded_run(12);
    REQUIRE(first != second);
    for (int round = 0; round < 3; ++round) {
        INFO("round " << round);
        const auto both = concurrently<std::vector<float>>({[] { return seeded_run(11); }, [] { return seeded_run(12); }});
        CHECK(both[0] == first);
        CHECK(both[1] == second);
    }
    // Four threads, two of them on the same seed: the same values, whatever the interleaving.
    const auto four = concurrently<std::vector<float>>(
        {[] { return seeded_run(11); }, [] { return seeded_run(12); }, [] { return seeded_run(11); },
         [] { return seeded_run(12); }});
    CHECK(four[0] == first);
    CHECK(four[1] == second);
    CHECK(four[2] == first);
    CHECK(four[3] == second);
}

TEST_CASE("a thread that never seeds starts from the process seed, whatever other threads draw", "[threads]") {
    manual_seed(5);
    CHECK(initial_seed() == 5);
    Model reference_model;
    const std::vector<float> reference = train(reference_model);  // right after manual_seed(5)
    // The main thread's generator has moved on; new threads start from the seed, not from it.
    const auto runs = concurrently<std::vector<float>>({[] {
                                                            Model m;
                                                            return train(m);
                                                        },
                                                        [] {
                                                            Model m;
                                                            return train(m);
                                                        },
                                                        [] {
                                                            Generator own(99);
                                                            return rand({1000}, kFloat32, own).to_vector<float>();
                                                        }});
    CHECK(runs[0] == reference);
    CHECK(runs[1] == reference);
    std::thread([] { manual_seed(99); }).join();
    CHECK(initial_seed() == 99);  // the last manual_seed, made on another thread
    manual_seed(0);
}

TEST_CASE("dropout draws from the generator of the thread that runs it, not of the one that built it",
          "[threads]") {
    manual_seed(3);
    Model built_here;
    std::vector<float> on_thread;
    std::thread t([&] {
        manual_seed(4);
        on_thread = train(built_here);
    });
    t.join();
    manual_seed(3);
    Model again;
    manual_seed(4);
    CHECK(train(again) == on_thread);
}

TEST_CASE("manual_seed on one thread leaves a generator another thread already uses alone", "[threads]") {
    std::mutex m;
    std::condition_variable cv;
    int phase = 0;
    std::vector<double> drawn, expected;
    std::thread t([&] {
        manual_seed(21);
        drawn = rand({4}, kFloat64).to_vector<double>();
        {
            std::unique_lock<std::mutex> lock(m);
            phase = 1;
            cv.notify_all();
            cv.wait(lock, [&] { return phase == 2; });
        }
        for (double v : rand({4}, kFloat64).to_vector<double>()) drawn.push_back(v);
    });
    {
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return phase == 1; });
        manual_seed(1234);  // while the other thread is between its two draws
        phase = 2;
        cv.notify_all();
    }
    t.join();
    Generator g(21);
    expected = rand({8}, kFloat64, g).to_vector<double>();
    CHECK(drawn == expected);
    manual_seed(0);
}

TEST_CASE("threads hammering their default generators draw exactly the sequential values", "[threads]") {
    // Before the generators were per thread this raced on one std::mt19937_64 (UBSan: an
    // out-of-bounds index in the engine's state).
    auto draws = [](std::uint64_t seed) {
        manual_seed(seed);
        std::vector<double> out;
        for (int i = 0; i < 20; ++i) {
            out.push_back(sum(rand({5000}, kFloat64)).item<double>());
            out.push_back(sum(randn({100}, kFloat64)).item<double>());
            out.push_back(static_cast<double>(randint(0, 1000, {7}).to_vector<std::int64_t>()[3]));
            out.push_back(static_cast<double>(randperm(50).to_vector<std::int64_t>()[0]));
        }
        return out;
    };
    const auto a = draws(1), b = draws(2);
    const auto both = concurrently<std::vector<double>>({[&] { return draws(1); }, [&] { return draws(2); }});
    CHECK(both[0] == a);
    CHECK(both[1] == b);
}

TEST_CASE("one model evaluated on several threads at once gives each the sequential result", "[threads]") {
    // Reading shared parameters is safe: forward passes, with or without recording a graph
    // (each thread's graph is its own), as long as no thread writes them.
    manual_seed(31);
    Model shared;
    shared.drop->eval();
    Generator g(4);
    const Tensor x = uniform({64, 6}, -1, 1, kFloat32, g);
    const auto alone = shared.forward(x).to_vector<float>();
    auto evaluate = [&](bool record) {
        std::vector<float> out;
        for (int i = 0; i < 20; ++i) {
            std::unique_ptr<NoGradGuard> guard = record ? nullptr : std::make_unique<NoGradGuard>();
            const auto y = shared.forward(x).to_vector<float>();
            if (y != alone) out.push_back(static_cast<float>(i));
        }
        return out;
    };
    const auto results = concurrently<std::vector<float>>(
        {[&] { return evaluate(false); }, [&] { return evaluate(true); }, [&] { return evaluate(true); }});
    for (const auto& r : results) CHECK(r.empty());
    manual_seed(0);
}

TEST_CASE("the default generator refuses to draw inside a parallel_for chunk", "[threads]") {
    // A chunk may run on any pool thread, each with its own generator: the values would
    // depend on the thread count. The error reaches the caller, from whichever chunk.
    CHECK_THROWS_WITH(parallel_for(64, 1, [](std::size_t, std::size_t) { rand({2}); }),
                      Catch::Contains("default_generator: called inside a parallel_for chunk"));
    CHECK_THROWS_WITH(parallel_for(64, 1, [](std::size_t, std::size_t) { manual_seed(1); }),
                      Catch::Contains("inside a parallel_for chunk"));
    CHECK(!in_parallel_chunk());
    // A Generator of the caller's, drawn serially, is fine.
    Generator g(1);
    std::vector<double> values(8);
    parallel_for(1, 1, [&](std::size_t, std::size_t) {
        for (double& v : values) v = g.next_double();
    });
    Generator h(1);
    CHECK(values[7] == (h.next_double(), h.next_double(), h.next_double(), h.next_double(), h.next_double(),
                        h.next_double(), h.next_double(), h.next_double()));
}

TEST_CASE("an exception in any chunk reaches the caller, after the loop, and the pool still works",
          "[threads]") {
    for (std::size_t bad : {std::size_t(0), std::size_t(1), std::size_t(63)}) {
        INFO("throwing at item " << bad);
        std::atomic<std::size_t> items{0};
        CHECK_THROWS_WITH(parallel_for(64, 1,
                                       [&](std::size_t b, std::size_t e) {
                                           items += e - b;
                                           if (b <= bad && bad < e) throw std::runtime_error("chunk failed");
                                       }),
                          "chunk failed");
        CHECK(!in_parallel_chunk());
        std::vector<int> hits(1000, 0);
        parallel_for(hits.size(), 1, [&](std::size_t b, std::size_t e) {
            for (std::size_t i = b; i < e; ++i) ++hits[i];
        });
        CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
    }
}

TEST_CASE("parallel_for from several threads at once covers each loop once, without mixing", "[threads]") {
    constexpr std::size_t kThreads = 4, kLoops = 200;
    // hits[t][i]: how often thread t's loops touched item i.
    std::vector<std::vector<int>> hits(kThreads, std::vector<int>(997, 0));
    std::vector<std::function<int()>> jobs;
    for (std::size_t t = 0; t < kThreads; ++t)
        jobs.push_back([&, t] {
            for (std::size_t loop = 0; loop < kLoops; ++loop)
                parallel_for(hits[t].size(), 7, [&](std::size_t b, std::size_t e) {
                    for (std::size_t i = b; i < e; ++i) ++hits[t][i];
                });
            return 0;
        });
    concurrently<int>(jobs);
    for (std::size_t t = 0; t < kThreads; ++t)
        CHECK(std::all_of(hits[t].begin(), hits[t].end(), [](int h) { return h == static_cast<int>(kLoops); }));
}

TEST_CASE("a thread holding a lock that another thread's chunks wait for can still run a loop", "[threads]") {
    // B holds `m`; A's loop holds the pool and its chunks wait for `m`. If B's loop waited for
    // the pool, neither would ever finish.
    std::mutex m;
    std::unique_lock<std::mutex> held(m);
    std::atomic<bool> a_started{false};
    std::thread a([&] {
        parallel_for(64, 1, [&](std::size_t, std::size_t) {
            a_started = true;
            std::lock_guard<std::mutex> lock(m);
        });
    });
    while (!a_started.load()) std::this_thread::yield();
    std::vector<int> hits(64, 0);
    parallel_for(hits.size(), 1, [&](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) ++hits[i];
    });
    held.unlock();
    a.join();
    CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
}

namespace held_worker {
// A pool thread held inside a signal handler until the test lets go: a worker that another
// process keeps off its core, as far as the pool can tell.
std::atomic<bool> holding{false}, release{false}, left{false};
void hold(int) {
    holding.store(true);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!release.load() && std::chrono::steady_clock::now() < give_up) {
    }
    left.store(true);
}
}  // namespace held_worker

TEST_CASE("child: a loop runs while its only worker is held", "[.held-worker-child]") {
    // Find the worker: the caller's chunk waits until the other chunk has run on it.
    const pthread_t caller = pthread_self();
    std::atomic<bool> found{false};
    pthread_t worker{};
    parallel_for(2, 1, [&](std::size_t, std::size_t) {
        if (pthread_equal(pthread_self(), caller)) {
            while (!found.load()) std::this_thread::yield();
            return;
        }
        worker = pthread_self();
        found.store(true);
    });
    struct sigaction action {};
    action.sa_handler = held_worker::hold;
    REQUIRE(sigaction(SIGUSR1, &action, nullptr) == 0);
    REQUIRE(pthread_kill(worker, SIGUSR1) == 0);
    while (!held_worker::holding.load()) std::this_thread::yield();
    // Every chunk runs, on the caller, while the worker is held.
    std::vector<int> hits(64, 0);
    std::atomic<int> on_worker{0};
    parallel_for(hits.size(), 1, [&](std::size_t b, std::size_t e) {
        if (!pthread_equal(pthread_self(), caller)) ++on_worker;
        for (std::size_t i = b; i < e; ++i) ++hits[i];
    });
    const bool finished_while_held = !held_worker::left.load();
    held_worker::release.store(true);
    std::printf("covered %d, on the held worker %d, finished while held %d\n",
                std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }) ? 1 : 0, on_worker.load(),
                finished_while_held ? 1 : 0);
    // and the worker takes chunks again once it is back
    std::vector<int> again(1000, 0);
    parallel_for(again.size(), 1, [&](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) ++again[i];
    });
    std::printf("covered again %d\n", std::all_of(again.begin(), again.end(), [](int h) { return h == 1; }) ? 1 : 0);
}

TEST_CASE("a loop does not wait for a worker that cannot start: the caller runs what is unclaimed", "[threads]") {
    const std::string out = test::run_this_binary("XGRAD_NUM_THREADS=2", "[.held-worker-child]");
    INFO(out);
    CHECK_THAT(out, Catch::Matchers::Contains("covered 1, on the held worker 0, finished while held 1"));
    CHECK_THAT(out, Catch::Matchers::Contains("covered again 1"));
}

TEST_CASE("products computed on two threads at once equal the same products computed alone", "[threads]") {
    // Large enough to be split over the pool; the thread that finds the pool busy runs the
    // same blocks itself, so the rounding is the same.
    Generator g(8);
    const Tensor a = uniform({256, 192}, -1, 1, kFloat32, g);
    const Tensor b = uniform({192, 160}, -1, 1, kFloat32, g);
    const Tensor a3 = uniform({4, 96, 128}, -1, 1, kFloat64, g);
    const Tensor b3 = uniform({4, 128, 96}, -1, 1, kFloat64, g);
    const auto alone = matmul(a, b).to_vector<double>();
    const auto alone3 = bmm(a3, b3).to_vector<double>();
    auto work = [&] {
        std::vector<double> out;
        for (int i = 0; i < 10; ++i) {
            const auto c = matmul(a, b).to_vector<double>();
            const auto c3 = bmm(a3, b3).to_vector<double>();
            if (c != alone || c3 != alone3) out.push_back(i);
        }
        return out;
    };
    const auto mismatches = concurrently<std::vector<double>>({work, work, work});
    for (const auto& m : mismatches) CHECK(m.empty());
}

TEST_CASE("grad mode and anomaly mode are per thread", "[threads]") {
    std::mutex m;
    std::condition_variable cv;
    int phase = 0;
    bool other_grad = false, other_anomaly = true, other_tracked = false;
    std::thread t([&] {
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return phase == 1; });
        other_grad = grad_enabled();
        other_anomaly = detect_anomaly_enabled();
        Tensor x = param({2});
        other_tracked = (x * 2.0).requires_grad();
        phase = 2;
        cv.notify_all();
    });
    {
        NoGradGuard no_grad;
        DetectAnomalyGuard anomaly;
        std::unique_lock<std::mutex> lock(m);
        phase = 1;
        cv.notify_all();
        cv.wait(lock, [&] { return phase == 2; });
        CHECK(!grad_enabled());
        CHECK(detect_anomaly_enabled());
    }
    t.join();
    CHECK(other_grad);
    CHECK(!other_anomaly);
    CHECK(other_tracked);
}

TEST_CASE("the allocator cache serves several threads at once", "[threads]") {
    const AllocCacheStats before = alloc_cache_stats();
    auto churn = [](int seed) {
        double total = 0;
        for (int i = 0; i < 200; ++i) {
            // 64 KiB and more goes through the cache; mixed sizes share and split classes.
            Tensor t = full({std::size_t(16384 + 1024 * ((i + seed) % 5))}, 1.0, kFloat32);
            total += sum(t).item<double>();
            if (i % 50 == 0) empty_cache();
        }
        return total;
    };
    const auto totals = concurrently<double>({[&] { return churn(0); }, [&] { return churn(1); },
                                              [&] { return churn(2); }});
    CHECK(totals[0] == churn(0));
    CHECK(totals[1] == churn(1));
    CHECK(totals[2] == churn(2));
    const AllocCacheStats after = alloc_cache_stats();
    CHECK(after.hits + after.misses >= before.hits + before.misses + 3 * 200);
    CHECK(after.cached_bytes <= after.limit_bytes);
}

// --- XGRAD_NUM_THREADS ------------------------------------------------------------------------

TEST_CASE("XGRAD_NUM_THREADS: whole numbers from 1 are taken, above the cap capped", "[threads]") {
    CHECK(parse_num_threads("1").threads == 1);
    CHECK(!parse_num_threads("1").capped);
    CHECK(parse_num_threads("3").threads == 3);
    CHECK(parse_num_threads("007").threads == 7);
    CHECK(parse_num_threads(std::to_string(kMaxThreads)).threads == kMaxThreads);
    CHECK(!parse_num_threads(std::to_string(kMaxThreads)).capped);
    for (const std::string v : {std::to_string(kMaxThreads + 1), std::string("1000"),
                                std::string("18446744073709551617"), std::string(400, '9')}) {
        INFO(v);
        CHECK(parse_num_threads(v).threads == kMaxThreads);
        CHECK(parse_num_threads(v).capped);
    }
}

TEST_CASE("XGRAD_NUM_THREADS: anything but a whole number from 1 is a clear error", "[threads]") {
    for (const std::string v : {"", "0", "00", "-1", "-0", "+3", "abc", "3abc", " 3", "3 ", "1e3", "3.0", "0x4",
                                "-99999999999999999999", "\t2", "٣"}) {
        INFO("'" << v << "'");
        CHECK_THROWS_WITH(parse_num_threads(v),
                          Catch::Contains("XGRAD_NUM_THREADS: invalid value '" + v + "'") &&
                              Catch::Contains("expected a whole number of threads >= 1"));
    }
}

// Run by the next test in a child process, with XGRAD_NUM_THREADS set: prints what the pool
// made of it. Hidden ("[.]"): it means nothing in the test process itself.
TEST_CASE("child: report num_threads", "[.threads-env-child]") {
    try {
        std::printf("threads=%zu\n", num_threads());
    } catch (const Error& e) {
        std::printf("error=%s\n", e.what());
    }
    try {
        parallel_for(100, 1, [](std::size_t, std::size_t) {});
        std::printf("loop=ok\n");
    } catch (const Error& e) {
        std::printf("loop-error=%s\n", e.what());
    }
    std::fflush(stdout);
}

TEST_CASE("XGRAD_NUM_THREADS is checked when the pool starts, in a fresh process", "[threads]") {
    auto run = [&](const std::string& value) {
        return test::run_this_binary("XGRAD_NUM_THREADS='" + value + "'", "[.threads-env-child]");
    };
    CHECK_THAT(run("3"), Catch::Contains("threads=3") && Catch::Contains("loop=ok"));
    for (const std::string v : {"", "0", "-1", "abc", "3abc", " 3", "1e3"}) {
        INFO("'" << v << "'");
        const std::string out = run(v);
        CHECK_THAT(out, Catch::Contains("error=XGRAD_NUM_THREADS: invalid value '" + v + "'"));
        CHECK_THAT(out, Catch::Contains("loop-error=XGRAD_NUM_THREADS: invalid value '" + v + "'"));
    }
    const std::string capped = run("100000000000000000000000");
    CHECK_THAT(capped, Catch::Contains("threads=" + std::to_string(kMaxThreads)) &&
                           Catch::Contains("XGRAD_NUM_THREADS=100000000000000000000000 is more than the " +
                                           std::to_string(kMaxThreads) + " threads xgrad uses at most"));
}

// GCC 12's AddressSanitizer allocator is not fork-safe: a lock of its size classes that another
// thread holds at the fork stays held in the child, which hangs in its next allocation or in the
// leak check at exit (both seen under gdb, now and then, on a loaded machine). The plain build
// runs the fork tests.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsanForkHangs = true;
#else
constexpr bool kAsanForkHangs = false;
#endif

// Children forked, 40 times, while another thread runs `busy` over and over, each running
// `child` (true: it worked) under an alarm of `seconds`: how many did not end well (a hang ends
// in SIGALRM).
template <class Busy, class Child> int children_failing_beside(Busy busy, Child child, unsigned seconds) {
    std::atomic<bool> stop{false};
    std::thread other([&] {
        while (!stop.load()) busy();
    });
    int failed = 0;
    for (int i = 0; i < 40; ++i) {
        const pid_t pid = fork();
        if (pid == 0) {
            alarm(seconds);
            _exit(child() ? 0 : 1);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
    }
    stop = true;
    other.join();
    return failed;
}

TEST_CASE("child: fork after the pool started", "[.threads-fork-child]") {
    // The pool's threads stay in the parent: the forked child's loops must not wait for them,
    // and its exit must not either. A hang ends in SIGALRM instead of stalling the suite.
    const Tensor a = randn({256, 256});
    const double before = relu(a * 2.0).sum().item<double>();
    std::printf("threads=%zu\n", num_threads());
    std::fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        alarm(20);
        std::vector<int> seen(1000, 0);
        parallel_for(seen.size(), 1, [&](std::size_t i0, std::size_t i1) {
            for (std::size_t i = i0; i < i1; ++i) ++seen[i];
        });
        bool once = true;
        for (int s : seen) once = once && s == 1;
        const double after = relu(a * 2.0).sum().item<double>();
        std::printf("child: loop covered once %d, same sum %d\n", once ? 1 : 0, after == before ? 1 : 0);
        std::exit(0);  // static destructors included
    }
    int status = 0;
    waitpid(pid, &status, 0);
    std::printf("child ended: %s %d\n", WIFSIGNALED(status) ? "signal" : "exit",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

TEST_CASE("a process forked while another thread makes products can make products", "[threads]") {
    if (kAsanForkHangs) {
        WARN("skipped under AddressSanitizer, whose allocator is not fork-safe");
        return;
    }
    // A product of a new shape makes its oneDNN primitive under the primitive cache's lock; a
    // child forked meanwhile hung at its own first product (2 of 54 children, seen under gdb).
    // The busy thread's shapes are all new, so it is nearly always making one. The process's
    // first product is made before: its one-time set-up (the BLAS loaded, oneDNN's engine) is a
    // window of its own, which this does not cover.
    (void)matmul(ones({200, 128}), ones({128, 128}));
    std::size_t m = 256;
    const int failed = children_failing_beside([&] { (void)matmul(ones({m++, 128}), ones({128, 128})); },
                                               [] {
                                                   const Tensor c = matmul(ones({200, 129}), ones({129, 100}));
                                                   return test::vals(c)[0] == 129.0;  // sums of 129 ones
                                               },
                                               10);
    CHECK(failed == 0);
}

TEST_CASE("a process forked after the pool started runs its loops and exits", "[threads]") {
    if (kAsanForkHangs) {
        WARN("skipped under AddressSanitizer, whose allocator is not fork-safe");
        return;
    }
    const std::string out = test::run_this_binary("XGRAD_NUM_THREADS=3", "[.threads-fork-child]");
    INFO(out);
    CHECK_THAT(out, Catch::Contains("threads=3"));
    CHECK_THAT(out, Catch::Contains("child: loop covered once 1, same sum 1"));
    CHECK_THAT(out, Catch::Contains("child ended: exit 0"));
}

TEST_CASE("a process forked while another thread allocates can allocate", "[threads]") {
    if (kAsanForkHangs) {
        WARN("skipped under AddressSanitizer, whose allocator is not fork-safe");
        return;
    }
    // The allocator cache's lock, copied held by a thread the child does not have, hung most
    // such children at their first large allocation.
    auto alloc_and_free = [] {
        void* p = cached_alloc(std::size_t(96) << 10);
        cached_free(p, std::size_t(96) << 10);
        return true;
    };
    CHECK(children_failing_beside(alloc_and_free, alloc_and_free, 5) == 0);
}
