// A module given an input of another dtype than its parameters says which module, which input,
// both dtypes and the two ways to convert, instead of an op's "dtypes differ" from deep inside.
#include "nn/nn.hpp"
#include "nn_helpers.hpp"

using namespace xgrad;
using namespace xgrad::nn;

#define DTYPE_ERROR(who, arg, got, want)                                                                   \
    Catch::StartsWith(who ": " arg " is " got " but the module's parameters are " want) &&                \
        Catch::Contains("convert the " arg " with .to(k")

TEST_CASE("modules name themselves when an input's dtype differs from their parameters", "[nn][dtype]") {
    Linear lin(3, 2);
    CHECK_THROWS_WITH(lin.forward(ones({4, 3}, kFloat64)), DTYPE_ERROR("Linear", "input", "float64", "float32") &&
                                                               Catch::Contains("or the module with .to(kFloat64)"));
    CHECK_THROWS_WITH(lin.forward(ones({4, 3}, kInt64)),
                      Catch::Contains("Linear: input is int64, expected a floating tensor") &&
                          Catch::Contains(".to(kFloat32)"));
    lin.to(kFloat64);
    CHECK_THROWS_WITH(lin.forward(ones({3})), DTYPE_ERROR("Linear", "input", "float32", "float64"));
    CHECK(lin.forward(ones({4, 3}, kFloat64)).dtype() == kFloat64);

    LayerNorm norm({3});
    CHECK_THROWS_WITH(norm.forward(ones({2, 3}, kFloat64)), DTYPE_ERROR("LayerNorm", "input", "float64", "float32"));

    MultiHeadAttention mha(4, 4, 4, 4, 2, 0.0);
    const Tensor x = ones({2, 3, 4});
    CHECK_THROWS_WITH(mha.forward(x, ones({2, 3, 4}, kFloat64), x, Tensor()),
                      DTYPE_ERROR("MultiHeadAttention", "keys", "float64", "float32"));
    CHECK_THROWS_WITH(mha.forward(x, x, ones({2, 3, 4}, kFloat64), Tensor()),
                      DTYPE_ERROR("MultiHeadAttention", "values", "float64", "float32"));

    AdditiveAttention add(4, 4, 5, 0.0);
    CHECK_THROWS_WITH(add.forward(ones({2, 3, 4}, kFloat64), x, x, Tensor()),
                      DTYPE_ERROR("AdditiveAttention", "queries", "float64", "float32"));
}
