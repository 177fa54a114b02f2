// The ordering rule of NCCL operations (parallel/device_order.h, docs/design.md §4), checked
// on the CPU. A simulator runs several ranks' programs (row, col, stage, world and pipe
// operations, blocking or started and waited later, host synchronizations) two ways:
//   - the MPI backend's semantics: the host blocks in a blocking call until it completes and
//     in wait() until the started operation completes; an operation completes once every
//     rank it involves has issued it;
//   - the NCCL backend's: the host never blocks but at a synchronization of the compute
//     stream (Tensor::to_host, barrier()); each operation is a GPU node that starts once the
//     operations the ordering rule puts before it are complete, and completes once it and
//     its peers' matching nodes have started (NCCL kernels of different communicators are
//     resident at once: nccl_cta_limit).
// Every program here completes under the MPI backend's semantics and issues each
// communicator's collectives in the same order on all members (communicator.h). The rule of
// DeviceOrder must then complete it under every interleaving; the rule it replaced (every
// NCCL operation of a GPU waits for the previous one, whichever its communicator) must
// deadlock on some of them, or the test could not tell the two apart.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "parallel/device_order.h"
#include "test/support/error_message.h"

namespace gridnn::parallel {
namespace {

using test::error_message;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ---- the component ----------------------------------------------------------------------

TEST(DeviceOrder, CtaLimitFitsEveryCommunicatorsKernelWithAQuarterLeft) {
  EXPECT_EQ(nccl_cta_limit(132), 16);  // H200, H100 SXM: 5 x 16 = 80 of 132 SMs
  EXPECT_EQ(nccl_cta_limit(108), 16);  // A100: 80 of 108
  EXPECT_EQ(nccl_cta_limit(80), 8);    // V100: 40 of 80
  EXPECT_EQ(nccl_cta_limit(40), 4);    // T4
  EXPECT_EQ(nccl_cta_limit(132, 2), 32);
  EXPECT_EQ(nccl_cta_limit(7), 1);
  EXPECT_EQ(nccl_cta_limit(1), 1);
  for (int sms = 7; sms <= 200; ++sms) {
    const int limit = nccl_cta_limit(sms);
    EXPECT_LE(limit * kCommunicatorsPerRank, sms * 3 / 4) << sms;
    EXPECT_EQ(limit & (limit - 1), 0) << sms;  // a power of two
    EXPECT_LE(limit, 32);
  }
  EXPECT_TRUE(contains(error_message([] { nccl_cta_limit(0); }), "at least 1"));
}

TEST(DeviceOrder, AnOperationWaitsForItsCommunicatorAndWhatTheComputeStreamWaitedFor) {
  DeviceOrder order;
  const int row = order.add_communicator("row"), col = order.add_communicator("col");
  const int pipe = order.add_communicator("pipe");
  using V = std::vector<int64_t>;

  DeviceOrder::Plan a = order.enqueue(row, Issue::blocking, Transfer::collective, "all_gather");
  EXPECT_EQ(a.op.comm, row);
  EXPECT_EQ(a.op.index, 0);
  EXPECT_EQ(a.after, (V{0, 0, 0}));
  EXPECT_TRUE(a.compute_waits);
  // A started all-reduce follows the blocking all-gather (through the compute stream).
  DeviceOrder::Plan g1 = order.enqueue(col, Issue::started, Transfer::collective, "all_reduce");
  EXPECT_EQ(g1.after, (V{1, 0, 0}));
  EXPECT_FALSE(g1.compute_waits);
  // Nothing of another communicator waits for it until it is waited for.
  DeviceOrder::Plan send = order.enqueue(pipe, Issue::blocking, Transfer::point_to_point, "send_recv");
  EXPECT_EQ(send.after, (V{1, 0, 0}));
  DeviceOrder::Plan halo = order.enqueue(row, Issue::blocking, Transfer::point_to_point, "send_recv");
  EXPECT_EQ(halo.after, (V{1, 0, 1}));
  // The next collective of its own communicator queues behind it (one stream, in order).
  DeviceOrder::Plan g2 = order.enqueue(col, Issue::started, Transfer::collective, "all_reduce");
  EXPECT_EQ(g2.op.index, 1);
  EXPECT_EQ(g2.after, (V{2, 1, 1}));
  EXPECT_EQ(order.pending_started(col).size(), 2u);
  EXPECT_EQ(order.compute_waited(), (V{2, 0, 1}));
  // Waiting for the second covers the first (their stream is in order).
  EXPECT_TRUE(order.wait(g2.op));
  EXPECT_FALSE(order.wait(g1.op));
  EXPECT_TRUE(order.pending_started(col).empty());
  EXPECT_EQ(order.compute_waited(), (V{2, 2, 1}));
  EXPECT_EQ(order.enqueue(pipe, Issue::blocking, Transfer::collective, "broadcast").after, (V{2, 2, 1}));
  EXPECT_EQ(order.communicators(), 3);
  order.remove_communicator(pipe);
  EXPECT_EQ(order.communicators(), 2);
  EXPECT_TRUE(contains(error_message([&] { order.enqueue(pipe, Issue::blocking, Transfer::collective, "barrier"); }),
                       "which is gone"));
  EXPECT_TRUE(contains(error_message([&] { order.wait({col, 7}); }), "has no operation 7"));
}

TEST(DeviceOrder, PointToPointBehindAStartedAllReduceNotWaitedForIsRefused) {
  DeviceOrder order;
  const int pipe = order.add_communicator("pipe");
  DeviceOrder::Plan started = order.enqueue(pipe, Issue::started, Transfer::collective, "all_reduce");
  const std::string m =
      error_message([&] { order.enqueue(pipe, Issue::blocking, Transfer::point_to_point, "send_recv"); });
  EXPECT_TRUE(contains(m, "send_recv on NCCL communicator \"pipe\": its operation #1 (all_reduce"));
  EXPECT_TRUE(contains(m, "has not been waited for")) << m;
  EXPECT_TRUE(contains(m, "docs/design.md §4")) << m;
  // A collective may follow it: every member issues the communicator's collectives in order.
  order.enqueue(pipe, Issue::started, Transfer::collective, "all_reduce");
  // Once test() has seen the first complete, the second still blocks a transfer.
  order.completed(started.op);
  EXPECT_EQ(order.pending_started(pipe).size(), 1u);
  EXPECT_THROW(order.enqueue(pipe, Issue::blocking, Transfer::point_to_point, "send_recv"), Error);
  // A blocking collective behind both makes the compute stream wait for all three.
  order.enqueue(pipe, Issue::blocking, Transfer::collective, "broadcast");
  EXPECT_TRUE(order.pending_started(pipe).empty());
  EXPECT_NO_THROW(order.enqueue(pipe, Issue::blocking, Transfer::point_to_point, "send_recv"));
}

// ---- programs -------------------------------------------------------------------------

struct Action {
  enum Kind { blocking, start, wait, sync } kind = blocking;
  int comm = -1;      // blocking, start: the communicator (an index into Job::comms)
  int handle = -1;    // start, wait: the started operation's number on this rank
  int dest = -1;      // point to point: the rank sent to (a job rank), or -1
  int source = -1;    // point to point: the rank received from, or -1
  bool host = false;  // blocking, on host tensors: through the wrapped MPI communicator, not NCCL
  bool p2p() const { return dest >= 0 || source >= 0; }
  bool op() const { return kind == blocking || kind == start; }
};

struct Comm {
  std::string name;
  std::vector<int> members;  // job ranks
};

struct Job {
  std::string title;
  std::vector<Comm> comms;
  std::vector<std::vector<Action>> programs;  // one per rank, in host order
};

std::string describe(const Action& a, const Job& job) {
  switch (a.kind) {
    case Action::sync:
      return "sync";
    case Action::wait:
      return "wait(h" + std::to_string(a.handle) + ")";
    default:
      break;
  }
  std::string s = (a.kind == Action::start ? "start " : a.host ? "host " : "") + job.comms[size_t(a.comm)].name;
  if (a.p2p()) {
    s += " p2p";
    if (a.dest >= 0) s += " ->" + std::to_string(a.dest);
    if (a.source >= 0) s += " <-" + std::to_string(a.source);
  } else {
    s += " coll";
  }
  if (a.kind == Action::start) s += " h" + std::to_string(a.handle);
  return s;
}

std::string describe(const Job& job) {
  std::string s = job.title + "\n";
  for (size_t r = 0; r < job.programs.size(); ++r) {
    s += "  rank " + std::to_string(r) + ":";
    for (const Action& a : job.programs[r]) s += " [" + describe(a, job) + "]";
    s += "\n";
  }
  return s;
}

// Every operation of a job as a node, and the nodes that must all have started (MPI: have
// been issued) for it to complete: a collective's members' matching collectives (the k-th on
// the communicator on each), a transfer's matching halves (the k-th message from a to b).
struct Graph {
  std::vector<int> rank_of, action_of;
  std::vector<std::vector<int>> partners;
  std::vector<std::vector<int>> node_at;      // [rank][action] -> node, or -1
  std::vector<std::vector<int>> handle_node;  // [rank][handle] -> node
};

Graph analyse(const Job& job) {
  Graph g;
  const size_t ranks = job.programs.size();
  g.node_at.resize(ranks);
  g.handle_node.resize(ranks);
  std::map<std::vector<int>, std::vector<int>> collective;  // (comm, k) -> nodes
  std::map<std::vector<int>, int> sends, recvs;             // (comm, from, to, k) -> node
  for (size_t r = 0; r < ranks; ++r) {
    std::map<int, int> colls;
    std::map<std::pair<int, int>, int> sent, received;
    const std::vector<Action>& p = job.programs[r];
    g.node_at[r].assign(p.size(), -1);
    for (size_t i = 0; i < p.size(); ++i) {
      const Action& a = p[i];
      if (!a.op()) continue;
      const int node = int(g.rank_of.size());
      g.rank_of.push_back(int(r));
      g.action_of.push_back(int(i));
      g.node_at[r][i] = node;
      if (a.kind == Action::start) {
        if (g.handle_node[r].size() <= size_t(a.handle)) g.handle_node[r].resize(size_t(a.handle) + 1, -1);
        g.handle_node[r][size_t(a.handle)] = node;
      }
      // Host tensors travel on the wrapped MPI communicator: messages of their own.
      const int channel = 2 * a.comm + (a.host ? 1 : 0);
      if (!a.p2p()) {
        collective[{channel, colls[channel]++}].push_back(node);
      } else {
        if (a.dest >= 0) sends[{channel, int(r), a.dest, sent[{channel, a.dest}]++}] = node;
        if (a.source >= 0) recvs[{channel, a.source, int(r), received[{channel, a.source}]++}] = node;
      }
    }
  }
  g.partners.resize(g.rank_of.size());
  for (auto& [key, nodes] : collective) {
    const size_t members = job.comms[size_t(key[0] / 2)].members.size();
    EXPECT_EQ(nodes.size(), members) << "collective #" << key[1] << " of " << job.comms[size_t(key[0] / 2)].name
                                     << " is not issued by every member\n"
                                     << describe(job);
    for (int n : nodes) g.partners[size_t(n)] = nodes;
  }
  for (auto& [key, node] : sends) {
    auto it = recvs.find(key);
    EXPECT_TRUE(it != recvs.end()) << "a send without its receive\n" << describe(job);
    if (it == recvs.end()) continue;
    g.partners[size_t(node)].push_back(it->second);
    g.partners[size_t(it->second)].push_back(node);
  }
  EXPECT_EQ(sends.size(), recvs.size()) << describe(job);
  return g;
}

struct Outcome {
  bool completed = false;
  std::string stuck;  // on a deadlock: where each rank's host and GPU stopped
};

// The MPI backend's semantics, in a random interleaving.
Outcome run_mpi(const Job& job, const Graph& g, std::mt19937& rng) {
  const size_t ranks = job.programs.size();
  std::vector<size_t> pc(ranks, 0);
  std::vector<char> issued(g.rank_of.size(), 0);
  auto complete = [&](int node) {
    if (!issued[size_t(node)]) return false;
    for (int p : g.partners[size_t(node)])
      if (!issued[size_t(p)]) return false;
    return true;
  };
  for (;;) {
    std::vector<int> enabled;
    for (size_t r = 0; r < ranks; ++r) {
      if (pc[r] == job.programs[r].size()) continue;
      const Action& a = job.programs[r][pc[r]];
      const int node = g.node_at[r][pc[r]];
      bool can = true;
      if (a.kind == Action::blocking) can = !issued[size_t(node)] || complete(node);
      if (a.kind == Action::wait) can = complete(g.handle_node[r][size_t(a.handle)]);
      if (can) enabled.push_back(int(r));
    }
    if (enabled.empty()) break;
    const size_t r = size_t(enabled[std::uniform_int_distribution<size_t>(0, enabled.size() - 1)(rng)]);
    const Action& a = job.programs[r][pc[r]];
    const int node = g.node_at[r][pc[r]];
    if (a.kind == Action::blocking && !issued[size_t(node)]) {
      issued[size_t(node)] = 1;  // issued; the host goes on once it is complete
      continue;
    }
    if (a.kind == Action::start) issued[size_t(node)] = 1;
    ++pc[r];
  }
  Outcome out;
  out.completed = true;
  for (size_t r = 0; r < ranks; ++r)
    if (pc[r] < job.programs[r].size()) {
      out.completed = false;
      out.stuck += "rank " + std::to_string(r) + " blocked in [" + describe(job.programs[r][pc[r]], job) + "]; ";
    }
  return out;
}

// Which rule orders the NCCL operations of a GPU.
enum class Rule {
  device_order,  // DeviceOrder's
  per_device,    // the rule it replaced: every operation also waits for the previous one on the GPU
};

// The NCCL backend's semantics under `rule`, in a random interleaving. Also checks that
// every node starts only after the operations the MPI backend completes before it is issued
// (the blocking ones before it, the started ones waited for before it): the rule keeps the
// data dependencies of a blocking call.
Outcome run_nccl(const Job& job, const Graph& g, Rule rule, std::mt19937& rng) {
  const size_t ranks = job.programs.size();
  const size_t nodes = g.rank_of.size();
  struct RankState {
    DeviceOrder order;
    std::vector<int> local;                  // job communicator -> its DeviceOrder number
    std::vector<std::vector<int>> stream;    // DeviceOrder number -> its nodes in order
    std::vector<DeviceOrder::Op> handle_op;  // started operations
    size_t pc = 0;
    int last = -1;                // the last node issued (per_device)
    std::vector<int> mpi_before;  // blocking and waited nodes so far
  };
  std::vector<RankState> st(ranks);
  for (size_t r = 0; r < ranks; ++r) {
    st[r].local.assign(job.comms.size(), -1);
    // Each rank makes its communicators in its own order: numbers are local to a GPU.
    std::vector<size_t> mine;
    for (size_t c = 0; c < job.comms.size(); ++c)
      if (std::count(job.comms[c].members.begin(), job.comms[c].members.end(), int(r))) mine.push_back(c);
    std::shuffle(mine.begin(), mine.end(), rng);
    for (size_t c : mine) st[r].local[c] = st[r].order.add_communicator(job.comms[c].name);
    st[r].stream.resize(mine.size());
  }
  std::vector<char> issued(nodes, 0), started(nodes, 0), done(nodes, 0);
  std::vector<std::vector<int>> deps(nodes), mpi_deps(nodes);
  bool dependency_broken = false;
  std::string broken;

  auto all_done = [&](const std::vector<int>& list) {
    return std::all_of(list.begin(), list.end(), [&](int n) { return done[size_t(n)] != 0; });
  };
  // The nodes a prefix vector (DeviceOrder::Plan::after, compute_waited) names: the last of
  // each prefix stands for the rest (a node starts only after its stream's previous one is
  // complete).
  auto prefix_nodes = [&](const RankState& s, const std::vector<int64_t>& after) {
    std::vector<int> list;
    for (size_t c = 0; c < after.size(); ++c)
      if (after[c] > 0) list.push_back(s.stream[c][size_t(after[c] - 1)]);
    return list;
  };

  for (;;) {
    // Events: a host issues its next action; a node starts; a node completes.
    std::vector<std::pair<int, int>> events;  // (kind, rank or node)
    for (size_t r = 0; r < ranks; ++r) {
      const RankState& s = st[r];
      if (s.pc == job.programs[r].size()) continue;
      const Action& a = job.programs[r][s.pc];
      if (a.kind == Action::sync && !all_done(prefix_nodes(s, s.order.compute_waited()))) continue;
      const int node = g.node_at[r][s.pc];
      if (a.host && started[size_t(node)] && !done[size_t(node)]) continue;  // blocked in an MPI call
      events.push_back({0, int(r)});
    }
    for (size_t n = 0; n < nodes; ++n) {
      if (issued[n] && !started[n] && all_done(deps[n])) events.push_back({1, int(n)});
      if (started[n] && !done[n] &&
          std::all_of(g.partners[n].begin(), g.partners[n].end(), [&](int p) { return started[size_t(p)] != 0; }))
        events.push_back({2, int(n)});
    }
    if (events.empty()) break;
    const auto [kind, who] = events[std::uniform_int_distribution<size_t>(0, events.size() - 1)(rng)];
    if (kind == 1) {
      if (!all_done(mpi_deps[size_t(who)]) && !dependency_broken) {
        dependency_broken = true;
        broken = "node of rank " + std::to_string(g.rank_of[size_t(who)]) + " action " +
                 std::to_string(g.action_of[size_t(who)]) +
                 " started before an operation the MPI backend completes "
                 "before issuing it";
      }
      started[size_t(who)] = 1;
      continue;
    }
    if (kind == 2) {
      done[size_t(who)] = 1;
      continue;
    }
    const size_t r = size_t(who);
    RankState& s = st[r];
    const Action& a = job.programs[r][s.pc];
    const int node = g.node_at[r][s.pc];
    if (a.host) {  // an MPI call on host tensors: the host blocks in it until it completes
      if (!started[size_t(node)]) {
        issued[size_t(node)] = started[size_t(node)] = 1;
      } else {
        ++s.pc;
        s.mpi_before.push_back(node);
      }
      continue;
    }
    ++s.pc;
    if (a.kind == Action::sync) continue;
    if (a.kind == Action::wait) {
      const DeviceOrder::Op op = s.handle_op[size_t(a.handle)];
      s.order.wait(op);
      s.mpi_before.push_back(s.stream[size_t(op.comm)][size_t(op.index)]);
      continue;
    }
    const int local = s.local[size_t(a.comm)];
    const DeviceOrder::Plan plan =
        s.order.enqueue(local, a.kind == Action::blocking ? Issue::blocking : Issue::started,
                        a.p2p() ? Transfer::point_to_point : Transfer::collective, describe(a, job));
    EXPECT_EQ(size_t(plan.op.index), s.stream[size_t(local)].size());
    s.stream[size_t(local)].push_back(node);
    deps[size_t(node)] = prefix_nodes(s, plan.after);
    if (rule == Rule::per_device && s.last >= 0) deps[size_t(node)].push_back(s.last);
    mpi_deps[size_t(node)] = s.mpi_before;
    s.last = node;
    if (a.kind == Action::start) {
      if (s.handle_op.size() <= size_t(a.handle)) s.handle_op.resize(size_t(a.handle) + 1);
      s.handle_op[size_t(a.handle)] = plan.op;
    } else {
      s.mpi_before.push_back(node);
    }
    issued[size_t(node)] = 1;
  }
  EXPECT_FALSE(dependency_broken) << broken << "\n" << describe(job);
  Outcome out;
  out.completed = true;
  for (size_t r = 0; r < ranks; ++r) {
    std::string where;
    if (st[r].pc < job.programs[r].size())
      where += " host blocked in [" + describe(job.programs[r][st[r].pc], job) + "]";
    for (size_t i = 0; i < job.programs[r].size(); ++i) {
      const int n = g.node_at[r][i];
      if (n < 0 || done[size_t(n)]) continue;
      const char* state = started[size_t(n)] ? "] running" : issued[size_t(n)] ? "] waiting" : "] unissued";
      where += " [" + describe(job.programs[r][i], job) + state;
    }
    if (!where.empty()) {
      out.completed = false;
      out.stuck += "rank " + std::to_string(r) + ":" + where + "; ";
    }
  }
  return out;
}

// ---- hand-written programs --------------------------------------------------------------

Action coll(int comm) { return {Action::blocking, comm, -1, -1, -1}; }
Action start(int comm, int handle) { return {Action::start, comm, handle, -1, -1}; }
Action wait(int handle) { return {Action::wait, -1, handle, -1, -1}; }
Action send(int comm, int to) { return {Action::blocking, comm, -1, to, -1}; }
Action recv(int comm, int from) { return {Action::blocking, comm, -1, -1, from}; }
Action sync() { return {Action::sync, -1, -1, -1, -1}; }
Action on_host(Action a) {
  a.host = true;
  return a;
}

std::vector<Job> adversarial_jobs() {
  std::vector<Job> jobs;
  {
    // Two stages of a 1x2 grid: ranks 0, 1 are stage 0 (batch shards 0, 1), ranks 2, 3 stage 1.
    // Stage 1, shard 0 starts its gradient all-reduce on col and then sends a gradient to
    // the previous stage; shard 1 sends first and starts after. Stage 0 receives on one shard
    // and reduces on col first on the other.
    Job j;
    j.title = "gradient all-reduce started on col, then a pipe send; the neighbours in the other order";
    j.comms = {{"col", {0, 1}}, {"col", {2, 3}}, {"pipe", {0, 2}}, {"pipe", {1, 3}}};
    j.programs = {
        {recv(2, 2), coll(0)},
        {coll(0), recv(3, 3)},
        {start(1, 0), send(2, 0), wait(0)},
        {send(3, 1), start(1, 0), wait(0)},
    };
    jobs.push_back(j);
  }
  {
    // The same with the pipe messages of PipelinedModel::send: a header of host memory (through MPI,
    // blocking the host), then the tensor through NCCL.
    Job j;
    j.title = "the same with a header on the host before each pipe tensor";
    j.comms = {{"col", {0, 1}}, {"col", {2, 3}}, {"pipe", {0, 2}}, {"pipe", {1, 3}}};
    j.programs = {
        {on_host(recv(2, 2)), recv(2, 2), coll(0)},
        {coll(0), on_host(recv(3, 3)), recv(3, 3)},
        {start(1, 0), on_host(send(2, 0)), send(2, 0), wait(0)},
        {on_host(send(3, 1)), send(3, 1), start(1, 0), wait(0)},
    };
    jobs.push_back(j);
  }
  {
    // One stage of a 1x2 grid: col and stage hold the same two ranks. Rank 0 starts a
    // gradient bucket, then all-reduces batch-norm statistics over the stage; rank 1 the
    // other way round.
    Job j;
    j.title = "a started all-reduce on col, then a blocking one on stage; the peer the other way round";
    j.comms = {{"col", {0, 1}}, {"stage", {0, 1}}};
    j.programs = {
        {start(0, 0), coll(1), wait(0), sync()},
        {coll(1), start(0, 0), wait(0), sync()},
    };
    jobs.push_back(j);
  }
  {
    // Three stages, one rank each, and a world all-reduce started by the last stage before it
    // sends back; the first stage starts it only after its receive.
    Job j;
    j.title = "a world all-reduce started before a pipe send that the others wait for first";
    j.comms = {{"world", {0, 1, 2}}, {"pipe", {0, 1, 2}}};
    j.programs = {
        {recv(1, 1), start(0, 0), wait(0)},
        {recv(1, 2), send(1, 0), start(0, 0), wait(0)},
        {start(0, 0), send(1, 1), wait(0)},
    };
    jobs.push_back(j);
  }
  {
    // Two started all-reduces on one communicator, then a row operation: the second queues
    // behind the first on its stream, which must not hold up the row.
    Job j;
    j.title = "two started all-reduces on col, then row; the col peer after its row operation";
    j.comms = {{"col", {0, 1}}, {"row", {0, 1}}};
    j.programs = {
        {start(0, 0), start(0, 1), coll(1), wait(1), wait(0)},
        {coll(1), start(0, 0), start(0, 1), wait(0), wait(1)},
    };
    jobs.push_back(j);
  }
  return jobs;
}

TEST(DeviceOrderSimulation, HandWrittenProgramsCompleteUnderTheRuleAndDeadlockUnderPerDeviceSerialization) {
  std::mt19937 rng(12345);
  for (const Job& job : adversarial_jobs()) {
    SCOPED_TRACE(describe(job));
    const Graph g = analyse(job);
    for (int i = 0; i < 20; ++i) {
      const Outcome mpi = run_mpi(job, g, rng);
      ASSERT_TRUE(mpi.completed) << "not a valid program: the MPI backend deadlocks: " << mpi.stuck;
    }
    for (int i = 0; i < 50; ++i) {
      const Outcome nccl = run_nccl(job, g, Rule::device_order, rng);
      ASSERT_TRUE(nccl.completed) << nccl.stuck;
    }
    const Outcome old = run_nccl(job, g, Rule::per_device, rng);
    EXPECT_FALSE(old.completed) << "per-device serialization completed it";
    if (!old.completed) std::cout << job.title << "\n  per-device serialization deadlocks: " << old.stuck << "\n";
  }
}

TEST(DeviceOrderSimulation, ItFindsTheDeadlocksOfTheMpiBackend) {
  // Blocking operations in crossed orders deadlock with MPI, and under the rule too (it keeps
  // a blocking call's order), so a deadlock is something the simulator does report.
  Job j;
  j.title = "crossed blocking order";
  j.comms = {{"row", {0, 1}}, {"col", {0, 1}}};
  j.programs = {{coll(0), coll(1)}, {coll(1), coll(0)}};
  const Graph g = analyse(j);
  std::mt19937 rng(7);
  EXPECT_FALSE(run_mpi(j, g, rng).completed);
  EXPECT_FALSE(run_nccl(j, g, Rule::device_order, rng).completed);
  // And a wait that comes before a peer can start the all-reduce.
  Job k;
  k.title = "waited before the peer starts";
  k.comms = {{"col", {0, 1}}, {"row", {0, 1}}};
  k.programs = {{start(0, 0), wait(0), coll(1)}, {coll(1), start(0, 0), wait(0)}};
  const Graph gk = analyse(k);
  EXPECT_FALSE(run_mpi(k, gk, rng).completed);
  EXPECT_FALSE(run_nccl(k, gk, Rule::device_order, rng).completed);
}

// ---- random programs ---------------------------------------------------------------------

// A random job on a random grid (stages x rows x cols, 2 to 12 ranks) whose programs follow
// one global sequence of steps, so that the MPI backend completes them: a blocking collective
// or a transfer is issued by all its ranks at the same step; each member issues a started
// all-reduce at a step of its own (in the communicator's order of collectives, possibly
// long after the others) and waits for it only once every member has started it.
// Communicators of one rank are left out, as the grid makes them self communicators.
Job random_job(std::mt19937& rng, int id) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int stages = 1, rows = 1, cols = 1;
  while (stages * rows * cols < 2) {
    stages = pick(1, 3);
    rows = pick(1, 2);
    cols = pick(1, 3);
  }
  const int ranks = stages * rows * cols;
  auto rank_of = [&](int s, int r, int c) { return (s * cols + c) * rows + r; };
  Job job;
  job.title = "random job " + std::to_string(id) + " on a " + std::to_string(stages) + "x" + std::to_string(rows) +
              "x" + std::to_string(cols) + " grid";
  auto add = [&](std::string name, std::vector<int> members) {
    if (members.size() > 1) job.comms.push_back({std::move(name), std::move(members)});
  };
  std::vector<int> world(static_cast<size_t>(ranks));
  for (int w = 0; w < ranks; ++w) world[size_t(w)] = w;
  add("world", world);
  for (int s = 0; s < stages; ++s) {
    std::vector<int> stage;
    for (int c = 0; c < cols; ++c)
      for (int r = 0; r < rows; ++r) stage.push_back(rank_of(s, r, c));
    add("stage" + std::to_string(s), stage);
    for (int c = 0; c < cols; ++c) {
      std::vector<int> row;
      for (int r = 0; r < rows; ++r) row.push_back(rank_of(s, r, c));
      add("row" + std::to_string(s) + std::to_string(c), row);
    }
    for (int r = 0; r < rows; ++r) {
      std::vector<int> col;
      for (int c = 0; c < cols; ++c) col.push_back(rank_of(s, r, c));
      add("col" + std::to_string(s) + std::to_string(r), col);
    }
  }
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      std::vector<int> pipe;
      for (int s = 0; s < stages; ++s) pipe.push_back(rank_of(s, r, c));
      add("pipe" + std::to_string(r) + std::to_string(c), pipe);
    }
  job.programs.resize(size_t(ranks));

  const size_t comms = job.comms.size();
  // Per communicator: collectives created; per member: collectives issued. Per rank: its
  // started handles (communicator, collective number, waited).
  std::vector<int> created(comms, 0);
  std::vector<std::vector<int>> issued(comms);
  for (size_t c = 0; c < comms; ++c) issued[c].assign(job.comms[c].members.size(), 0);
  struct Handle {
    int comm, k;
    bool waited;
  };
  std::vector<std::vector<Handle>> handles(static_cast<size_t>(ranks));
  // Per rank and communicator: the collectives before this number are known complete on it
  // (a blocking one issued, or a started one waited for): what DeviceOrder lets a transfer
  // follow.
  std::vector<std::vector<int>> settled(size_t(ranks), std::vector<int>(comms, 0));
  auto started_by_all = [&](size_t c, int k) {
    return std::all_of(issued[c].begin(), issued[c].end(), [&](int n) { return n > k; });
  };
  auto issue_start = [&](size_t c, int m) {  // member m issues its next collective of c, a started one
    const int rank = job.comms[c].members[size_t(m)];
    const int k = issued[c][size_t(m)]++;
    handles[size_t(rank)].push_back({int(c), k, false});
    job.programs[size_t(rank)].push_back(start(int(c), int(handles[size_t(rank)].size()) - 1));
  };
  auto do_wait = [&](int rank, size_t h) {
    Handle& hd = handles[size_t(rank)][h];
    hd.waited = true;
    int& s = settled[size_t(rank)][size_t(hd.comm)];
    s = std::max(s, hd.k + 1);
    job.programs[size_t(rank)].push_back(wait(int(h)));
  };
  auto free_for_transfer = [&](size_t c, int rank) {
    for (const Handle& hd : handles[size_t(rank)])
      if (size_t(hd.comm) == c && hd.k >= settled[size_t(rank)][c]) return false;
    return true;
  };

  const int steps = pick(8, 40);
  for (int step = 0; step < steps; ++step) {
    const size_t c = size_t(pick(0, int(comms) - 1));
    const std::vector<int>& members = job.comms[c].members;
    const bool pipe = job.comms[c].name.rfind("pipe", 0) == 0;
    switch (pick(0, 9)) {
      case 0:
      case 1: {  // a blocking collective, once every member has issued the earlier ones
        if (!std::all_of(issued[c].begin(), issued[c].end(), [&](int n) { return n == created[c]; })) break;
        ++created[c];
        const bool host = pick(0, 3) == 0;  // on host tensors: through MPI
        for (size_t m = 0; m < members.size(); ++m) {
          ++issued[c][m];
          if (!host) settled[size_t(members[m])][c] = created[c];
          job.programs[size_t(members[m])].push_back(host ? on_host(coll(int(c))) : coll(int(c)));
        }
        break;
      }
      case 2:
      case 3:
      case 4: {  // a member starts its next all-reduce of c (a new one if it is up to date)
        const int m = pick(0, int(members.size()) - 1);
        if (issued[c][size_t(m)] == created[c]) ++created[c];
        issue_start(c, m);
        break;
      }
      case 5:
      case 6: {  // a rank waits for one of its started all-reduces that every member has started
        const int rank = pick(0, ranks - 1);
        std::vector<size_t> ready;
        for (size_t h = 0; h < handles[size_t(rank)].size(); ++h) {
          const Handle& hd = handles[size_t(rank)][h];
          if (!hd.waited && started_by_all(size_t(hd.comm), hd.k)) ready.push_back(h);
        }
        if (!ready.empty()) do_wait(rank, ready[size_t(pick(0, int(ready.size()) - 1))]);
        break;
      }
      case 7:
      case 8: {  // transfers on a pipe: one message, or a cycle of send_recv among some members
        if (!pipe) break;
        std::vector<int> who = members;
        std::shuffle(who.begin(), who.end(), rng);
        who.resize(size_t(pick(2, int(who.size()))));
        const bool host = pick(0, 3) == 0;  // host tensors go through MPI, not the NCCL stream
        if (!host && !std::all_of(who.begin(), who.end(), [&](int rank) { return free_for_transfer(c, rank); })) break;
        std::vector<Action> actions;
        if (who.size() == 2 && pick(0, 1)) {
          actions.push_back(send(int(c), who[1]));
          actions.push_back(recv(int(c), who[0]));
        } else {
          for (size_t i = 0; i < who.size(); ++i)
            actions.push_back(
                {Action::blocking, int(c), -1, who[(i + 1) % who.size()], who[(i + who.size() - 1) % who.size()]});
        }
        for (size_t i = 0; i < who.size(); ++i) {
          actions[i].host = host;
          job.programs[size_t(who[i])].push_back(actions[i]);
        }
        break;
      }
      default:  // a host synchronization (reading a loss, a barrier's wait)
        job.programs[size_t(pick(0, ranks - 1))].push_back(sync());
        break;
    }
  }
  // Every member starts what is left, in random order, then every rank waits for all it started.
  std::vector<std::pair<size_t, int>> left;
  for (size_t c = 0; c < comms; ++c)
    for (size_t m = 0; m < issued[c].size(); ++m)
      for (int k = issued[c][m]; k < created[c]; ++k) left.push_back({c, int(m)});
  std::shuffle(left.begin(), left.end(), rng);
  for (auto [c, m] : left) issue_start(c, m);  // per member in order: issue_start takes its next
  for (int rank = 0; rank < ranks; ++rank) {
    std::vector<size_t> open;
    for (size_t h = 0; h < handles[size_t(rank)].size(); ++h)
      if (!handles[size_t(rank)][h].waited) open.push_back(h);
    std::shuffle(open.begin(), open.end(), rng);
    for (size_t h : open) do_wait(rank, h);
    if (pick(0, 1)) job.programs[size_t(rank)].push_back(sync());
  }
  return job;
}

TEST(DeviceOrderSimulation, RandomProgramsAlwaysCompleteUnderTheRule) {
  std::mt19937 rng(2024);
  const int jobs = 1500;
  int old_deadlocks = 0, operations = 0;
  std::string first_old_deadlock;
  for (int id = 0; id < jobs; ++id) {
    const Job job = random_job(rng, id);
    const Graph g = analyse(job);
    operations += int(g.rank_of.size());
    for (int i = 0; i < 2; ++i) {
      const Outcome mpi = run_mpi(job, g, rng);
      ASSERT_TRUE(mpi.completed) << "the generator made a program the MPI backend deadlocks on: " << mpi.stuck << "\n"
                                 << describe(job);
    }
    for (int i = 0; i < 3; ++i) {
      const Outcome nccl = run_nccl(job, g, Rule::device_order, rng);
      ASSERT_TRUE(nccl.completed) << nccl.stuck << "\n" << describe(job);
    }
    const Outcome old = run_nccl(job, g, Rule::per_device, rng);
    if (!old.completed) {
      ++old_deadlocks;
      if (first_old_deadlock.empty()) first_old_deadlock = describe(job) + "  " + old.stuck;
    }
  }
  std::cout << jobs << " random programs (" << operations << " operations): all complete under the rule; "
            << old_deadlocks << " deadlock under per-device serialization, e.g.\n"
            << first_old_deadlock << "\n";
  EXPECT_GT(old_deadlocks, 0);
}

}  // namespace
}  // namespace gridnn::parallel
