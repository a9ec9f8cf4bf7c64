#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "backend/device_link.h"
#include "backend/device_rules.h"
#include "core/median.h"

namespace moeflow {

double measure_pinned_h2d(DeviceLink& link, uint64_t bytes, int reps) {
  Buffer src = link.pinned_allocator().allocate(bytes, kPinnedMaxAlignment);
  Buffer dst = link.device_allocator().allocate(bytes, kDeviceMaxAlignment);
  std::memset(src.data(), 1, bytes);  // fault the pages in before timing
  std::unique_ptr<CopyLane> lane = link.open_lane();
  lane->wait(lane->copy_async(dst.data(), src.data(), bytes));  // warm-up
  std::vector<double> rates;
  for (int r = 0; r < std::max(1, reps); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    lane->wait(lane->copy_async(dst.data(), src.data(), bytes));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(s > 0 ? double(bytes) / s : 0);
  }
  return median(rates);
}

}  // namespace moeflow
