// A model's chat template: its own, an override, ChatML, or the native harmony format, with
// the BOS/EOS texts of its vocabulary (chat_template.h).
#include <fmt/format.h>

#include "chat_template/chat_template.h"
#include "core/error.h"
#include "tokenizer/harmony.h"
#include "tokenizer/tokenizer.h"

namespace moeflow {

std::string ModelChatTemplate::describe() const {
  if (harmony)
    return "chat format: harmony (gpt-oss), rendered natively; the answer is the final channel";
  if (fallback)
    return "chat template: the model has none (no tokenizer.chat_template); using ChatML";
  return fmt::format("chat template: {} ({} bytes)", origin, tmpl.source().size());
}

std::string ModelChatTemplate::format(const nlohmann::ordered_json& messages,
                                      bool add_generation_prompt,
                                      const nlohmann::ordered_json& extra) const {
  if (harmony) {
    // Of the template variables, harmony reads the tools (HarmonyOptions::tools).
    HarmonyOptions o = harmony_options;
    for (auto it = extra.begin(); it != extra.end(); ++it) {
      if (!extra.is_object() || it.key() != "tools")
        fail("chat template: the harmony format takes no template variables but 'tools', got {}",
             extra.dump());
      o.tools = it.value();
    }
    return render_harmony(messages, add_generation_prompt, o);
  }
  return tmpl.apply(messages, add_generation_prompt, bos_token, eos_token, extra);
}

std::vector<int32_t> ModelChatTemplate::tokenize(const Tokenizer& tok,
                                                 const std::string& rendered) const {
  const bool has_bos = !bos_token.empty() && rendered.rfind(bos_token, 0) == 0;
  return tok.encode(rendered, !has_bos, true);
}

ModelChatTemplate model_chat_template(const Tokenizer& tok, const std::string& override_source) {
  // gpt-oss's own Jinja template is not parsed: harmony is rendered natively.
  const bool harmony = override_source.empty() && uses_harmony(tok);
  const std::string& own =
      override_source.empty() ? (harmony ? std::string() : tok.chat_template()) : override_source;
  const bool fallback = own.empty() && !harmony;
  ModelChatTemplate m{
      ChatTemplate(fallback ? std::string(kChatMlTemplate) : own), fallback, "", "", "", false, {}};
  m.fallback = fallback;
  m.harmony = harmony;
  m.origin =
      override_source.empty() ? "the model's tokenizer.chat_template" : "given on the command line";
  if (tok.bos_id() >= 0) m.bos_token = tok.token_text(tok.bos_id());
  if (tok.eos_id() >= 0) m.eos_token = tok.token_text(tok.eos_id());
  return m;
}

}  // namespace moeflow
