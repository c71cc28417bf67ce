// libFuzzer entry point for the .npy / .npz / checkpoint readers (tools/fuzz builds and runs it).
#include <cstddef>
#include <cstdint>

#include "npz_target.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    xgrad::fuzz::npz_one_input(std::string_view(reinterpret_cast<const char*>(data), size));
    return 0;
}
