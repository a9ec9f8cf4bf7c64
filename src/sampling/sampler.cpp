#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace moeflow {

int32_t argmax(std::span<const float> v) {
  if (v.empty()) fail("sampler: empty logits");
  int32_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[best]) best = (int32_t)i;
  return best;
}

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) {
  if (!(p.repeat_penalty > 0)) fail("--repeat-penalty must be positive, got {}", p.repeat_penalty);
  if (p.top_p < 0) fail("--top-p must be >= 0, got {}", p.top_p);
  if (p.min_p > 1) fail("--min-p must be <= 1, got {}", p.min_p);
}

double Sampler::uniform() { return (double)(rng_() >> 11) * 0x1.0p-53; }

void Sampler::prepare(std::span<const float> logits, std::span<const int32_t> history) {
  if (logits.empty()) fail("sampler: empty logits");
  const int64_t V = (int64_t)logits.size();
  work_.assign(logits.begin(), logits.end());
  if (p_.repeat_penalty != 1.0f && p_.repeat_last_n != 0) {
    const size_t n = p_.repeat_last_n < 0 ? history.size()
                                          : std::min(history.size(), (size_t)p_.repeat_last_n);
    // Each distinct token is penalised once however often it repeats (CTRL / llama.cpp rule);
    // dividing positive and multiplying negative logits both make the token less likely.
    for (size_t i = history.size() - n; i < history.size(); ++i) {
      const int32_t t = history[i];
      if (t < 0 || t >= V) continue;
      bool earlier = false;
      for (size_t j = history.size() - n; j < i && !earlier; ++j) earlier = history[j] == t;
      if (earlier) continue;
      float& l = work_[t];
      l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
    }
  }
  cand_.clear();
  if (p_.temperature <= 0) {
    cand_.emplace_back(argmax(work_), 1.0f);
    return;
  }
  cand_.reserve(V);
  for (int64_t i = 0; i < V; ++i) cand_.emplace_back((int32_t)i, work_[i] / p_.temperature);
  auto by_logit = [](const auto& a, const auto& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
  };
  if (p_.top_k > 0 && p_.top_k < V) {
    std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), by_logit);
    cand_.resize(p_.top_k);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  const float mx = cand_[0].second;
  double sum = 0;
  for (auto& c : cand_) {
    c.second = std::exp(c.second - mx);
    sum += c.second;
  }
  for (auto& c : cand_) c.second = (float)(c.second / sum);
  if (p_.top_p < 1.0f) {
    // Keep the smallest prefix whose mass reaches top_p (at least one token).
    double cum = 0;
    size_t keep = cand_.size();
    for (size_t i = 0; i < cand_.size(); ++i) {
      cum += cand_[i].second;
      if (cum >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
    cand_.resize(keep);
  }
  if (p_.min_p > 0) {
    const float thr = p_.min_p * cand_[0].second;
    size_t keep = 1;
    while (keep < cand_.size() && cand_[keep].second >= thr) ++keep;
    cand_.resize(keep);
  }
  double s = 0;
  for (auto& c : cand_) s += c.second;
  for (auto& c : cand_) c.second = (float)(c.second / s);
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  prepare(logits, history);
  if (cand_.size() == 1) return cand_[0].first;
  const double u = uniform();
  double cum = 0;
  for (const auto& c : cand_) {
    cum += c.second;
    if (u < cum) return c.first;
  }
  return cand_.back().first;
}

}  // namespace moeflow
