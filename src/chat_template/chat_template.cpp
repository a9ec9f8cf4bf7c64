// ChatTemplate: parse once (statement_parser), render per conversation (renderer).
#include "chat_template/chat_template.h"

#include "chat_template/renderer.h"
#include "chat_template/statement_parser.h"
#include "core/error.h"

namespace moeflow {

using json = nlohmann::ordered_json;

const char* const kChatMlTemplate =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

struct ChatTemplate::Impl {
  std::string source;
  jinja::Body body;
};

ChatTemplate::ChatTemplate(const std::string& source) {
  auto impl = std::make_shared<Impl>();
  impl->source = source;
  impl->body = jinja::parse_template(source);
  impl_ = std::move(impl);
}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(const ChatTemplate&) = default;
ChatTemplate& ChatTemplate::operator=(const ChatTemplate&) = default;

const std::string& ChatTemplate::source() const { return impl_->source; }

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  if (!context.is_object()) fail("chat template: the context must be an object");
  return jinja::render(impl_->body, context);
}

std::string ChatTemplate::apply(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                const std::string& bos_token, const std::string& eos_token,
                                const nlohmann::ordered_json& extra) const {
  if (!extra.is_object())
    fail("chat template: the extra variables must be an object, got {}", extra.type_name());
  json ctx = json::object();
  ctx["messages"] = messages;
  ctx["add_generation_prompt"] = add_generation_prompt;
  ctx["bos_token"] = bos_token;
  ctx["eos_token"] = eos_token;
  for (auto it = extra.begin(); it != extra.end(); ++it) ctx[it.key()] = it.value();
  return render(ctx);
}

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, const std::string& bos_token,
                                const std::string& eos_token) const {
  json arr = json::array();
  for (const ChatMessage& m : messages)
    arr.push_back(json{{"role", m.role}, {"content", m.content}});
  return apply(arr, add_generation_prompt, bos_token, eos_token);
}

}  // namespace moeflow
