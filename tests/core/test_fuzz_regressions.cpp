// Every input that once crashed, hung or over-allocated in tools/fuzz is kept in
// tests/data/fuzz-regressions/ and replayed here through the same code the fuzzer runs; the
// folder also holds hand-made hostile files (lengths that claim far more than is present).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "helpers.hpp"
#include "fuzz/npz_target.hpp"

namespace fs = std::filesystem;

TEST_CASE("fuzz regressions: every kept input is refused cleanly or read", "[npz][fuzz]") {
    const fs::path dir = fs::path(XGRAD_TEST_DATA_DIR) / "fuzz-regressions";
    std::vector<fs::path> inputs;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.is_regular_file()) inputs.push_back(e.path());
    std::sort(inputs.begin(), inputs.end());
    REQUIRE(!inputs.empty());
    for (const auto& path : inputs) {
        std::ifstream in(path, std::ios::binary);
        std::stringstream bytes;
        bytes << in.rdbuf();
        INFO(path.filename().string());
        CHECK_NOTHROW(xgrad::fuzz::npz_one_input(bytes.str()));
    }
}
