// `moeflow tokenize`: print the ids of a prompt, or check llama.cpp tokenizer test vectors.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "chat_template/chat_template.h"
#include "cli/command.h"
#include "core/error.h"
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab_vectors.h"

namespace moeflow::cli {
namespace {

struct TokenizeOpts {
  std::string model, prompt, chat, reasoning_effort;
  std::vector<std::string> vectors;
  bool no_bos = false, no_special = false, pieces = false;
};

std::string escape(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    if (c == '\n')
      o += "\\n";
    else if (c == '\t')
      o += "\\t";
    else if (c < 0x20)
      o += fmt::format("\\x{:02x}", c);
    else
      o += static_cast<char>(c);
  }
  return o;
}

int run_vectors(const Tokenizer& tok, const TokenizeOpts& o) {
  const auto vecs = load_vocab_vectors(o.vectors[0], o.vectors[1]);
  const auto r = check_vocab_vectors(tok, vecs);
  size_t shown = 0;
  for (size_t i : r.failed) {
    if (shown++ == 5) break;
    std::printf("MISMATCH #%zu input \"%s\"\n  expected: %s\n  got:      %s\n", i,
                escape(vecs[i].input).c_str(), format_ids(vecs[i].expected).c_str(),
                format_ids(tok.encode(vecs[i].input, false, false)).c_str());
  }
  std::printf("%s: %zu/%zu passed\n", o.vectors[0].c_str(), r.passed, r.total);
  return r.passed == r.total ? 0 : 2;
}

const bool registered_tokenize =
    register_command("tokenize", "Tokenize text with a model's vocabulary", [](CLI::App& sub) {
      auto o = std::make_shared<TokenizeOpts>();
      sub.add_option("-m,--model", o->model, "GGUF file with tokenizer.ggml.* metadata")
          ->required();
      sub.add_option("-p,--prompt", o->prompt, "Text to tokenize");
      sub.add_option("--vectors", o->vectors,
                     "Check FILE.inp FILE.out test vectors (exit 2 on any mismatch)")
          ->expected(2);
      sub.add_option(
          "--chat", o->chat,
          "Tokenize the chat prompt of a JSON array of messages, or of an object {\"messages\": "
          "[...], \"tools\": [...]} with OpenAI tools (the model's chat format)");
      sub.add_option("--reasoning-effort", o->reasoning_effort,
                     "harmony (gpt-oss): low | medium | high");
      sub.add_flag("--no-bos", o->no_bos, "Do not add the BOS/EOS tokens the model asks for");
      sub.add_flag("--no-special", o->no_special,
                   "Spell out special-token text instead of parsing it");
      sub.add_flag("--pieces", o->pieces, "Print each id with its text");
      return CommandMain([o] {
        auto gguf = GgufFile::open(o->model);
        auto tok = Tokenizer::from_gguf(*gguf);
        if (!tok->warning().empty())
          std::fprintf(stderr, "moeflow: warning: %s\n", tok->warning().c_str());
        if (!o->vectors.empty()) return run_vectors(*tok, *o);
        std::vector<int32_t> ids;
        if (!o->chat.empty()) {
          // The prompt `chat`/`serve` would give the model for this conversation.
          std::ifstream in(o->chat, std::ios::binary);
          if (!in) fail("--chat: cannot open '{}'", o->chat);
          auto chat = nlohmann::ordered_json::parse(in, nullptr, false);
          if (chat.is_discarded()) fail("--chat: '{}' is not JSON", o->chat);
          // A bare array of messages, or {"messages": [...], "tools": [...]} as in a request.
          nlohmann::ordered_json messages, extra = nlohmann::ordered_json::object();
          if (chat.is_object()) {
            for (auto it = chat.begin(); it != chat.end(); ++it)
              if (it.key() != "messages" && it.key() != "tools")
                fail("--chat: '{}' has '{}': only 'messages' and 'tools' are read", o->chat,
                     it.key());
            if (!chat.contains("messages")) fail("--chat: '{}' has no 'messages'", o->chat);
            messages = std::move(chat["messages"]);
            if (chat.contains("tools") && !chat["tools"].is_null())
              extra["tools"] = std::move(chat["tools"]);
          } else {
            messages = std::move(chat);
          }
          ModelChatTemplate t = model_chat_template(*tok);
          if (!o->reasoning_effort.empty())
            t.harmony_options.reasoning_effort = o->reasoning_effort;
          ids = t.tokenize(*tok, t.format(messages, true, extra));
        } else {
          ids = tok->encode(o->prompt, !o->no_bos, !o->no_special);
        }
        if (o->pieces) {
          for (int32_t id : ids)
            std::printf("%d\t'%s'\n", id, escape(tok->token_to_piece(id, true)).c_str());
        } else {
          std::printf("%s\n", format_ids(ids).c_str());
        }
        return 0;
      });
    });

}  // namespace
}  // namespace moeflow::cli
