#include "server/response_json.h"

#include "tokenizer/tokenizer.h"

namespace moeflow {

std::string dump_json(const ojson& j) {
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

ojson response_base(const ResponseHead& h, bool chunk) {
  return {{"id", h.id},
          {"object",
           h.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
          {"created", h.created},
          {"model", h.model}};
}

ojson usage_json(int n_prompt, int n_cached, int n_completion) {
  return {{"prompt_tokens", n_prompt},
          {"completion_tokens", n_completion},
          {"total_tokens", n_prompt + n_completion},
          {"prompt_tokens_details", {{"cached_tokens", n_cached}}}};
}

namespace {

ojson bytes_of(const std::string& s) {
  ojson b = ojson::array();
  for (unsigned char c : s) b.push_back((int)c);
  return b;
}

// Alternatives are shown with control tokens spelt out (<|im_end|>), as OpenAI shows them.
std::string alt_piece(const Tokenizer& tok, int32_t id) { return tok.token_to_piece(id, true); }

}  // namespace

ojson chat_logprobs_json(const Tokenizer& tok, const std::vector<TokenLogprob>& lps) {
  ojson content = ojson::array();
  for (const TokenLogprob& lp : lps) {
    ojson top = ojson::array();
    for (const auto& [id, l] : lp.top) {
      const std::string p = alt_piece(tok, id);
      top.push_back({{"token", p}, {"logprob", l}, {"bytes", bytes_of(p)}});
    }
    content.push_back({{"token", lp.piece},
                       {"logprob", lp.logprob},
                       {"bytes", bytes_of(lp.piece)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}, {"refusal", nullptr}};
}

ojson completion_logprobs_json(const Tokenizer& tok, const std::vector<TokenLogprob>& lps,
                               size_t offset_base, bool with_top) {
  ojson tokens = ojson::array(), lp = ojson::array(), top = ojson::array(), off = ojson::array();
  for (const TokenLogprob& t : lps) {
    tokens.push_back(t.piece);
    lp.push_back(t.logprob);
    off.push_back(offset_base + t.text_offset);
    ojson alts = ojson::object();
    for (const auto& [id, l] : t.top) {
      const std::string p = alt_piece(tok, id);
      if (!alts.contains(p)) alts[p] = l;  // two ids with one text: the likelier one
    }
    top.push_back(alts);
  }
  return {{"tokens", tokens},
          {"token_logprobs", lp},
          {"top_logprobs", with_top ? top : ojson(nullptr)},
          {"text_offset", off}};
}

std::string finish_reason_json(const std::string& r) { return r == "cancelled" ? "stop" : r; }

ojson tool_calls_json(const std::vector<ToolCall>& calls) {
  ojson a = ojson::array();
  for (const ToolCall& c : calls)
    a.push_back({{"id", c.id},
                 {"type", "function"},
                 {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return a;
}

}  // namespace moeflow
