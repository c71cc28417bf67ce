#pragma once
// Helpers for module tests: gradient checks with respect to a module's inputs and parameters.
#include <functional>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "nn/module.hpp"

namespace xgrad::test {

/// Gradcheck of `forward` (a function of the inputs that calls the module) with respect to
/// the inputs AND every parameter of `module` (which must be float64 already: module.to()).
/// The parameters are passed to gradcheck as extra inputs; on each evaluation the lambda swaps
/// gradcheck's (perturbed) copies into the module with set_parameter, as a functional call
/// does, and the original handles are put back afterwards.
inline GradcheckResult module_check(decltype(&gradcheck) check, nn::Module& module, std::vector<Tensor> inputs,
                                    const std::function<Tensor(const std::vector<Tensor>&)>& forward,
                                    const std::string& name) {
    const auto original = module.named_parameters();
    const std::size_t n_inputs = inputs.size();
    for (const auto& [pname, p] : original) inputs.push_back(p.detach().requires_grad_(true));
    auto f = [&](const std::vector<Tensor>& x) {
        for (std::size_t k = 0; k < original.size(); ++k)
            module.set_parameter(original[k].first, x[n_inputs + k]);
        return forward(std::vector<Tensor>(x.begin(), x.begin() + static_cast<long>(n_inputs)));
    };
    GradcheckOptions opts;
    opts.name = name;
    GradcheckResult result = check(f, inputs, opts);
    for (const auto& [pname, p] : original) module.set_parameter(pname, p);
    return result;
}

inline GradcheckResult module_gradcheck(nn::Module& module, std::vector<Tensor> inputs,
                                        const std::function<Tensor(const std::vector<Tensor>&)>& forward,
                                        const std::string& name) {
    return module_check(&gradcheck, module, std::move(inputs), forward, name);
}

/// The same for second derivatives: gradgradcheck of `forward` with respect to the inputs and
/// every parameter of `module` (float64).
inline GradcheckResult module_gradgradcheck(nn::Module& module, std::vector<Tensor> inputs,
                                            const std::function<Tensor(const std::vector<Tensor>&)>& forward,
                                            const std::string& name) {
    return module_check(&gradgradcheck, module, std::move(inputs), forward, name);
}

#define REQUIRE_MODULE_GRADGRADCHECK(...)                                \
    do {                                                                 \
        auto result_ = ::xgrad::test::module_gradgradcheck(__VA_ARGS__); \
        INFO(result_.report);                                            \
        REQUIRE(result_.passed);                                         \
    } while (0)

/// REQUIRE_MODULE_GRADCHECK(module, {inputs...}, forward, "name"): requires module_gradcheck
/// to pass, printing its report otherwise. Variadic because braces and lambdas carry commas.
#define REQUIRE_MODULE_GRADCHECK(...)                                \
    do {                                                             \
        auto result_ = ::xgrad::test::module_gradcheck(__VA_ARGS__); \
        INFO(result_.report);                                        \
        REQUIRE(result_.passed);                                     \
    } while (0)

/// int64 lengths: lens({2, 3}) has shape (2,); lens2({1, 3, 2, 4}, 2) has shape (2, 2).
inline Tensor lens(std::vector<std::int64_t> v) {
    const std::size_t n = v.size();
    return from_vector(std::move(v), {n});
}
inline Tensor lens2(std::vector<std::int64_t> v, std::size_t rows) {
    const std::size_t n = v.size();
    return from_vector(std::move(v), {rows, n / rows});
}

}  // namespace xgrad::test
