#include "tokenizer/harmony.h"

#include "core/error.h"

namespace moeflow {
namespace {

// openai-harmony's SystemContent defaults (model identity, knowledge cutoff, channels).
std::string system_message(const std::string& effort) {
  return "You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\n\n"
         "Reasoning: " +
         effort +
         "\n\n# Valid channels: analysis, commentary, final. Channel must "
         "be included for every message.";
}

std::string text_of(const nlohmann::ordered_json& m) {
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) return "";
  if (!it->is_string()) fail("chat template: harmony messages need text content");
  return it->get<std::string>();
}

int32_t control(const Tokenizer& tok, const char* text) {
  const auto id = tok.find_token(text);
  return id && tok.token_type(*id) == TokenType::Control ? *id : -1;
}

}  // namespace

bool uses_harmony(const Tokenizer& tok) {
  for (const char* t :
       {"<|start|>", "<|message|>", "<|channel|>", "<|end|>", "<|return|>", "<|call|>"})
    if (control(tok, t) < 0) return false;
  return true;
}

std::string render_harmony(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                           const HarmonyOptions& o) {
  if (o.reasoning_effort != "low" && o.reasoning_effort != "medium" && o.reasoning_effort != "high")
    fail("chat template: reasoning effort '{}' must be low, medium or high", o.reasoning_effort);
  if (!messages.is_array()) fail("chat template: messages must be an array");
  std::string instructions, turns;
  for (const auto& m : messages) {
    const std::string role = m.value("role", "");
    const std::string text = text_of(m);
    if (role == "system" || role == "developer") {
      instructions += (instructions.empty() ? "" : "\n\n") + text;
    } else if (role == "user") {
      turns += "<|start|>user<|message|>" + text + "<|end|>";
    } else if (role == "assistant") {
      turns += "<|start|>assistant<|channel|>final<|message|>" + text + "<|end|>";
    } else {
      fail("chat template: harmony has no role '{}' here (system, developer, user, assistant)",
           role);
    }
  }
  std::string out = "<|start|>system<|message|>" + system_message(o.reasoning_effort) + "<|end|>";
  if (!instructions.empty())
    out += "<|start|>developer<|message|># Instructions\n\n" + instructions + "<|end|>";
  out += turns;
  if (add_generation_prompt) out += "<|start|>assistant";
  return out;
}

HarmonyStream::HarmonyStream(const Tokenizer& tok)
    : tok_(tok),
      start_(control(tok, "<|start|>")),
      channel_(control(tok, "<|channel|>")),
      message_(control(tok, "<|message|>")),
      end_(control(tok, "<|end|>")),
      constrain_(control(tok, "<|constrain|>")),
      dec_(tok) {}

void HarmonyStream::end_content(Delta& d) {
  if (state_ != State::Content) return;
  (answer_ ? d.answer : d.reasoning) += dec_.flush();
}

HarmonyStream::Delta HarmonyStream::push(int32_t id) {
  Delta d;
  if (id == message_) {
    // A message without a channel is taken as an answer.
    const std::string name = channel_name_.substr(0, channel_name_.find(' '));
    answer_ = name.empty() || name == "final";
    state_ = State::Content;
    return d;
  }
  if (id == channel_) {
    end_content(d);
    state_ = State::Channel;
    channel_name_.clear();
    return d;
  }
  if (id == constrain_) {  // "<|constrain|>json": part of the header
    if (state_ == State::Channel) state_ = State::Header;
    return d;
  }
  if (id == start_ || id == end_ || tok_.token_type(id) == TokenType::Control) {
    end_content(d);
    state_ = State::Header;
    channel_name_.clear();
    return d;
  }
  if (state_ == State::Channel) {
    channel_name_ += tok_.token_to_piece(id);
  } else if (state_ == State::Content) {
    (answer_ ? d.answer : d.reasoning) += dec_.push(id);
  }
  return d;
}

HarmonyStream::Delta HarmonyStream::flush() {
  Delta d;
  end_content(d);
  state_ = State::Header;
  return d;
}

}  // namespace moeflow
