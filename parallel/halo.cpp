// The depth split rule and the halo exchange on the Communicator interface (no MPI here).
#include "parallel/halo.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "kernels/layout.h"

namespace gridnn::parallel {
namespace {

// Messages between two ranks match by tag: one for the planes, one for their gradients.
constexpr int kHaloTag = 0x4a10;
constexpr int kHaloGradientTag = 0x4a11;

Range intersect(Range a, Range b) {
  Range r{std::max(a.begin, b.begin), std::min(a.end, b.end)};
  if (r.end < r.begin) r.end = r.begin;
  return r;
}

std::string window_str(const DepthWindow& w) {
  return "kernel " + std::to_string(w.kernel) + ", stride " + std::to_string(w.stride) + ", padding " +
         std::to_string(w.padding) + " along depth";
}

const PlaneTransfer* find_peer(const std::vector<PlaneTransfer>& transfers, int peer, size_t* at) {
  for (size_t i = 0; i < transfers.size(); ++i)
    if (transfers[i].peer == peer) {
      *at = i;
      return &transfers[i];
    }
  return nullptr;
}

// P - 1 rounds, all posted at once; in round d rank r sends to r + d and receives from
// r - d (mod P). Both ends of a message compute the same plan, so a send in round d always
// meets its receive. outgoing[i] goes to out_list[i].peer; incoming[i] comes from
// in_list[i].peer.
std::vector<std::unique_ptr<PendingCall>> start_exchange(Communicator& comm, const std::vector<PlaneTransfer>& out_list,
                                                         const std::vector<Tensor>& outgoing,
                                                         const std::vector<PlaneTransfer>& in_list,
                                                         std::vector<Tensor>& incoming, int tag) {
  std::vector<std::unique_ptr<PendingCall>> calls;
  const int p = comm.size(), r = comm.rank();
  for (int d = 1; d < p; ++d) {
    const int dest = (r + d) % p, source = (r - d + p) % p;
    size_t out_at = 0, in_at = 0;
    const bool sending = find_peer(out_list, dest, &out_at) != nullptr;
    const bool receiving = find_peer(in_list, source, &in_at) != nullptr;
    if (!sending && !receiving) continue;
    Tensor none;
    calls.push_back(comm.start_send_recv(sending ? outgoing[out_at] : Tensor(), sending ? dest : -1,
                                         receiving ? incoming[in_at] : none, receiving ? source : -1, tag));
  }
  return calls;
}

void wait_all(std::vector<std::unique_ptr<PendingCall>>& calls) {
  for (auto& c : calls) c->wait();
  calls.clear();
}

}  // namespace

int64_t DepthHalo::padding_before() const { return std::max<int64_t>(0, -needed.begin); }
int64_t DepthHalo::padding_after() const { return std::max<int64_t>(0, needed.end - input.global); }

int largest_usable_parts(int64_t global_in, const DepthWindow& window) {
  if (global_in <= 0 || global_in + 2 * window.padding < window.kernel) return 0;
  const int64_t out = window.output_size(global_in);
  return int(std::min<int64_t>({out, global_in, int64_t(1) << 30}));
}

DepthHalo plan_depth_halo(const std::string& layer, int64_t global_in, const DepthWindow& window, int parts,
                          int index) {
  GRIDNN_REQUIRE(window.kernel >= 1 && window.stride >= 1 && window.padding >= 0, layer, ": ", window_str(window),
                 " must have kernel and stride >= 1, padding >= 0");
  GRIDNN_REQUIRE(parts >= 1 && index >= 0 && index < parts, layer, ": rank ", index, " is not one of ", parts,
                 " ranks");
  GRIDNN_REQUIRE(global_in >= 1 && global_in + 2 * window.padding >= window.kernel, layer, ": a depth of ", global_in,
                 " planes is too thin for ", window_str(window));
  const int64_t global_out = window.output_size(global_in);
  const int usable = largest_usable_parts(global_in, window);
  if (parts > usable) {
    const bool outputs_short = global_out < parts;
    throw Error(detail::concat(
        layer, ": the depth split over Pr = ", parts, " ranks leaves ranks ", outputs_short ? global_out : global_in,
        "..", parts - 1, " without ", outputs_short ? "output" : "input", " planes (", global_in, " input planes -> ",
        global_out, " output planes, ", window_str(window),
        "): the slab is thinner than the halo; the largest usable Pr for this layer is ", usable));
  }

  DepthHalo h;
  h.window = window;
  h.input = DepthSplit{global_in, parts, index};
  h.output = DepthSplit{global_out, parts, index};
  h.needed = window.input_planes(h.output.owned());
  const Range volume{0, global_in};
  const Range mine = h.input.owned();
  const Range my_need = intersect(h.needed, volume);
  for (int q = 0; q < parts; ++q) {
    if (q == index) continue;
    const Range from_q = intersect(my_need, h.input.owned_by(q));
    if (from_q.size() > 0) h.receives.push_back({q, from_q});
    const Range q_need = intersect(window.input_planes(h.output.owned_by(q)), volume);
    const Range to_q = intersect(q_need, mine);
    if (to_q.size() > 0) h.sends.push_back({q, to_q});
  }
  return h;
}

std::vector<Tensor> plane_buffers(const std::vector<PlaneTransfer>& transfers, const Tensor& like) {
  std::vector<Tensor> out;
  out.reserve(transfers.size());
  for (const PlaneTransfer& t : transfers)
    out.push_back(Tensor::empty(like.shape().with(2, t.planes.size()), like.dtype(), like.device()));
  return out;
}

std::vector<Tensor> planes_to_send(const DepthHalo& h, const Tensor& x) {
  std::vector<Tensor> out;
  out.reserve(h.sends.size());
  for (const PlaneTransfer& t : h.sends)
    out.push_back(ops::slice(x, 2, t.planes.begin - h.input.owned().begin, t.planes.size()));
  return out;
}

std::vector<Tensor> gradients_to_return(const DepthHalo& h, const Tensor& d_extended) {
  std::vector<Tensor> out;
  out.reserve(h.receives.size());
  for (const PlaneTransfer& t : h.receives)
    out.push_back(ops::slice(d_extended, 2, t.planes.begin - h.needed.begin, t.planes.size()));
  return out;
}

Tensor assemble_own(const DepthHalo& h, const Tensor& x, float padding_value) {
  Tensor ext = Tensor::empty(x.shape().with(2, h.extended_planes()), x.dtype(), x.device());
  const Range mine = h.input.owned();
  const int64_t base = h.needed.begin;  // global plane of the extended slab's plane 0
  ops::fill_slices(ext, 2, 0, h.padding_before(), padding_value);
  ops::fill_slices(ext, 2, h.extended_planes() - h.padding_after(), h.padding_after(), padding_value);
  const Range own_needed = intersect(h.needed, mine);
  ops::copy_slices(x, 2, own_needed.begin - mine.begin, ext, own_needed.begin - base, own_needed.size());
  return ext;
}

void place_received(const DepthHalo& h, const std::vector<Tensor>& incoming, Tensor& extended) {
  GRIDNN_REQUIRE(incoming.size() == h.receives.size(), "place_received: ", incoming.size(), " tensors for ",
                 h.receives.size(), " transfers");
  const int64_t base = h.needed.begin;
  for (size_t i = 0; i < incoming.size(); ++i)
    ops::copy_slices(incoming[i], 2, 0, extended, h.receives[i].planes.begin - base, h.receives[i].planes.size());
}

Tensor own_gradient(const DepthHalo& h, const Tensor& d_extended) {
  const Range mine = h.input.owned();
  const int64_t base = h.needed.begin;
  Tensor dx = Tensor::empty(d_extended.shape().with(2, mine.size()), d_extended.dtype(), d_extended.device());
  const Range own_needed = intersect(h.needed, mine);
  if (own_needed.size() == 0) {
    ops::fill_slices(dx, 2, 0, mine.size(), 0.0);
  } else {
    ops::fill_slices(dx, 2, 0, own_needed.begin - mine.begin, 0.0);
    ops::copy_slices(d_extended, 2, own_needed.begin - base, dx, own_needed.begin - mine.begin, own_needed.size());
    ops::fill_slices(dx, 2, own_needed.end - mine.begin, mine.end - own_needed.end, 0.0);
  }
  return dx;
}

void add_returned(const DepthHalo& h, const std::vector<Tensor>& incoming, Tensor& dx) {
  GRIDNN_REQUIRE(incoming.size() == h.sends.size(), "add_returned: ", incoming.size(), " tensors for ", h.sends.size(),
                 " transfers");
  const Range mine = h.input.owned();
  for (size_t i = 0; i < incoming.size(); ++i)  // in rank order: a fixed order of addition
    ops::add_slices(incoming[i], 2, 0, dx, h.sends[i].planes.begin - mine.begin, h.sends[i].planes.size());
}

HaloExchange::HaloExchange(Communicator& row, DepthHalo halo, std::string layer)
    : row_(row), halo_(std::move(halo)), layer_(std::move(layer)) {
  GRIDNN_REQUIRE(row_.size() == halo_.input.parts && row_.rank() == halo_.input.index, layer_,
                 ": the halo was planned for rank ", halo_.input.index, " of ", halo_.input.parts, " but the ",
                 row_.name(), " communicator has rank ", row_.rank(), " of ", row_.size());
}

Tensor HaloExchange::extend(const Tensor& x, float padding_value) {
  HaloInFlight started = start_extend(x, padding_value);
  return finish_extend(started);
}

Tensor HaloExchange::return_gradient(const Tensor& d_ext) {
  HaloInFlight started = start_return_gradient(d_ext);
  return finish_return_gradient(started);
}

HaloInFlight HaloExchange::start_extend(const Tensor& x, float padding_value) {
  const Range mine = halo_.input.owned();
  GRIDNN_REQUIRE(x.defined() && x.rank() == 5 && x.size(2) == mine.size(), layer_,
                 ": expects this rank's depth slab [B, C, ", mine.size(), ", H, W] (planes [", mine.begin, ", ",
                 mine.end, ") of ", halo_.input.global, "), got ", x.defined() ? x.str() : std::string("undefined"));
  HaloInFlight f;
  f.outgoing = planes_to_send(halo_, x);
  f.incoming = plane_buffers(halo_.receives, x);
  f.calls = start_exchange(row_, halo_.sends, f.outgoing, halo_.receives, f.incoming, kHaloTag);
  f.assembled = assemble_own(halo_, x, padding_value);
  return f;
}

Tensor HaloExchange::finish_extend(HaloInFlight& started) {
  wait_all(started.calls);
  started.outgoing.clear();
  place_received(halo_, started.incoming, started.assembled);
  started.incoming.clear();
  return std::move(started.assembled);
}

HaloInFlight HaloExchange::start_return_gradient(const Tensor& d_ext) {
  GRIDNN_REQUIRE(d_ext.defined() && d_ext.rank() == 5 && d_ext.size(2) == halo_.extended_planes(), layer_,
                 ": expects the gradient of the extended slab [B, C, ", halo_.extended_planes(), ", H, W], got ",
                 d_ext.defined() ? d_ext.str() : std::string("undefined"));
  // What this rank received in the forward goes back to its owner; what it sent comes back.
  HaloInFlight f;
  f.outgoing = gradients_to_return(halo_, d_ext);
  f.incoming = plane_buffers(halo_.sends, d_ext);
  f.calls = start_exchange(row_, halo_.receives, f.outgoing, halo_.sends, f.incoming, kHaloGradientTag);
  f.assembled = own_gradient(halo_, d_ext);  // the returned gradients follow in finish_return_gradient
  return f;
}

Tensor HaloExchange::finish_return_gradient(HaloInFlight& started) {
  wait_all(started.calls);
  started.outgoing.clear();
  add_returned(halo_, started.incoming, started.assembled);
  started.incoming.clear();
  return std::move(started.assembled);
}

}  // namespace gridnn::parallel
