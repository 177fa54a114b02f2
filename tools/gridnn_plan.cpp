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
//
// Nodes of several ranks (plan/node_layout.h):
//   gridnn-plan --model alexnet --batch 2048 --nodes 8 --ranks-per-node 4 --alpha-intra 3e-6
//               --bandwidth-intra 150e9 --alpha-inter 5e-6 --bandwidth-inter 25e9
// sweeps every grid of P = N·G ranks in both rank orders (rows-in-node, cols-in-node: the
// names of gridnn-train --rank-order), each communicator at the intra-node link where its
// ranks share a node and at the inter-node link where they do not, and names the fastest as
// "best: PrxPc --rank-order X". --procs may be left out (P = N·G; given, it must equal N·G;
// with --procs and no --ranks-per-node, G = P / N). --alpha-intra and --alpha-inter default
// to --alpha, --bandwidth-inter to --bandwidth/--beta (the one link of the flat model stands
// for the network between nodes); --bandwidth-intra has no default. The line after the table
// gives the flat model's choice with every communicator at the inter-node link.
//
// Inside a Slurm allocation (parallel/slurm.h):
//   salloc --nodes 2 --ntasks-per-node 4 gridnn-plan --slurm --width 16 --input 64x64x64 --batch 32
// takes N and G from the allocation, plans gridnn-train's own step (--conv gridnn) at the links
// --grid auto assumes (the link flags override them), and prints the srun line of the choice.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "core/bytes.h"
#include "core/error.h"
#include "models/run/grid_choice.h"
#include "models/run/memory_plan.h"
#include "models/run/step_plan.h"
#include "parallel/slurm.h"
#include "plan/calibration.h"
#include "plan/cost_model.h"
#include "plan/node_layout.h"
#include "tools/cli.h"

namespace {

using namespace gridnn::plan;

// --conv: how convolutions use the grid rows, or (gridnn) gridnn's own description of its step.
enum class ConvUse { domain, batch, gridnn };
inline constexpr gridnn::EnumName<ConvUse> kConvUseNames[] = {
    {ConvUse::domain, "domain"}, {ConvUse::batch, "batch"}, {ConvUse::gridnn, "gridnn"}};
constexpr gridnn::EnumNames<ConvUse> enum_names(ConvUse) { return {"convolution use", kConvUseNames}; }

// What a --calibration contributed (for the table header and the JSON).
struct CalibrationUse {
  std::string file, kind, machine, date, grid;
  bool alpha_from_file = false, beta_from_file = false;
  size_t layers_measured = 0, layers = 0;
  size_t operations = 0;  // fitted on their own (gridnn's own step costs its calls at them)
};

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) out += ch;
  }
  return out + "\"";
}

// The two-level sweep's additions to the JSON (absent: the flat model's output).
struct NodesUse {
  const NodeCluster* cluster = nullptr;
  const std::vector<NodePlan>* plans = nullptr;
};

void print_json(const Network& net, const std::vector<PlanCost>& plans, size_t best, int64_t batch, const Machine& m,
                bool explain, const CalibrationUse* cal, const NodesUse& nodes = {}) {
  std::printf("{\"model\": \"%s\", \"batch\": %lld, \"alpha\": %g, \"beta\": %g, \"flops\": %g,", net.name.c_str(),
              static_cast<long long>(batch), m.alpha, m.beta, m.flops);
  if (nodes.cluster) {
    const NodeCluster& c = *nodes.cluster;
    std::printf(
        " \"nodes\": %d, \"ranks_per_node\": %d, \"intra\": {\"alpha\": %g, \"beta\": %g}, "
        "\"inter\": {\"alpha\": %g, \"beta\": %g}, \"best_rank_order\": \"%s\",",
        c.nodes, c.ranks_per_node, c.intra.alpha, c.intra.beta, c.inter.alpha, c.inter.beta,
        gridnn::enum_name((*nodes.plans)[best].order));
  }
  if (cal)
    std::printf(
        " \"calibration\": {\"file\": %s, \"kind\": %s, \"machine\": %s, \"date\": %s, "
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
    std::printf(
        "%s\n  {\"rows\": %d, \"cols\": %d, \"words\": %.0f, \"latency_s\": %g, "
        "\"bandwidth_s\": %g, \"comm_s\": %g, \"compute_s\": %g, \"total_s\": %g, "
        "\"speedup_over_batch\": %g",
        i ? "," : "", p.grid.rows, p.grid.cols, p.words, p.latency_s, p.bandwidth_s, p.comm_s(), p.compute_s,
        p.total_s(), plans[0].total_s() / p.total_s());
    if (nodes.plans) {
      const NodePlan& n = (*nodes.plans)[i];
      std::printf(", \"rank_order\": \"%s\", \"crosses_nodes\": {\"row\": %s, \"col\": %s, \"world\": %s}",
                  gridnn::enum_name(n.order), n.crosses.row ? "true" : "false", n.crosses.col ? "true" : "false",
                  n.crosses.world ? "true" : "false");
    }
    if (explain) {
      std::printf(", \"layers\": [");
      for (size_t j = 0; j < p.layers.size(); ++j) {
        const LayerCost& l = p.layers[j];
        std::printf("%s{\"layer\": \"%s\", \"use\": \"%s\", \"compute_s\": %g, \"terms\": [", j ? ", " : "",
                    l.layer.c_str(), gridnn::enum_name(l.use), l.compute_s);
        for (size_t k = 0; k < l.terms.size(); ++k) {
          const CommTerm& t = l.terms[k];
          std::printf(
              "%s{\"what\": \"%s\", \"words\": %.0f, \"messages\": %g, "
              "\"latency_s\": %g, \"bandwidth_s\": %g}",
              k ? ", " : "", t.what.c_str(), t.words, t.messages, t.latency_s, t.bandwidth_s);
        }
        std::printf("]}");
      }
      std::printf("]");
    }
    std::printf("}");
  }
  std::printf("\n]}\n");
}

void print_explain(const PlanCost& p, const char* rank_order = nullptr) {
  std::printf("\n%dx%d%s%s, per layer:\n", p.grid.rows, p.grid.cols, rank_order ? " --rank-order " : "",
              rank_order ? rank_order : "");
  for (const LayerCost& l : p.layers) {
    std::printf("  %-22s %-6s compute %.3e s\n", l.layer.c_str(), gridnn::enum_name(l.use), l.compute_s);
    for (const CommTerm& t : l.terms)
      std::printf("      %-44s %12.0f words  %3g msgs  %.3e + %.3e s\n", t.what.c_str(), t.words, t.messages,
                  t.latency_s, t.bandwidth_s);
  }
}

// The two-level flags (plan/node_layout.h; their defaults in the header comment).
struct NodeFlags {
  int nodes = 0, ranks_per_node = 0;
  double alpha_intra = 0, bandwidth_intra = 0, alpha_inter = 0, bandwidth_inter = 0;
  bool slurm = false;               // the nodes and ranks of the Slurm allocation this runs in
  std::vector<CLI::Option*> given;  // every two-level option: any of them asks for the sweep
  CLI::Option *nodes_opt = nullptr, *ranks_opt = nullptr, *alpha_intra_opt = nullptr, *bandwidth_intra_opt = nullptr,
              *alpha_inter_opt = nullptr, *bandwidth_inter_opt = nullptr, *slurm_opt = nullptr;
  bool used() const {
    for (const CLI::Option* o : given)
      if (o->count() > 0) return true;
    return false;
  }
};

void add_node_flags(CLI::App& app, NodeFlags& f) {
  f.nodes_opt = app.add_option("--nodes", f.nodes,
                               "nodes N: plan for N nodes of --ranks-per-node ranks, both rank "
                               "orders, each communicator at the link it crosses");
  f.ranks_opt = app.add_option("--ranks-per-node", f.ranks_per_node, "ranks per node G (default: --procs / --nodes)");
  f.alpha_intra_opt = app.add_option("--alpha-intra", f.alpha_intra, "latency inside a node, s (default: --alpha)");
  f.bandwidth_intra_opt = app.add_option("--bandwidth-intra", f.bandwidth_intra, "bytes/s inside a node (no default)");
  f.alpha_inter_opt = app.add_option("--alpha-inter", f.alpha_inter, "latency between nodes, s (default: --alpha)");
  f.bandwidth_inter_opt = app.add_option("--bandwidth-inter", f.bandwidth_inter,
                                         "bytes/s between nodes (default: --bandwidth, or 4 / --beta)");
  f.slurm_opt = app.add_flag("--slurm", f.slurm,
                             "plan for the Slurm allocation this runs in (SLURM_JOB_NUM_NODES, SLURM_NTASKS_PER_NODE, "
                             "SLURM_NTASKS): its nodes and tasks per node, gridnn-train's own step (--conv gridnn), "
                             "links as --grid auto assumes them unless given; prints the srun line to run");
  f.given = {f.nodes_opt,       f.ranks_opt,           f.alpha_intra_opt, f.bandwidth_intra_opt,
             f.alpha_inter_opt, f.bandwidth_inter_opt, f.slurm_opt};
}

// The cluster the flags describe; `flat` gives the defaults, `procs` (given or not) must agree.
// --slurm: the allocation's nodes and tasks per node, the links given or those --grid auto
// assumes (gridnn::run::assumed_cluster).
NodeCluster slurm_cluster(const NodeFlags& f, bool procs_given) {
  GRIDNN_REQUIRE(f.nodes_opt->count() == 0 && f.ranks_opt->count() == 0 && !procs_given,
                 "--slurm reads the nodes and tasks from the allocation: leave --nodes, --ranks-per-node and --procs "
                 "out");
  const std::optional<gridnn::parallel::SlurmAllocation> slurm = gridnn::parallel::slurm_allocation();
  GRIDNN_REQUIRE(slurm.has_value(),
                 "--slurm: no Slurm allocation here (SLURM_JOB_ID is not set); run it inside one (salloc, sbatch) or "
                 "give --nodes N --ranks-per-node G");
  const int per_node = slurm->even_tasks_per_node();
  GRIDNN_REQUIRE(per_node > 0, "--slurm: ", slurm->str(),
                 " has not the same number of tasks on every node; submit with --ntasks-per-node, or give --nodes "
                 "and --ranks-per-node");
  NodeCluster c = gridnn::run::assumed_cluster(slurm->nodes, per_node);
  if (f.alpha_intra_opt->count() > 0) c.intra.alpha = f.alpha_intra;
  if (f.bandwidth_intra_opt->count() > 0) c.intra.beta = 4.0 / f.bandwidth_intra;
  if (f.alpha_inter_opt->count() > 0) c.inter.alpha = f.alpha_inter;
  if (f.bandwidth_inter_opt->count() > 0) c.inter.beta = 4.0 / f.bandwidth_inter;
  check_cluster(c);
  return c;
}

NodeCluster cluster_of(const NodeFlags& f, const Machine& flat, int procs, bool procs_given) {
  if (f.slurm) return slurm_cluster(f, procs_given);
  GRIDNN_REQUIRE(f.nodes_opt->count() > 0,
                 "--ranks-per-node, --alpha-intra, --bandwidth-intra, --alpha-inter and "
                 "--bandwidth-inter describe nodes of several ranks: add --nodes N");
  GRIDNN_REQUIRE(f.nodes >= 1, "--nodes must be >= 1, got ", f.nodes);
  NodeCluster c;
  c.nodes = f.nodes;
  if (f.ranks_opt->count() > 0) {
    GRIDNN_REQUIRE(f.ranks_per_node >= 1, "--ranks-per-node must be >= 1, got ", f.ranks_per_node);
    c.ranks_per_node = f.ranks_per_node;
    GRIDNN_REQUIRE(!procs_given || procs == c.procs(), "--procs ", procs, " is not --nodes ", c.nodes,
                   " x --ranks-per-node ", c.ranks_per_node, " = ", c.procs(), ": leave --procs out or make it ",
                   c.procs());
  } else {
    GRIDNN_REQUIRE(procs_given, "--nodes ", c.nodes, ": add --ranks-per-node G (or --procs P, a multiple of ", c.nodes,
                   ")");
    GRIDNN_REQUIRE(procs >= 1 && procs % c.nodes == 0, "--procs ", procs, " is not a multiple of --nodes ", c.nodes,
                   ": give --ranks-per-node G, or a --procs that ", c.nodes, " nodes share evenly");
    c.ranks_per_node = procs / c.nodes;
  }
  GRIDNN_REQUIRE(f.bandwidth_intra_opt->count() > 0,
                 "--nodes: add --bandwidth-intra B/s, the bandwidth between "
                 "the ranks of a node (e.g. 150e9 for NVLink)");
  GRIDNN_REQUIRE(f.bandwidth_intra > 0, "--bandwidth-intra must be > 0 bytes/s, got ", f.bandwidth_intra);
  GRIDNN_REQUIRE(f.bandwidth_inter_opt->count() == 0 || f.bandwidth_inter > 0,
                 "--bandwidth-inter must be > 0 bytes/s, got ", f.bandwidth_inter);
  c.intra = {f.alpha_intra_opt->count() > 0 ? f.alpha_intra : flat.alpha, 4.0 / f.bandwidth_intra};
  c.inter = {f.alpha_inter_opt->count() > 0 ? f.alpha_inter : flat.alpha,
             f.bandwidth_inter_opt->count() > 0 ? 4.0 / f.bandwidth_inter : flat.beta};
  check_cluster(c);
  return c;
}

// Where the α, β and compute times came from. `two_level`: the file's α and β are the flat
// ones, the defaults of the link flags not given.
void print_calibration(const CalibrationUse& cal, bool two_level) {
  std::printf(
      "calibration: %s (%s, %s, grid %s): %salpha %s, beta %s of kind \"%s\"%s%s; measured compute for %zu "
      "of %zu layers (the others: --flops)\n",
      cal.file.c_str(), cal.machine.c_str(), cal.date.c_str(), cal.grid.c_str(), two_level ? "the flat " : "",
      cal.alpha_from_file ? "from the file" : "from --alpha",
      cal.beta_from_file ? "from the file" : "from --beta/--bandwidth", cal.kind.c_str(),
      cal.operations > 0
          ? (" and of each of its " + std::to_string(cal.operations) + " operations (--conv gridnn)").c_str()
          : "",
      two_level ? " (the defaults of the link flags not given)" : "", cal.layers_measured, cal.layers);
}

std::string grid_name(Grid g) { return std::to_string(g.rows) + "x" + std::to_string(g.cols); }

// The two-level table, the best grid and rank order, and the flat model's choice at the
// inter-node link beside it.
void print_nodes(const std::vector<NodePlan>& plans, size_t best, const std::vector<PlanCost>& flat) {
  std::printf("%-9s %-13s %-15s %14s %12s %12s %12s %10s\n", "grid", "rank order", "crosses nodes", "words", "comm s",
              "compute s", "total s", "speedup");
  const PlanCost& first = plans[0].cost;
  for (size_t i = 0; i < plans.size(); ++i) {
    const PlanCost& p = plans[i].cost;
    std::printf("%-9s %-13s %-15s %14.0f %12.4e %12.4e %12.4e %10.2f%s\n", grid_name(p.grid).c_str(),
                gridnn::enum_name(plans[i].order), plans[i].crosses.str().c_str(), p.words, p.comm_s(), p.compute_s,
                p.total_s(), first.total_s() / p.total_s(), i == best ? "  <- best" : "");
  }
  const PlanCost& b = plans[best].cost;
  std::printf("best: %s --rank-order %s (speedup over %s: %.2f)\n", grid_name(b.grid).c_str(),
              gridnn::enum_name(plans[best].order), grid_name(first.grid).c_str(), first.total_s() / b.total_s());
  if (flat.empty()) return;
  const PlanCost& f = flat[best_index(flat)];
  std::printf("flat model, every communicator at the inter-node link: best %s (total %.4e s)",
              grid_name(f.grid).c_str(), f.total_s());
  for (const NodePlan& n : plans)
    if (n.cost.grid.rows == f.grid.rows && n.order == RankOrder::rows_in_node)
      std::printf(
          "; here %s --rank-order rows-in-node (the default) takes %.4e s, the two-level choice %.4e s "
          "(%.2fx)",
          grid_name(f.grid).c_str(), n.cost.total_s(), b.total_s(), n.cost.total_s() / b.total_s());
  std::printf("\n");
}

// The flags, and the options of those whose presence matters (an explicit flag wins over
// the calibration file and the model's default).
struct PlanFlags {
  gridnn::cli::ModelFlags model;
  int64_t batch = 32;
  int procs = 4;
  Machine machine;
  double bandwidth = 0;
  std::string calibration_file, calibration_kind = "world";
  ConvUse conv_use = ConvUse::domain;
  bool json = false, explain = false, physical = false;
  std::string memory_per_rank;  // a size (gridnn::parse_bytes); empty: memory not considered
  NodeFlags nodes;
  CLI::Option *procs_opt = nullptr, *alpha = nullptr, *beta = nullptr, *bandwidth_opt = nullptr, *conv = nullptr;
};

void add_flags(CLI::App& app, PlanFlags& f) {
  gridnn::cli::add_model_flags(app, f.model, true);
  app.add_option("--batch", f.batch, "global batch B")->capture_default_str();
  f.procs_opt = app.add_option("--procs", f.procs, "processes P")->capture_default_str();
  f.alpha = app.add_option("--alpha", f.machine.alpha, "latency, s per message")->capture_default_str();
  f.beta = app.add_option("--beta", f.machine.beta, "s per 4-byte word")->capture_default_str();
  f.bandwidth_opt = app.add_option("--bandwidth", f.bandwidth, "bytes/s (sets beta = 4 / bandwidth)")->excludes(f.beta);
  app.add_option("--calibration", f.calibration_file,
                 "a gridnn-calibrate JSON file: alpha, beta of --calibration-kind and the measured "
                 "per-layer compute times (explicit --alpha, --beta, --bandwidth win)");
  app.add_option("--calibration-kind", f.calibration_kind,
                 "which measured communicator gives alpha and beta: world, row, col or pingpong")
      ->capture_default_str();
  app.add_option("--flops", f.machine.flops, "compute rate, FLOP/s (0: no compute term)")->capture_default_str();
  f.conv = gridnn::cli::add_enum_option(app, "--conv", f.conv_use,
                                        "how convolutions use the grid rows: domain or batch (default: batch for "
                                        "alexnet, the paper's setting; domain otherwise); gridnn: as gridnn-train "
                                        "runs the network, from its own description (hand-overs, 1.5D or replicated "
                                        "fc, batch-norm sums, loss, gradients; plan/cost_model.h)");
  app.add_flag("--physical", f.physical,
               "count the gradient sent back from the first FC layer to batch-parallel layers "
               "(the paper omits it)");
  add_node_flags(app, f.nodes);
  app.add_flag("--json", f.json, "JSON output");
  app.add_option("--memory-per-rank", f.memory_per_rank,
                 "memory of one rank (6GiB, 512MiB or bytes): each grid's predicted peak per rank, whether it "
                 "fits, and the fastest grid among those that fit (resattnet3d and mlp; docs/design.md section 6a)");
  app.add_flag("--explain", f.explain, "per-layer terms of every grid");
}

// Reads --calibration into f.machine: alpha and beta of --calibration-kind, and of each of its
// operations, unless given as flags, and the measured per-layer compute times. Returns what
// was used, for the output.
CalibrationUse apply_calibration(PlanFlags& f, const Network& net) {
  const Calibration c = read_calibration(f.calibration_file);
  // A file from one process has no communication: α and β then come from the flags.
  const bool comm = !c.comm.empty();
  const Machine fitted = machine_from(c, comm ? f.calibration_kind : "", f.machine);
  CalibrationUse cal = {f.calibration_file,
                        comm ? f.calibration_kind : "none (one process)",
                        c.machine,
                        c.date,
                        c.grid,
                        comm && f.alpha->count() == 0,
                        comm && f.beta->count() == 0 && f.bandwidth_opt->count() == 0,
                        0,
                        net.layers.size()};
  if (cal.alpha_from_file) f.machine.alpha = fitted.alpha;
  if (cal.beta_from_file) f.machine.beta = fitted.beta;
  if (cal.alpha_from_file && cal.beta_from_file) f.machine.ops = fitted.ops;  // flags given: they cost every call
  if (cal.alpha_from_file && cal.beta_from_file) cal.operations = c.comm.at(f.calibration_kind).ops.size();
  f.machine.compute = fitted.compute;
  for (const LayerShape& l : net.layers) cal.layers_measured += c.compute.count(l.name);
  return cal;
}

// --slurm: the line that runs the plan's choice in the allocation (every task, one rank each).
void print_srun(const PlanFlags& f, const NodePlan& best) {
  const auto slurm = gridnn::parallel::slurm_allocation();
  const gridnn::cli::ModelFlags& m = f.model;
  std::string model;
  if (m.model == gridnn::cli::PlanModel::mlp)
    model = "--model mlp";
  else
    model = "--depth " + std::to_string(m.run.resattnet.depth) + " --width " + std::to_string(m.run.resattnet.width) +
            " --input " + m.input;
  std::printf("%s: run it with\n  srun --mpi=pmi2 gridnn-train --grid %s --rank-order %s %s --batch %lld ...\n",
              slurm->str().c_str(), grid_name(best.cost.grid).c_str(), gridnn::enum_name(best.order), model.c_str(),
              static_cast<long long>(f.batch));
}

// Every grid on nodes of several ranks (--nodes, --slurm): both rank orders, the two-level links.
void plan_on_nodes(PlanFlags& f, const gridnn::run::RunOptions& options, const Network& net, const Strategy& strategy,
                   const CalibrationUse* used) {
  const Machine& machine = f.machine;
  const NodeCluster cluster = cluster_of(f.nodes, machine, f.procs, f.procs_opt->count() > 0);
  f.procs = cluster.procs();
  Machine at_inter = machine;
  at_inter.alpha = cluster.inter.alpha;
  at_inter.beta = cluster.inter.beta;
  const bool own = f.conv_use == ConvUse::gridnn;
  const std::vector<NodePlan> nodes = own ? gridnn::run::sweep_grids_on_nodes(options, cluster, machine)
                                          : sweep(net, f.batch, cluster, machine, strategy);
  GRIDNN_REQUIRE(!nodes.empty(), "no grid of ", f.procs, " processes fits --batch ", f.batch, " and the input depth");
  const std::vector<PlanCost> flat =
      own ? gridnn::run::sweep_grids(options, f.procs, at_inter) : sweep(net, f.batch, f.procs, at_inter, strategy);
  const size_t best = best_index(nodes);
  if (f.json) {
    std::vector<PlanCost> costs;
    costs.reserve(nodes.size());
    for (const NodePlan& n : nodes) costs.push_back(n.cost);
    print_json(net, costs, best, f.batch, machine, f.explain, used, {&cluster, &nodes});
    return;
  }
  std::printf(
      "%s, %lld weights, B = %lld, P = %d (%d nodes x %d ranks); inside a node alpha = %g s, beta = %g "
      "s/word (%g B/s); between nodes alpha = %g s, beta = %g s/word (%g B/s); flops = %g/s, "
      "convolutions: %s, FC: model\n",
      net.name.c_str(), static_cast<long long>(net.weights()), static_cast<long long>(f.batch), f.procs, cluster.nodes,
      cluster.ranks_per_node, cluster.intra.alpha, cluster.intra.beta, 4.0 / cluster.intra.beta, cluster.inter.alpha,
      cluster.inter.beta, 4.0 / cluster.inter.beta, machine.flops, gridnn::enum_name(f.conv_use));
  if (used) print_calibration(*used, true);
  print_nodes(nodes, best, flat);
  if (f.explain)
    for (const NodePlan& n : nodes) print_explain(n.cost, gridnn::enum_name(n.order));
  if (f.nodes.slurm) print_srun(f, nodes[best]);
}

// For each grid with Pr > 1, the switch to the batch split the cost model predicts fastest
// (gridnn-train --batch-split-from), against none.
void print_batch_splits(const gridnn::run::RunOptions& options, const std::vector<PlanCost>& plans, const Machine& m) {
  for (const PlanCost& p : plans) {
    if (p.grid.rows == 1 || options.model != gridnn::run::Model::resattnet3d) continue;
    const gridnn::run::BatchSplitChoice c = gridnn::run::choose_batch_split(options, {1, p.grid.rows, p.grid.cols}, m);
    std::printf("batch split on %dx%d: --batch-split-from %s, %.4e s (none %.4e s; %s)\n", p.grid.rows, p.grid.cols,
                c.block.empty() ? "(none)" : c.block.c_str(), c.step_s, c.without_s, c.why.c_str());
  }
}

// Every Pr x Pc grid of P processes with one link.
void plan_flat(const PlanFlags& f, const gridnn::run::RunOptions& options, const Network& net, const Strategy& strategy,
               const CalibrationUse* used) {
  const Machine& machine = f.machine;
  const int procs = f.procs;
  const std::vector<PlanCost> plans = f.conv_use == ConvUse::gridnn ? gridnn::run::sweep_grids(options, procs, machine)
                                                                    : sweep(net, f.batch, procs, machine, strategy);
  GRIDNN_REQUIRE(!plans.empty(), "no grid of ", procs, " processes fits --batch ", f.batch, " and the input depth");
  // With --memory-per-rank: every grid's largest predicted peak (-1: the run cannot use the
  // grid), and the best among those that fit.
  std::vector<int64_t> peaks, recomputed;  // recomputed: with --recompute blocks, where that fits alone
  const int64_t limit = f.memory_per_rank.empty() ? 0 : gridnn::parse_bytes(f.memory_per_rank, "--memory-per-rank");
  size_t best = best_index(plans);
  if (limit > 0) {
    GRIDNN_REQUIRE(f.model.model != gridnn::cli::PlanModel::alexnet,
                   "--memory-per-rank: the memory model describes gridnn's networks (--model resattnet3d or mlp)");
    bool any = false;
    for (size_t i = 0; i < plans.size(); ++i) {
      const Grid g = plans[i].grid;
      peaks.push_back(gridnn::run::usable_grid(options, g.rows, g.cols)
                          ? gridnn::run::largest_peak(gridnn::run::predict_grid_memory(options, {1, g.rows, g.cols}))
                          : -1);
      const bool fits = peaks[i] >= 0 && peaks[i] <= limit;
      if (fits && (!any || plans[i].total_s() < plans[best].total_s())) best = i;
      any = any || fits;
      recomputed.push_back(-1);
      if (peaks[i] > limit && options.model == gridnn::run::Model::resattnet3d) {
        gridnn::run::RunOptions again = options;
        again.recompute = gridnn::run::Recompute::blocks;
        recomputed[i] = gridnn::run::largest_peak(gridnn::run::predict_grid_memory(again, {1, g.rows, g.cols}));
      }
    }
    bool with_recompute = false;
    for (int64_t r : recomputed) with_recompute = with_recompute || (r >= 0 && r <= limit);
    GRIDNN_REQUIRE(any || with_recompute, "--memory-per-rank ", gridnn::format_bytes(limit), ": no grid of ", procs,
                   " processes fits, even with --recompute blocks (see the peaks with a larger limit); use more "
                   "processes, a smaller --batch or --input");
    if (!any) {  // the fastest of those that fit with it
      std::printf("only --recompute blocks makes a grid fit (\"recompute\" below)\n");
      for (size_t i = 0, first = 1; i < plans.size(); ++i)
        if (recomputed[i] >= 0 && recomputed[i] <= limit && (first || plans[i].total_s() < plans[best].total_s())) {
          best = i;
          first = 0;
        }
    }
  }
  if (f.json) {
    print_json(net, plans, best, f.batch, machine, f.explain, used);
    return;
  }
  std::printf(
      "%s, %lld weights, B = %lld, P = %d, alpha = %g s, beta = %g s/word, "
      "flops = %g/s, convolutions: %s, FC: model\n",
      net.name.c_str(), static_cast<long long>(net.weights()), static_cast<long long>(f.batch), procs, machine.alpha,
      machine.beta, machine.flops, gridnn::enum_name(f.conv_use));
  if (used) print_calibration(*used, false);
  std::printf("%-9s %14s %12s %12s %12s %10s %10s%s\n", "grid", "words", "comm s", "compute s", "total s", "speedup",
              "comm/", limit > 0 ? "    peak/rank  fits" : "");
  for (size_t i = 0; i < plans.size(); ++i) {
    const PlanCost& p = plans[i];
    const std::string g = std::to_string(p.grid.rows) + "x" + std::to_string(p.grid.cols);
    std::string memory;
    if (limit > 0)
      memory = peaks[i] < 0 ? "     (unusable)    -"
                            : " " + std::string(13 - std::min<size_t>(13, gridnn::format_bytes(peaks[i]).size()), ' ') +
                                  gridnn::format_bytes(peaks[i]) +
                                  (peaks[i] <= limit                              ? "   yes"
                                   : recomputed[i] >= 0 && recomputed[i] <= limit ? "   recompute"
                                                                                  : "    no");
    std::printf("%-9s %14.0f %12.4e %12.4e %12.4e %10.2f %10.2f%s%s\n", g.c_str(), p.words, p.comm_s(), p.compute_s,
                p.total_s(), plans[0].total_s() / p.total_s(), plans[0].comm_s() / p.comm_s(), memory.c_str(),
                i == best ? "  <- best" : "");
  }
  if (limit > 0)
    std::printf(
        "memory per rank: %s; the best grid is the fastest that fits (\"recompute\": fits only with --recompute "
        "blocks, a slower step)\n",
        gridnn::format_bytes(limit).c_str());
  std::printf(
      "best: %dx%d (speedup over pure batch 1x%d: %.2f; \"comm/\": pure batch's "
      "communication over this grid's)\n",
      plans[best].grid.rows, plans[best].grid.cols, procs, plans[0].total_s() / plans[best].total_s());
  if (f.conv_use == ConvUse::gridnn) print_batch_splits(options, plans, machine);
  if (f.explain)
    for (const PlanCost& p : plans) print_explain(p);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "gridnn-plan: the alpha-beta model's cost of one training step on every Pr x Pc "
      "grid of P processes (docs/design.md section 6)"};
  PlanFlags f;
  add_flags(app, f);
  CLI11_PARSE(app, argc, argv);

  return gridnn::cli::run_program("gridnn-plan", [&] {
    if (f.bandwidth > 0) f.machine.beta = 4.0 / f.bandwidth;
    const bool paper = f.model.model == gridnn::cli::PlanModel::alexnet;
    const gridnn::run::RunOptions options = gridnn::cli::model_options(f.model, f.batch);
    if (f.nodes.slurm && paper)
      throw gridnn::Error("--slurm plans a gridnn-train run: --model resattnet3d or mlp, not the paper's alexnet");
    if (f.conv->count() == 0) f.conv_use = paper ? ConvUse::batch : f.nodes.slurm ? ConvUse::gridnn : ConvUse::domain;
    if (f.conv_use == ConvUse::gridnn && paper)
      throw gridnn::Error("--conv gridnn: gridnn runs resattnet3d and mlp, not the paper's alexnet");
    const Network net = paper ? alexnet() : gridnn::run::network_of(options);
    CalibrationUse cal;
    if (!f.calibration_file.empty()) cal = apply_calibration(f, net);
    const CalibrationUse* used = f.calibration_file.empty() ? nullptr : &cal;
    Strategy strategy = model_batch_domain();
    strategy.conv = f.conv_use == ConvUse::batch ? LayerUse::batch : LayerUse::domain;
    strategy.paper_convention = !f.physical;
    if (f.nodes.used())
      plan_on_nodes(f, options, net, strategy, used);
    else
      plan_flat(f, options, net, strategy, used);
    return 0;
  });
}
