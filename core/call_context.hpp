#pragma once
/// Errors named for the call the user made. A composite op (one made of other ops: stack of
/// unsqueeze and concat) and a module's forward run their bodies through as_call(who, body).
/// An xgrad::Error raised inside comes out starting with `who` when that call is the
/// outermost as_call on the thread: "stack: unsqueeze: axis 3 is out of range ...", not the
/// bare "unsqueeze: ..." of an op the user never called. A message that already starts with
/// "who: " passes unchanged, and calls nested inside another (a Transformer's attention
/// layers, a stack inside a module) leave the naming to the outermost, so a message carries
/// one prefix, the user's call, before the inner op's own words. The argument checks at
/// entry still name the call themselves; this catches what the checks could not foresee
/// (running out of memory, a value met deep inside). Costs two thread-local updates a call.
#include <utility>

#include "core/error.hpp"

namespace xgrad {

namespace detail {
/// Enters one as_call level on this thread; returns the depth before it (0: outermost).
int enter_call() noexcept;
void leave_call() noexcept;
/// Inside a catch of `e`: rethrows it prefixed with "who: ", or unchanged when it already
/// starts so.
[[noreturn]] void rethrow_as(const char* who, const Error& e);

/// A module constructor as the user's call `who`: its member initialisers (the submodules it
/// makes) run before any body could call as_call, so the level is entered by the base's
/// argument and left at the end of the body or in a function-try-block's handler:
///
///   X::X(...) try : Module(detail::enter_constructor("X")), m_w(...) { ...; detail::leave_call(); }
///   catch (...) { detail::leave_constructor("X"); }
///
/// Returns `who` (the Module's name).
const char* enter_constructor(const char* who) noexcept;
/// In the handler: leaves the level and rethrows the exception in flight, an Error prefixed
/// with "who: " (see as_call) when this constructor was the outermost call.
[[noreturn]] void leave_constructor(const char* who);
}  // namespace detail

/// Runs body() as the user's call `who` (see above) and returns what it returns.
template <class F> decltype(auto) as_call(const char* who, F&& body) {
    struct Level {
        const bool outer = detail::enter_call() == 0;
        ~Level() { detail::leave_call(); }
    } level;
    if (!level.outer) return std::forward<F>(body)();
    try {
        return std::forward<F>(body)();
    } catch (const Error& e) {
        detail::rethrow_as(who, e);
    }
}

}  // namespace xgrad
