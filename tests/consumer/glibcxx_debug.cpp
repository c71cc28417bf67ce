// Built with _GLIBCXX_DEBUG against an xgrad built without it: std::vector and std::string differ
// in layout between the two, so this must not link (run.cmake expects the failure and the symbol
// that names it), where it would otherwise run on garbage shapes.
#include <xgrad/xgrad.hpp>

int main() { return xgrad::ones({2, 3}).shape()[1] == 3 ? 0 : 1; }
