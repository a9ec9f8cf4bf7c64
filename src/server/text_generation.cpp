#include "server/text_generation.h"

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "runtime/engine.h"
#include "tokenizer/harmony.h"
#include "tokenizer/tokenizer.h"

namespace moeflow {

size_t stop_prefix_overlap(const std::string& text, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const std::string& s : stops) {
    const size_t max_len = std::min(text.size(), s.empty() ? 0 : s.size() - 1);
    for (size_t len = max_len; len > best; --len) {
      if (text.compare(text.size() - len, len, s, 0, len) == 0) {
        best = len;
        break;
      }
    }
  }
  return best;
}

TextGenResult generate_text(Engine& engine, const Tokenizer& tok, std::span<const int32_t> prompt,
                            const TextGenParams& params,
                            const std::function<bool(const std::string&)>& on_delta,
                            const std::atomic<bool>* cancel,
                            const std::function<void(const std::string&)>& on_reasoning) {
  if (params.max_tokens < 0) fail("max_tokens must be >= 0, got {}", params.max_tokens);
  TextGenResult res;
  res.n_prompt = (int)prompt.size();
  res.finish_reason = "length";
  engine.reset();
  if (params.max_tokens == 0) return res;
  std::vector<std::string> stops;
  for (const std::string& s : params.stop)
    if (!s.empty()) stops.push_back(s);
  StreamDecoder dec(tok);
  std::optional<HarmonyStream> harmony;
  if (params.harmony) harmony.emplace(tok);
  std::string pending;  // decoded text not yet handed out
  bool finished = false, stopped_by_string = false;

  // Hands out everything of `pending` that can no longer turn into a stop string; returns
  // false when generation must end (stop string found or the callback cancelled).
  auto release = [&](bool final) -> bool {
    size_t cut = std::string::npos;
    for (const std::string& s : stops) {
      const size_t p = pending.find(s);
      if (p != std::string::npos && (cut == std::string::npos || p < cut)) cut = p;
    }
    std::string out;
    if (cut != std::string::npos) {
      out = pending.substr(0, cut);
      pending.clear();
      res.finish_reason = "stop";
      stopped_by_string = finished = true;
    } else {
      const size_t hold = final ? 0 : stop_prefix_overlap(pending, stops);
      out = pending.substr(0, pending.size() - hold);
      pending.erase(0, pending.size() - hold);
    }
    if (!out.empty()) {
      res.text += out;
      if (on_delta && !on_delta(out)) {
        res.finish_reason = "cancelled";
        finished = true;
      }
    }
    return !finished;
  };

  // Harmony: reasoning goes out at once, the answer through `pending`.
  auto take = [&](HarmonyStream::Delta d) {
    if (!d.reasoning.empty()) {
      res.reasoning += d.reasoning;
      if (on_reasoning) on_reasoning(d.reasoning);
    }
    return d.answer;
  };

  Sampler sampler(params.sampling);
  std::vector<int32_t> eog;
  if (!params.ignore_eos) eog = tok.eog_ids();
  engine.generate(prompt, params.max_tokens, sampler, [&](int32_t id) {
    if (cancel && cancel->load()) {
      res.finish_reason = "cancelled";
      finished = true;
      return false;
    }
    if (!params.ignore_eos && tok.is_eog(id)) {
      res.finish_reason = "stop";
      finished = true;
      return false;
    }
    pending += harmony ? take(harmony->push(id)) : dec.push(id);
    return release(false);
  }, eog);
  // Whatever is still held back (an unfinished character, a possible stop-string prefix) ends
  // the text, unless a stop string or the callback already ended it.
  if (!stopped_by_string && res.finish_reason != "cancelled") {
    pending += harmony ? take(harmony->flush()) : dec.flush();
    release(true);
  }
  const GenerationStats& st = engine.stats();
  res.n_generated = st.n_generated;
  res.prefill_s = st.prefill_s;
  res.decode_s = st.decode_s;
  res.ttft_s = st.ttft_s;
  return res;
}

}  // namespace moeflow
