// Writes the fuzzer's seed corpus: valid .npy and .npz files (stored and deflated) of every dtype
// and a few shapes, and checkpoints of the module the fuzz target loads into.
// Usage: make_seeds <folder>
#include <cstdio>
#include <fstream>
#include <string>

#include "core/creation.hpp"
#include "core/io/npz.hpp"
#include "core/ops.hpp"
#include "nn/linear.hpp"

using namespace xgrad;

namespace {

void write(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: make_seeds <folder>\n");
        return 2;
    }
    const std::string dir = argv[1];
    Generator gen(1);
    const NamedTensors arrays = {
        {"f32", randn({2, 3}, kFloat32, gen)},
        {"f64", randn({4}, kFloat64, gen)},
        {"i64", randint(-5, 5, {3, 1, 2}, gen)},
        {"b1", gt(randn({5}, kFloat32, gen), 0.0)},
        {"scalar", tensor(1.5, kFloat64)},
        {"empty", zeros({0, 3})},
    };
    for (const auto& [name, t] : arrays) write(dir + "/" + name + ".npy", npy_bytes(t));
    write(dir + "/all.npz", npz_bytes(arrays));
    write(dir + "/all-compressed.npz", npz_compressed_bytes(arrays));
    write(dir + "/one.npz", npz_bytes({{"a.b.c", arange(6, kFloat32).reshape({2, 3})}}));
    nn::Linear layer(3, 2);
    write(dir + "/linear.npz", npz_bytes(layer.state_dict()));
    write(dir + "/linear-compressed.npz", npz_compressed_bytes(layer.state_dict()));
    write(dir + "/linear-f64.npz", npz_bytes({{"weight", zeros({2, 3}, kFloat64)}, {"bias", zeros({2})}}));
    std::printf("make_seeds: wrote %zu files to %s\n", arrays.size() + 6, dir.c_str());
    return 0;
}
