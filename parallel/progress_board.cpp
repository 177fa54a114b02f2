// The time limit on communicator waits and the node's progress board (progress_board.h).
#include "parallel/progress_board.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "parallel/communicator.h"

#if GRIDNN_HAVE_MPI
#include "parallel/mpi_check.h"
#include "parallel/mpi_session.h"
#endif

namespace gridnn::parallel {

namespace {
std::atomic<double> g_timeout{kDefaultCommTimeout};
std::atomic<int64_t> g_step{0};
}  // namespace

void set_comm_timeout(double seconds) {
  GRIDNN_REQUIRE(std::isfinite(seconds) && seconds >= 0, "--comm-timeout must be >= 0 seconds (0: no limit), got ",
                 seconds);
  g_timeout.store(seconds);
}

double comm_timeout() { return g_timeout.load(); }

int64_t progress_step() { return g_step.load(); }

#if !GRIDNN_HAVE_MPI

void set_progress_step(int64_t step) { g_step.store(step); }

#else

namespace {

constexpr int kSlots = 32;

// One rank's record, in the node's shared window. Plain lock-free atomics: they work across
// processes mapping the same memory.
struct RankRecord {
  std::atomic<int32_t> pid;
  std::atomic<int64_t> step;
  std::atomic<int32_t> waiting_slot;        // -1: not waiting in a communicator call
  std::atomic<int32_t> waiting_collective;  // 1: the wait is a collective's
  std::atomic<int64_t> waiting_call;
  std::atomic<int64_t> collectives[kSlots];  // started, per slot
};
static_assert(std::atomic<int64_t>::is_always_lock_free, "the board needs lock-free 64-bit atomics");

struct Board {
  MPI_Win window = MPI_WIN_NULL;
  MPI_Comm node = MPI_COMM_NULL;
  std::vector<RankRecord*> by_local;  // every rank of the node, by node rank
  std::vector<int> local_of_world;    // node rank of a world rank, -1 on another node
  RankRecord* mine = nullptr;
};

Board g_board;
RankRecord g_private{};  // this rank's record when there is no board
int g_next_slot = 0;
BoardSlot g_session_slot;  // slot 0: the session's own world barrier at the end

RankRecord& mine() { return g_board.mine ? *g_board.mine : g_private; }

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// What the kernel says of a process on this node: "stopped" (SIGSTOP, a debugger), "dead",
// or "" (running or sleeping).
std::string process_state(int pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (!f) return "dead";
  char line[512] = {};
  const size_t n = std::fread(line, 1, sizeof line - 1, f);
  std::fclose(f);
  const char* paren = std::strrchr(line, ')');  // the command name may hold spaces
  if (n == 0 || !paren || paren[1] == 0 || paren[2] == 0) return "";
  switch (paren[2]) {
    case 'T':
    case 't':
      return "stopped";
    case 'Z':
    case 'X':
      return "dead";
    default:
      return "";
  }
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : " ") + std::to_string(x);
  return s;
}

}  // namespace

void set_progress_step(int64_t step) {
  g_step.store(step);
  mine().step.store(step);
}

void open_progress_board(MPI_Comm node) {
  if (g_board.window != MPI_WIN_NULL) return;
  int locals = 1, world = 0, worlds = 1;
  GRIDNN_CHECK_MPI(MPI_Comm_size(node, &locals));
  GRIDNN_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &world));
  GRIDNN_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &worlds));
  GRIDNN_CHECK_MPI(MPI_Comm_dup(node, &g_board.node));
  void* base = nullptr;
  GRIDNN_CHECK_MPI(
      MPI_Win_allocate_shared(MPI_Aint(sizeof(RankRecord)), 1, MPI_INFO_NULL, g_board.node, &base, &g_board.window));
  g_board.mine = new (base) RankRecord{};
  g_board.mine->pid.store(int32_t(::getpid()));
  g_board.mine->waiting_slot.store(-1);
  g_board.mine->step.store(g_step.load());
  g_board.by_local.assign(size_t(locals), nullptr);
  for (int i = 0; i < locals; ++i) {
    MPI_Aint bytes = 0;
    int unit = 0;
    void* record = nullptr;
    GRIDNN_CHECK_MPI(MPI_Win_shared_query(g_board.window, i, &bytes, &unit, &record));
    g_board.by_local[size_t(i)] = static_cast<RankRecord*>(record);
  }
  std::vector<int> worlds_here(static_cast<size_t>(locals));
  GRIDNN_CHECK_MPI(MPI_Allgather(&world, 1, MPI_INT, worlds_here.data(), 1, MPI_INT, g_board.node));
  g_board.local_of_world.assign(size_t(worlds), -1);
  for (int i = 0; i < locals; ++i) g_board.local_of_world[size_t(worlds_here[size_t(i)])] = i;
  // Every record is initialized before anyone reads one.
  GRIDNN_CHECK_MPI(MPI_Barrier(g_board.node));
  g_session_slot.slot = 0;
  g_session_slot.world_ranks.resize(size_t(worlds));
  for (int w = 0; w < worlds; ++w) g_session_slot.world_ranks[size_t(w)] = w;
  g_next_slot = 1;
}

void finish_barrier() {
  if (g_board.window == MPI_WIN_NULL) return;
  WatchedWait watch(g_session_slot, "world", "the barrier at the end of the job", true);
  MPI_Request request = MPI_REQUEST_NULL;
  GRIDNN_CHECK_MPI(MPI_Ibarrier(MPI_COMM_WORLD, &request));
  for (;;) {
    int done = 0;
    GRIDNN_CHECK_MPI(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    watch.expired();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void close_progress_board() {
  if (g_board.window == MPI_WIN_NULL) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    MPI_Win_free(&g_board.window);
    MPI_Comm_free(&g_board.node);
  }
  g_board = Board{};
}

BoardSlot join_progress_board(MPI_Comm comm) {
  BoardSlot s;
  int next = g_next_slot;
  GRIDNN_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &next, 1, MPI_INT, MPI_MAX, comm));
  g_next_slot = next + 1;
  s.slot = next < kSlots ? next : -1;
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  GRIDNN_CHECK_MPI(MPI_Comm_group(comm, &group));
  GRIDNN_CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world));
  int size = 0;
  GRIDNN_CHECK_MPI(MPI_Group_size(group, &size));
  std::vector<int> ranks(size_t(size), 0);
  for (int i = 0; i < size; ++i) ranks[size_t(i)] = i;
  s.world_ranks.resize(size_t(size));
  GRIDNN_CHECK_MPI(MPI_Group_translate_ranks(group, size, ranks.data(), world, s.world_ranks.data()));
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return s;
}

WatchedWait::WatchedWait(const BoardSlot& slot, std::string comm_name, const char* op, bool collective,
                         std::vector<int> partners)
    : slot_(slot),
      comm_name_(std::move(comm_name)),
      op_(op),
      collective_(collective),
      partners_(std::move(partners)),
      layer_(CommLayerScope::current()) {
  if (slot_.slot >= 0 && collective_) call_ = mine().collectives[slot_.slot].fetch_add(1) + 1;
}

WatchedWait::~WatchedWait() {
  if (start_ >= 0) mine().waiting_slot.store(-1);
}

void WatchedWait::begin() {
  if (start_ >= 0) return;
  start_ = now_s();
  RankRecord& me = mine();
  me.waiting_call.store(call_);
  me.waiting_collective.store(collective_ ? 1 : 0);
  me.waiting_slot.store(slot_.slot);
}

bool WatchedWait::expired() {
  if (start_ < 0) begin();
  if ((polls_++ & 63u) != 0) return false;
  const double limit = comm_timeout();
  if (limit <= 0) return false;
  const double waited = now_s() - start_;
  if (waited > limit) fail(waited);
  return false;
}

void WatchedWait::fail(double waited) const {
  char head[160];
  std::snprintf(head, sizeof head, "communication timeout: waited %.1f s (--comm-timeout %g) in ", waited,
                comm_timeout());
  std::string why = head;
  why += std::string(op_) + " on communicator \"" + comm_name_ + "\"";
  if (collective_ && slot_.slot >= 0) why += " (its collective #" + std::to_string(call_) + ")";
  why += ", world ranks " + join(slot_.world_ranks) + ", layer \"" + (layer_.empty() ? "-" : layer_) + "\", step " +
         std::to_string(g_step.load());
  // The peers to report: every other member for a collective, the partners of a transfer.
  std::vector<int> peers;
  const int me = error_rank();
  if (collective_) {
    for (int w : slot_.world_ranks)
      if (w != me) peers.push_back(w);
  } else {
    for (int p : partners_)
      if (p >= 0 && size_t(p) < slot_.world_ranks.size()) peers.push_back(slot_.world_ranks[size_t(p)]);
  }
  std::string silent, missing, arrived, elsewhere;
  for (int w : peers) {
    const int local =
        g_board.mine && size_t(w) < g_board.local_of_world.size() ? g_board.local_of_world[size_t(w)] : -1;
    if (local < 0) {
      elsewhere += (elsewhere.empty() ? "" : ", ") + std::to_string(w);
      continue;
    }
    const RankRecord& peer = *g_board.by_local[size_t(local)];
    const int pid = peer.pid.load();
    if (const std::string state = process_state(pid); !state.empty()) {
      silent += (silent.empty() ? "" : "; ") + std::string("rank ") + std::to_string(w) + " (pid " +
                std::to_string(pid) + ") is " + state + " (step " + std::to_string(peer.step.load()) + ")";
      continue;
    }
    const int32_t waiting_slot = peer.waiting_slot.load();
    const bool here =
        slot_.slot >= 0 && waiting_slot == slot_.slot && (!collective_ || peer.waiting_call.load() == call_);
    const bool passed = collective_ && slot_.slot >= 0 && peer.collectives[slot_.slot].load() >= call_;
    std::string state = "rank " + std::to_string(w) + " (step " + std::to_string(peer.step.load());
    if (collective_ && slot_.slot >= 0)
      state +=
          ", " + std::to_string(peer.collectives[slot_.slot].load()) + " collectives started on \"" + comm_name_ + "\"";
    state += waiting_slot >= 0 ? ", waiting in a communicator call)" : ", not in any communicator call)";
    if (here || passed)
      arrived += (arrived.empty() ? "" : "; ") + state;
    else
      missing += (missing.empty() ? "" : "; ") + state;
  }
  if (!g_board.mine) why += ". The progress board is not open (no MpiSession): the peers' state is unknown";
  if (!silent.empty()) why += ". NOT RESPONDING: " + silent;
  if (!missing.empty()) why += ". NOT ARRIVED: " + missing + " — stopped, dead, or still computing";
  if (!arrived.empty()) why += ". Arrived: " + arrived;
  if (!elsewhere.empty()) why += ". On other nodes (not visible here): rank " + elsewhere;
  why += ". Ending the job; raise --comm-timeout if a step can legitimately take this long";
  MpiSession::fail_job(why, kCommTimeoutExitCode);
}

#endif

}  // namespace gridnn::parallel
