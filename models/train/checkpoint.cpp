// Checkpoint files: save (atomic, pruned), read, find the newest, strict weight loading.
#include "models/train/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <regex>

#include "core/error.h"
#include "models/run/whole_state.h"

namespace gridnn::train {

namespace fs = std::filesystem;

namespace {

const std::string kFormat = std::string(run::kCheckpointFormatFamily) + "1";

// A gridnn checkpoint of another format version: refused, never skipped (resuming from an
// older file instead would silently lose the newer work).
class FormatVersionError : public Error {
 public:
  using Error::Error;
};

// Checkpoint files in `dir`, newest (highest step) first.
std::vector<std::pair<int64_t, fs::path>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  static const std::regex pattern(R"(step-(\d+)\.safetensors)");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && std::regex_match(name, m, pattern))
      found.emplace_back(std::stoll(m[1].str()), entry.path());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return found;
}

int64_t metadata_int(const std::map<std::string, std::string>& meta, const std::string& key, const std::string& path) {
  auto it = meta.find(key);
  GRIDNN_REQUIRE(it != meta.end(), path, ": not a gridnn checkpoint (no '", key, "' in its metadata)");
  try {
    size_t used = 0;
    const long long v = std::stoll(it->second, &used);
    GRIDNN_REQUIRE(used == it->second.size(), "trailing characters");
    return v;
  } catch (const std::exception&) {
    throw Error(path + ": metadata '" + key + "' is not an integer: '" + it->second + "'");
  }
}

}  // namespace

std::string checkpoint_path(const std::string& dir, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "step-%08lld.safetensors", static_cast<long long>(step));
  return (fs::path(dir) / name).string();
}

std::string save_checkpoint(const std::string& dir, nn::Module& model, const optim::Optimizer& optimizer,
                            const RunState& state, int keep) {
  return save_checkpoint(dir, run::model_tensors(model), optimizer.state(), optimizer.steps(), state, keep);
}

std::string save_checkpoint(const std::string& dir, const NamedTensors& model, const NamedTensors& optimizer_state,
                            int64_t optimizer_steps, const RunState& state, int keep) {
  GRIDNN_REQUIRE(keep >= 1, "save_checkpoint: keep must be >= 1");
  std::error_code ec;
  fs::create_directories(dir, ec);
  GRIDNN_REQUIRE(!ec, "cannot create the checkpoint folder '", dir, "': ", ec.message());

  NamedTensors tensors = model;
  for (auto& [name, t] : optimizer_state) tensors.emplace_back(std::string(run::kOptimizerPrefix) + name, t);
  const std::map<std::string, std::string> meta = {{"format", kFormat},
                                                   {"step", std::to_string(state.step)},
                                                   {"epoch", std::to_string(state.epoch)},
                                                   {"batch", std::to_string(state.batch)},
                                                   {"optimizer_steps", std::to_string(optimizer_steps)},
                                                   {"seed", std::to_string(state.seed)},
                                                   {"grid", state.grid},
                                                   {"config", state.config_json}};
  std::string path = checkpoint_path(dir, state.step);
  save_safetensors(path, tensors, meta);

  // Only now that the new file is durable: drop the oldest.
  auto all = list_checkpoints(dir);
  for (size_t i = size_t(keep); i < all.size(); ++i) fs::remove(all[i].second, ec);
  return path;
}

Checkpoint read_checkpoint(const std::string& path) {
  SafetensorsFile file = load_safetensors(path);
  const auto& meta = file.metadata;
  auto format = meta.find("format");
  if (format != meta.end() && format->second != kFormat && format->second.rfind(run::kCheckpointFormatFamily, 0) == 0)
    throw FormatVersionError(path + ": checkpoint format '" + format->second + "' is another version than the '" +
                             kFormat +
                             "' this gridnn reads; resume it with the gridnn that wrote it, or start "
                             "from its weights alone with --init-from (no optimizer state)");
  GRIDNN_REQUIRE(format != meta.end() && format->second == kFormat, path,
                 ": not a gridnn checkpoint (metadata 'format' is not '", kFormat,
                 "'); for weights alone use --init-from");
  Checkpoint c;
  c.path = path;
  c.state.step = metadata_int(meta, "step", path);
  c.state.epoch = metadata_int(meta, "epoch", path);
  c.state.batch = metadata_int(meta, "batch", path);
  c.state.seed = uint64_t(metadata_int(meta, "seed", path));
  c.optimizer_steps = metadata_int(meta, "optimizer_steps", path);
  if (auto it = meta.find("grid"); it != meta.end()) c.state.grid = it->second;
  if (auto it = meta.find("config"); it != meta.end()) c.state.config_json = it->second;
  for (auto& [name, t] : file.tensors) {
    if (name.rfind(std::string(run::kOptimizerPrefix), 0) == 0)
      c.optimizer.emplace(name.substr(std::string(run::kOptimizerPrefix).size()), t);
    else
      c.model.emplace(name, t);
  }
  return c;
}

std::string newest_checkpoint_path(const std::string& dir) {
  const auto all = list_checkpoints(dir);
  return all.empty() ? std::string() : all.front().second.string();
}

std::optional<Checkpoint> latest_checkpoint(const std::string& dir) {
  for (const auto& [step, path] : list_checkpoints(dir)) {
    try {
      return read_checkpoint(path.string());
    } catch (const FormatVersionError&) {
      throw;
    } catch (const Error& e) {
      std::fprintf(stderr, "gridnn: skipping unreadable checkpoint: %s\n", e.what());
    }
  }
  return std::nullopt;
}

}  // namespace gridnn::train
