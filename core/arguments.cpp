#include "core/arguments.hpp"

#include <cmath>

#include <fmt/format.h>

namespace xgrad {

void check_argument(bool ok, const char* op, const char* arg, double value, const char* expected) {
    if (!ok) throw Error(fmt::format("{}: invalid {} {} (expected {})", op, arg, value, expected));
}

void check_finite_argument(const char* op, const char* arg, double value) {
    check_argument(std::isfinite(value), op, arg, value, "a finite number");
}

}  // namespace xgrad
