#pragma once
// Measures O_DIRECT read bandwidth of a file region by request size and queue depth, with two
// engines: `pread` (depth = that many threads, each with one blocking read outstanding) and
// `uring` (one thread keeping `depth` reads in flight through io_uring). Offsets are random
// and aligned to the request size (or 4 KiB), so the device cannot stream sequentially and the
// page cache is not involved. `moeflow pack --measure --sweep` prints the table; the result
// decides how ExpertStore issues its reads (docs/bigger-than-ram.md).
#include <cstdint>
#include <string>
#include <vector>

namespace moeflow {

struct ReadBenchConfig {
  std::string path;
  uint64_t region_begin = 0;  // bytes [begin, end) of the file are read
  uint64_t region_end = 0;
  std::vector<uint64_t> sizes;       // request sizes (multiples of 4 KiB)
  std::vector<int> depths;           // queue depths (reads in flight)
  std::vector<std::string> engines;  // "pread", "uring"
  double seconds = 1.0;              // per (engine, size, depth) point
  uint64_t seed = 42;
};

struct ReadBenchPoint {
  std::string engine;
  uint64_t request_bytes = 0;
  int depth = 0;
  uint64_t bytes = 0;
  double seconds = 0;
  double gbps() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
};

// Whether io_uring can be used here (built with liburing and the kernel allows it).
bool uring_available();

// Runs every point; throws moeflow::Error naming the file on an I/O error or when O_DIRECT is
// refused (a bandwidth through the page cache would not be the device's).
std::vector<ReadBenchPoint> run_read_bench(const ReadBenchConfig& cfg);

}  // namespace moeflow
