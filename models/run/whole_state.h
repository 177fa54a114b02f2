// The model's tensors as one process holds them, on a grid whose layers may hold parts of
// some (ParameterLayout: a 1.5D layer's row blocks). Checkpoints, --dump-step and state
// dicts hold whole tensors, so a run saved on one grid resumes on any other; loading cuts
// the whole tensors back into this rank's parts. Without split parameters every function
// returns the tensors as they are.
#pragma once

#include <map>
#include <string>

#include "core/safetensors.h"
#include "models/layers/module.h"

namespace gridnn::run {

// A tensor laid out like parameter `p` (its value, its gradient, or optimizer state shaped
// like it): the whole from this rank's part (collective over the ranks p is split over),
// this rank's part of the whole (a copy; no communication), and the whole's shape.
Tensor whole_of(const nn::Parameter& p, const Tensor& part);
Tensor part_of(const nn::Parameter& p, const Tensor& whole);
Shape whole_shape(const nn::Parameter& p, const Tensor& part);

// The model's parameters and buffers by name (state_dict order), as this rank holds them.
NamedTensors model_tensors(nn::Module& model);
// The same, whole (collective), and every parameter's gradient, whole (collective).
NamedTensors whole_model_tensors(nn::Module& model);
NamedTensors whole_gradients(nn::Module& model);

// Copies `tensors` (whole, as the single-process model holds them) into the model's
// parameters and buffers (any device; converted to the parameter's device), this rank's
// part where the model splits a tensor. Strict: every name of the model must be present
// with its whole shape and dtype, and no other names may appear; otherwise a gridnn::Error
// lists every missing, unexpected and mis-shaped tensor and names `source`.
void load_model_tensors(nn::Module& model, const std::map<std::string, Tensor>& tensors, const std::string& source);

// How a gridnn checkpoint (models/train/checkpoint.h) marks itself and its optimizer state:
// its "format" metadata starts with the family, its optimizer tensors' names with the prefix.
inline constexpr char kCheckpointFormatFamily[] = "gridnn-checkpoint-";
inline constexpr char kOptimizerPrefix[] = "optimizer.";
// The weights in `path` (--init-from, gridnn-predict): every tensor of a plain weights file
// (exported from PyTorch), or the model tensors of a gridnn checkpoint (its optimizer state
// left out).
std::map<std::string, Tensor> read_weights(const std::string& path);

}  // namespace gridnn::run
