// The step profiler (core/profile.h): exclusive time per kind, nothing recorded without an
// installed profiler or on another thread, and the table's rows. No timing is asserted
// beyond what a sleep guarantees (at least its duration).
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <thread>

#include "core/profile.h"

namespace gridnn {
namespace {

using namespace std::chrono_literals;

double total(const Profiler& p) { return std::accumulate(p.seconds().begin(), p.seconds().end(), 0.0); }
double of(const Profiler& p, ProfileKind k) { return p.seconds()[size_t(k)]; }

TEST(Profiler, NestedScopesCountTheirOwnTimeOnly) {
  Profiler profiler;
  const ProfilerScope on(profiler);
  const auto start = std::chrono::steady_clock::now();
  {
    const ProfileScope outer(ProfileKind::convolution);
    std::this_thread::sleep_for(20ms);
    {
      const ProfileScope inner(ProfileKind::reorder);
      std::this_thread::sleep_for(30ms);
    }
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(of(profiler, ProfileKind::reorder), 0.030);
  EXPECT_GE(of(profiler, ProfileKind::convolution), 0.020);
  // Exclusive: the kinds add up to the outer scope's time, not more.
  EXPECT_LE(total(profiler), elapsed);
  EXPECT_GE(total(profiler), 0.050);
  EXPECT_EQ(of(profiler, ProfileKind::optimizer), 0.0);
  // A kind nested in itself is counted once.
  profiler.reset();
  {
    const ProfileScope a(ProfileKind::attention);
    const ProfileScope b(ProfileKind::attention);
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_GE(of(profiler, ProfileKind::attention), 0.010);
  EXPECT_EQ(of(profiler, ProfileKind::attention), total(profiler));
}

TEST(Profiler, NothingIsRecordedWithoutOneInstalledOnThisThread) {
  Profiler profiler;
  {
    const ProfileScope scope(ProfileKind::data);  // none installed yet
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(Profiler::current(), nullptr);
  {
    const ProfilerScope on(profiler);
    EXPECT_EQ(Profiler::current(), &profiler);
    std::thread other([] {
      EXPECT_EQ(Profiler::current(), nullptr);
      const ProfileScope scope(ProfileKind::data);
      std::this_thread::sleep_for(5ms);
    });
    other.join();
  }
  EXPECT_EQ(Profiler::current(), nullptr);
  EXPECT_EQ(total(profiler), 0.0);
}

TEST(Profiler, TheTableHasEveryKindOtherAndTheStep) {
  Profiler profiler;
  {
    const ProfilerScope on(profiler);
    const ProfileScope scope(ProfileKind::optimizer);
    std::this_thread::sleep_for(10ms);
  }
  const double optimizer = of(profiler, ProfileKind::optimizer);
  const std::string t = profiler.table(4 * optimizer, 2);
  for (const EnumName<ProfileKind>& k : kProfileKindNames)
    EXPECT_NE(t.find(std::string("| ") + k.name + " |"), std::string::npos) << k.name;
  EXPECT_NE(t.find("| optimizer | "), std::string::npos);
  EXPECT_NE(t.find("| 25.0% |"), std::string::npos) << t;  // the optimizer's share
  EXPECT_NE(t.find("| other | "), std::string::npos);
  EXPECT_NE(t.find("| 75.0% |"), std::string::npos) << t;  // the rest
  EXPECT_NE(t.find("| step | "), std::string::npos);
  EXPECT_NE(t.find("| 100.0% |"), std::string::npos) << t;
}

TEST(Profiler, ALayersScopesCountForItsPassWithTheUnnamedOnesInside) {
  Profiler profiler;
  const std::string conv = "layer1.0.conv1", bn = "layer1.0.bn1";
  {
    const ProfilerScope on(profiler);
    {
      const ProfileScope forward(ProfileKind::convolution, conv, ProfilePass::forward);
      std::this_thread::sleep_for(10ms);
      const ProfileScope reorder(ProfileKind::reorder);  // the layer's own work: counted for it
      std::this_thread::sleep_for(10ms);
    }
    {
      const ProfileScope forward(ProfileKind::batchnorm_relu, bn, ProfilePass::forward);
      std::this_thread::sleep_for(5ms);
    }
    {
      const ProfileScope backward(ProfileKind::convolution, conv, ProfilePass::backward);
      std::this_thread::sleep_for(10ms);
      {
        const ProfileScope bucket(ProfileKind::gradient_sync);  // the step's: no layer's
        std::this_thread::sleep_for(30ms);
      }
      const ProfileScope inner(ProfileKind::batchnorm_relu, bn, ProfilePass::backward);  // named: its own
      std::this_thread::sleep_for(20ms);
    }
    {
      const ProfileScope unnamed(ProfileKind::pooling);  // outside every layer
      std::this_thread::sleep_for(5ms);
    }
  }
  ASSERT_EQ(profiler.layers().size(), 2u);
  const LayerSeconds& c = profiler.layers()[0];
  const LayerSeconds& b = profiler.layers()[1];
  EXPECT_EQ(c.layer, conv);  // in the order first timed
  EXPECT_EQ(b.layer, bn);
  EXPECT_GE(c.forward, 0.020);
  EXPECT_GE(c.backward, 0.010);
  EXPECT_LT(c.backward, 0.030);  // neither the bucket's 30 ms nor the inner layer's 20 ms
  EXPECT_GE(b.forward, 0.005);
  EXPECT_GE(b.backward, 0.020);
  EXPECT_GE(of(profiler, ProfileKind::gradient_sync), 0.030);
  // Every second of the layers is a second of a kind, once.
  const double layers = c.forward + c.backward + b.forward + b.backward;
  EXPECT_NEAR(layers + of(profiler, ProfileKind::gradient_sync) + of(profiler, ProfileKind::pooling), total(profiler),
              1e-9);
  profiler.reset();
  EXPECT_TRUE(profiler.layers().empty());
}

}  // namespace
}  // namespace gridnn
