#pragma once
// Speculative loads pay when the disk (or bus) has idle time and cost when it is the
// bottleneck: there a wrong guess evicts a resident the policy wanted and its read competes
// with demand reads, so a read-bound run reads more bytes and decodes slower with prefetching
// than without (Qwen3-30B-A3B shape at half its size in RAM: 79.9 vs 67.5 MB per token).
// The gate watches both sides — the share of each step's wall time with demand reads queued or
// running, and the share of resolved prefetches that were used — and while demand reads keep
// the disk busy and too few prefetches are used, lets only one prefetch in `probe_every`
// through, so that the accuracy keeps being measured and prefetching resumes when it pays.
//
// It also closes, whatever the disk's load, when prefetches gain nothing net: a used prefetch
// avoids one miss, but each one evicts a resident, and when the evicted experts are demanded
// again as often as the prefetched ones are used, the cache hits no more than without
// prefetching while reading twice the bytes (Qwen3 shape at 1/2: same hit rate, 1.8x the
// bytes, 17.3-18.9 vs 22.6-24.8 tok/s; on two vCPUs reads cost compute time when the disk idles).
// The provider reports such a demand miss of a prefetch's victim through on_harm(). Its count
// misses second-order effects (a victim's absence changes later evictions too): on that run the
// count said 0.17 net per prefetch where the hit rate showed none, hence a threshold of 0.3.
namespace moeflow {

class PrefetchGate {
 public:
  struct Config {
    double busy_threshold = 0.6;  // demand-read share of a step's wall time: "read-bound"
    double min_accuracy = 0.8;    // below it, prefetching costs more than it saves
    double min_net_gain = 0.3;    // (used - harmed) / prefetch events below it: no gain
    int probe_every = 8;          // prefetches let through while closed: 1 in this many
    double smoothing = 0.2;       // weight of the newest step / outcome in the averages
    double net_smoothing = 0.05;  // the same for the net gain: harm shows up steps later
  };
  PrefetchGate() : PrefetchGate(Config{}) {}
  explicit PrefetchGate(const Config& c) : c_(c) {}

  // A prefetched expert was used, or left the cache (or its queue) unused.
  void on_outcome(bool used) {
    const double v = used ? 1.0 : 0.0;
    accuracy_ += c_.smoothing * (v - accuracy_);
    net_ += c_.net_smoothing * (v - net_);
  }
  // A demand miss of an expert a prefetch had evicted: the miss that prefetch caused.
  void on_harm() { net_ += c_.net_smoothing * (-1.0 - net_); }
  // One step's demand-read seconds and wall seconds.
  void on_step(double demand_busy_s, double wall_s) {
    if (wall_s <= 0) return;
    const double b = demand_busy_s / wall_s;
    busy_ += c_.smoothing * ((b > 1 ? 1 : b < 0 ? 0 : b) - busy_);
  }
  bool closed() const {
    return (busy_ >= c_.busy_threshold && accuracy_ < c_.min_accuracy) || net_ < c_.min_net_gain;
  }
  // Whether the next prefetch may go (always while open; one in probe_every while closed).
  bool admit() {
    if (!closed()) return true;
    return ++held_ % c_.probe_every == 0;
  }
  double accuracy() const { return accuracy_; }
  double busy() const { return busy_; }
  // Misses avoided minus misses caused, per prefetch event (used +1, wasted 0, harm -1).
  double net_gain() const { return net_; }

 private:
  Config c_;
  double accuracy_ = 1.0;  // optimistic until prefetches resolve
  double busy_ = 0.0;
  double net_ = 1.0;  // optimistic, as accuracy_
  unsigned held_ = 0;
};

}  // namespace moeflow
