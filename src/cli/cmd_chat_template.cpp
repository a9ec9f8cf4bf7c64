// `moeflow chat-template`: render a chat template with a given context, as `chat` and `serve`
// render a model's template. It exposes the Jinja engine (src/chat_template/) to scripts: the
// oracle test tests/python/test_chat_template_jinja2.py compares its output with jinja2's.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "chat_template/chat_template.h"
#include "cli/command.h"
#include "core/error.h"

namespace moeflow::cli {
namespace {

struct ChatTemplateOpts {
  std::string template_file, context_file;
};

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open '{}'", what, path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

const bool registered_chat_template = register_command(
    "chat-template", "Render a chat template (Jinja) with a JSON context, as chat/serve do",
    [](CLI::App& sub) {
      auto o = std::make_shared<ChatTemplateOpts>();
      sub.add_option("-t,--template", o->template_file, "File with the template's Jinja text")
          ->required();
      sub.add_option("-c,--context", o->context_file,
                     "JSON object with the template's variables (messages, add_generation_prompt, "
                     "bos_token, eos_token, tools, ...)")
          ->required();
      return CommandMain([o] {
        const ChatTemplate t(read_file(o->template_file, "--template"));
        const auto ctx =
            nlohmann::ordered_json::parse(read_file(o->context_file, "--context"), nullptr, false);
        if (ctx.is_discarded()) fail("--context: '{}' is not JSON", o->context_file);
        // The rendering exactly, with no newline added: the text is the prompt.
        const std::string out = t.render(ctx);
        std::fwrite(out.data(), 1, out.size(), stdout);
        return 0;
      });
    });

}  // namespace
}  // namespace moeflow::cli
