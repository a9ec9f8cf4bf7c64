#include "trace/simulator.h"

#include <algorithm>
#include <cmath>
#include <deque>

#include "core/error.h"
#include "policy/eviction_policy.h"
#include "policy/predictor.h"
#include "policy/resident_set.h"
#include "trace/oracle.h"

namespace moeflow::trace {
namespace {

enum class Slot : uint8_t { absent, pending, inflight, resident };

struct Entry {
  Slot slot = Slot::absent;
  double arrival = 0;        // when the transfer completes (inflight/resident)
  bool prefetched = false;   // brought by a prefetch and not used yet
  bool speculative = false;  // in flight at LOW priority (demand loads overtake it)
};

// A prefetch holds its place from the moment it is issued (the live cache binds a slot then);
// only its copy waits for the link.
struct Pending {
  ExpertKey key;
  double issued;
};

// The whole replay of one trace for one configuration. Logical time for policies is
// step * n_layers + layer (see oracle.h), so Belady can look the future up.
class Sim {
 public:
  Sim(const Trace& t, const SimConfig& c) : t_(t), c_(c), L_(t.n_layers), E_(t.n_experts) {
    MOEFLOW_CHECK(c.cache_rate > 0 && c.cache_rate <= 1,
                  "sim: --cache-rate must be in (0, 1], got {}", c.cache_rate);
    MOEFLOW_CHECK(c.hw.expert_bytes > 0 && c.hw.link_gb_s > 0,
                  "sim: hardware profile '{}' lacks bandwidth or expert size", c.hw.name);
    layers_ = t.recorded_layers();
    MOEFLOW_CHECK(!layers_.empty(), "sim: trace '{}' has no routing", t.source);
    per_layer_cap_ = std::max(1, (int)std::lround(c.cache_rate * E_));
    total_cap_ = std::max(1, (int)std::lround(c.cache_rate * E_ * (double)layers_.size()));
    ent_.assign((size_t)L_ * E_, {});
    res_.layers.resize(L_);
    for (int l = 0; l < L_; ++l) res_.layers[l].layer = l;
    pred_cur_.assign((size_t)L_ * E_, 0);
    pred_next_.assign((size_t)L_ * E_, 0);
    xfer_ms_ = c.hw.transfer_ms();
  }

  SimResult run(EvictionPolicy& pol, Predictor* pred) {
    pol_ = &pol;
    belady_ = dynamic_cast<BeladyPolicy*>(&pol);
    pred_ = pred;
    ResidentSet::Config rc;
    rc.n_layers = L_;
    rc.n_experts = E_;
    rc.layers = layers_;
    rc.per_layer = !global();
    rc.capacity = cap();
    core_ = std::make_unique<ResidentSet>(rc, pol);
    core_->set_log(c_.events);
    for (ExpertKey k : core_->preload()) at(k) = {Slot::resident, 0, false, false};
    size_t s = 0;
    double ttft_sum = 0;
    int n_prefills = 0;
    double decode_sum = 0;
    while (s < t_.steps.size()) {
      const TokenStep& st = t_.steps[s];
      if (s == 0 || st.request != t_.steps[s - 1].request) {
        pol_->on_sequence_start();
        if (pred_) pred_->on_sequence_start();
        std::fill(pred_cur_.begin(), pred_cur_.end(), 0);
        std::fill(pred_next_.begin(), pred_next_.end(), 0);
      }
      double start = clock_;
      if (st.phase == Phase::prefill) {
        size_t e = s;
        while (e < t_.steps.size() && t_.steps[e].phase == Phase::prefill &&
               t_.steps[e].request == st.request)
          ++e;
        prefill(s, e);
        ttft_sum += clock_ - start;
        n_prefills++;
        s = e;
        continue;
      }
      decode_step(s);
      decode_sum += clock_ - start;
      res_.decode_tokens++;
      ++s;
    }
    finish(decode_sum, ttft_sum, n_prefills);
    return res_;
  }

 private:
  Entry& at(ExpertKey k) { return ent_[(size_t)k.layer * E_ + k.expert]; }
  bool global() const { return c_.global_budget; }
  int cap() const { return global() ? total_cap_ : per_layer_cap_; }

  // k took its place in the core (already inserted): now it is on its way.
  void occupy(ExpertKey k, double arrival) {
    Entry& e = at(k);
    e.slot = Slot::inflight;
    e.arrival = arrival;
  }
  // The core evicted k.
  void evicted(ExpertKey k) {
    if (k.layer >= 0) at(k) = {};
  }

  // Starts queued prefetches whose turn on the link comes before `now`.
  void advance_link(double now) {
    while (!pending_.empty()) {
      double start = std::max(link_free_, pending_.front().issued);
      if (start >= now) break;
      Pending p = pending_.front();
      pending_.pop_front();
      if (at(p.key).slot != Slot::pending) continue;
      link_free_ = start + xfer_ms_;
      occupy(p.key, link_free_);
      at(p.key).speculative = true;
      res_.bytes_moved += c_.hw.expert_bytes;
    }
  }
  // A demand load is HIGH priority: it waits only for earlier demand loads; speculative copies
  // in flight are preempted between chunks and finish after it (the prefetcher's two queues).
  double demand_transfer(double now) {
    double start = std::max(demand_free_, now);
    double end = start + xfer_ms_;
    if (link_free_ > start) {
      for (auto& e : ent_)
        if (e.slot == Slot::inflight && e.speculative && e.arrival > start) e.arrival += xfer_ms_;
      link_free_ += xfer_ms_;
    } else {
      link_free_ = end;
    }
    demand_free_ = end;
    res_.bytes_moved += c_.hw.expert_bytes;
    res_.demand_loads++;
    return end;
  }
  void settle(double now) {
    // In-flight transfers that completed become plain residents.
    for (auto& e : ent_)
      if (e.slot == Slot::inflight && e.arrival <= now)
        e.slot = Slot::resident, e.speculative = false;
  }

  // Room for a prefetched expert; false if nothing may be evicted. A prefetch never evicts what
  // it is worth less than ("do no harm"): neither the issuing layer's route, nor experts the
  // predictor currently expects, nor (under Belady) a resident needed sooner than itself.
  bool room_for_prefetch(ExpertKey incoming, uint64_t t, const std::vector<ExpertKey>& protect) {
    if (!core_->full(incoming.layer)) return true;
    const ExpertKey v = core_->pick_victim(incoming.layer, t, [&](ExpertKey k) {
      if (at(k).slot != Slot::resident) return false;
      if (std::find(protect.begin(), protect.end(), k) != protect.end()) return false;
      return belady_ || !(pred_cur_[(size_t)k.layer * E_ + k.expert] ||
                          pred_next_[(size_t)k.layer * E_ + k.expert]);
    });
    if (v.layer < 0) return false;
    if (belady_ && belady_->next_use(v, t) <= belady_->next_use(incoming, t)) return false;
    core_->evict(v);
    evicted(v);
    return true;
  }

  // One layer of one token (or of a whole prefill batch when `tokens` > 1). Returns the time
  // the layer's experts finish.
  double run_layer(size_t step, const LayerRoute& r, double tokens, bool count_stats) {
    const uint64_t tl = logical_time(step, r.layer, L_);
    clock_ += c_.hw.layer_ms;
    advance_link(clock_);
    settle(clock_);
    // Early preemption: speculative tasks for this layer that the router did not pick and that
    // have not started are dropped and give their places back (live: cancel_low at the route);
    // a picked one is raised to a demand load and keeps its place.
    auto picked = [&](ExpertKey k) {
      return k.layer == r.layer &&
             std::find(r.experts.begin(), r.experts.end(), k.expert) != r.experts.end();
    };
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->key.layer == r.layer) {
        if (!picked(it->key)) {
          core_->evict(it->key);
          at(it->key) = {};
        }
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
    RouteEvent ev{r.layer, step, tokens > 1, r.experts, r.weights};
    pol_->on_route(ev);
    LayerStats& ls = res_.layers[r.layer];
    const double per_expert = c_.hw.expert_compute_ms * (tokens > 1 ? 1.0 + 0.05 * tokens : 1.0);
    std::vector<double> ready;
    const size_t n = r.experts.size();
    std::vector<char> hits(n), lates(n), keep(n, 0);
    for (size_t i = 0; i < n; ++i) {
      Entry& en = at({r.layer, r.experts[i]});
      if (en.slot == Slot::pending) {  // a queued prefetch the router picked: read now, at HIGH
        en.slot = Slot::inflight;
        en.arrival = demand_transfer(clock_);
        res_.demand_loads--;  // counted when it was issued, as a prefetch
      }
      hits[i] = en.slot == Slot::resident;
      lates[i] = en.slot == Slot::inflight;
      if (lates[i]) en.speculative = false;  // raised to HIGH: nothing overtakes it any more
    }
    if (belady_ && belady_->bypass()) belady_route(r, tl, keep);
    auto routed = [&](ExpertKey k) {
      return k.layer == r.layer &&
             std::find(r.experts.begin(), r.experts.end(), k.expert) != r.experts.end();
    };
    // Streams a miss the cache does not keep: computed where the weights are (host CPU), in
    // parallel with the fast tier, or copied through a temporary buffer.
    auto stream = [&]() {
      if (c_.hw.cpu_expert_ms > 0) {
        ready.push_back(clock_ + c_.hw.cpu_expert_ms * (tokens > 1 ? 1.0 + 0.05 * tokens : 1.0) -
                        per_expert);
      } else {
        ready.push_back(demand_transfer(clock_));
      }
    };
    // Phase 1 (the core's rule, as the live cache decides at on_route): misses in route order,
    // room among the residents that are settled and not routed by this layer.
    std::vector<size_t> deferred;
    for (size_t i = 0; i < n; ++i) {
      const int e = r.experts[i];
      ExpertKey k{r.layer, e};
      Entry& en = at(k);
      const bool hit = hits[i], late = lates[i];
      if (en.prefetched && (hit || late)) {
        res_.prefetch_used++;
        if (hit) res_.prefetch_in_time++;
        en.prefetched = false;
      }
      if (count_stats) {
        ls.uses++, res_.uses++;
        if (hit) ls.hits++, res_.hits++;
        if (late) ls.late++, res_.late++;
      }
      if (hit) {
        ready.push_back(clock_);
        continue;
      }
      if (late) {
        ready.push_back(en.arrival);
        continue;
      }
      if (en.slot != Slot::absent) {  // the route names it twice
        ready.push_back(en.arrival);
        continue;
      }
      bool cached = false;
      if (belady_ && belady_->bypass()) {
        cached = keep[i] != 0;
        if (cached) core_->insert(k, tl);
      } else {
        ExpertKey ev;
        const ResidentSet::Miss m = core_->route_miss(
            k, tl, [&](ExpertKey c) { return at(c).slot == Slot::resident && !routed(c); }, ev);
        evicted(ev);
        if (m == ResidentSet::Miss::Defer) {
          deferred.push_back(i);
          continue;
        }
        cached = m == ResidentSet::Miss::Load;
      }
      if (!cached) {
        stream();
        continue;
      }
      const double arr = demand_transfer(clock_);
      occupy(k, arr);
      ready.push_back(arr);
    }
    for (size_t i = 0; i < n; ++i)
      if (std::find(deferred.begin(), deferred.end(), i) == deferred.end())
        core_->access({r.layer, r.experts[i]}, tl);
    // Phase 2: the deferred misses, once the layer's other experts were served (live: at their
    // acquire, after the resident and in-flight ones), so those are candidates too.
    for (size_t i : deferred) {
      ExpertKey k{r.layer, r.experts[i]}, ev;
      if (core_->serve_deferred(
              k, tl, [&](ExpertKey c) { return at(c).slot == Slot::resident || routed(c); }, ev)) {
        evicted(ev);
        const double arr = demand_transfer(clock_);
        occupy(k, arr);
        ready.push_back(arr);
      } else {
        stream();
      }
      core_->access(k, tl);
    }
    // Residents first, then by arrival: the reorder step of the MoE block protocol.
    std::sort(ready.begin(), ready.end());
    double cursor = clock_;
    for (double rd : ready) cursor = std::max(cursor, rd) + per_expert;
    double ideal = clock_ + per_expert * (double)ready.size();
    double stall = std::max(0.0, cursor - ideal);
    ls.stall_ms += stall;
    res_.stall_ms += stall;
    return cursor;
  }

  // Belady with bypass decides a route at once: of the residents in scope (the layer, or all
  // layers for a global budget) and the route's missing experts, the ones with the soonest next
  // use fill the free capacity; residents beyond it are evicted, misses beyond it are streamed.
  void belady_route(const LayerRoute& r, uint64_t tl, std::vector<char>& keep) {
    std::vector<std::pair<uint64_t, ExpertKey>> pool;
    int fixed = 0;
    auto scan = [&](int l) {
      for (int e = 0; e < E_; ++e) {
        ExpertKey k{l, e};
        Slot sl = at(k).slot;
        bool routed =
            l == r.layer && std::find(r.experts.begin(), r.experts.end(), e) != r.experts.end();
        if (sl == Slot::inflight || sl == Slot::pending) {
          fixed++;
        } else if (sl == Slot::resident || routed) {
          pool.push_back({belady_->next_use(k, tl), k});
        }
      }
    };
    if (global()) {
      for (int l : layers_) scan(l);
    } else {
      scan(r.layer);
    }
    std::sort(pool.begin(), pool.end(), [&](auto& a, auto& b) {
      if (a.first != b.first) return a.first < b.first;
      bool ra = at(a.second).slot == Slot::resident, rb = at(b.second).slot == Slot::resident;
      if (ra != rb) return ra;  // ties: keep what is already there
      return a.second.layer != b.second.layer ? a.second.layer < b.second.layer
                                              : a.second.expert < b.second.expert;
    });
    const size_t free = (size_t)std::max(0, cap() - fixed);
    for (size_t i = 0; i < pool.size(); ++i) {
      ExpertKey k = pool[i].second;
      bool kept = i < free && pool[i].first != UINT64_MAX;
      if (k.layer == r.layer)
        for (size_t j = 0; j < r.experts.size(); ++j)
          if (r.experts[j] == k.expert) keep[j] = kept;
      if (!kept && at(k).slot == Slot::resident) {
        core_->evict(k);
        evicted(k);
      }
    }
  }

  void issue_prefetches(size_t step, const LayerRoute& r, std::vector<Prediction>& preds) {
    std::stable_sort(preds.begin(), preds.end(),
                     [](auto& a, auto& b) { return a.confidence > b.confidence; });
    const uint64_t tl = logical_time(step, r.layer, L_);
    std::vector<ExpertKey> protect;
    for (int e : r.experts) protect.push_back({r.layer, e});
    // Every prediction of the call is expected (and so protected from the call's evictions)
    // before the first one takes a place; also what the recall statistics read: which (token,
    // layer) each prediction targets.
    for (auto& p : preds) {
      if (p.layer < 0 || p.layer >= L_ || p.expert < 0 || p.expert >= E_) continue;
      auto& tgt = p.layer > r.layer ? pred_cur_ : pred_next_;
      tgt[(size_t)p.layer * E_ + p.expert] = 1;
    }
    int issued = 0;
    for (auto& p : preds) {
      if (p.layer < 0 || p.layer >= L_ || p.expert < 0 || p.expert >= E_) continue;
      if (c_.max_prefetch_per_call > 0 && issued >= c_.max_prefetch_per_call) continue;
      // Stride rule (ProMoE): a copy that cannot finish before its use is not started; it would
      // arrive late, cost an eviction and delay other copies.
      if (c_.skip_late_prefetches) {
        int ahead = p.layer > r.layer ? p.layer - r.layer : L_ - r.layer + p.layer;
        double lead = ahead * (c_.hw.layer_ms + t_.top_k * c_.hw.expert_compute_ms);
        double backlog = std::max(0.0, link_free_ - clock_) + (double)pending_.size() * xfer_ms_;
        if (lead < backlog + xfer_ms_) continue;
      }
      ExpertKey k{p.layer, p.expert};
      if (at(k).slot != Slot::absent) continue;
      if (std::find(layers_.begin(), layers_.end(), p.layer) == layers_.end()) continue;
      // Its place is taken now, as the live cache binds a slot when it queues the read; the
      // issuing layer's experts are still protected (live: routed, not yet acquired).
      if (!room_for_prefetch(k, tl, protect)) continue;
      core_->insert(k, tl);
      at(k).slot = Slot::pending;
      at(k).prefetched = true;
      pending_.push_back({k, clock_});
      res_.prefetches++;  // issued (live: prefetch_issued), whether or not its copy starts
      issued++;
    }
  }

  void score_predictions(const LayerRoute& r) {
    LayerStats& ls = res_.layers[r.layer];
    uint8_t* row = &pred_cur_[(size_t)r.layer * E_];
    for (int e = 0; e < E_; ++e) ls.predicted += row[e];
    for (int e : r.experts) ls.correct += row[e];
    std::fill(row, row + E_, 0);
  }

  void decode_step(size_t s) {
    const TokenStep& st = t_.steps[s];
    std::vector<Prediction> preds;
    for (const LayerRoute& r : st.routes) {
      score_predictions(r);
      double done = run_layer(s, r, 1, true);
      if (pred_) {
        preds.clear();
        PredictorInput in{RouteEvent{r.layer, s, false, r.experts, r.weights}, r.hidden,
                          st.token_id};
        pred_->on_layer(in, preds);
        issue_prefetches(s, r, preds);
      }
      clock_ = done;
    }
    // Predictions for layers at or before the current one target the next token.
    std::swap(pred_cur_, pred_next_);
    std::fill(pred_next_.begin(), pred_next_.end(), 0);
  }

  // A prompt runs as one batch per layer: each expert routed by any prompt token is needed once,
  // in the MoE planner's order (every token's first choice, then every token's second ...).
  void prefill(size_t b, size_t e) {
    std::vector<double> counts((size_t)L_ * E_, 0);
    for (size_t s = b; s < e; ++s)
      for (auto& r : t_.steps[s].routes)
        for (int x : r.experts) counts[(size_t)r.layer * E_ + x] += 1;
    for (int l : layers_) {
      LayerRoute u;
      u.layer = l;
      double tokens = 0;
      for (int x = 0; x < E_; ++x) tokens += counts[(size_t)l * E_ + x];
      for (int rank = 0; rank < t_.top_k; ++rank)
        for (size_t s = b; s < e; ++s)
          for (auto& r : t_.steps[s].routes)
            if (r.layer == l && rank < (int)r.experts.size() &&
                std::find(u.experts.begin(), u.experts.end(), r.experts[rank]) == u.experts.end())
              u.experts.push_back(r.experts[rank]);
      if (u.experts.empty()) continue;
      double n_tok = std::max(2.0, tokens / std::max(1.0, (double)t_.top_k));
      clock_ = run_layer(b, u, n_tok, false);
    }
    // Placed as at the prefill's last layer (live: before the sequence's first decode step),
    // when the layers' own loads have arrived (each layer waited for them).
    settle(clock_);
    const uint64_t t_end = logical_time(e, 0, L_) - 1;
    for (auto [k, ev] :
         core_->place(counts, t_end, [&](ExpertKey c) { return at(c).slot == Slot::resident; })) {
      evicted(ev);
      occupy(k, demand_transfer(clock_));
      res_.placement_loads++;
    }
  }

  void finish(double decode_sum, double ttft_sum, int n_prefills) {
    res_.capacity = cap();
    res_.hit_rate = res_.uses ? (double)res_.hits / (double)res_.uses : 0;
    res_.prefetch_accuracy =
        res_.prefetches ? (double)res_.prefetch_used / (double)res_.prefetches : 0;
    res_.in_time_rate =
        res_.prefetch_used ? (double)res_.prefetch_in_time / (double)res_.prefetch_used : 0;
    res_.goodpred = res_.prefetch_accuracy * res_.in_time_rate;
    uint64_t pr = 0, co = 0;
    for (auto& l : res_.layers) pr += l.predicted, co += l.correct;
    res_.pred_precision = pr ? (double)co / (double)pr : 0;
    res_.pred_recall = res_.uses ? (double)co / (double)res_.uses : 0;
    res_.tpot_ms = res_.decode_tokens ? decode_sum / (double)res_.decode_tokens : 0;
    res_.ttft_ms = n_prefills ? ttft_sum / n_prefills : 0;
  }

  const Trace& t_;
  const SimConfig& c_;
  int L_, E_;
  std::vector<int> layers_;
  int per_layer_cap_ = 1, total_cap_ = 1;
  std::vector<Entry> ent_;
  std::unique_ptr<ResidentSet> core_;  // which experts hold a place (shared with the live cache)
  std::deque<Pending> pending_;
  double clock_ = 0, link_free_ = 0, demand_free_ = 0, xfer_ms_ = 0;
  std::vector<uint8_t> pred_cur_, pred_next_;
  EvictionPolicy* pol_ = nullptr;
  BeladyPolicy* belady_ = nullptr;
  Predictor* pred_ = nullptr;
  SimResult res_;
};

}  // namespace

std::vector<double> routing_counts(const Trace& t) {
  std::vector<double> c((size_t)t.n_layers * t.n_experts, 0);
  for (auto& s : t.steps)
    for (auto& r : s.routes)
      for (int e : r.experts) c[(size_t)r.layer * t.n_experts + e] += 1;
  return c;
}

std::vector<std::string> sim_policy_names() {
  auto v = eviction_policy_names();
  v.push_back("belady");
  v.push_back("belady-forced");
  return v;
}

std::vector<std::string> sim_predictor_names() {
  auto v = predictor_names();
  v.insert(v.begin(), "none");
  v.push_back("oracle");
  return v;
}

std::vector<std::string> sim_predictor_names(const Trace& t) {
  std::vector<std::string> out;
  for (auto& n : sim_predictor_names()) {
    bool needs_hidden = n == "lookahead" || n == "gate" || n == "stacked" || n == "promoe";
    bool needs_router = n == "lookahead" || n == "gate" || n == "stacked";
    if (needs_hidden && !t.has_hidden()) continue;
    if (needs_router && t.routers.empty()) continue;
    out.push_back(n);
  }
  return out;
}

SimResult simulate(const Trace& t, const SimConfig& cfg) {
  t.validate(t.source);
  const Trace& calib = cfg.calibration ? *cfg.calibration : t;
  MOEFLOW_CHECK(calib.n_layers == t.n_layers && calib.n_experts == t.n_experts,
                "sim: calibration trace '{}' has {}x{} experts, trace '{}' has {}x{}", calib.source,
                calib.n_layers, calib.n_experts, t.source, t.n_layers, t.n_experts);
  std::unique_ptr<EvictionPolicy> pol;
  if (cfg.policy == "belady" || cfg.policy == "belady-forced") {
    pol = make_belady(t, cfg.policy == "belady");
  } else {
    PolicyOptions po;
    po.n_layers = t.n_layers;
    po.n_experts = t.n_experts;
    po.top_k = t.top_k;
    po.capacity_per_layer = std::max(1, (int)std::lround(cfg.cache_rate * t.n_experts));
    po.capacity_total = std::max(
        1, (int)std::lround(cfg.cache_rate * t.n_experts * (double)t.recorded_layers().size()));
    if (eviction_policy_needs_calibration(cfg.policy)) po.calib_counts = routing_counts(calib);
    if (cfg.policy == "hobbit")
      po.weights = cfg.hobbit_weights.empty() ? fit_hobbit_weights(calib, cfg) : cfg.hobbit_weights;
    pol = make_eviction_policy(cfg.policy, po);
  }
  std::unique_ptr<Predictor> pred;
  if (cfg.predictor == "oracle") {
    pred = make_oracle_predictor(t, std::min(cfg.oracle_lookahead, t.n_layers), cfg.oracle);
  } else if (cfg.predictor != "none" && !cfg.predictor.empty()) {
    PredictorOptions po;
    po.n_layers = t.n_layers;
    po.n_experts = t.n_experts;
    po.top_k = t.top_k;
    po.model_path = cfg.predictor_model;
    po.hidden_dim = t.hidden_dim;
    pred = make_predictor(cfg.predictor, po);
    if (!t.routers.empty()) {
      const Trace* tp = &t;
      pred->set_router([tp](int layer, std::span<const float> h, std::vector<float>& logits) {
        logits.assign(tp->n_experts, 0.f);
        if (layer < 0 || layer >= (int)tp->routers.size() || tp->routers[layer].empty()) return;
        const auto& W = tp->routers[layer];
        for (int e = 0; e < tp->n_experts; ++e) {
          double acc = 0;
          for (size_t i = 0; i < h.size() && i < (size_t)tp->hidden_dim; ++i)
            acc += W[(size_t)e * tp->hidden_dim + i] * h[i];
          logits[e] = (float)acc;
        }
      });
    }
    // Predictors learn from routing they observe: warm them on the calibration trace when it is
    // a different trace (on the trace itself they learn online, as the live engine would).
    if (cfg.calibration && cfg.calibration != &t) {
      std::vector<Prediction> sink;
      for (size_t s = 0; s < calib.steps.size(); ++s) {
        if (s == 0 || calib.steps[s].request != calib.steps[s - 1].request)
          pred->on_sequence_start();
        if (calib.steps[s].phase != Phase::decode) continue;
        for (auto& r : calib.steps[s].routes) {
          sink.clear();
          pred->on_layer({RouteEvent{r.layer, s, false, r.experts, r.weights}, r.hidden,
                          calib.steps[s].token_id},
                         sink);
        }
      }
      pred->on_sequence_start();
    }
  }
  Sim sim(t, cfg);
  SimResult r = sim.run(*pol, pred.get());
  r.policy = cfg.policy;
  r.predictor = pred ? cfg.predictor : "none";
  r.cache_rate = cfg.cache_rate;
  return r;
}

std::vector<double> fit_hobbit_weights(const Trace& calib, const SimConfig& base) {
  // Coarse grid over the simplex-ish cube; demand-only replay on the calibration trace.
  const double g[] = {0.0, 0.25, 0.5, 1.0};
  std::vector<double> best = {0.4, 0.3, 0.1, 0.2};
  double best_hr = -1;
  SimConfig c = base;
  c.predictor = "none";
  c.policy = "hobbit";
  c.calibration = &calib;
  for (double a : g)
    for (double b : g)
      for (double h : g)
        for (double d : g) {
          if (a + b + h + d == 0) continue;
          c.hobbit_weights = {a, b, h, d};
          double hr = simulate(calib, c).hit_rate;
          if (hr > best_hr + 1e-12) best_hr = hr, best = c.hobbit_weights;
        }
  return best;
}

}  // namespace moeflow::trace
