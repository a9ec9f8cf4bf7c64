#pragma once
// The median of repeated measurements (timings, rates): what every benchmark and start-up
// measurement reports, since single runs on these machines are noisy.
#include <algorithm>
#include <vector>

namespace moeflow {

// Middle value of v (the mean of the two middle values for an even count); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace moeflow
