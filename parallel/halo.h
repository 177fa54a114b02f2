// The depth split and its halo exchange (docs/design.md §4), as their own component (DiHydrogen's
// distconv, docs/design.md §10): the distribution of an activation is described explicitly, and the
// layers that need neighbouring planes ask HaloExchange for them.
//
// Distribution: activations are [B, C, D, H, W]; depth (dimension 2) is split over the Pr
// ranks of the row communicator, rank r holding the balanced range r of the D planes
// (DepthSplit). H, W, B and C are whole on every rank of the row.
//
// Depth split rule: for a window (kernel k, stride s, padding p) along depth, rank r owns the
// output planes [o0, o1) = balanced_range(D_out, Pr, r), D_out = (D_in + 2p - k) / s + 1, and
// needs the input planes [o0 s - p, (o1 - 1) s - p + k). The "extended slab" holds exactly
// those planes: the ones it owns, the ones other ranks own (the halo, fetched from them), and
// the ones outside the volume (padding, filled with the layer's padding value). A window of
// stride s and padding 0 over the extended slab then gives exactly the owned output planes.
//
// Pairing (docs/design.md §10): extend() in the forward fetches planes from their owners;
// return_gradient() in the backward sends the gradients of those planes back to their owners,
// who add them to their own. Both are point-to-point send_recv on the row communicator, and
// every rank works out the same plan, so sends and receives always match.
//
// Planes are packed and unpacked on the tensor's own device (kernels/layout.h); the
// communicator carries device tensors itself (NCCL, or MPI through pinned buffers).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/names.h"
#include "core/tensor.h"
#include "parallel/communicator.h"
#include "parallel/process_grid.h"

namespace gridnn::parallel {

// How a depth of `global` planes is split over `parts` ranks; this rank is `index`.
struct DepthSplit {
  int64_t global = 0;
  int parts = 1;
  int index = 0;

  Range owned() const { return owned_by(index); }
  Range owned_by(int rank) const { return balanced_range(global, parts, rank); }
};

// A window along depth: a convolution's or a pooling's kernel, stride and padding.
struct DepthWindow {
  int64_t kernel = 1, stride = 1, padding = 0;

  int64_t output_size(int64_t input) const { return (input + 2 * padding - kernel) / stride + 1; }
  // The input planes output planes [o.begin, o.end) read, unclipped (may reach into padding).
  Range input_planes(Range o) const { return {o.begin * stride - padding, (o.end - 1) * stride - padding + kernel}; }
};

// Planes [planes.begin, planes.end) of the input, in global numbering, moving between this
// rank and `peer`.
struct PlaneTransfer {
  int peer = 0;
  Range planes;
};

// One layer's halo for one rank: what it owns, what it needs, and who sends what to whom.
struct DepthHalo {
  DepthWindow window;
  DepthSplit input;                     // global: D_in
  DepthSplit output;                    // global: D_out, same parts and index
  Range needed;                         // input planes of the extended slab, unclipped
  std::vector<PlaneTransfer> receives;  // planes owned by peer that this rank needs (by peer)
  std::vector<PlaneTransfer> sends;     // planes this rank owns that peer needs (by peer)

  int64_t extended_planes() const { return needed.size(); }
  // Planes of the extended slab outside the volume (zero or -inf padding): before and after.
  int64_t padding_before() const;
  int64_t padding_after() const;
};

// The largest Pr for which every rank owns at least one output and one input plane of a
// layer with this window over `global_in` planes (0 when the window does not fit at all).
int largest_usable_parts(int64_t global_in, const DepthWindow& window);

// The halo of rank `index` of `parts` (docs/design.md §4's rule). Throws gridnn::Error naming `layer`
// and the largest usable Pr when some rank would own no output or no input plane.
DepthHalo plan_depth_halo(const std::string& layer, int64_t global_in, const DepthWindow& window, int parts, int index);

// How a depth-split convolution's halo meets its computation (gridnn-train --halo,
// docs/design.md §4); the results are the same bit for bit. Blocking is the default: with
// MPI on host tensors a transfer moves only inside MPI calls, so the overlapped order pays
// for its extra copy of the inner planes' output and gains nothing (bench/results/grid-scaling.md).
enum class HaloMode { overlap, blocking };
inline constexpr EnumName<HaloMode> kHaloModeNames[] = {
    {HaloMode::overlap, "overlap",
     "the planes inside the slab are convolved while the halo planes travel, and the halo's "
     "gradients travel while the weight gradient is computed"},
    {HaloMode::blocking, "blocking", "each exchange is waited for before the layer computes"}};
constexpr EnumNames<HaloMode> enum_names(HaloMode) { return {"halo mode", kHaloModeNames}; }

// The exchange's copies on one rank into and out of the slabs, which move nothing between
// ranks: HaloExchange runs them around its messages, and the cost model's calibration times
// them with the layer they feed (models/run/timing.h).
//   assemble_own     the extended slab [B, C, needed planes, H, W] of the own slab x: own
//                    planes copied, planes outside the volume set to `padding_value`, the
//                    planes from other ranks left for place_received
//   place_received   the planes received from each rank of h.receives (in its order) put in
//                    their places in the extended slab
//   own_gradient     dx [B, C, owned planes, H, W]: the own planes' gradient from d(extended
//                    slab), zero for owned planes no output reads
//   add_returned     the gradients each rank of h.sends returned added to dx, in that order
//   planes_to_send   the own planes each rank of h.sends needs, copied out of the slab x
//   gradients_to_return  the halo planes' gradients for each rank of h.receives, copied out
//                    of d(extended slab)
//   plane_buffers    a tensor [B, C, planes, H, W] like `like` for each transfer
Tensor assemble_own(const DepthHalo& h, const Tensor& x, float padding_value);
void place_received(const DepthHalo& h, const std::vector<Tensor>& incoming, Tensor& extended);
Tensor own_gradient(const DepthHalo& h, const Tensor& d_extended);
void add_returned(const DepthHalo& h, const std::vector<Tensor>& incoming, Tensor& dx);
std::vector<Tensor> planes_to_send(const DepthHalo& h, const Tensor& x);
std::vector<Tensor> gradients_to_return(const DepthHalo& h, const Tensor& d_extended);
std::vector<Tensor> plane_buffers(const std::vector<PlaneTransfer>& transfers, const Tensor& like);

// An exchange under way (HaloExchange::start_extend, start_return_gradient): the tensor being
// assembled and the messages in flight, owned until the matching finish_ call.
struct HaloInFlight {
  Tensor assembled;                                 // the extended slab, or dx of the own planes
  std::vector<Tensor> outgoing;                     // the planes sent, by transfer
  std::vector<Tensor> incoming;                     // the planes received, by transfer
  std::vector<std::unique_ptr<PendingCall>> calls;  // one per round that moves planes
};

class HaloExchange {
 public:
  // `row` is the communicator the depth is split over (its size and rank must be the
  // halo's parts and index). The communicator must outlive the exchange.
  HaloExchange(Communicator& row, DepthHalo halo, std::string layer);

  const DepthHalo& halo() const { return halo_; }
  Communicator& row() const { return row_; }
  const std::string& layer() const { return layer_; }
  void set_layer(std::string layer) { layer_ = std::move(layer); }

  // Forward: the own slab x [B, C, owned input planes, H, W] -> the extended slab
  // [B, C, needed planes, H, W]: own planes copied, others' fetched from their owners,
  // planes outside the volume set to `padding_value` (0 for convolution and average
  // pooling, -inf for max pooling).
  Tensor extend(const Tensor& x, float padding_value = 0.0f);
  // Backward, the opposite: d(extended slab) -> d(own slab) = the own planes' gradient plus
  // the gradients other ranks computed for planes this rank owns (added in rank order);
  // the padding planes' gradients are dropped.
  Tensor return_gradient(const Tensor& d_extended);

  // Each of the two, overlapped with computation (docs/design.md §4): start_ posts the
  // messages and puts in place what needs none (extend: the own and padding planes; the
  // gradient: the own planes'), finish_ waits for them and puts the rest in. start_ then
  // finish_ give extend's and return_gradient's tensors bit for bit. One exchange of a layer
  // is in flight at a time.
  HaloInFlight start_extend(const Tensor& x, float padding_value = 0.0f);
  Tensor finish_extend(HaloInFlight& started);
  HaloInFlight start_return_gradient(const Tensor& d_extended);
  Tensor finish_return_gradient(HaloInFlight& started);

 private:
  Communicator& row_;
  DepthHalo halo_;
  std::string layer_;
};

}  // namespace gridnn::parallel
