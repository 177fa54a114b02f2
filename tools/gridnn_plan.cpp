// gridnn-plan: for every factorization Pr x Pc of P, the α–β model's words moved,
// communication, compute and total time of one training step, and the speedup over pure batch
// (1 x P); marks the fastest (docs/design.md §6, plan/cost_model.h).
//
//   gridnn-plan --model alexnet --procs 32 --batch 2048 --alpha 2e-6 --bandwidth 6e9
//   gridnn-plan --model resattnet3d --depth 18 --width 16 --input 64x64x64 --procs 8 --explain
//   gridnn-plan --calibration calib.json [--calibration-kind world] --procs 32 ...
//
// --calibration FILE (written by gridnn-calibrate, plan/calibration.h): α and β of one of
// its communicator kinds (--calibration-kind, default "world": the grid's traffic mixes row
// and col, world is their common bound; --alpha/--beta/--bandwidth given explicitly override
// them) and the measured per-layer compute tables (layers without one use --flops).
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/train/step_plan.h"
#include "plan/calibration.h"
#include "plan/cost_model.h"
#include "tools/cli.h"

namespace {

using namespace gridnn::plan;

// What a --calibration contributed (for the table header and the JSON).
struct CalibrationUse {
  std::string file, kind, machine, date, grid;
  bool alpha_from_file = false, beta_from_file = false;
  size_t layers_measured = 0, layers = 0;
};

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) out += ch;
  }
  return out + "\"";
}

void print_json(const Network& net, const std::vector<PlanCost>& plans, size_t best,
                int64_t batch, const Machine& m, bool explain, const CalibrationUse* cal) {
  std::printf("{\"model\": \"%s\", \"batch\": %lld, \"alpha\": %g, \"beta\": %g, \"flops\": %g,",
              net.name.c_str(), static_cast<long long>(batch), m.alpha, m.beta, m.flops);
  if (cal)
    std::printf(" \"calibration\": {\"file\": %s, \"kind\": %s, \"machine\": %s, \"date\": %s, "
                "\"grid\": %s, \"alpha_from_file\": %s, \"beta_from_file\": %s, "
                "\"layers_measured\": %zu, \"layers\": %zu},",
                json_string(cal->file).c_str(), json_string(cal->kind).c_str(), json_string(cal->machine).c_str(),
                json_string(cal->date).c_str(), json_string(cal->grid).c_str(), cal->alpha_from_file ? "true" : "false",
                cal->beta_from_file ? "true" : "false", cal->layers_measured, cal->layers);
  else
    std::printf(" \"calibration\": null,");
  std::printf(" \"best\": \"%dx%d\", \"grids\": [", plans[best].grid.rows, plans[best].grid.cols);
  for (size_t i = 0; i < plans.size(); ++i) {
    const PlanCost& p = plans[i];
    std::printf("%s\n  {\"rows\": %d, \"cols\": %d, \"words\": %.0f, \"latency_s\": %g, "
                "\"bandwidth_s\": %g, \"comm_s\": %g, \"compute_s\": %g, \"total_s\": %g, "
                "\"speedup_over_batch\": %g",
                i ? "," : "", p.grid.rows, p.grid.cols, p.words, p.latency_s, p.bandwidth_s,
                p.comm_s(), p.compute_s, p.total_s(), plans[0].total_s() / p.total_s());
    if (explain) {
      std::printf(", \"layers\": [");
      for (size_t j = 0; j < p.layers.size(); ++j) {
        const LayerCost& l = p.layers[j];
        std::printf("%s{\"layer\": \"%s\", \"use\": \"%s\", \"compute_s\": %g, \"terms\": [",
                    j ? ", " : "", l.layer.c_str(), use_name(l.use), l.compute_s);
        for (size_t k = 0; k < l.terms.size(); ++k) {
          const CommTerm& t = l.terms[k];
          std::printf("%s{\"what\": \"%s\", \"words\": %.0f, \"messages\": %g, "
                      "\"latency_s\": %g, \"bandwidth_s\": %g}",
                      k ? ", " : "", t.what.c_str(), t.words, t.messages, t.latency_s,
                      t.bandwidth_s);
        }
        std::printf("]}");
      }
      std::printf("]");
    }
    std::printf("}");
  }
  std::printf("\n]}\n");
}

void print_explain(const PlanCost& p) {
  std::printf("\n%dx%d, per layer:\n", p.grid.rows, p.grid.cols);
  for (const LayerCost& l : p.layers) {
    std::printf("  %-22s %-6s compute %.3e s\n", l.layer.c_str(), use_name(l.use), l.compute_s);
    for (const CommTerm& t : l.terms)
      std::printf("      %-44s %12.0f words  %3g msgs  %.3e + %.3e s\n", t.what.c_str(),
                  t.words, t.messages, t.latency_s, t.bandwidth_s);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gridnn-plan: the alpha-beta model's cost of one training step on every Pr x Pc "
               "grid of P processes (docs/design.md section 6)"};
  std::string conv_use, calibration_file, calibration_kind = "world";
  gridnn::cli::ModelFlags flags;
  int64_t batch = 32;
  int procs = 4;
  Machine machine;
  double bandwidth = 0;
  bool json = false, explain = false, physical = false;
  gridnn::cli::add_model_flags(app, flags, true);
  app.add_option("--batch", batch, "global batch B")->capture_default_str();
  app.add_option("--procs", procs, "processes P")->capture_default_str();
  auto* alpha = app.add_option("--alpha", machine.alpha, "latency, s per message")->capture_default_str();
  auto* beta = app.add_option("--beta", machine.beta, "s per 4-byte word")->capture_default_str();
  auto* bandwidth_opt =
      app.add_option("--bandwidth", bandwidth, "bytes/s (sets beta = 4 / bandwidth)")->excludes(beta);
  app.add_option("--calibration", calibration_file,
                 "a gridnn-calibrate JSON file: alpha, beta of --calibration-kind and the measured "
                 "per-layer compute times (explicit --alpha, --beta, --bandwidth win)");
  app.add_option("--calibration-kind", calibration_kind,
                 "which measured communicator gives alpha and beta: world, row, col or pingpong")
      ->capture_default_str();
  app.add_option("--flops", machine.flops, "compute rate, FLOP/s (0: no compute term)")
      ->capture_default_str();
  app.add_option("--conv", conv_use,
                 "how convolutions use the grid rows: domain or batch (default: batch for "
                 "alexnet, the paper's setting; domain otherwise); gridnn: as gridnn-train runs "
                 "the network, from its own description (hand-overs, 1.5D or replicated fc, "
                 "batch-norm sums, loss, gradients; plan/cost_model.h)")
      ->check(CLI::IsMember({"domain", "batch", "gridnn"}));
  app.add_flag("--physical", physical,
               "count the gradient sent back from the first FC layer to batch-parallel layers "
               "(the paper omits it)");
  app.add_flag("--json", json, "JSON output");
  app.add_flag("--explain", explain, "per-layer terms of every grid");
  CLI11_PARSE(app, argc, argv);

  return gridnn::cli::run_program("gridnn-plan", [&] {
    if (bandwidth > 0) machine.beta = 4.0 / bandwidth;
    const std::string& model = flags.model;
    const gridnn::train::TrainOptions run = gridnn::cli::model_options(flags, batch);
    if (conv_use.empty()) conv_use = model == "alexnet" ? "batch" : "domain";
    if (conv_use == "gridnn" && model == "alexnet")
      throw gridnn::Error("--conv gridnn: gridnn runs resattnet3d and mlp, not the paper's alexnet");
    const Network net = model == "alexnet" ? alexnet() : gridnn::train::network_of(run);
    CalibrationUse cal;
    if (!calibration_file.empty()) {
      const Calibration c = read_calibration(calibration_file);
      // A file from one process has no communication: α and β then come from the flags.
      const bool comm = !c.comm.empty();
      const Machine fitted = machine_from(c, comm ? calibration_kind : "", machine);
      cal = {calibration_file, comm ? calibration_kind : "none (one process)", c.machine, c.date, c.grid,
             comm && alpha->count() == 0, comm && beta->count() == 0 && bandwidth_opt->count() == 0, 0,
             net.layers.size()};
      if (cal.alpha_from_file) machine.alpha = fitted.alpha;
      if (cal.beta_from_file) machine.beta = fitted.beta;
      machine.compute = fitted.compute;
      for (const LayerShape& l : net.layers) cal.layers_measured += c.compute.count(l.name);
    }
    const CalibrationUse* used = calibration_file.empty() ? nullptr : &cal;
    Strategy strategy = model_batch_domain();
    strategy.conv = conv_use == "batch" ? LayerUse::batch : LayerUse::domain;
    strategy.paper_convention = !physical;
    const std::vector<PlanCost> plans = conv_use == "gridnn" ? gridnn::train::sweep_grids(run, procs, machine)
                                                             : sweep(net, batch, procs, machine, strategy);
    GRIDNN_REQUIRE(!plans.empty(), "no grid of ", procs, " processes fits --batch ", batch, " and the input depth");
    const size_t best = best_index(plans);
    if (json) {
      print_json(net, plans, best, batch, machine, explain, used);
      return 0;
    }
    std::printf("%s, %lld weights, B = %lld, P = %d, alpha = %g s, beta = %g s/word, "
                "flops = %g/s, convolutions: %s, FC: model\n",
                net.name.c_str(), static_cast<long long>(net.weights()),
                static_cast<long long>(batch), procs, machine.alpha, machine.beta, machine.flops,
                conv_use.c_str());
    if (used)
      std::printf("calibration: %s (%s, %s, grid %s): alpha %s, beta %s of kind \"%s\"; measured "
                  "compute for %zu of %zu layers (the others: --flops)\n",
                  cal.file.c_str(), cal.machine.c_str(), cal.date.c_str(), cal.grid.c_str(),
                  cal.alpha_from_file ? "from the file" : "from --alpha",
                  cal.beta_from_file ? "from the file" : "from --beta/--bandwidth", cal.kind.c_str(),
                  cal.layers_measured, cal.layers);
    std::printf("%-9s %14s %12s %12s %12s %10s %10s\n", "grid", "words", "comm s", "compute s",
                "total s", "speedup", "comm/");
    for (size_t i = 0; i < plans.size(); ++i) {
      const PlanCost& p = plans[i];
      const std::string g = std::to_string(p.grid.rows) + "x" + std::to_string(p.grid.cols);
      std::printf("%-9s %14.0f %12.4e %12.4e %12.4e %10.2f %10.2f%s\n", g.c_str(), p.words,
                  p.comm_s(), p.compute_s, p.total_s(), plans[0].total_s() / p.total_s(),
                  plans[0].comm_s() / p.comm_s(), i == best ? "  <- best" : "");
    }
    std::printf("best: %dx%d (speedup over pure batch 1x%d: %.2f; \"comm/\": pure batch's "
                "communication over this grid's)\n",
                plans[best].grid.rows, plans[best].grid.cols, procs,
                plans[0].total_s() / plans[best].total_s());
    if (explain)
      for (const PlanCost& p : plans) print_explain(p);
    return 0;
  });
}
