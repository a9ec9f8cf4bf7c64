// fuzz-link: moeflow_chat_template
// The chat-template parser and renderer (src/chat_template/) on arbitrary template
// text and arbitrary conversations.
//
// Input: the template text, then optionally a 0 byte and the context:
//   * a JSON object: rendered as the whole context (messages, tools, any variable);
//   * a JSON array: the messages, rendered by apply() with bos/eos tokens;
//   * anything else: messages built from the bytes, split at 0x01 into role, content, role,
//     content, ... (so contents may be any bytes, invalid UTF-8 included);
//   * no 0 byte: a fixed four-message conversation.
// add_generation_prompt is the parity of the input length.
//
// Properties (a violation aborts, libFuzzer saves the input): parsing and rendering either
// succeed or throw moeflow::Error (with the "chat template: " prefix) -- never another
// exception, a crash, UB, a leak, a hang or an allocation beyond libFuzzer's limits; a parsed
// template renders the same text twice (no state leaks between renders) and from a copy.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "chat_template/chat_template.h"
#include "core/error.h"
#include "fuzz_util.h"

using namespace moeflow;
using ojson = nlohmann::ordered_json;

namespace {

ojson default_messages() {
  return ojson::parse(R"([{"role":"system","content":"You are terse."},
                          {"role":"user","content":"Hi \u00e9\ud83e\udd99"},
                          {"role":"assistant","content":"<think>\nhm\n</think>\n\nHello."},
                          {"role":"user","content":"Again?"}])");
}

ojson messages_from_bytes(std::string_view s) {
  ojson arr = ojson::array();
  std::string parts[2];
  int k = 0;
  size_t b = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i < s.size() && s[i] != '\x01') continue;
    parts[k] = std::string(s.substr(b, i - b));
    b = i + 1;
    if (++k == 2) {
      arr.push_back(ojson{{"role", parts[0]}, {"content", parts[1]}});
      k = 0;
    }
  }
  if (k == 1) arr.push_back(ojson{{"role", parts[0]}, {"content", ""}});
  return arr;
}

bool is_template_error(const Error& e) {
  return std::strncmp(e.what(), "chat template: ", 15) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string source(in.substr(0, nul));
  const bool add_generation_prompt = size & 1;

  std::unique_ptr<ChatTemplate> t;
  try {
    t = std::make_unique<ChatTemplate>(source);
  } catch (const Error& e) {
    FUZZ_CHECK(is_template_error(e), std::string("parse error without the prefix: ") + e.what());
    return 0;
  }

  ojson context;
  bool whole_context = false;
  if (nul == std::string_view::npos) {
    context = default_messages();
  } else {
    const std::string_view rest = in.substr(nul + 1);
    context = ojson::parse(rest.begin(), rest.end(), nullptr, /*allow_exceptions=*/false);
    if (context.is_object())
      whole_context = true;
    else if (!context.is_array())
      context = messages_from_bytes(rest);
  }

  auto render = [&](const ChatTemplate& tmpl) -> std::string {
    return whole_context ? tmpl.render(context)
                         : tmpl.apply(context, add_generation_prompt, "<s>", "</s>");
  };
  std::string first;
  try {
    first = render(*t);
  } catch (const Error& e) {
    FUZZ_CHECK(is_template_error(e), std::string("render error without the prefix: ") + e.what());
    return 0;
  }
  // Deterministic and stateless: the same text again, and from a copy (shared parse tree).
  // strftime_now is the one input from outside; templates using it are not compared.
  if (source.find("strftime_now") == std::string::npos) {
    const ChatTemplate copy(*t);
    FUZZ_CHECK(render(copy) == first, "a second render gave a different text");
  }
  return 0;
}
