// Per-layer compute timing for the cost model's calibration (plan/calibration.h): each
// layer of a plan::Network built as the single-process module for its LayerShape and timed
// forward+backward on random inputs at a list of local batches (gridnn-calibrate).
//
// Supported layer kinds and their modules (models/layers/, as models/nets/resattnet3d.cpp
// builds them): conv -> Conv3d (no bias; the first layer skips its input gradient), bn ->
// BatchNorm3d (training mode; one sample of one voxel: half the time of two), pool -> MaxPool3d, attention -> SelfAttention3d (gamma set to
// 0.5: at its initial 0 the backward would skip the attention path), global_pool ->
// GlobalAvgPool3d, fc -> Linear (bias). Shapes are as the network gives them, all three sides
// of the window equal (3D nets: plan::resattnet3d, plan::mlp); plan::alexnet's grouped and
// flat 2D windows are not supported.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/cost_model.h"

namespace gridnn::calibrate {

struct LayerTimingOptions {
  int warmup = 1;
  int reps = 3;
  uint64_t seed = 1;
};

// Seconds (the median over reps, after warm-up) of forward + backward of `layer` on `batch`
// samples on the CPU, on the calling thread (OpenMP as configured).
double time_layer(const plan::LayerShape& layer, int64_t batch, const LayerTimingOptions& o = {});

// Every layer of `net` at every batch in `batches` (each >= 1): tables for plan::Machine,
// forward_flops = the layer's (per sample) so the cost model can scale to other shapes.
plan::ComputeTables time_layers(const plan::Network& net, const std::vector<int64_t>& batches,
                                const LayerTimingOptions& o = {});

}  // namespace gridnn::calibrate
