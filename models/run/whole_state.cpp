// Whole tensors from this rank's parts and back (whole_state.h).
#include "models/run/whole_state.h"

#include <sstream>
#include <vector>

#include "parallel/mappings.h"

namespace gridnn::run {
namespace {
parallel::BlockSplit split_of(const nn::Parameter& p) {
  return {p.layout.split_over, p.layout.split_dim, p.layout.whole, 1};
}
}  // namespace

Tensor whole_of(const nn::Parameter& p, const Tensor& part) {
  return p.layout.split_over ? parallel::gather_blocks(part, split_of(p)) : part;
}

Tensor part_of(const nn::Parameter& p, const Tensor& whole) {
  return p.layout.split_over ? parallel::own_block(whole, split_of(p)) : whole;
}

Shape whole_shape(const nn::Parameter& p, const Tensor& part) {
  return p.layout.split_over ? part.shape().with(p.layout.split_dim, p.layout.whole) : part.shape();
}

NamedTensors model_tensors(nn::Module& model) {
  NamedTensors out;
  for (auto& [name, p] : model.named_parameters()) out.emplace_back(name, p->value);
  for (auto& [name, b] : model.named_buffers()) out.emplace_back(name, *b);
  return out;
}

NamedTensors whole_model_tensors(nn::Module& model) {
  NamedTensors out;
  for (auto& [name, p] : model.named_parameters()) out.emplace_back(name, whole_of(*p, p->value));
  for (auto& [name, b] : model.named_buffers()) out.emplace_back(name, *b);
  return out;
}

NamedTensors whole_gradients(nn::Module& model) {
  NamedTensors out;
  for (auto& [name, p] : model.named_parameters()) out.emplace_back(name, whole_of(*p, p->grad));
  return out;
}

void load_model_tensors(nn::Module& model, const std::map<std::string, Tensor>& tensors, const std::string& source) {
  std::vector<std::string> missing, misshaped, unexpected;
  std::map<std::string, bool> known;
  auto check = [&](const std::string& name, const Shape& shape, DType dtype) {
    known[name] = true;
    auto it = tensors.find(name);
    if (it == tensors.end())
      missing.push_back(name + " " + shape.str());
    else if (it->second.shape() != shape || it->second.dtype() != dtype)
      misshaped.push_back(name + ": file has " + it->second.str() + ", model needs " + shape.str() + " " +
                          dtype_name(dtype));
  };
  const auto parameters = model.named_parameters();
  const auto buffers = model.named_buffers();
  for (auto& [name, p] : parameters) check(name, whole_shape(*p, p->value), p->value.dtype());
  for (auto& [name, b] : buffers) check(name, b->shape(), b->dtype());
  for (const auto& [name, t] : tensors)
    if (!known.count(name)) unexpected.push_back(name + " " + t.shape().str());
  if (!missing.empty() || !misshaped.empty() || !unexpected.empty()) {
    std::ostringstream msg;
    msg << source << " does not match the model:";
    auto list = [&](const char* what, const std::vector<std::string>& names) {
      if (names.empty()) return;
      msg << "\n  " << what << " (" << names.size() << "):";
      for (const auto& n : names) msg << "\n    " << n;
    };
    list("missing", missing);
    list("mis-shaped", misshaped);
    list("unexpected", unexpected);
    msg << "\ncheck --model, --depth, --width, --classes and the attention switches";
    throw Error(msg.str());
  }
  for (auto& [name, p] : parameters) p->value.copy_from(part_of(*p, tensors.at(name)));
  for (auto& [name, b] : buffers) b->copy_from(tensors.at(name));
}

std::map<std::string, Tensor> read_weights(const std::string& path) {
  SafetensorsFile file = load_safetensors(path);
  auto format = file.metadata.find("format");
  if (format == file.metadata.end() || format->second.rfind(kCheckpointFormatFamily, 0) != 0)
    return std::move(file.tensors);
  std::map<std::string, Tensor> model;
  for (auto& [name, t] : file.tensors)
    if (name.rfind(kOptimizerPrefix, 0) != 0) model.emplace(name, t);
  return model;
}

}  // namespace gridnn::run
