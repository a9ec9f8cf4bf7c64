#pragma once
// Chat templates: the Jinja text of `tokenizer.chat_template` rendered by a small Jinja subset
// (enough for the published templates of Mixtral/Mistral, Qwen2/Qwen3 (ChatML), OLMoE,
// DeepSeek, Phi-3.5, Llama 3, Hermes, GLM-4): {% for/if/elif/else/set/macro %}, namespace(),
// loop.*, filters
// (trim, length, tojson, join, selectattr, ...), tests (defined, string, ...), string methods
// (strip, split, startswith, ...), slicing, raise_exception. Environment as Hugging Face
// transformers sets it: trim_blocks and lstrip_blocks on, the final newline dropped.
//
//   ChatTemplate t(tok.chat_template());                      // throws on syntax errors
//   std::string prompt = t.apply(messages, /*add_generation_prompt=*/true, bos, eos);
//
// Rendering errors (raise_exception, unknown filter, type errors) throw moeflow::Error whose
// message starts with "chat template: ".
//
// This is the module's public API; the engine behind it is one file per layer, internal to
// src/chat_template/: value.h (values and their Python semantics), lexer.h (template text ->
// segments, expression text -> tokens), expr_parser.h, statement_parser.h, renderer.h, and
// limits.h (what bounds a hostile template). model_chat_template.cpp ties a template to a
// model's vocabulary.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/harmony.h"

namespace moeflow {

class Tokenizer;

struct ChatMessage {
  std::string role, content;
};

class ChatTemplate {
 public:
  explicit ChatTemplate(const std::string& source);
  ~ChatTemplate();
  ChatTemplate(const ChatTemplate&);
  ChatTemplate& operator=(const ChatTemplate&);

  // Renders with `context` as the global variables (an object).
  std::string render(const nlohmann::ordered_json& context) const;
  // messages: array of {"role", "content", ...}; also sets add_generation_prompt, bos_token,
  // eos_token, then each member of `extra` (an object: further variables a template reads, as
  // transformers' apply_chat_template passes them, e.g. {"tools": [...]} or
  // {"enable_thinking": false}); a member named like one of the four replaces it.
  std::string apply(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                    const std::string& bos_token, const std::string& eos_token,
                    const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;
  std::string apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                    const std::string& bos_token, const std::string& eos_token) const;

  const std::string& source() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

// The ChatML template (<|im_start|>role\n...<|im_end|>\n), used when a model has none.
extern const char* const kChatMlTemplate;

// A model's template ready to format conversations: its own tokenizer.chat_template, or ChatML
// when it has none (fallback = true), with the BOS/EOS texts of its vocabulary. A harmony
// vocabulary (gpt-oss) is formatted by render_harmony instead, unless a template is given.
struct ModelChatTemplate {
  ChatTemplate tmpl;
  bool fallback = false;
  std::string origin;  // where the template comes from (for describe())
  std::string bos_token, eos_token;
  bool harmony = false;
  HarmonyOptions harmony_options;
  // The line to log: which template is used and why.
  std::string describe() const;
  // Renders messages (`extra`: further template variables, as ChatTemplate::apply takes them;
  // the harmony format reads only "tools", so it refuses any other rather than drop it).
  std::string format(const nlohmann::ordered_json& messages, bool add_generation_prompt = true,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;
  // Tokenizes a rendering (special tokens parsed; BOS added only when the tokenizer asks for it
  // and the rendered text does not already start with it).
  std::vector<int32_t> tokenize(const Tokenizer& tok, const std::string& rendered) const;
};

// override_source: a template text given by the user ("" = the model's).
ModelChatTemplate model_chat_template(const Tokenizer& tok,
                                      const std::string& override_source = "");

}  // namespace moeflow
