#pragma once
// Shared test helpers: gradient checks that report why they failed, and value comparisons.
#include <catch2/catch.hpp>

#include "core/creation.hpp"
#include "core/gradcheck.hpp"
#include "core/ops.hpp"

namespace xgrad::test {

/// REQUIREs that `f` passes gradcheck at `inputs`, printing gradcheck's report otherwise.
#define REQUIRE_GRADCHECK(f, inputs, name)                                                  \
    do {                                                                                    \
        ::xgrad::GradcheckOptions opts_;                                                    \
        opts_.name = name;                                                                  \
        auto result_ = ::xgrad::gradcheck(f, inputs, opts_);                                \
        INFO(result_.report);                                                               \
        REQUIRE(result_.passed);                                                            \
    } while (0)

/// A float64 leaf with uniform values in [lo, hi) that requires grad.
inline Tensor param(const Shape& shape, double lo = -1.0, double hi = 1.0, std::uint64_t seed = 1) {
    Generator gen(seed);
    return uniform(shape, lo, hi, TensorOptions(kFloat64).requires_grad(true), gen);
}

/// Values of t as doubles, for Catch's Approx matcher.
inline std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

/// Matches a tensor's values against expected ones within 1e-6 relative / 1e-9 absolute.
inline Catch::Matchers::Vector::ApproxMatcher<double> approx(std::vector<double> expected,
                                                             double margin = 1e-6) {
    return Catch::Matchers::Approx(std::move(expected)).margin(margin).epsilon(1e-6);
}

}  // namespace xgrad::test
