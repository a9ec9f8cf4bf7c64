#include "server/text_generation.h"

#include <algorithm>
#include <deque>
#include <optional>
#include <random>

#include "core/error.h"
#include "core/timer.h"
#include "grammar/grammar_constraint.h"
#include "runtime/engine.h"
#include "runtime/prefix_cache.h"
#include "sampling/logprobs.h"
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

namespace {

// Turns sampled tokens into final text: decodes UTF-8 (harmony: splits the final channel from
// the reasoning ones, which go out at once), holds back what could still become a stop string,
// cuts at the first stop string, and hands each token's log-probabilities out with the piece of
// text its own text starts in.
class TextAssembler {
 public:
  TextAssembler(const Tokenizer& tok, const TextGenParams& params, TextGenResult& res,
                const std::function<bool(const TextDelta&)>& on_delta)
      : dec_(tok, params.tool_syntax != ToolCallSyntax::None),
        res_(res),
        on_delta_(on_delta),
        tools_(params.tool_syntax, params.tools),
        parse_tools_(params.tool_syntax != ToolCallSyntax::None &&
                     params.tool_syntax != ToolCallSyntax::Harmony) {
    for (const std::string& s : params.stop)
      if (!s.empty()) stops_.push_back(s);
    if (params.harmony) {
      harmony_.emplace(tok);
      for (int32_t id : params.harmony_header) harmony_->push(id);  // no text of its own
    }
  }

  // Returns false when generation must end (stop string found or the callback cancelled).
  bool push(int32_t id, TokenLogprob* lp) {
    if (lp) {
      lp->text_offset = decoded_;
      held_.push_back(std::move(*lp));
    }
    const std::string s = harmony_ ? take(harmony_->push(id)) : dec_.push(id);
    if (cancelled_) return false;
    decoded_ += s.size();
    pending_ += s;
    return release(false);
  }

  // End of generation (not by a stop string or a cancel): everything held back is final.
  void finish() {
    if (stopped_) return;
    const std::string s = harmony_ ? take(harmony_->flush()) : dec_.flush();
    if (cancelled_) return;
    decoded_ += s.size();
    pending_ += s;
    release(true);
  }

  bool stopped_by_string() const { return stopped_; }

 private:
  // Harmony: reasoning goes out at once (stop strings do not apply to it), the answer through
  // pending_.
  std::string take(HarmonyStream::Delta d) {
    if (!d.calls.empty()) {
      TextDelta c;
      for (HarmonyToolCall& h : d.calls) {
        // The arguments as generated; compact JSON when they are JSON.
        const auto j = nlohmann::ordered_json::parse(h.arguments, nullptr, false);
        ToolCall t{h.name, j.is_discarded() ? h.arguments : j.dump(),
                   new_tool_call_id(ToolCallSyntax::Harmony, ids_)};
        res_.tool_calls.push_back(t);
        c.tool_calls.push_back(std::move(t));
      }
      if (on_delta_ && !on_delta_(c)) {
        res_.finish_reason = "cancelled";
        cancelled_ = true;
      }
    }
    if (!d.reasoning.empty()) {
      res_.reasoning += d.reasoning;
      TextDelta r;
      r.reasoning = std::move(d.reasoning);
      if (on_delta_ && !on_delta_(r)) {
        res_.finish_reason = "cancelled";
        cancelled_ = true;
      }
    }
    return std::move(d.answer);
  }

  bool release(bool final) {
    size_t cut = std::string::npos;
    for (const std::string& s : stops_) {
      const size_t p = pending_.find(s);
      if (p != std::string::npos && (cut == std::string::npos || p < cut)) cut = p;
    }
    TextDelta d;
    if (cut != std::string::npos) {
      d.text = pending_.substr(0, cut);
      pending_.clear();
      res_.finish_reason = "stop";
      stopped_ = true;
    } else {
      const size_t hold = final ? 0 : stop_prefix_overlap(pending_, stops_);
      d.text = pending_.substr(0, pending_.size() - hold);
      pending_.erase(0, pending_.size() - hold);
    }
    const size_t end = res_.text.size() + d.text.size();
    // Tokens whose text starts before the released end; at the very end (no stop string) also
    // those that produced no text of their own.
    while (!held_.empty() && (held_.front().text_offset < end || (final && !stopped_))) {
      d.logprobs.push_back(held_.front());
      held_.pop_front();
    }
    if (stopped_) held_.clear();  // their text is after the stop string
    if (parse_tools_) split_tool_calls(d, final || stopped_);
    res_.text += d.text;
    res_.logprobs.insert(res_.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
    if ((!d.text.empty() || !d.logprobs.empty() || !d.tool_calls.empty()) && on_delta_ &&
        !on_delta_(d)) {
      res_.finish_reason = "cancelled";
      cancelled_ = true;
    }
    return !stopped_ && !cancelled_;
  }

  // The released text through the tool-call parser: content goes on, completed calls (with
  // their ids) join the piece; at the end what it held back is content.
  void split_tool_calls(TextDelta& d, bool end) {
    ToolCallParser::Out o = tools_.push(d.text);
    if (end) {
      ToolCallParser::Out rest = tools_.finish();
      o.content += rest.content;
      for (ToolCall& c : rest.calls) o.calls.push_back(std::move(c));
    }
    d.text = std::move(o.content);
    for (ToolCall& c : o.calls) {
      c.id = new_tool_call_id(tools_.syntax(), ids_);
      res_.tool_calls.push_back(c);
      d.tool_calls.push_back(std::move(c));
    }
  }

  StreamDecoder dec_;
  std::optional<HarmonyStream> harmony_;
  TextGenResult& res_;
  const std::function<bool(const TextDelta&)>& on_delta_;
  std::vector<std::string> stops_;
  std::string pending_;  // decoded text not yet handed out
  size_t decoded_ = 0;   // bytes decoded so far (offsets of held_ refer to it)
  std::deque<TokenLogprob> held_;
  bool stopped_ = false, cancelled_ = false;
  ToolCallParser tools_;
  bool parse_tools_;
  std::mt19937_64 ids_{std::random_device{}()};
};

}  // namespace

TextGenResult generate_text(Engine& engine, const Tokenizer& tok, std::span<const int32_t> prompt,
                            const TextGenParams& params,
                            const std::function<bool(const TextDelta&)>& on_delta,
                            const std::atomic<bool>* cancel, PrefixCache* cache) {
  if (params.max_tokens < 0) fail("max_tokens must be >= 0, got {}", params.max_tokens);
  if (prompt.empty()) fail("the prompt is empty: at least one token is needed");
  const int64_t n_ctx = engine.context().n_ctx();
  if ((int64_t)prompt.size() + std::max(params.max_tokens, 1) - 1 > n_ctx)
    fail("prompt ({} tokens) plus max_tokens {} does not fit the context size {}", prompt.size(),
         params.max_tokens, n_ctx);
  TextGenResult res;
  res.n_prompt = (int)prompt.size();
  res.finish_reason = "length";
  if (params.max_tokens == 0) return res;
  Sampler sampler(params.sampling);
  std::optional<GrammarConstraint> constraint;
  if (params.grammar) {
    constraint.emplace(params.grammar,
                       params.token_vocab ? params.token_vocab : TokenVocab::from_tokenizer(tok));
    sampler.set_constraint(&*constraint);
  }
  TextAssembler text(tok, params, res, on_delta);

  const double t0 = now_seconds();
  const size_t reused = cache ? cache->prepare(engine, prompt) : (engine.reset(), 0);
  res.n_cached = (int)reused;
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  history.reserve(prompt.size() + (size_t)params.max_tokens);
  std::vector<float> logits;
  try {
    engine.prefill(prompt.subspan(reused), false, &logits);
    if (cache) cache->fed(prompt.subspan(reused));
    res.prefill_s = now_seconds() - t0;
    std::span<const float> row(logits);
    double decode_start = 0;
    bool finished = false;
    for (int i = 0; i < params.max_tokens && !finished; ++i) {
      const int32_t id = sampler.sample(row, history);
      if (i == 0) {
        res.ttft_s = now_seconds() - t0;
        decode_start = now_seconds();
      }
      history.push_back(id);
      res.tokens.push_back(id);
      res.n_generated = i + 1;
      if (cancel && cancel->load()) {
        res.finish_reason = "cancelled";
        break;
      }
      if (!params.ignore_eos && tok.is_eog(id)) {
        res.finish_reason = "stop";
        break;
      }
      TokenLogprob lp;
      if (params.logprobs) {
        TokenLogprobs l = token_logprobs(row, id, params.top_logprobs);
        lp = {id, tok.token_to_piece(id), 0, l.logprob, std::move(l.top)};
      }
      finished = !text.push(id, params.logprobs ? &lp : nullptr);
      if (!finished && constraint && constraint->done()) {
        res.finish_reason = "stop";  // the constrained output is whole: nothing else may follow
        break;
      }
      if (finished || i + 1 == params.max_tokens) break;
      row = engine.decode(id);
      if (cache) cache->fed(id);
      res.decode_s = now_seconds() - decode_start;
    }
  } catch (...) {
    if (cache) cache->clear();  // the engine's state is unknown: the next request starts cold
    throw;
  }
  // Whatever is still held back (an unfinished character, a possible stop-string prefix) ends
  // the text, unless a stop string or the callback already ended it.
  if (res.finish_reason != "cancelled") text.finish();
  if (res.finish_reason == "stop" && !res.tool_calls.empty()) res.finish_reason = "tool_calls";
  return res;
}

}  // namespace moeflow
