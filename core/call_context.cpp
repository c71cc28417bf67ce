#include "core/call_context.hpp"

#include <cstring>
#include <string>

#include <fmt/format.h>

namespace xgrad::detail {

namespace {
thread_local int t_depth = 0;
}

int enter_call() noexcept { return t_depth++; }
void leave_call() noexcept { --t_depth; }

const char* enter_constructor(const char* who) noexcept {
    enter_call();
    return who;
}

void leave_constructor(const char* who) {
    leave_call();
    const bool outer = t_depth == 0;
    try {
        throw;
    } catch (const Error& e) {
        if (outer) rethrow_as(who, e);
        throw;
    }
}

void rethrow_as(const char* who, const Error& e) {
    const std::size_t n = std::strlen(who);
    const char* what = e.what();
    if (std::strncmp(what, who, n) == 0 && what[n] == ':') throw;
    throw Error(fmt::format("{}: {}", who, what));
}

}  // namespace xgrad::detail
