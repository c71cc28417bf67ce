#include <xgrad/xgrad.hpp>

int main() { return xgrad::sum(xgrad::ones({3})).item<float>() == 3.0f ? 0 : 1; }
