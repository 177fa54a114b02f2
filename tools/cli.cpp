// The gridnn-* programs' shared pieces (cli.h).
#include "tools/cli.h"

#include <cstdio>
#include <exception>
#include <limits>
#include <vector>

#include "core/bytes.h"
#include "core/device.h"
#include "core/error.h"
#if GRIDNN_HAVE_MPI
#include "parallel/mpi_session.h"
#endif

namespace gridnn::cli {

std::array<int64_t, 3> parse_size(const std::string& flag, const std::string& text) {
  const std::string expected = flag + ": expected DxHxW with positive integers (e.g. 32x32x32), got '" + text + "'";
  std::vector<int64_t> v;
  size_t pos = 0;
  while (true) {
    const size_t x = text.find('x', pos);
    const std::string part = text.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
    GRIDNN_REQUIRE(!part.empty() && part.size() <= 12 && part.find_first_not_of("0123456789") == std::string::npos,
                   expected);
    v.push_back(std::stoll(part));
    GRIDNN_REQUIRE(v.back() > 0, expected);
    if (x == std::string::npos) break;
    pos = x + 1;
  }
  GRIDNN_REQUIRE(v.size() == 3, flag, ": expected three sizes DxHxW, got '", text, "'");
  return {v[0], v[1], v[2]};
}

void set_attention(Attention a, nn::ResAttNetConfig& config) {
  config.attention3 = a == Attention::both || a == Attention::layer3;
  config.attention4 = a == Attention::both || a == Attention::layer4;
}

void add_model_flags(CLI::App& app, ModelFlags& f, bool paper) {
  std::vector<PlanModel> models{PlanModel::resattnet3d, PlanModel::mlp};
  if (paper) models.push_back(PlanModel::alexnet);
  add_enum_option(app, "--model", f.model, "network", models)->capture_default_str();
  app.add_option("--depth", f.run.resattnet.depth, "ResAttNet3D depth (18 or 34)")->capture_default_str();
  app.add_option("--width", f.run.resattnet.width, "ResAttNet3D width w")->capture_default_str();
  app.add_option("--input", f.input, "input volume DxHxW")->capture_default_str();
  app.add_option("--in-channels", f.run.in_channels, "input channels")->capture_default_str();
  app.add_option("--classes", f.run.classes, "classes")->capture_default_str();
  app.add_option("--mlp-sizes", f.mlp_sizes, "MLP sizes: in hidden... classes")->delimiter(',');
}

run::RunOptions model_options(const ModelFlags& f, int64_t batch) {
  run::RunOptions o = f.run;
  const auto size = parse_size("--input", f.input);
  o.input.assign(size.begin(), size.end());
  o.batch = batch;
  if (f.model == PlanModel::mlp) {  // the sizes as given: the input features, hidden sizes, classes
    GRIDNN_REQUIRE(f.mlp_sizes.size() >= 2, "--mlp-sizes: give at least the input and output sizes");
    o.model = run::Model::mlp;
    o.in_channels = 1;
    o.input = {f.mlp_sizes.front(), 1, 1};
    o.mlp_hidden.assign(f.mlp_sizes.begin() + 1, f.mlp_sizes.end() - 1);
    o.classes = f.mlp_sizes.back();
  }
  return o;
}

Device process_device(const std::string& text, const Process& process) {
  return run::device_of(text, process.node_rank, process.node_size);
}

int64_t memory_limit(const std::string& text, const Device& device, const Process& process) {
  if (text.empty() && device.is_cpu()) return 0;
  if (!text.empty() && text != "auto") return parse_bytes(text, "--memory-limit");
  int64_t available = available_memory_bytes(device);
  available /= parallel::ranks_sharing_device(device);
  const int64_t unknown = std::numeric_limits<int64_t>::max();
  const int64_t limit = parallel::min_over_world(
      available > 0 ? available - std::max<int64_t>(available / 10, int64_t(512) << 20) : unknown);
  if (limit == unknown) {
    if (process.rank == 0)
      std::fprintf(stderr, "gridnn: --memory-limit auto: no rank could read its device's free memory; no limit\n");
    return 0;
  }
  GRIDNN_REQUIRE(limit > 0, "--memory-limit auto: ", device.str(), " has ", format_bytes(available),
                 " available, less than the margin gridnn keeps (512 MiB); free memory or give --memory-limit SIZE");
  return limit;
}

std::unique_ptr<parallel::ProcessGrid> create_grid(const run::RunOptions& o) {
  return parallel::ProcessGrid::create(o.grid, o.comm_backend, o.device, o.rank_order);
}

int run_mpi_program(int* argc, char*** argv, const std::function<int(const Process&)>& body) {
#if GRIDNN_HAVE_MPI
  return MpiSession::run(argc, argv, [&](MpiSession& session) {
    return body(
        Process{session.rank(), session.size(), session.node_rank(), session.node_size(), session.node_of_rank()});
  });
#else
  (void)argc;
  (void)argv;
  return run_program("gridnn", [&] { return body(Process{}); });
#endif
}

int run_program(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace gridnn::cli
