#pragma once
/// Everything in xgrad::optim: the optimizers, gradient clipping and learning-rate schedules.
#include "optim/adam.hpp"
#include "optim/clip_grad.hpp"
#include "optim/lr_scheduler.hpp"
#include "optim/optimizer.hpp"
#include "optim/sgd.hpp"
