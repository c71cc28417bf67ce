#pragma once
/// Everything in xgrad::nn, for programs that want it all at once.
#include "nn/activation.hpp"
#include "nn/additive_attention.hpp"
#include "nn/dot_product_attention.hpp"
#include "nn/dropout.hpp"
#include "nn/embedding.hpp"
#include "nn/functional.hpp"
#include "nn/layer_norm.hpp"
#include "nn/linear.hpp"
#include "nn/module.hpp"
#include "nn/multi_head_attention.hpp"
#include "nn/positional_encoding.hpp"
#include "nn/transformer.hpp"
