// --memory-limit's pre-flight check (memory_limit.h).
#include "models/run/memory_limit.h"

#include <algorithm>

#include "core/allocator.h"
#include "core/bytes.h"
#include "core/error.h"
#include "core/test_switches.h"
#include "models/nets/blocks.h"
#include "models/run/step_plan.h"

namespace gridnn::run {

std::vector<std::string> grids_that_fit(const RunOptions& o, const parallel::GridShape& g, int64_t limit,
                                        MemoryJob job) {
  std::vector<std::string> fits;
  const int procs = g.rows * g.cols;
  for (int rows = 1; rows <= procs; ++rows) {
    if (procs % rows != 0 || (rows == g.rows && procs / rows == g.cols) || !usable_grid(o, rows, procs / rows))
      continue;
    const int64_t peak = largest_peak(predict_grid_memory(o, {1, rows, procs / rows}, job));
    if (peak <= limit)
      fits.push_back("--grid " + std::to_string(rows) + "x" + std::to_string(procs / rows) + " (" + format_bytes(peak) +
                     " per rank)");
  }
  return fits;
}

std::string what_fits_text(const std::vector<std::string>& fits) {
  if (fits.empty())
    return "nothing smaller of this job fits: more ranks along the depth (Pr), a smaller input, or a "
           "larger --memory-limit";
  std::string text;
  for (const std::string& f : fits) text += (text.empty() ? "" : ", ") + f;
  return "what fits: " + text;
}

namespace {

// What would fit under `limit` instead: the other grids of the job's size (one stage), the
// largest smaller batch and the fewest micro-batches that fit on this grid (this rank's
// blocks; one stage: every rank's).
std::string what_would_fit(const RunOptions& o, PipelinedModel& model, parallel::ProcessGrid& grid, int64_t limit) {
  const parallel::GridShape g = grid.shape();
  const bool one_stage = g.stages == 1;
  auto peak_of = [&](const RunOptions& t) {
    return one_stage ? largest_peak(predict_grid_memory(t, g)) : plan::simulate_memory(model.memory_step(t)).peak_bytes;
  };
  std::vector<std::string> fits;
  if (one_stage) fits = grids_that_fit(o, g, limit, MemoryJob::training);
  for (int64_t b = o.batch - g.cols; b >= g.cols * o.micro_batches; b -= g.cols) {
    RunOptions t = o;
    t.batch = b;
    if (!batch_split_fits(t, g)) continue;
    if (const int64_t peak = peak_of(t); peak <= limit) {
      fits.push_back("--batch " + std::to_string(b) + " (" + format_bytes(peak) + ")");
      break;
    }
  }
  const int64_t shard = o.batch / g.cols;
  if (o.recompute == Recompute::none && dynamic_cast<nn::BlockNetwork*>(&model.model())->has_recomputable_blocks()) {
    RunOptions t = o;
    t.recompute = Recompute::blocks;
    if (const int64_t peak = peak_of(t); peak <= limit)
      fits.push_back("--recompute blocks (" + format_bytes(peak) + ")");
  }
  for (int m = o.micro_batches + 1; m <= shard; ++m) {
    RunOptions t = o;
    t.micro_batches = m;
    if (!batch_split_fits(t, g)) continue;
    if (const int64_t peak = plan::simulate_memory(model.memory_step(t)).peak_bytes; peak <= limit) {
      fits.push_back("--micro-batches " + std::to_string(m) + " (" + format_bytes(peak) + " on this rank)");
      break;
    }
  }
  return what_fits_text(fits);
}

}  // namespace

void enforce_memory_limit(const RunOptions& o, PipelinedModel& model, parallel::ProcessGrid& grid,
                          const plan::MemoryPeak& own) {
  enforce_memory_limit(o.memory_limit, o.device, grid, own,
                       [&] { return what_would_fit(o, model, grid, o.memory_limit); });
}

void enforce_memory_limit(int64_t limit, const Device& device, parallel::ProcessGrid& grid, const plan::MemoryPeak& own,
                          const std::function<std::string()>& what_fits) {
  if (limit <= 0) return;
  // GRIDNN_MEMORY_PREFLIGHT=off keeps only the allocators' cap (how the tests make a job
  // cross it mid-run, as a wrong prediction would).
  if (!test_switches().memory_preflight) {
    allocator_for(device).set_limit(size_t(limit));
    return;
  }
  const std::vector<int64_t> peaks = per_rank(grid, own.peak_bytes);
  const auto worst = std::max_element(peaks.begin(), peaks.end());
  const int rank = int(worst - peaks.begin());
  if (*worst <= limit) {
    allocator_for(device).set_limit(size_t(limit));
    return;
  }
  std::string holders;
  if (rank == grid.world_rank())
    for (size_t i = 0; i < std::min<size_t>(5, own.shares.size()); ++i)
      holders += (holders.empty() ? "" : ", ") + own.shares[i].what + " " + format_bytes(own.shares[i].bytes);
  throw Error("--memory-limit " + format_bytes(limit) + ": rank " + std::to_string(rank) + " would need " +
              format_bytes(*worst) + " at its peak (predicted, " +
              (rank == grid.world_rank() ? "at the " + own.at + "; largest: " + holders : "see that rank's message") +
              "). Nothing was run or written; " + what_fits());
}

}  // namespace gridnn::run
