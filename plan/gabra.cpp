// GABRA and its baselines (gabra.h). Every method scores candidates with plan::simulate.
//
// GA individual: the sorted cut positions (first block of partitions 1..K-1) and the device of
// each partition. Operators:
//   crossover  one point x in block space: the child's cuts are parent A's below x and parent
//              B's at or above x; each child partition takes the device that the parent owning
//              its first block gave to that block; a device used twice is replaced by the
//              first unused device in parent B's order (order-preserving), then by index;
//   mutation   move a cut by +-1, move a cut anywhere, swap two partitions' devices, replace a
//              device by an unused one, and (search over K) add or remove a cut.
// Repair keeps K fixed (adding or dropping random cuts) or within [1, min(blocks, devices)].
// The first generation holds greedy's and round-robin's solutions, so the result is never
// worse than greedy; elitism keeps the best. Fitness values are cached per chromosome, and a
// child equal to one already seen is mutated again (up to 16 times) so that the search keeps
// exploring instead of cloning the elite. Each generation's 4 best are improved by local search
// (best neighbour while it improves; neighbours: every cut moved by one, every device swap and
// replacement, and with K searched every cut removed or added).
#include "plan/gabra.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "core/error.h"

namespace gridnn::plan {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int max_partitions(const Profile& profile, const Cluster& cluster) {
  return std::min(int(profile.blocks.size()), cluster.size());
}

void check_inputs(const Profile& profile, const Cluster& cluster, int partitions, const char* method) {
  validate(profile);
  validate(cluster);
  const int k_max = max_partitions(profile, cluster);
  GRIDNN_REQUIRE(partitions >= 0 && partitions <= k_max, method, ": partitions = ", partitions, " must be in [1, ",
                 k_max, "] (min of ", profile.blocks.size(), " blocks and ", cluster.size(),
                 " devices), or 0 to let the search choose");
}

// Candidates carry no block names while scored; the result gets them.
Placement make_placement(const Profile&, std::vector<int> first_block, std::vector<int> device) {
  Placement p;
  p.first_block = std::move(first_block);
  p.device = std::move(device);
  return p;
}

// Candidates scored so far by one search: counts evaluations, keeps the best (first wins ties).
struct Scorer {
  Scorer(const Profile& p, const Cluster& c) : profile(p), cluster(c) {}
  const Profile& profile;
  const Cluster& cluster;
  int64_t evaluations = 0;
  Placement best;
  Simulation best_sim;
  bool has_best = false;

  double score(const Placement& p) {
    Simulation s = simulate(profile, cluster, p);
    ++evaluations;
    if (!has_best || s.fitness() < best_sim.fitness()) {
      best = p;
      best_sim = s;
      has_best = true;
    }
    return s.fitness();
  }
  SearchResult result(const char* method, Clock::time_point t0) const {
    SearchResult r;
    r.method = method;
    r.placement = best;
    for (const BlockProfile& b : profile.blocks) r.placement.blocks.push_back(b.name);
    r.simulation = best_sim;
    r.evaluations = evaluations;
    r.search_s = seconds_since(t0);
    return r;
  }
};

// Calls visit(first_block) for every way to cut n blocks into k contiguous non-empty parts.
template <class F>
void for_each_cut(int n, int k, F&& visit) {
  std::vector<int> first(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) first[size_t(i)] = i;
  while (true) {
    visit(first);
    int i = k - 1;  // the last cut that can still move right
    while (i >= 1 && first[size_t(i)] == n - (k - i)) --i;
    if (i < 1) return;
    ++first[size_t(i)];
    for (int j = i + 1; j < k; ++j) first[size_t(j)] = first[size_t(j) - 1] + 1;
  }
}

// Calls visit(device) for every injective assignment of k of d devices, in lexicographic order.
template <class F>
void for_each_assignment(int d, int k, F&& visit) {
  std::vector<int> device(size_t(k), -1);
  std::vector<char> used(size_t(d), 0);
  auto rec = [&](auto&& self, int pos) -> void {
    if (pos == k) {
      visit(device);
      return;
    }
    for (int x = 0; x < d; ++x) {
      if (used[size_t(x)]) continue;
      used[size_t(x)] = 1;
      device[size_t(pos)] = x;
      self(self, pos + 1);
      used[size_t(x)] = 0;
    }
  };
  rec(rec, 0);
}

double binomial(int n, int k) {
  if (k < 0 || k > n) return 0;
  double r = 1;
  for (int i = 1; i <= k; ++i) r = r * (n - k + i) / i;
  return r;
}

double assignments(int d, int k) {
  double r = 1;
  for (int i = 0; i < k; ++i) r *= d - i;
  return r;
}

std::vector<int> k_range(int partitions, int k_max) {
  std::vector<int> ks;
  if (partitions > 0) {
    ks.push_back(partitions);
  } else {
    for (int k = 1; k <= k_max; ++k) ks.push_back(k);
  }
  return ks;
}

// The best devices for fixed cuts: every injective assignment when there are at most
// `kExhaustiveOrders`, otherwise the largest partition on the fastest device improved by swaps.
constexpr double kExhaustiveOrders = 50'000;

void best_devices(Scorer& scorer, const std::vector<int>& first_block) {
  const Profile& profile = scorer.profile;
  const Cluster& cluster = scorer.cluster;
  const int k = int(first_block.size()), d = cluster.size();
  if (assignments(d, k) <= kExhaustiveOrders) {
    for_each_assignment(
        d, k, [&](const std::vector<int>& device) { scorer.score(make_placement(profile, first_block, device)); });
    return;
  }
  std::vector<double> work(size_t(k), 0);
  const int n = int(profile.blocks.size());
  for (int p = 0; p < k; ++p) {
    const int end = p + 1 < k ? first_block[size_t(p) + 1] : n;
    for (int i = first_block[size_t(p)]; i < end; ++i)
      work[size_t(p)] += profile.blocks[size_t(i)].forward_s + profile.blocks[size_t(i)].backward_s;
  }
  std::vector<int> by_work(static_cast<size_t>(k)), by_speed(static_cast<size_t>(d));
  std::iota(by_work.begin(), by_work.end(), 0);
  std::iota(by_speed.begin(), by_speed.end(), 0);
  std::stable_sort(by_work.begin(), by_work.end(), [&](int a, int b) { return work[size_t(a)] > work[size_t(b)]; });
  std::stable_sort(by_speed.begin(), by_speed.end(),
                   [&](int a, int b) { return cluster.devices[size_t(a)].speed > cluster.devices[size_t(b)].speed; });
  std::vector<int> device(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) device[size_t(by_work[size_t(i)])] = by_speed[size_t(i)];
  double current = scorer.score(make_placement(profile, first_block, device));
  for (bool improved = true; improved;) {  // swap two partitions' devices while it helps
    improved = false;
    for (int a = 0; a < k; ++a)
      for (int b = a + 1; b < k; ++b) {
        std::swap(device[size_t(a)], device[size_t(b)]);
        const double f = scorer.score(make_placement(profile, first_block, device));
        if (f < current) {
          current = f;
          improved = true;
        } else {
          std::swap(device[size_t(a)], device[size_t(b)]);
        }
      }
  }
}

// Cuts minimizing the largest partition time when partition i runs at speed[i] (linear
// partition by dynamic programming over block prefixes).
std::vector<int> balanced_cuts(const Profile& profile, const std::vector<double>& speed) {
  const int n = int(profile.blocks.size()), k = int(speed.size());
  std::vector<double> prefix(size_t(n) + 1, 0);
  for (int i = 0; i < n; ++i)
    prefix[size_t(i) + 1] =
        prefix[size_t(i)] + profile.blocks[size_t(i)].forward_s + profile.blocks[size_t(i)].backward_s;
  const double inf = std::numeric_limits<double>::infinity();
  // best[p][i]: the smallest max time of partitions 0..p-1 covering blocks [0, i).
  std::vector<std::vector<double>> best(size_t(k) + 1, std::vector<double>(size_t(n) + 1, inf));
  std::vector<std::vector<int>> from(size_t(k) + 1, std::vector<int>(size_t(n) + 1, -1));
  best[0][0] = 0;
  for (int p = 1; p <= k; ++p)
    for (int i = p; i <= n - (k - p); ++i)
      for (int j = p - 1; j < i; ++j) {
        const double t =
            std::max(best[size_t(p) - 1][size_t(j)], (prefix[size_t(i)] - prefix[size_t(j)]) / speed[size_t(p) - 1]);
        if (t < best[size_t(p)][size_t(i)]) {
          best[size_t(p)][size_t(i)] = t;
          from[size_t(p)][size_t(i)] = j;
        }
      }
  std::vector<int> first(static_cast<size_t>(k));
  for (int p = k, i = n; p >= 1; --p) {
    i = from[size_t(p)][size_t(i)];
    first[size_t(p) - 1] = i;
  }
  return first;
}

// ---- the GA -----------------------------------------------------------------------------

struct Individual {
  std::vector<int> cuts;    // first blocks of partitions 1..K-1, strictly increasing
  std::vector<int> device;  // K distinct devices
  double fitness = 0;
};

class Ga {
 public:
  Ga(const Profile& profile, const Cluster& cluster, int partitions, const GaOptions& o)
      : profile_(profile),
        cluster_(cluster),
        n_(int(profile.blocks.size())),
        d_(cluster.size()),
        fixed_k_(partitions),
        k_max_(max_partitions(profile, cluster)),
        o_(o),
        rng_(o.seed),
        scorer_(profile, cluster) {}

  SearchResult run(Clock::time_point t0) {
    std::vector<Individual> pop = initial_population();
    double best = pop.front().fitness;
    int stale = 0, generation = 0;
    while (generation < o_.generations && stale < o_.patience) {
      ++generation;
      std::vector<Individual> next(pop.begin(), pop.begin() + std::min<size_t>(size_t(o_.elite), pop.size()));
      while (int(next.size()) < o_.population) {
        const Individual& a = select(pop);
        const Individual& b = select(pop);
        Individual child = uniform01() < o_.crossover_rate ? crossover(a, b) : a;
        if (uniform01() < o_.mutation_rate) mutate(child);
        repair(child);
        // A child seen before adds nothing: mutate it until it is new (diversity; small
        // spaces run out of new ones, hence the bound).
        for (int tries = 0; tries < kNoveltyTries && seen(child); ++tries) {
          mutate(child);
          repair(child);
        }
        child.fitness = fitness(child);
        next.push_back(std::move(child));
      }
      sort(next);
      for (size_t i = 0; i < std::min<size_t>(kClimbed, next.size()); ++i) climb(next[i]);
      sort(next);
      pop = std::move(next);
      if (pop.front().fitness < best) {
        best = pop.front().fitness;
        stale = 0;
      } else {
        ++stale;
      }
    }
    SearchResult r = scorer_.result("gabra", t0);
    r.generations = generation;
    return r;
  }

 private:
  double uniform01() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  Placement placement_of(const Individual& x) const {
    std::vector<int> first{0};
    first.insert(first.end(), x.cuts.begin(), x.cuts.end());
    return make_placement(profile_, first, x.device);
  }

  static constexpr int kNoveltyTries = 16;
  static constexpr size_t kClimbed = 4;  // individuals improved by local search per generation

  // Local search (memetic step) on one individual: takes the best neighbour while it improves.
  // Neighbours: a cut moved by one, two devices swapped, a device replaced by an unused one,
  // and (search over K) a cut removed or added.
  void climb(Individual& x) {
    if (!climbed_.insert(std::make_pair(x.cuts, x.device)).second) return;
    for (bool improved = true; improved;) {
      improved = false;
      Individual best = x;
      auto consider = [&](Individual y) {
        if (!valid(y)) return;
        y.fitness = fitness(y);
        if (y.fitness < best.fitness) best = std::move(y);
      };
      const int k = int(x.device.size());
      for (int i = 0; i + 1 < k; ++i)
        for (int step : {-1, 1}) {
          Individual y = x;
          y.cuts[size_t(i)] += step;
          consider(y);
        }
      for (int a = 0; a < k; ++a)
        for (int b = a + 1; b < k; ++b) {
          Individual y = x;
          std::swap(y.device[size_t(a)], y.device[size_t(b)]);
          consider(y);
        }
      for (int a = 0; a < k; ++a)
        for (int dev = 0; dev < d_; ++dev)
          if (std::find(x.device.begin(), x.device.end(), dev) == x.device.end()) {
            Individual y = x;
            y.device[size_t(a)] = dev;
            consider(y);
          }
      if (fixed_k_ == 0) {
        for (int i = 0; i + 1 < k; ++i) {
          Individual y = x;
          y.cuts.erase(y.cuts.begin() + i);
          y.device.erase(y.device.begin() + i + 1);
          consider(y);
        }
        if (k < k_max_)
          for (int c = 1; c < n_; ++c)
            if (!std::binary_search(x.cuts.begin(), x.cuts.end(), c)) {
              const auto at = std::lower_bound(x.cuts.begin(), x.cuts.end(), c) - x.cuts.begin();
              for (int dev = 0; dev < d_; ++dev)
                if (std::find(x.device.begin(), x.device.end(), dev) == x.device.end()) {
                  Individual y = x;
                  y.cuts.insert(y.cuts.begin() + at, c);
                  y.device.insert(y.device.begin() + at + 1, dev);
                  consider(y);
                }
            }
      }
      if (best.fitness < x.fitness) {
        x = std::move(best);
        improved = climbed_.insert(std::make_pair(x.cuts, x.device)).second;
      }
    }
  }

  bool valid(const Individual& x) const {
    for (size_t i = 0; i < x.cuts.size(); ++i)
      if (x.cuts[i] < 1 || x.cuts[i] > n_ - 1 || (i > 0 && x.cuts[i] <= x.cuts[i - 1])) return false;
    return true;
  }

  bool seen(const Individual& x) const { return cache_.count(std::make_pair(x.cuts, x.device)) != 0; }

  double fitness(const Individual& x) {
    const auto key = std::make_pair(x.cuts, x.device);
    const auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    const double f = scorer_.score(placement_of(x));
    cache_.emplace(key, f);
    return f;
  }

  static void sort(std::vector<Individual>& pop) {
    std::stable_sort(pop.begin(), pop.end(),
                     [](const Individual& a, const Individual& b) { return a.fitness < b.fitness; });
  }

  Individual from(const SearchResult& r) {
    scorer_.evaluations += r.evaluations;
    Individual x;
    x.cuts.assign(r.placement.first_block.begin() + 1, r.placement.first_block.end());
    x.device = r.placement.device;
    x.fitness = fitness(x);
    return x;
  }

  Individual random_individual() {
    const int k = fixed_k_ > 0 ? fixed_k_ : uniform(1, k_max_);
    std::vector<int> positions(size_t(n_) - 1);
    std::iota(positions.begin(), positions.end(), 1);
    std::shuffle(positions.begin(), positions.end(), rng_);
    Individual x;
    x.cuts.assign(positions.begin(), positions.begin() + (k - 1));
    std::sort(x.cuts.begin(), x.cuts.end());
    std::vector<int> devices(static_cast<size_t>(d_));
    std::iota(devices.begin(), devices.end(), 0);
    std::shuffle(devices.begin(), devices.end(), rng_);
    x.device.assign(devices.begin(), devices.begin() + k);
    x.fitness = fitness(x);
    return x;
  }

  std::vector<Individual> initial_population() {
    std::vector<Individual> pop;
    for (int k : k_range(fixed_k_, k_max_)) {  // the baselines' solutions, every K
      pop.push_back(from(greedy(profile_, cluster_, k)));
      pop.push_back(from(round_robin(profile_, cluster_, k)));
    }
    while (int(pop.size()) < std::max(o_.population, 2)) pop.push_back(random_individual());
    sort(pop);
    pop.resize(size_t(std::max(o_.population, 2)));
    return pop;
  }

  const Individual& select(const std::vector<Individual>& pop) {
    const Individual* best = &pop[size_t(uniform(0, int(pop.size()) - 1))];
    for (int i = 1; i < o_.tournament; ++i) {
      const Individual& c = pop[size_t(uniform(0, int(pop.size()) - 1))];
      if (c.fitness < best->fitness) best = &c;
    }
    return *best;
  }

  // The device the parent gives to block i.
  static int device_of_block(const Individual& x, int block) {
    const auto p = std::upper_bound(x.cuts.begin(), x.cuts.end(), block) - x.cuts.begin();
    return x.device[size_t(p)];
  }

  Individual crossover(const Individual& a, const Individual& b) {
    if (n_ < 2) return a;
    const int x = uniform(1, n_ - 1);
    Individual c;
    for (int cut : a.cuts)
      if (cut < x) c.cuts.push_back(cut);
    for (int cut : b.cuts)
      if (cut >= x) c.cuts.push_back(cut);
    const int most = (fixed_k_ > 0 ? fixed_k_ : k_max_) - 1;  // more partitions than devices
    while (int(c.cuts.size()) > most) c.cuts.erase(c.cuts.begin() + uniform(0, int(c.cuts.size()) - 1));
    std::vector<int> firsts{0};
    firsts.insert(firsts.end(), c.cuts.begin(), c.cuts.end());
    for (int f : firsts) c.device.push_back(device_of_block(f < x ? a : b, f));
    fix_devices(c, b.device);
    return c;
  }

  // Replaces a device used twice by the first unused one in `order`, then by index.
  void fix_devices(Individual& c, const std::vector<int>& order) const {
    std::vector<char> used(size_t(d_), 0);
    std::vector<size_t> duplicate;
    for (size_t p = 0; p < c.device.size(); ++p) {
      if (used[size_t(c.device[p])]) duplicate.push_back(p);
      used[size_t(c.device[p])] = 1;
    }
    std::vector<int> spare;
    for (int dev : order)
      if (!used[size_t(dev)]) spare.push_back(dev), used[size_t(dev)] = 1;
    for (int dev = 0; dev < d_; ++dev)
      if (!used[size_t(dev)]) spare.push_back(dev);
    for (size_t i = 0; i < duplicate.size(); ++i) c.device[duplicate[i]] = spare[i];
  }

  void mutate(Individual& x) {
    const int k = int(x.device.size());
    switch (uniform(0, 5)) {
      case 0:  // move a cut by one block
        if (k > 1) {
          const int i = uniform(0, k - 2);
          x.cuts[size_t(i)] += uniform(0, 1) ? 1 : -1;
        }
        break;
      case 1:  // move a cut anywhere
        if (k > 1) x.cuts[size_t(uniform(0, k - 2))] = uniform(1, n_ - 1);
        break;
      case 2:  // swap two partitions' devices
        if (k > 1) {
          const int a = uniform(0, k - 1), b = uniform(0, k - 1);
          std::swap(x.device[size_t(a)], x.device[size_t(b)]);
        }
        break;
      case 3: {  // replace a device by an unused one
        std::vector<int> unused;
        for (int dev = 0; dev < d_; ++dev)
          if (std::find(x.device.begin(), x.device.end(), dev) == x.device.end()) unused.push_back(dev);
        if (!unused.empty()) x.device[size_t(uniform(0, k - 1))] = unused[size_t(uniform(0, int(unused.size()) - 1))];
        break;
      }
      case 4:  // add a cut (its partition gets an unused device)
        if (fixed_k_ == 0 && k < k_max_) {
          x.cuts.push_back(uniform(1, n_ - 1));
          x.device.push_back(x.device.back());  // made distinct by repair
        }
        break;
      default:  // remove a cut (its partition's blocks join the previous one)
        if (fixed_k_ == 0 && k > 1) {
          const int i = uniform(0, k - 2);
          x.cuts.erase(x.cuts.begin() + i);
          x.device.erase(x.device.begin() + i + 1);
        }
        break;
    }
  }

  // Makes the cuts sorted, distinct and in [1, n-1], with the right count, and the devices
  // distinct, one per partition.
  void repair(Individual& x) {
    std::vector<int> cuts;
    for (int c : x.cuts) cuts.push_back(std::clamp(c, 1, std::max(n_ - 1, 1)));
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    if (n_ < 2) cuts.clear();
    const int want = fixed_k_ > 0 ? fixed_k_ - 1 : std::min(int(cuts.size()), k_max_ - 1);
    while (int(cuts.size()) > want) cuts.erase(cuts.begin() + uniform(0, int(cuts.size()) - 1));
    while (int(cuts.size()) < want) {
      const int c = uniform(1, n_ - 1);
      if (!std::binary_search(cuts.begin(), cuts.end(), c))
        cuts.insert(std::lower_bound(cuts.begin(), cuts.end(), c), c);
    }
    x.cuts = cuts;
    const size_t k = cuts.size() + 1;
    while (x.device.size() > k) x.device.pop_back();
    while (x.device.size() < k) x.device.push_back(x.device.empty() ? 0 : x.device.back());
    std::vector<int> order(static_cast<size_t>(d_));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng_);
    fix_devices(x, order);
  }

  const Profile& profile_;
  const Cluster& cluster_;
  const int n_, d_, fixed_k_, k_max_;
  const GaOptions o_;
  std::mt19937_64 rng_;
  Scorer scorer_;
  std::map<std::pair<std::vector<int>, std::vector<int>>, double> cache_;
  std::set<std::pair<std::vector<int>, std::vector<int>>> climbed_;
};

}  // namespace

SearchResult gabra(const Profile& profile, const Cluster& cluster, int partitions, const GaOptions& options) {
  const auto t0 = Clock::now();
  check_inputs(profile, cluster, partitions, "gabra");
  GRIDNN_REQUIRE(options.population >= 2, "gabra: population must be >= 2, got ", options.population);
  GRIDNN_REQUIRE(options.generations >= 0 && options.patience >= 1,
                 "gabra: generations must be >= 0 and patience >= 1");
  GRIDNN_REQUIRE(options.tournament >= 1, "gabra: tournament must be >= 1");
  GRIDNN_REQUIRE(options.elite >= 0 && options.elite < options.population, "gabra: elite must be in [0, population)");
  GRIDNN_REQUIRE(options.crossover_rate >= 0 && options.crossover_rate <= 1 && options.mutation_rate >= 0 &&
                     options.mutation_rate <= 1,
                 "gabra: crossover and mutation rates must be in [0, 1]");
  Ga ga(profile, cluster, partitions, options);
  return ga.run(t0);
}

SearchResult round_robin(const Profile& profile, const Cluster& cluster, int partitions) {
  const auto t0 = Clock::now();
  check_inputs(profile, cluster, partitions, "round-robin");
  const int n = int(profile.blocks.size());
  const int k = partitions > 0 ? partitions : max_partitions(profile, cluster);
  std::vector<int> first(static_cast<size_t>(k)), device(static_cast<size_t>(k));
  for (int p = 0; p < k; ++p) {
    first[size_t(p)] = int(int64_t(p) * n / k);
    device[size_t(p)] = p;
  }
  Scorer scorer(profile, cluster);
  scorer.score(make_placement(profile, first, device));
  return scorer.result("round-robin", t0);
}

SearchResult greedy(const Profile& profile, const Cluster& cluster, int partitions) {
  const auto t0 = Clock::now();
  check_inputs(profile, cluster, partitions, "greedy");
  std::vector<double> speeds;
  for (const Device& d : cluster.devices) speeds.push_back(d.speed);
  std::sort(speeds.begin(), speeds.end(), std::greater<>());
  Scorer scorer(profile, cluster);
  for (int k : k_range(partitions, max_partitions(profile, cluster))) {
    // The k fastest speeds, in pipeline order fastest first and slowest first: the DP gives
    // the fastest device the largest share either way; then the best devices for those cuts.
    std::vector<double> fast(speeds.begin(), speeds.begin() + k);
    best_devices(scorer, balanced_cuts(profile, fast));
    std::reverse(fast.begin(), fast.end());
    best_devices(scorer, balanced_cuts(profile, fast));
  }
  return scorer.result("greedy", t0);
}

SearchResult exhaustive(const Profile& profile, const Cluster& cluster, int partitions, int64_t limit) {
  const auto t0 = Clock::now();
  check_inputs(profile, cluster, partitions, "exhaustive");
  const int n = int(profile.blocks.size()), d = cluster.size();
  const std::vector<int> ks = k_range(partitions, max_partitions(profile, cluster));
  double candidates = 0;
  for (int k : ks) candidates += binomial(n - 1, k - 1) * assignments(d, k);
  GRIDNN_REQUIRE(candidates <= double(limit), "exhaustive: ", candidates, " candidate placements exceed the limit of ",
                 limit, "; raise the limit (--exhaustive-limit) or use the GA");
  Scorer scorer(profile, cluster);
  for (int k : ks)
    for_each_cut(n, k, [&](const std::vector<int>& first) {
      for_each_assignment(
          d, k, [&](const std::vector<int>& device) { scorer.score(make_placement(profile, first, device)); });
    });
  return scorer.result("exhaustive", t0);
}

int64_t exhaustive_candidates(const Profile& profile, const Cluster& cluster, int partitions) {
  const int n = int(profile.blocks.size()), d = cluster.size();
  double candidates = 0;
  for (int k : k_range(partitions, max_partitions(profile, cluster)))
    candidates += binomial(n - 1, k - 1) * assignments(d, k);
  return candidates > 9e18 ? std::numeric_limits<int64_t>::max() : int64_t(std::llround(candidates));
}

}  // namespace gridnn::plan
