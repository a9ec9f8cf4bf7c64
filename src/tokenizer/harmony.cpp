#include "tokenizer/harmony.h"

#include <cctype>
#include <cstring>
#include <map>
#include <string_view>
#include <vector>

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

namespace {

// One message of the harmony conversation, rendered.
struct Rendered {
  bool assistant;
  std::string channel;
  std::string text;
};

// A tool call of an assistant message: "to=functions.NAME" on the commentary channel.
Rendered call_message(const nlohmann::ordered_json& call, size_t i, size_t k,
                      std::map<std::string, std::string>& names) {
  const auto* f = call.is_object() && call.contains("function") ? &call["function"] : nullptr;
  if (!f || !f->is_object() || !f->contains("name") || !(*f)["name"].is_string())
    fail(
        "chat template: messages[{}].tool_calls[{}] must be {{\"type\": \"function\", "
        "\"function\": {{\"name\": ..., \"arguments\": ...}}}}",
        i, k);
  const std::string name = (*f)["name"].get<std::string>();
  std::string args;
  if (const auto a = f->find("arguments"); a != f->end() && !a->is_null())
    args = a->is_string() ? a->get<std::string>() : a->dump();  // OpenAI sends a JSON string
  if (const auto id = call.find("id"); id != call.end() && id->is_string())
    names[id->get<std::string>()] = name;
  return {true, "commentary",
          "<|start|>assistant to=functions." + name +
              "<|channel|>commentary <|constrain|>json<|message|>" + args + "<|call|>"};
}

}  // namespace

std::string render_harmony(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                           const HarmonyOptions& o) {
  if (o.reasoning_effort != "low" && o.reasoning_effort != "medium" && o.reasoning_effort != "high")
    fail("chat template: reasoning effort '{}' must be low, medium or high", o.reasoning_effort);
  if (!messages.is_array()) fail("chat template: messages must be an array");
  const std::string tools = harmony_tools_section(o.tools);
  std::string instructions;
  std::vector<Rendered> turns;
  std::map<std::string, std::string> call_names;  // tool_call_id -> function
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const std::string role = m.value("role", "");
    const std::string text = text_of(m);
    if (role == "system" || role == "developer") {
      instructions += (instructions.empty() ? "" : "\n\n") + text;
    } else if (role == "user") {
      turns.push_back({false, "", "<|start|>user<|message|>" + text + "<|end|>"});
    } else if (role == "assistant") {
      const auto reasoning = m.find("reasoning_content");
      if (reasoning != m.end() && reasoning->is_string() && !reasoning->empty())
        turns.push_back({true, "analysis",
                         "<|start|>assistant<|channel|>analysis<|message|>" +
                             reasoning->get<std::string>() + "<|end|>"});
      const auto calls = m.find("tool_calls");
      if (calls != m.end() && !calls->is_null() && !calls->is_array())
        fail("chat template: messages[{}].tool_calls must be an array", i);
      if (calls == m.end() || calls->is_null() || calls->empty()) {
        turns.push_back(
            {true, "final", "<|start|>assistant<|channel|>final<|message|>" + text + "<|end|>"});
        continue;
      }
      // Text beside tool calls is a preamble: commentary the user sees, before the calls.
      if (!text.empty())
        turns.push_back({true, "commentary",
                         "<|start|>assistant<|channel|>commentary<|message|>" + text + "<|end|>"});
      for (size_t k = 0; k < calls->size(); ++k)
        turns.push_back(call_message((*calls)[k], i, k, call_names));
    } else if (role == "tool") {
      const auto id = m.find("tool_call_id");
      if (id == m.end() || !id->is_string())
        fail("chat template: messages[{}] (role tool) needs a string tool_call_id", i);
      const auto name = call_names.find(id->get<std::string>());
      if (name == call_names.end())
        fail(
            "chat template: messages[{}] answers tool_call_id '{}', which no earlier assistant "
            "tool call has",
            i, id->get<std::string>());
      turns.push_back({false, "commentary",
                       "<|start|>functions." + name->second +
                           " to=assistant<|channel|>commentary<|message|>" + text + "<|end|>"});
    } else {
      fail(
          "chat template: harmony has no role '{}' here (system, developer, user, assistant, "
          "tool)",
          role);
    }
  }
  std::string out = "<|start|>system<|message|>" + system_message(o.reasoning_effort);
  if (!tools.empty())
    out += "\nCalls to these tools must go to the commentary channel: 'functions'.";
  out += "<|end|>";
  if (!instructions.empty() || !tools.empty()) {
    out += "<|start|>developer<|message|>";
    if (!instructions.empty()) out += "# Instructions\n\n" + instructions;
    if (!instructions.empty() && !tools.empty()) out += "\n\n";
    out += tools + "<|end|>";
  }
  // openai-harmony's auto_drop_analysis: when the last assistant message is an answer, the
  // analysis messages before the conversation's first answer are left out.
  size_t first_final = turns.size();
  for (size_t i = 0; i < turns.size() && first_final == turns.size(); ++i)
    if (turns[i].channel == "final") first_final = i;
  bool last_is_final = false;
  for (size_t i = turns.size(); i-- > 0;)
    if (turns[i].assistant) {
      last_is_final = turns[i].channel == "final";
      break;
    }
  for (size_t i = 0; i < turns.size(); ++i)
    if (!(last_is_final && i < first_final && turns[i].channel == "analysis")) out += turns[i].text;
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

void HarmonyStream::begin_content() {
  // The channel: the word after <|channel|>; the recipient: a word "to=NAME" anywhere in the
  // header (before or after the channel, as the model writes either).
  auto word_at = [&](size_t at) {
    size_t end = at;
    while (end < header_.size() && !std::isspace(static_cast<unsigned char>(header_[end])) &&
           header_[end] != '<')
      ++end;
    return header_.substr(at, end - at);
  };
  std::string channel, recipient;
  if (const size_t c = header_.rfind("<|channel|>"); c != std::string::npos)
    channel = word_at(c + std::strlen("<|channel|>"));
  for (size_t at = header_.find("to="); at != std::string::npos; at = header_.find("to=", at + 1))
    if (at == 0 || std::isspace(static_cast<unsigned char>(header_[at - 1])) ||
        header_[at - 1] == '>') {
      recipient = word_at(at + 3);
      break;
    }
  constexpr std::string_view kFunctions = "functions.";
  if (recipient.size() > kFunctions.size() && recipient.rfind(kFunctions, 0) == 0) {
    kind_ = Kind::Call;
    call_name_ = recipient.substr(kFunctions.size());
    call_args_.clear();
  } else if (!recipient.empty() && recipient != "all") {
    kind_ = Kind::Reasoning;  // a built-in tool (browser, python): not for the user
  } else {
    // A message without a channel is taken as an answer.
    kind_ = channel.empty() || channel == "final" ? Kind::Answer : Kind::Reasoning;
  }
  header_.clear();
  state_ = State::Content;
}

void HarmonyStream::end_content(Delta& d) {
  if (state_ != State::Content) return;
  if (kind_ == Kind::Call) {
    d.calls.push_back({std::move(call_name_), std::move(call_args_) + dec_.flush()});
    call_name_.clear();
    call_args_.clear();
  } else {
    (kind_ == Kind::Answer ? d.answer : d.reasoning) += dec_.flush();
  }
}

HarmonyStream::Delta HarmonyStream::push(int32_t id) {
  Delta d;
  // Header text past this is not kept: a model that never writes <|message|> must not grow it.
  constexpr size_t kMaxHeader = 1024;
  if (id == message_) {
    if (state_ == State::Header) begin_content();
    return d;
  }
  if (id == channel_ || id == constrain_) {
    if (state_ == State::Content) {
      if (id == constrain_) return d;  // stray; the content goes on
      end_content(d);                  // a new message's header without <|start|>
      state_ = State::Header;
      header_.clear();
    }
    if (header_.size() < kMaxHeader) header_ += id == channel_ ? "<|channel|>" : " <|constrain|>";
    return d;
  }
  if (id == start_ || id == end_ || tok_.token_type(id) == TokenType::Control) {
    end_content(d);
    state_ = State::Header;
    header_.clear();
    return d;
  }
  if (state_ == State::Header) {
    if (header_.size() < kMaxHeader) header_ += tok_.token_to_piece(id);
  } else if (kind_ == Kind::Call) {
    call_args_ += dec_.push(id);
  } else {
    (kind_ == Kind::Answer ? d.answer : d.reasoning) += dec_.push(id);
  }
  return d;
}

HarmonyStream::Delta HarmonyStream::flush() {
  Delta d;
  end_content(d);
  state_ = State::Header;
  header_.clear();
  return d;
}

}  // namespace moeflow
