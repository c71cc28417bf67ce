// Compares two seq_train checkpoints written by the same configuration, one single-process and
// one data-parallel: the per-step training losses (history.loss) and the final parameters
// (model.*) must agree within a relative tolerance. Prints the largest differences; exit 0 if
// they agree, 1 if not, 2 for bad arguments or unreadable files.
//
//   compare_checkpoints single.npz distributed.npz [rtol]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include <xgrad/xgrad.hpp>

#include "core/io/npz.hpp"

using namespace xgrad;

namespace {

const Tensor* find(const NamedTensors& all, const std::string& name) {
    for (const auto& [n, t] : all)
        if (n == name) return &t;
    return nullptr;
}

// max |a − b| / (|b| + atol): a relative difference that does not blow up near zero.
double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b, double atol) {
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / (std::abs(b[i]) + atol));
    return worst;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 3 || argc > 4) {
        std::fprintf(stderr, "usage: compare_checkpoints single.npz distributed.npz [rtol]\n");
        return 2;
    }
    const double rtol = argc == 4 ? std::stod(argv[3]) : 1e-4;
    try {
        const NamedTensors a = load_npz(argv[1]), b = load_npz(argv[2]);
        bool ok = true;
        const Tensor* la = find(a, "history.loss");
        const Tensor* lb = find(b, "history.loss");
        if (!la || !lb) throw Error("a checkpoint has no history.loss");
        const auto va = la->to_vector<double>(), vb = lb->to_vector<double>();
        if (va.size() != vb.size() || va.empty()) {
            std::printf("FAIL: %zu steps against %zu\n", va.size(), vb.size());
            return 1;
        }
        std::size_t first_diff = va.size();
        for (std::size_t i = 0; i < va.size(); ++i)
            if (va[i] != vb[i]) { first_diff = i; break; }
        const double loss_diff = max_rel_diff(vb, va, 0.0);
        std::printf("losses over %zu steps: largest relative difference %.3g (first differing step %zu), "
                    "final %.9g vs %.9g\n", va.size(), loss_diff, first_diff + 1, va.back(), vb.back());
        ok = ok && loss_diff <= rtol;

        double param_diff = 0;
        std::size_t params = 0;
        for (const auto& [name, t] : a) {
            if (name.rfind("model.", 0) != 0) continue;
            const Tensor* u = find(b, name);
            if (!u || u->shape() != t.shape()) {
                std::printf("FAIL: parameter %s missing or of another shape\n", name.c_str());
                return 1;
            }
            // Relative to the parameter's largest value: single entries near zero drift freely.
            const auto x = t.to_vector<double>(), y = u->to_vector<double>();
            double scale = 0;
            for (double v : x) scale = std::max(scale, std::abs(v));
            double worst = 0;
            for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
            param_diff = std::max(param_diff, worst / std::max(scale, 1e-12));
            ++params;
        }
        std::printf("%zu parameters: largest difference %.3g of the parameter's largest value\n", params, param_diff);
        ok = ok && params > 0 && param_diff <= rtol * 10;
        std::printf("%s (tolerance %g on losses, %g on parameters)\n", ok ? "OK" : "FAIL", rtol, rtol * 10);
        return ok ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "compare_checkpoints: %s\n", e.what());
        return 2;
    }
}
