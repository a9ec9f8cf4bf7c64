#include "experts/read_bench.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <thread>

#if MOEFLOW_HAVE_URING
#include <liburing.h>
#endif

#include "core/aligned_buffer.h"
#include "core/error.h"
#include "core/timer.h"

namespace moeflow {
namespace {

constexpr uint64_t kAlign = 4096;

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Random request offsets inside the region, aligned to min(request, 64 KiB) so large requests
// still have many places to start.
class Offsets {
 public:
  Offsets(const ReadBenchConfig& c, uint64_t size, uint64_t seed) : rng_(seed) {
    align_ = std::max<uint64_t>(kAlign, std::min<uint64_t>(size, 64 << 10));
    begin_ = (c.region_begin + align_ - 1) / align_ * align_;
    MOEFLOW_CHECK(c.region_end > begin_ + size,
                  "{}: the region to measure ({} bytes) is smaller "
                  "than one {}-byte request",
                  c.path, c.region_end - c.region_begin, size);
    n_ = (c.region_end - size - begin_) / align_ + 1;
  }
  uint64_t next() { return begin_ + rng_() % n_ * align_; }

 private:
  std::mt19937_64 rng_;
  uint64_t align_ = kAlign, begin_ = 0, n_ = 1;
};

void check_read(const ReadBenchConfig& c, ssize_t r, uint64_t size, uint64_t off) {
  if (r < 0) fail("{}: read of {} bytes at {} failed: {}", c.path, size, off, std::strerror(-r));
  if (static_cast<uint64_t>(r) != size)
    fail("{}: short read ({} of {} bytes at {})", c.path, r, size, off);
}

ReadBenchPoint bench_pread(const ReadBenchConfig& c, int fd, uint64_t size, int depth) {
  std::atomic<uint64_t> bytes{0};
  std::vector<std::string> errors(depth);
  std::vector<std::thread> th;
  const double t0 = now_seconds();
  for (int i = 0; i < depth; ++i) {
    th.emplace_back([&, i] {
      try {
        AlignedBuffer buf(size, kAlign);
        Offsets off(c, size, c.seed + i);
        while (now_seconds() - t0 < c.seconds) {
          const uint64_t o = off.next();
          ssize_t r = ::pread(fd, buf.data(), size, static_cast<off_t>(o));
          check_read(c, r < 0 ? -errno : r, size, o);
          bytes += size;
        }
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : th) t.join();
  const double dt = now_seconds() - t0;
  for (const auto& e : errors)
    if (!e.empty()) fail("{}", e);
  return {"pread", size, depth, bytes.load(), dt};
}

#if MOEFLOW_HAVE_URING
ReadBenchPoint bench_uring(const ReadBenchConfig& c, int fd, uint64_t size, int depth) {
  io_uring ring;
  const int rc = io_uring_queue_init(static_cast<unsigned>(depth), &ring, 0);
  if (rc < 0) fail("io_uring_queue_init({}): {}", depth, std::strerror(-rc));
  struct Ring {
    io_uring* r;
    ~Ring() { io_uring_queue_exit(r); }
  } guard{&ring};
  std::vector<AlignedBuffer> bufs;
  std::vector<uint64_t> offs(depth);
  for (int i = 0; i < depth; ++i) bufs.emplace_back(size, kAlign);
  Offsets off(c, size, c.seed);
  auto submit = [&](int i) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    MOEFLOW_CHECK(sqe != nullptr, "io_uring: submission queue full");
    offs[i] = off.next();
    io_uring_prep_read(sqe, fd, bufs[i].data(), static_cast<unsigned>(size), offs[i]);
    io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(i));
  };
  const double t0 = now_seconds();
  for (int i = 0; i < depth; ++i) submit(i);
  io_uring_submit(&ring);
  uint64_t bytes = 0;
  int in_flight = depth;
  bool stopping = false;
  while (in_flight > 0) {
    io_uring_cqe* cqe = nullptr;
    const int w = io_uring_wait_cqe(&ring, &cqe);
    if (w == -EINTR) continue;
    if (w < 0) fail("io_uring_wait_cqe: {}", std::strerror(-w));
    const int i = static_cast<int>(io_uring_cqe_get_data64(cqe));
    const int res = cqe->res;
    io_uring_cqe_seen(&ring, cqe);
    --in_flight;
    check_read(c, res, size, offs[i]);
    bytes += size;
    stopping = stopping || now_seconds() - t0 >= c.seconds;
    if (!stopping) {
      submit(i);
      io_uring_submit(&ring);
      ++in_flight;
    }
  }
  return {"uring", size, depth, bytes, now_seconds() - t0};
}
#endif

}  // namespace

bool uring_available() {
#if MOEFLOW_HAVE_URING
  io_uring ring;
  if (io_uring_queue_init(2, &ring, 0) < 0) return false;
  io_uring_queue_exit(&ring);
  return true;
#else
  return false;
#endif
}

std::vector<ReadBenchPoint> run_read_bench(const ReadBenchConfig& c) {
  Fd f;
  f.fd = ::open(c.path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (f.fd < 0)
    fail(
        "{}: cannot open with O_DIRECT ({}): the read bandwidth measured through the page cache "
        "would not be the device's",
        c.path, std::strerror(errno));
  for (uint64_t s : c.sizes)
    MOEFLOW_CHECK(s > 0 && s % kAlign == 0, "request size {} is not a positive multiple of 4 KiB",
                  s);
  for (int d : c.depths) MOEFLOW_CHECK(d >= 1 && d <= 256, "queue depth {} is not in 1..256", d);
  std::vector<ReadBenchPoint> out;
  for (const std::string& e : c.engines) {
    if (e == "uring" && !uring_available())
      fail("io_uring is not available here ({})",
#if MOEFLOW_HAVE_URING
           "the kernel refused io_uring_queue_init"
#else
           "moeflow was built without liburing"
#endif
      );
    if (e != "pread" && e != "uring") fail("unknown read engine '{}' (pread, uring)", e);
  }
  for (uint64_t size : c.sizes)
    for (int depth : c.depths)
      for (const std::string& e : c.engines) {
#if MOEFLOW_HAVE_URING
        if (e == "uring") {
          out.push_back(bench_uring(c, f.fd, size, depth));
          continue;
        }
#endif
        out.push_back(bench_pread(c, f.fd, size, depth));
      }
  return out;
}

}  // namespace moeflow
