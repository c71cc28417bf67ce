#pragma once
// Shared test helpers: gradient checks that report why they failed, and value comparisons.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/creation.hpp"
#include "core/gradcheck.hpp"
#include "core/io/npz.hpp"
#include "core/ops.hpp"

namespace xgrad::test {

/// NaN and infinity as doubles, for the tests of numeric edges.
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

/// Runs this test binary again in a fresh process, only the tests tagged `tag` (a hidden tag such
/// as "[.child]"), with `env` ("NAME=value", shell-quoted by the caller) set: for what is read
/// once per process, as the pool's thread count. Returns what it wrote, stdout and stderr.
inline std::string run_this_binary(const std::string& env, const std::string& tag) {
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    REQUIRE(n > 0);
    self[n] = '\0';
    const std::string cmd = env + " '" + self + "' '" + tag + "' 2>&1";
    FILE* pipe = popen(cmd.c_str(), "r");
    REQUIRE(pipe);
    std::string out;
    char buf[512];
    while (std::fgets(buf, sizeof buf, pipe)) out += buf;
    pclose(pipe);
    return out;
}

/// Runs the tests tagged `tag` in a child on each of `threads` (XGRAD_NUM_THREADS), for tests
/// whose checks run in the child: each run must pass them all.
inline void check_child_passes_on(const std::string& tag, std::initializer_list<int> threads) {
    for (int n : threads) {
        const std::string out = run_this_binary("XGRAD_NUM_THREADS=" + std::to_string(n), tag);
        INFO("threads " << n << "\n" << out);
        CHECK_THAT(out, Catch::Contains("All tests passed"));
    }
}

/// The process's address space now (VmSize from /proc/self/status), in bytes: what an
/// RLIMIT_AS for a child's out-of-memory test is set above.
inline std::size_t address_space_bytes() {
    std::FILE* f = std::fopen("/proc/self/status", "r");
    REQUIRE(f);
    char line[256];
    std::size_t kib = 0;
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "VmSize: %zu kB", &kib) == 1) break;
    std::fclose(f);
    REQUIRE(kib > 0);
    return kib * 1024;
}

/// What the tests tagged `tag` write when run on 1 thread and on 3 (XGRAD_NUM_THREADS): a child
/// that prints a result in hexadecimal, for a check that it does not depend on the pool's size.
struct OnThreads {
    std::string one, three;
};
inline OnThreads run_on_1_and_3_threads(const std::string& tag) {
    return {run_this_binary("XGRAD_NUM_THREADS=1", tag), run_this_binary("XGRAD_NUM_THREADS=3", tag)};
}

/// Runs gradcheck with the project's tolerances under a name for the report.
inline GradcheckResult run_gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                                     const std::string& name) {
    GradcheckOptions options;
    options.name = name;
    return gradcheck(f, inputs, options);
}

/// REQUIRE_GRADCHECK(f, {inputs...}, "name"): requires that f passes gradcheck, printing
/// gradcheck's report otherwise. Variadic because braces and lambdas carry commas.
#define REQUIRE_GRADCHECK(...)                                         \
    do {                                                               \
        auto result_ = ::xgrad::test::run_gradcheck(__VA_ARGS__);      \
        INFO(result_.report);                                          \
        REQUIRE(result_.passed);                                       \
    } while (0)

/// Runs gradgradcheck (second derivatives) with the project's tolerances under a name.
inline GradcheckResult run_gradgradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                                         const std::string& name) {
    GradcheckOptions options;
    options.name = name;
    return gradgradcheck(f, inputs, options);
}

/// REQUIRE_GRADGRADCHECK(f, {inputs...}, "name"): requires that f's second derivatives pass
/// gradgradcheck, printing its report otherwise.
#define REQUIRE_GRADGRADCHECK(...)                                     \
    do {                                                               \
        auto result_ = ::xgrad::test::run_gradgradcheck(__VA_ARGS__);  \
        INFO(result_.report);                                          \
        REQUIRE(result_.passed);                                       \
    } while (0)

/// A float64 leaf with uniform values in [lo, hi) that requires grad.
inline Tensor param(const Shape& shape, double lo = -1.0, double hi = 1.0, std::uint64_t seed = 1) {
    Generator gen(seed);
    return uniform(shape, lo, hi, TensorOptions(kFloat64).requires_grad(true), gen);
}

/// Values of t as doubles, for Catch's Approx matcher.
inline std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

/// The largest |a − b| over the elements of two tensors of one size.
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
    const auto x = a.to_vector<double>(), y = b.to_vector<double>();
    REQUIRE(x.size() == y.size());
    double m = 0;
    for (std::size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
    return m;
}

/// How near a value must be to its expected one: within relative·|want| or within absolute,
/// either enough, as Catch's Approx (whose own relative tolerance is the default here).
struct Tolerance {
    double relative = std::numeric_limits<float>::epsilon() * 100;
    double absolute = 0;
};

/// got equals want element by element within tol, NaN where want is NaN (an infinity must be
/// the same infinity).
inline void check_close_or_both_nan(const std::vector<double>& got, const std::vector<double>& want, Tolerance tol) {
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
        if (std::isnan(want[i])) CHECK(std::isnan(got[i]));
        else CHECK(got[i] == Approx(want[i]).epsilon(tol.relative).margin(tol.absolute));
    }
}

/// A bool tensor of `shape` whose element k (row-major) is at(k).
inline Tensor bool_tensor(const Shape& shape, const std::function<bool(std::size_t)>& at) {
    std::size_t n = 1;
    for (auto s : shape) n *= s;
    std::vector<double> v(n);
    for (std::size_t k = 0; k < n; ++k) v[k] = at(k) ? 1.0 : 0.0;
    return gt(from_vector(v, shape, kFloat64), 0.5);
}

/// Every entry's name and values, to compare two states exactly (before and after a refused load).
inline std::vector<std::pair<std::string, std::vector<double>>> state_values(const NamedTensors& all) {
    std::vector<std::pair<std::string, std::vector<double>>> out;
    for (const auto& [name, t] : all) out.emplace_back(name, t.to_vector<double>());
    return out;
}

/// Matches a tensor's values against expected ones within 1e-6 relative / 1e-9 absolute.
inline auto approx(std::vector<double> expected, double margin = 1e-6) {
    return Catch::Matchers::Approx(std::move(expected)).margin(margin).epsilon(1e-6);
}

}  // namespace xgrad::test
