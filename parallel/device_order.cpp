// The order of NCCL operations on one GPU (device_order.h, docs/design.md §4).
#include "parallel/device_order.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace gridnn::parallel {

int nccl_cta_limit(int multiprocessors, int communicators) {
  GRIDNN_REQUIRE(multiprocessors >= 1 && communicators >= 1, "nccl_cta_limit: ", multiprocessors, " SMs and ",
                 communicators, " communicators; both must be at least 1");
  const int budget = multiprocessors * 3 / 4;  // a quarter of the SMs stays with compute
  int limit = 32;
  while (limit > 1 && limit * communicators > budget) limit /= 2;
  return limit;
}

DeviceOrder::Comm& DeviceOrder::at(int comm, const char* what) {
  return const_cast<Comm&>(std::as_const(*this).at(comm, what));
}

const DeviceOrder::Comm& DeviceOrder::at(int comm, const char* what) const {
  GRIDNN_REQUIRE(comm >= 0 && size_t(comm) < comms_.size(), "DeviceOrder::", what, ": no communicator ", comm, " (",
                 comms_.size(), " added)");
  return comms_[size_t(comm)];
}

int DeviceOrder::add_communicator(std::string name) {
  comms_.push_back(Comm{});
  comms_.back().name = std::move(name);
  return int(comms_.size()) - 1;
}

void DeviceOrder::remove_communicator(int comm) { at(comm, "remove_communicator").open = false; }

int DeviceOrder::communicators() const {
  return int(std::count_if(comms_.begin(), comms_.end(), [](const Comm& c) { return c.open; }));
}

const std::string& DeviceOrder::name(int comm) const { return at(comm, "name").name; }

DeviceOrder::Plan DeviceOrder::enqueue(int comm, Issue issue, Transfer transfer, const std::string& op) {
  Comm& c = at(comm, "enqueue");
  GRIDNN_REQUIRE(c.open, op, " on NCCL communicator \"", c.name, "\", which is gone");
  if (transfer == Transfer::point_to_point) {
    const std::vector<Op> pending = pending_started(comm);
    if (!pending.empty()) {
      const auto& first = *std::find_if(c.started.begin(), c.started.end(),
                                        [&](const auto& s) { return s.first == pending.front().index; });
      throw Error(detail::concat(
          op, " on NCCL communicator \"", c.name, "\": its operation #", first.first + 1, " (", first.second,
          ", started without blocking) has not been waited for. An NCCL communicator runs its operations in the "
          "order they were issued, so this transfer would wait for that ",
          first.second,
          ", which may itself need a peer that first needs this transfer: a deadlock the MPI backend would not "
          "have. Wait for it first, or start it on another communicator (docs/design.md §4)"));
    }
  }
  Plan plan;
  plan.op = {comm, c.issued};
  plan.after.resize(comms_.size());
  for (size_t i = 0; i < comms_.size(); ++i) plan.after[i] = int(i) == comm ? c.issued : comms_[i].compute_waited;
  plan.compute_waits = issue == Issue::blocking;
  if (issue == Issue::started) c.started.emplace_back(c.issued, op);
  ++c.issued;
  // The compute stream now waits for this operation and, its stream being in order, for all
  // earlier ones of the communicator.
  if (plan.compute_waits) wait(plan.op);
  return plan;
}

bool DeviceOrder::wait(Op op) {
  Comm& c = at(op.comm, "wait");
  GRIDNN_REQUIRE(op.index >= 0 && op.index < c.issued, "DeviceOrder::wait: communicator \"", c.name,
                 "\" has no operation ", op.index, " (", c.issued, " enqueued)");
  const bool now = op.index >= c.compute_waited;
  c.compute_waited = std::max(c.compute_waited, op.index + 1);
  completed(op);
  return now;
}

void DeviceOrder::completed(Op op) {
  Comm& c = at(op.comm, "completed");
  GRIDNN_REQUIRE(op.index >= 0 && op.index < c.issued, "DeviceOrder::completed: communicator \"", c.name,
                 "\" has no operation ", op.index, " (", c.issued, " enqueued)");
  c.known_done = std::max(c.known_done, op.index + 1);
  // Forget the started operations now known done (one stream is in order: all before it).
  auto done = std::find_if(c.started.begin(), c.started.end(), [&](const auto& s) { return s.first >= c.known_done; });
  c.started.erase(c.started.begin(), done);
}

std::vector<int64_t> DeviceOrder::compute_waited() const {
  std::vector<int64_t> waited(comms_.size());
  for (size_t i = 0; i < comms_.size(); ++i) waited[i] = comms_[i].compute_waited;
  return waited;
}

std::vector<DeviceOrder::Op> DeviceOrder::pending_started(int comm) const {
  const Comm& c = at(comm, "pending_started");
  std::vector<Op> pending;
  for (const auto& [index, op] : c.started)
    if (index >= c.known_done) pending.push_back({comm, index});
  return pending;
}

}  // namespace gridnn::parallel
