#pragma once
/// The umbrella header: everything a training program needs. Installed as <xgrad/xgrad.hpp>.
/// (Its includes are spelled from the include root, so they resolve both in the source tree
/// and in an installed include/xgrad/.)
#include "core/alloc.hpp"
#include "core/blas.hpp"
#include "core/creation.hpp"
#include "core/gradcheck.hpp"
#include "core/npz.hpp"
#include "core/ops.hpp"
#include "core/random.hpp"
#include "core/svg.hpp"
#include "core/tensor.hpp"
#include "nn/nn.hpp"
#include "optim/optim.hpp"
