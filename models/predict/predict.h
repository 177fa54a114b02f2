// Inference with a trained model (gridnn-predict, docs/design.md §8): class probabilities
// for every scan of a manifest, a NIfTI file or a folder of them, with metrics when the
// scans are labelled, and optionally heatmaps: class activation maps (Grad-CAM, Grad-CAM++,
// HiResCAM) of one or more blocks, averaged over test-time transforms
// (models/explain/explanation.h).
//
// The scans are read as training reads its validation set (models/data/nifti_dataset.h:
// orientation, spacing, fit, z-score; no augmentation) and run in evaluation mode, batch by
// batch, on any PrxPc grid: rank (r, c) takes its batch shard's scans and their depth slab,
// as in training, so the logits equal the single process's up to reassociation.
//
// Outputs (the first rank writes the tables; with --explain each batch shard's first row
// rank writes its scans' images):
//   <out>                  CSV: path, prob_<class>..., predicted, label, error — one row per
//                          scan in input order; a scan that cannot be read has only its error
//   <out stem>_metrics.json  with labels: samples, loss, accuracy (and for two classes
//                          sensitivity, specificity, AUC), the confusion matrix (rows: label,
//                          columns: predicted)
//   <out stem>_roc.csv/.png  with labels and two classes: the ROC curve of class 1
//   <explain>/<name>_gradcam.nii.gz  the heatmap in [0, 1] (whatever the method), in the scan's own voxel grid and
//                          geometry (overlays in FSLeyes, MRIcron, ITK-SNAP)
//   <explain>/<name>_gradcam.png     axial, coronal and sagittal slices through the heatmap's
//                          peak, heat over the scan as the network saw it (orientation letters
//                          when it is in canonical RAS+ order), a colour bar, and with
//                          explain_mask the outline of the region (models/explain/region_mask.h;
//                          "{name}" in it is replaced by the scan's name)
//   <name> is the scan's explanation name (scans.h).
// The metrics JSON also counts the scans that failed ("failed"); the ROC needs both classes
// among the readable labelled scans (else a note says why it is missing); its first point
// is (threshold inf, 0, 0).
// Unreadable scans (missing, corrupt, 4-D, ...) are listed with their error and skipped; the
// others are still predicted, and the result counts the failures (the program then exits
// non-zero). To agree on them before any batch, the ranks first read every scan once between
// them (each its share) and all-reduce the failures; the batches read their scans again.
// So a scan is read twice, and the ranks must see the same files (a shared filesystem).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "models/explain/gradcam.h"
#include "models/predict/scans.h"
#include "models/run/metrics.h"
#include "models/run/run_options.h"
#include "parallel/process_grid.h"

namespace gridnn::predict {

struct PredictOptions {
  run::RunOptions run;                   // the network, --input, the data options, device, precision, grid, batch
  std::string weights;                   // a checkpoint file or PyTorch weights (safetensors)
  std::string data;                      // a CSV manifest, a NIfTI file or a folder of them
  SplitFilter split = SplitFilter::all;  // the manifest rows to predict
  std::string out = "predictions.csv";
  std::string explain_dir;    // empty: no heatmaps
  std::string explain_layer;  // blocks (explain::parse_layers); empty: the last attention block
  explain::CamMethod explain_method = explain::CamMethod::gradcam;
  int64_t explain_tta = 1;     // test-time transforms (models/explain/explanation.h)
  std::string explain_mask;    // a region mask outlined on each montage: a file, or a path with {name}
  int64_t explain_class = -1;  // -1: each scan's predicted class
  bool memory_report = false;  // each rank's predicted and measured peak at the end
};

struct PredictResult {
  int64_t scans = 0, failed = 0;
  bool labelled = false;  // metrics and confusion below are set
  run::Metrics metrics;
  std::vector<std::vector<int64_t>> confusion;  // [label][predicted]
  std::vector<std::string> files;               // what was written
  Tensor logits;                                // [readable scans, classes]: their logits in input order (every rank)
  int64_t predicted_peak_bytes = 0;             // this rank's (docs/design.md §6a)
  int64_t measured_peak_bytes = 0;              // this rank's allocator's, over the process so far
};

// Collective over the grid; `out` (the first rank's, may be null) gets progress and results.
PredictResult predict(const PredictOptions& options, parallel::ProcessGrid& grid, std::FILE* out);

}  // namespace gridnn::predict
