#include "experts/arrival_estimate.h"

#include <algorithm>

#include "gguf/expert_index.h"

namespace moeflow {

namespace {
// Exponential running mean; the first sample sets it. 0.2 follows a change of phase (prefill to
// decode) within a few layers without jumping at every noisy one.
double running_mean(double mean, double sample, bool first) {
  return first ? sample : 0.8 * mean + 0.2 * sample;
}
}  // namespace

ArrivalEstimate::ArrivalEstimate(int n_layers, int io_threads)
    : n_layers_(std::max(1, n_layers)), parallel_(std::clamp(io_threads, 1, kNumExpertProj)) {}

void ArrivalEstimate::on_route(int layer, double t, double busy) {
  if (last_layer_ >= 0 && layer > last_layer_ && t > last_t_) {
    const double dt = t - last_t_;
    const bool first = layer_s_ == 0;
    layer_s_ = running_mean(layer_s_, dt / (layer - last_layer_), first);
    free_ = running_mean(free_, std::clamp(1.0 - (busy - last_busy_) / dt, 0.0, 1.0), first);
  }
  last_layer_ = layer;
  last_t_ = t;
  last_busy_ = busy;
}

void ArrivalEstimate::on_step_end() { last_layer_ = -1; }

void ArrivalEstimate::on_read(uint64_t bytes, double seconds) {
  if (bytes == 0 || seconds <= 0) return;
  byte_s_ = running_mean(byte_s_, seconds / static_cast<double>(bytes), byte_s_ == 0);
}

int ArrivalEstimate::distance(int target) const {
  if (last_layer_ < 0) return target + 1;  // the step has not routed a layer yet
  const int d = target - last_layer_;
  return d > 0 ? d : d + n_layers_;
}

double ArrivalEstimate::copy_seconds(uint64_t bytes) const {
  return static_cast<double>(bytes) * byte_s_ / parallel_;
}

bool ArrivalEstimate::in_time(int target, uint64_t bytes) const {
  if (layer_s_ == 0 || byte_s_ == 0) return true;
  return distance(target) * layer_s_ * free_ >= kMinShare * copy_seconds(bytes);
}

}  // namespace moeflow
