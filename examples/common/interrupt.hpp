#pragma once
/// Ctrl-C for the examples that train in one loop: the first SIGINT asks the loop to stop after
/// its current step, so the program still writes what it has (pictures, numbers); a second one
/// ends the program at once (every file is written atomically, none is left half-written).
namespace xgrad::examples {

/// Installs the handler; call before the training loop.
void stop_on_sigint();
/// Whether a SIGINT arrived since stop_on_sigint().
bool interrupted();

}  // namespace xgrad::examples
