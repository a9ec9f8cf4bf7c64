#include "core/watchdog.h"

#include <dirent.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

namespace moeflow {
namespace {

using Clock = std::chrono::steady_clock;

struct State {
  std::mutex mu;
  std::string phase = "starting";
  Clock::time_point phase_start = Clock::now();
  const Clock::time_point t0 = Clock::now();
  std::atomic<uint64_t> ticks{0};
  std::atomic<bool> lines{false};
  std::atomic<uint64_t> reports{0};
  std::once_flag started;
};

State& state() {
  static State* s = new State;  // never destroyed: the watchdog thread may outlive main's statics
  return *s;
}

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The stack dump: one thread at a time is signalled and writes its own backtrace.
std::atomic<int> g_dump_done{0};
constexpr int kDumpSignal = SIGURG;  // ignored by default: a stray one harms nothing

void dump_handler(int) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  char head[64];
  const int len = std::snprintf(head, sizeof head, "--- thread %ld:\n", (long)syscall(SYS_gettid));
  if (len > 0) (void)!write(2, head, (size_t)len);
  backtrace_symbols_fd(frames, n, 2);
  g_dump_done.store(1, std::memory_order_release);
}

void watch(double limit) {
  State& s = state();
  uint64_t last = s.ticks.load();
  Clock::time_point last_move = Clock::now();
  bool reported = false;
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const uint64_t now = s.ticks.load(std::memory_order_relaxed);
    if (now != last) {
      last = now;
      last_move = Clock::now();
      reported = false;
      continue;
    }
    if (!reported && since(last_move) >= limit) {
      char why[96];
      std::snprintf(why, sizeof why, "no progress for %.0f s (MOEFLOW_WATCHDOG=%g)",
                    since(last_move), limit);
      report_threads(why);
      reported = true;
    }
  }
}

}  // namespace

void phase(const char* name) {
  State& s = state();
  double at = 0;
  {
    std::lock_guard lk(s.mu);
    s.phase = name;
    s.phase_start = Clock::now();
    at = since(s.t0);
  }
  s.ticks.fetch_add(1, std::memory_order_relaxed);
  if (s.lines.load(std::memory_order_relaxed))
    std::fprintf(stderr, "moeflow: [%8.3f s] %s\n", at, name);
}

void progress() { state().ticks.fetch_add(1, std::memory_order_relaxed); }

void set_phase_lines(bool on) { state().lines.store(on); }

void start_watchdog(double seconds) {
  if (!(seconds > 0)) return;
  std::call_once(state().started, [seconds] {
    // backtrace() loads its unwinder on first use, which allocates: never first in a handler.
    void* warm[4];
    (void)backtrace(warm, 4);
    struct sigaction sa {};
    sa.sa_handler = dump_handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(kDumpSignal, &sa, nullptr);
    std::thread(watch, seconds).detach();
  });
}

void start_watchdog_from_env() {
  const char* e = std::getenv("MOEFLOW_WATCHDOG");
  if (!e || !*e) return;
  char* end = nullptr;
  const double s = std::strtod(e, &end);
  if (end == e || *end != '\0' || !(s > 0)) {
    std::fprintf(stderr,
                 "moeflow: warning: MOEFLOW_WATCHDOG='%s' is not a positive number of seconds; no "
                 "watchdog\n",
                 e);
    return;
  }
  start_watchdog(s);
}

void report_threads(const char* why) {
  State& s = state();
  std::string ph;
  double in_phase = 0, total = 0;
  {
    std::lock_guard lk(s.mu);
    ph = s.phase;
    in_phase = since(s.phase_start);
    total = since(s.t0);
  }
  std::fprintf(stderr,
               "moeflow: watchdog: %s; phase '%s' for %.1f s (%.1f s since start); stacks of every "
               "thread:\n",
               why, ph.c_str(), in_phase, total);
  std::fflush(stderr);
  const pid_t pid = getpid();
  const long self = syscall(SYS_gettid);
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      const long tid = std::strtol(e->d_name, nullptr, 10);
      if (tid <= 0 || tid == self) continue;
      g_dump_done.store(0, std::memory_order_release);
      if (syscall(SYS_tgkill, pid, tid, kDumpSignal) != 0) continue;
      // A thread blocked with the signal masked never answers: wait a bounded time.
      for (int i = 0; i < 200 && !g_dump_done.load(std::memory_order_acquire); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    closedir(d);
  }
  std::fprintf(stderr, "moeflow: watchdog: end of report\n");
  std::fflush(stderr);
  s.reports.fetch_add(1);
}

uint64_t watchdog_reports() { return state().reports.load(); }

}  // namespace moeflow
