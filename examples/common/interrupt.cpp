#include "interrupt.hpp"

#include <csignal>

namespace xgrad::examples {

namespace {
volatile std::sig_atomic_t g_sigint = 0;
extern "C" void on_sigint(int) {
    g_sigint = 1;
    std::signal(SIGINT, SIG_DFL);
}
}  // namespace

void stop_on_sigint() {
    g_sigint = 0;
    std::signal(SIGINT, on_sigint);
}

bool interrupted() { return g_sigint != 0; }

}  // namespace xgrad::examples
