#pragma once
// Helpers shared by the libFuzzer targets in this folder.
#include <sanitizer/allocator_interface.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace moeflow::fuzz {

// ../shared/data (real vocabularies); the environment variable MOEFLOW_SHARED_DATA overrides
// the path compiled in.
inline std::string shared_data_dir() {
  const char* env = std::getenv("MOEFLOW_SHARED_DATA");
  return env && *env ? env : MOEFLOW_SHARED_DATA;
}

// A finding: prints `what` and aborts, which libFuzzer reports as a crash and saves the input.
[[noreturn]] inline void fuzz_fail(const std::string& what) {
  std::fprintf(stderr, "\n==== fuzz property violated: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

#define FUZZ_CHECK(cond, msg)                                                   \
  do {                                                                          \
    if (!(cond)) ::moeflow::fuzz::fuzz_fail(std::string(#cond) + ": " + (msg)); \
  } while (0)

// Peak heap growth while one input is processed, through the sanitizer allocator's hooks. The
// GGUF target uses it to check that the memory a file makes moeflow allocate is bounded by
// the file's size (a count or length in a header must not buy more than the file holds).
class HeapMeter {
 public:
  static void start() {
    current().store(0, std::memory_order_relaxed);
    peak().store(0, std::memory_order_relaxed);
    active().store(true, std::memory_order_relaxed);
  }
  static int64_t stop() {
    active().store(false, std::memory_order_relaxed);
    return peak().load(std::memory_order_relaxed);
  }
  static void install() { __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free); }

 private:
  static std::atomic<int64_t>& current() {
    static std::atomic<int64_t> v{0};
    return v;
  }
  static std::atomic<int64_t>& peak() {
    static std::atomic<int64_t> v{0};
    return v;
  }
  static std::atomic<bool>& active() {
    static std::atomic<bool> v{false};
    return v;
  }
  static void on_malloc(const volatile void*, size_t n) {
    if (!active().load(std::memory_order_relaxed)) return;
    const int64_t now = current().fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed) +
                        static_cast<int64_t>(n);
    int64_t p = peak().load(std::memory_order_relaxed);
    while (now > p && !peak().compare_exchange_weak(p, now, std::memory_order_relaxed)) {}
  }
  static void on_free(const volatile void* ptr) {
    if (!active().load(std::memory_order_relaxed) || !ptr) return;
    const size_t n = __sanitizer_get_allocated_size(const_cast<const void*>(ptr));
    current().fetch_sub(static_cast<int64_t>(n), std::memory_order_relaxed);
  }
};

}  // namespace moeflow::fuzz
