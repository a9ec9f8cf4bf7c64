// The watchdog (core/watchdog.h): a process that stops progressing says where it is — the phase
// it is in, for how long, and every thread's stack — once per stall, and stays quiet while
// progress() moves.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/watchdog.h"

namespace moeflow {
namespace {

TEST(Watchdog, ReportsTheStalledPhaseAndEveryThreadOncePerStall) {
  phase("a test that waits");
  start_watchdog(0.4);
  // A second thread, blocked: its stack must be in the report too.
  std::atomic<bool> stop{false};
  std::thread sleeper([&] {
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  });
  // While progress moves, nothing is reported.
  const uint64_t before = watchdog_reports();
  for (int i = 0; i < 20; ++i) {
    progress();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(watchdog_reports(), before);
  testing::internal::CaptureStderr();
  for (int i = 0; i < 60 && watchdog_reports() == before; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::milliseconds(800));  // a stall reports once
  const std::string err = testing::internal::GetCapturedStderr();
  stop = true;
  sleeper.join();
  EXPECT_EQ(watchdog_reports(), before + 1) << err;
  EXPECT_NE(err.find("no progress for"), std::string::npos) << err;
  EXPECT_NE(err.find("phase 'a test that waits'"), std::string::npos) << err;
  // At least the sleeper's and this thread's stacks (the watchdog's own is not dumped).
  size_t threads = 0;
  for (size_t p = err.find("--- thread"); p != std::string::npos; p = err.find("--- thread", p + 1))
    ++threads;
  EXPECT_GE(threads, 2u) << err;
  EXPECT_NE(err.find("end of report"), std::string::npos) << err;
}

}  // namespace
}  // namespace moeflow
