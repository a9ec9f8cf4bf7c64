#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"

namespace moeflow {

int32_t argmax(std::span<const float> v) {
  if (v.empty()) fail("sampler: empty logits");
  int32_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[best]) best = (int32_t)i;
  return best;
}

namespace {

std::string num(double v) { return fmt::format("{}", v); }

}  // namespace

std::optional<SamplerParamError> check_sampler_params(const SamplerParams& p) {
  // Written so that NaN fails every test: !(lo <= v && v <= hi).
  auto in = [](double v, double lo, double hi) { return lo <= v && v <= hi; };
  if (!in(p.temperature, 0, 100))
    return SamplerParamError{"temperature", "--temp", "must be in [0, 100] (0 = greedy)",
                             num(p.temperature)};
  if (p.top_k < -1)
    return SamplerParamError{"top_k", "--top-k", "must be >= -1 (0 or -1 = off)", num(p.top_k)};
  if (!in(p.top_p, 0, 1))
    return SamplerParamError{"top_p", "--top-p", "must be in [0, 1] (1 = off)", num(p.top_p)};
  if (!in(p.min_p, 0, 1))
    return SamplerParamError{"min_p", "--min-p", "must be in [0, 1] (0 = off)", num(p.min_p)};
  if (!(p.repeat_penalty > 0 && p.repeat_penalty <= 100))
    return SamplerParamError{"repeat_penalty", "--repeat-penalty",
                             "must be > 0 and <= 100 (1 = off)", num(p.repeat_penalty)};
  if (p.repeat_last_n < -1)
    return SamplerParamError{"repeat_last_n", "--repeat-last-n",
                             "must be >= -1 (-1 = all, 0 = off)", num(p.repeat_last_n)};
  if (!in(p.presence_penalty, -2, 2))
    return SamplerParamError{"presence_penalty", "--presence-penalty",
                             "must be in [-2, 2] (0 = off)", num(p.presence_penalty)};
  if (!in(p.frequency_penalty, -2, 2))
    return SamplerParamError{"frequency_penalty", "--frequency-penalty",
                             "must be in [-2, 2] (0 = off)", num(p.frequency_penalty)};
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0)
      return SamplerParamError{"logit_bias", "--logit-bias", "token ids must be >= 0", num(id)};
    if (!in(bias, -100, 100))
      return SamplerParamError{"logit_bias", "--logit-bias", "biases must be in [-100, 100]",
                               num(bias)};
  }
  return std::nullopt;
}

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) {
  if (auto e = check_sampler_params(p)) fail("{} {}, got {}", e->flag, e->requirement, e->value);
}

double Sampler::uniform() { return (double)(rng_() >> 11) * 0x1.0p-53; }

void Sampler::apply_bias_and_penalties(std::span<const int32_t> history) {
  const int64_t V = (int64_t)work_.size();
  for (const auto& [t, b] : p_.logit_bias)
    if (t >= 0 && t < V) work_[t] += b;
  const bool repeat = p_.repeat_penalty != 1.0f;
  const bool counted = p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f;
  if ((!repeat && !counted) || p_.repeat_last_n == 0) return;
  const size_t n =
      p_.repeat_last_n < 0 ? history.size() : std::min(history.size(), (size_t)p_.repeat_last_n);
  window_.assign(history.end() - (std::ptrdiff_t)n, history.end());
  std::sort(window_.begin(), window_.end());
  for (size_t i = 0; i < window_.size();) {
    size_t j = i;
    while (j < window_.size() && window_[j] == window_[i]) ++j;
    const int32_t t = window_[i];
    const size_t count = j - i;
    i = j;
    if (t < 0 || t >= V) continue;
    float& l = work_[t];
    // Each distinct token takes the repetition penalty once however often it repeats (CTRL /
    // llama.cpp rule); dividing positive and multiplying negative logits both make it less likely.
    if (repeat) l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
    if (counted) l -= (float)count * p_.frequency_penalty + p_.presence_penalty;
  }
}

void Sampler::prepare(std::span<const float> logits, std::span<const int32_t> history) {
  if (logits.empty()) fail("sampler: empty logits");
  const int64_t V = (int64_t)logits.size();
  work_.assign(logits.begin(), logits.end());
  apply_bias_and_penalties(history);
  cand_.clear();
  if (p_.temperature <= 0) {
    cand_.emplace_back(argmax(work_), 1.0f);
    return;
  }
  cand_.reserve(V);
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < V; ++i)
    if (work_[i] != kMasked) cand_.emplace_back((int32_t)i, work_[i] / p_.temperature);
  if (cand_.empty()) fail("sampler: every logit is -inf");
  auto by_logit = [](const auto& a, const auto& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
  };
  if (p_.top_k > 0 && (size_t)p_.top_k < cand_.size()) {  // masked tokens are not in cand_
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
  if (!constraint_) return draw(logits, history);
  auto masked_draw = [&] {
    masked_.assign(logits.begin(), logits.end());
    if (constraint_->mask(masked_) == 0)
      fail("sampler: the output constraint allows no token of the vocabulary here");
    return draw(masked_, history);
  };
  int32_t id;
  if (constraint_->mask_first()) {
    id = masked_draw();
  } else {
    id = draw(logits, history);
    if (!constraint_->allows(id)) id = masked_draw();
  }
  constraint_->accept(id);
  return id;
}

int32_t Sampler::draw(std::span<const float> logits, std::span<const int32_t> history) {
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
