#include "server/server.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "chat_template/chat_template.h"
#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/token_vocab.h"
#include "runtime/engine.h"
#include "runtime/prefix_cache.h"
#include "server/http_guard.h"
#include "server/response_json.h"
#include "server/server_metrics.h"
#include "server/text_generation.h"
#include "tokenizer/harmony.h"
#include "tokenizer/tokenizer.h"
#include "toolcall/tool_call_grammar.h"
#include "toolcall/tool_call_syntax.h"

namespace moeflow {
namespace {

// Text deltas a streaming job may have waiting for its writer before the engine thread waits:
// generation runs at most this far ahead of the socket, so a client that has gone away is
// noticed within a few tokens.
constexpr size_t kMaxPendingDeltas = 8;

const char* const kShuttingDown = "the server is shutting down";
// How often a request thread waiting for its generation looks at its client's connection.
constexpr auto kClientPoll = std::chrono::milliseconds(50);
// What follows " to=functions.NAME" in the header of a harmony tool call, as openai-harmony
// writes it.
const char* const kHarmonyCallHeaderTail = "<|channel|>commentary <|constrain|>json<|message|>";
// The finish_reason of a choice cut short by the server's stop (a stream also gets an error).
const char* const kCutReason = "cancelled";

ojson error_json(const RequestError& e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? ojson(nullptr) : ojson(e.param)},
            {"code", e.code.empty() ? ojson(nullptr) : ojson(e.code)}}}};
}

RequestError server_error(int status, std::string msg, std::string code = "") {
  RequestError e(status, std::move(msg), "", std::move(code));
  e.type = "server_error";
  return e;
}

// One piece of a streamed choice, or its end.
struct StreamEvent {
  int index = 0;
  TextDelta delta;
  const TextGenResult* finished = nullptr;  // the choice ended (points into Job::results)
};

// Harmony, tool_choice "required" with several tools: the model first writes which function
// (a grammar of the names, right after " to=functions." at the end of the prompt), then the
// call's arguments as for a named choice.
struct HarmonyChoice {
  std::shared_ptr<const Grammar> names;
  std::map<std::string, std::shared_ptr<const Grammar>> arguments;  // per function
};

struct Job {
  std::vector<int32_t> prompt;
  TextGenParams params;
  std::optional<HarmonyChoice> harmony_choice;
  int n = 1;
  bool stream = false;
  std::atomic<bool> cancel{false};
  std::atomic<bool> client_gone{false};  // its client disconnected (counted once)
  bool by_shutdown = false;              // cancelled by the server's stop (under mu)
  std::mutex mu;
  std::condition_variable cv;
  std::deque<StreamEvent> events;  // streaming: not yet written to the client
  bool done = false;
  std::deque<TextGenResult> results;  // one per choice (a deque: events point into it)
  std::string error;                  // generation failed (or the server stopped) with this message

  void set_cancel(bool shutdown = false) {
    {
      std::lock_guard lk(mu);
      cancel = true;
      if (shutdown) by_shutdown = true;
    }
    cv.notify_all();
  }
  // Waits until pred() (under mu) or the client has gone (probe, looked at every kClientPoll);
  // returns false for the latter. lk holds mu.
  template <class Pred>
  bool wait_or_gone(std::unique_lock<std::mutex>& lk, const std::function<bool()>& probe,
                    Pred pred) {
    while (!cv.wait_for(lk, kClientPoll, pred)) {
      if (!probe) continue;
      lk.unlock();
      const bool gone = probe();
      lk.lock();
      if (gone && !pred()) return false;
    }
    return true;
  }
  void finish(std::string err) {
    {
      std::lock_guard lk(mu);
      error = std::move(err);
      done = true;
    }
    cv.notify_all();
  }
  // Engine thread: waits while the writer is kMaxPendingDeltas behind; false when cancelled.
  bool push(StreamEvent ev) {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return events.size() < kMaxPendingDeltas || cancel.load(); });
    if (cancel) return false;
    events.push_back(std::move(ev));
    lk.unlock();
    cv.notify_all();
    return true;
  }
};

// The path label of a request in /metrics: a fixed set, whatever paths clients invent.
std::string metric_path(const std::string& path) {
  static const char* known[] = {
      "/v1/chat/completions", "/v1/completions", "/chat/completions", "/completions",
      "/v1/models",           "/health",         "/metrics"};
  for (const char* k : known)
    if (path == k) return k;
  return path.rfind("/v1/models/", 0) == 0 ? "/v1/models/{id}" : "other";
}

bool is_control_path(const std::string& method, const std::string& path) {
  return method == "GET" && (path == "/health" || path == "/metrics" || path == "/v1/models" ||
                             path.rfind("/v1/models/", 0) == 0);
}

}  // namespace

struct Server::Impl {
  Engine& eng;
  const Tokenizer& tok;
  ServerOptions opt;
  std::function<std::optional<OffloadStats>()> offload_stats;
  ModelChatTemplate tmpl;
  std::string template_line;
  const int64_t created = (int64_t)std::time(nullptr);
  const int64_t n_ctx;
  RequestContext rctx;
  ServerMetrics stats;
  PrefixCache cache;  // engine thread only
  std::once_flag vocab_once;
  std::shared_ptr<const TokenVocab> vocab;  // response_format's token bytes (constrain())

  GuardedHttpServer http;
  int port = -1;
  std::thread listen_thread, engine_thread;

  mutable std::mutex qmu;
  std::condition_variable qcv;
  std::deque<std::shared_ptr<Job>> queue;
  std::shared_ptr<Job> running;
  bool stopping = false, stopped = false;
  bool draining = false;        // a graceful stop has begun: new requests get 503
  bool accept_stopped = false;  // http.stop() was called
  std::once_flag shutdown_once;
  size_t max_token_bytes = 4;  // the longest vocabulary string (see check_prompt_bytes)
  bool template_knows_developer = false;
  ToolCallSyntax tool_syntax = ToolCallSyntax::None;  // how the template's model writes calls
  bool object_arguments = true;  // the template reads a call's arguments as an object
  std::atomic<uint64_t> next_id{1};

  static GuardOptions guard_options(const ServerOptions& o, ServerMetrics& m) {
    GuardOptions g;
    g.worker_threads = o.http_threads > 0 ? o.http_threads : o.max_queue + 4;
    g.header_timeout_s = o.header_timeout_s;
    g.idle_timeout_s = o.idle_timeout_s;
    g.write_timeout_s = o.write_timeout_s;
    g.max_connections = o.max_connections;
    g.limits.max_body_bytes = o.limits.max_body_bytes;
    g.is_control = is_control_path;
    g.on_drop = [&m](const std::string& r) { m.connection_dropped(r); };
    g.on_answered = [&m](const std::string& path, int status) {
      m.http_request(metric_path(path), status);
    };
    return g;
  }

  Impl(Engine& e, const Tokenizer& t, ServerOptions o,
       std::function<std::optional<OffloadStats>()> os)
      : eng(e),
        tok(t),
        opt(std::move(o)),
        offload_stats(std::move(os)),
        tmpl(model_chat_template(t, opt.chat_template)),
        n_ctx(e.context().n_ctx()),
        cache(opt.prefix_cache),
        http(guard_options(opt, stats)) {
    template_line = tmpl.describe();
    if (opt.model_id.empty()) opt.model_id = "moeflow";
    if (opt.max_queue < 0) fail("--max-queue must be >= 0, got {}", opt.max_queue);
    if (auto e = check_sampler_params(opt.sampling))
      fail("{} {}, got {}", e->flag, e->requirement, e->value);
    rctx.model_id = opt.model_id;
    rctx.sampling = opt.sampling;
    rctx.default_max_tokens = opt.default_max_tokens;
    rctx.n_vocab = eng.n_vocab();
    rctx.limits = opt.limits;
    rctx.reasoning_effort = tmpl.harmony;
    if (!(opt.shutdown_timeout_s >= 0 && opt.shutdown_timeout_s <= 86400))
      fail("--shutdown-timeout must be in [0, 86400] seconds, got {}", opt.shutdown_timeout_s);
    // An unknown character is one token of up to 4 bytes; others cover at most their text.
    for (int32_t id = 0; id < t.n_vocab(); ++id)
      max_token_bytes = std::max(max_token_bytes, t.token_text(id).size());
    template_knows_developer = tmpl.tmpl.source().find("developer") != std::string::npos;
    tool_syntax = detect_tool_call_syntax(tmpl.harmony ? "" : tmpl.tmpl.source(), tmpl.harmony);
    // Gemma 4's template writes an object in its own notation and a string as it is: the probe
    // (which looks for JSON) would take it for a template of string arguments.
    if (!tmpl.harmony)
      object_arguments = tool_syntax == ToolCallSyntax::Gemma4 || wants_object_arguments(tmpl);
    routes();
    engine_thread = std::thread([this] { engine_loop(); });
  }

  // Engine thread ------------------------------------------------------------------------------

  void engine_loop() {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock lk(qmu);
        qcv.wait(lk, [&] { return stopping || !queue.empty(); });
        if (stopping) break;
        job = queue.front();
        queue.pop_front();
        running = job;
      }
      run_job(*job);
      {
        std::lock_guard lk(qmu);
        running.reset();
      }
      qcv.notify_all();  // a graceful stop waits for the queue to empty
    }
    std::deque<std::shared_ptr<Job>> rest;
    {
      std::lock_guard lk(qmu);
      rest.swap(queue);
    }
    for (auto& j : rest) {
      stats.cancelled("shutdown");
      j->finish(kShuttingDown);
    }
  }

  void run_job(Job& job) {
    std::string err;
    for (int i = 0; i < job.n && err.empty(); ++i) {
      TextGenResult res;
      if (job.cancel) {
        res.finish_reason = "cancelled";
      } else {
        TextGenParams p = job.params;
        p.sampling.seed += (uint64_t)i;  // choices differ; choice 0 is what n = 1 gives
        try {
          auto on_delta = [&](const TextDelta& d) {
            return !job.stream ? !job.cancel.load() : job.push({i, d, nullptr});
          };
          res = job.harmony_choice
                    ? choose_and_call(job, std::move(p), on_delta)
                    : generate_text(eng, tok, job.prompt, p, on_delta, &job.cancel, &cache);
        } catch (const std::exception& e) {
          err = e.what();
        }
      }
      stats.generation(res, !err.empty());
      {
        std::lock_guard lk(job.mu);
        job.results.push_back(std::move(res));
      }
      if (job.stream && err.empty() && !job.push({i, {}, &job.results.back()})) break;
    }
    // Cut short by the server's stop: an error for the client (a stream ends every open choice).
    bool cut = false;
    {
      std::lock_guard lk(job.mu);
      cut = job.by_shutdown &&
            (job.results.size() < (size_t)job.n || job.results.back().finish_reason == "cancelled");
    }
    if (err.empty() && cut) {
      stats.cancelled("shutdown");
      err = kShuttingDown;
    }
    job.finish(std::move(err));
  }

  // HarmonyChoice: the name (no text of its own: it is header), then the call with the chosen
  // function's header and schema, continuing from the cached prefix.
  TextGenResult choose_and_call(Job& job, TextGenParams p,
                                const std::function<bool(const TextDelta&)>& on_delta) {
    const HarmonyChoice& hc = *job.harmony_choice;
    TextGenParams a = p;
    a.grammar = hc.names;
    a.max_tokens = std::min(p.max_tokens, 64);
    a.logprobs = false;
    a.stop.clear();
    TextGenResult first = generate_text(eng, tok, job.prompt, a, nullptr, &job.cancel, &cache);
    if (!first.tokens.empty() && tok.is_eog(first.tokens.back())) first.tokens.pop_back();
    const std::string name = tok.decode(first.tokens);
    auto it = hc.arguments.find(name);
    if (first.finish_reason != "stop" || it == hc.arguments.end()) {
      first.finish_reason = first.finish_reason == "cancelled" ? "cancelled" : "length";
      return first;  // cut off by max_tokens or cancelled before the name was whole
    }
    std::vector<int32_t> prompt = job.prompt;
    prompt.insert(prompt.end(), first.tokens.begin(), first.tokens.end());
    const std::vector<int32_t> rest = tok.encode(kHarmonyCallHeaderTail, false, true);
    prompt.insert(prompt.end(), rest.begin(), rest.end());
    p.harmony_header.insert(p.harmony_header.end(), first.tokens.begin(), first.tokens.end());
    p.harmony_header.insert(p.harmony_header.end(), rest.begin(), rest.end());
    p.grammar = it->second;
    p.max_tokens =
        (int)std::min<int64_t>(p.max_tokens - first.n_generated, n_ctx - (int64_t)prompt.size());
    TextGenResult res;
    if (p.max_tokens > 0) res = generate_text(eng, tok, prompt, p, on_delta, &job.cancel, &cache);
    res.n_prompt = first.n_prompt;
    res.n_cached = first.n_cached;
    res.n_generated += first.n_generated;
    res.tokens.insert(res.tokens.begin(), first.tokens.begin(), first.tokens.end());
    res.prefill_s += first.prefill_s;
    res.ttft_s = first.ttft_s;
    res.decode_s += first.decode_s;
    return res;
  }

  // Request threads ----------------------------------------------------------------------------

  // The client of a job went away: its generation stops (between tokens), counted once while
  // it was still generating or waiting.
  void client_left(Job& job) {
    if (job.client_gone.exchange(true)) return;
    bool done;
    {
      std::lock_guard lk(job.mu);
      done = job.done;
    }
    if (done) return;
    stats.cancelled("client_gone");
    job.set_cancel();
  }

  void enqueue(const std::shared_ptr<Job>& job) {
    std::lock_guard lk(qmu);
    if (stopping || draining) throw server_error(503, kShuttingDown, "shutting_down");
    if ((int)queue.size() >= opt.max_queue && (running || !queue.empty())) {
      stats.rejected();
      throw server_error(
          503, fmt::format("the server is busy ({} requests queued); retry later", queue.size()),
          "queue_full");
    }
    queue.push_back(job);
    qcv.notify_all();
  }

  static void send_error(httplib::Response& res, const RequestError& e) {
    res.status = e.status;
    res.set_content(dump_json(error_json(e)), "application/json");
  }

  static RequestError tools_unsupported() {
    return RequestError(400,
                        "tool calling is not supported by this model's chat template: it does not "
                        "render 'tools', so the model would never see them (leave 'tools' out, "
                        "send \"tool_choice\": \"none\", or give `moeflow serve` a "
                        "--chat-template-file that renders tools)",
                        "tools", "tools_not_supported");
  }

  // OpenAI clients send a call's arguments as a JSON string; most templates write them with
  // `| tojson` and need the object (Llama 3.1 would quote the string, GLM refuses it), while
  // DeepSeek V3.1's writes them as given and needs the string. Told once by rendering a probe
  // call both ways: the form whose arguments come out as JSON is the template's.
  static bool wants_object_arguments(const ModelChatTemplate& t) {
    auto renders_json = [&](const ojson& args) {
      const ojson msgs = ojson::array(
          {{{"role", "user"}, {"content", "x"}},
           {{"role", "assistant"},
            {"content", ""},
            {"tool_calls",
             ojson::array({{{"id", "abcdefghi"},  // Mistral's 9 characters
                            {"type", "function"},
                            {"function", {{"name", "probe"}, {"arguments", args}}}}})}},
           {{"role", "tool"}, {"tool_call_id", "abcdefghi"}, {"content", "y"}},
           {{"role", "user"}, {"content", "z"}}});
      try {
        const std::string text = t.format(msgs, true);
        return text.find("\"probe_arg\": 12345") != std::string::npos ||
               text.find("\"probe_arg\":12345") != std::string::npos;
      } catch (const std::exception&) {
        return false;
      }
    };
    const ojson args = {{"probe_arg", 12345}};
    return renders_json(args) || !renders_json(args.dump());
  }

  // Each earlier call's arguments in the form the template reads (see wants_object_arguments).
  void arguments_for_template(ojson& messages) const {
    for (ojson& m : messages) {
      if (!m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
      for (ojson& c : m["tool_calls"]) {
        if (!c.is_object() || !c.contains("function") || !c["function"].is_object()) continue;
        ojson& a = c["function"]["arguments"];
        if (object_arguments && a.is_string()) {
          ojson parsed = ojson::parse(a.get<std::string>(), nullptr, false);
          if (parsed.is_object()) a = std::move(parsed);
        } else if (!object_arguments && a.is_object()) {
          a = a.dump();
        }
      }
    }
  }

  std::vector<int32_t> chat_prompt(GenerationRequest& r) const {
    if (tmpl.harmony) {
      // gpt-oss: the answer is the final channel; reasoning_effort is OpenAI's field; tools
      // go into the developer message, calls come back as commentary to=functions.NAME.
      HarmonyOptions ho = tmpl.harmony_options;
      ho.tools = r.tools;
      if (!r.reasoning_effort.empty()) ho.reasoning_effort = r.reasoning_effort;
      std::string text;
      try {
        text = render_harmony(r.messages, true, ho);
      } catch (const Error& e) {
        throw RequestError(400, e.what(), "messages");
      }
      return tmpl.tokenize(tok, text);
    }
    // OpenAI's "developer" is the system message of models trained before it had that name.
    if (!template_knows_developer)
      for (ojson& m : r.messages)
        if (m["role"] == "developer") m["role"] = "system";
    arguments_for_template(r.messages);
    ojson extra = ojson::object();
    if (!r.tools.is_null()) extra["tools"] = r.tools;
    std::string text;
    try {
      text = tmpl.format(r.messages, true, extra);
      // A template that renders the same prompt with and without the tools does not show them
      // to the model: refused rather than silently dropped.
      if (!r.tools.is_null() && text == tmpl.format(r.messages, true)) throw tools_unsupported();
      // One that shows them but not how its model writes a call: its calls could not be read.
      if (!r.tools.is_null() && tool_syntax == ToolCallSyntax::None)
        throw RequestError(400,
                           "tool calling is not supported with this chat template: it renders "
                           "'tools' but none of the tool-call syntaxes moeflow reads (Qwen/Hermes "
                           "<tool_call>, Qwen3.5 XML, GLM, Mistral [TOOL_CALLS], Llama 3 JSON, "
                           "DeepSeek, Gemma 4, MiniMax-M2, harmony), so the model's calls would "
                           "come back as plain text",
                           "tools", "tools_not_supported");
    } catch (const Error& e) {
      throw RequestError(400, e.what(), "messages");
    }
    return tmpl.tokenize(tok, text);
  }

  // Tools the template showed the model: its reply is parsed for calls; tool_choice "required"
  // or a named function is enforced by a grammar of the family's call syntax.
  void use_tools(const GenerationRequest& r, Job& job) {
    job.params.tool_syntax = tool_syntax;
    job.params.tools = r.tools;
    if (r.tool_choice != ToolChoice::Required && r.tool_choice != ToolChoice::Named) return;
    ForcedToolCalls forced;
    if (r.tool_choice == ToolChoice::Named) forced.name = r.tool_name;
    forced.parallel = r.tool_choice == ToolChoice::Required && r.parallel_tool_calls;
    if (tool_syntax == ToolCallSyntax::Harmony) {
      force_harmony_call(r, job, forced.name);
      return;
    }
    try {
      job.params.grammar = forced_tool_call_grammar(tool_syntax, r.tools, forced);
    } catch (const SchemaError& e) {
      throw RequestError(400, e.what(), "tools", "invalid_tool_parameters");
    } catch (const Error& e) {
      throw RequestError(400, fmt::format("'tool_choice' cannot be enforced: {}", e.what()),
                         "tool_choice");
    }
  }

  // Harmony frames a call with control tokens, which a byte grammar cannot write: the prompt
  // gets the call's header (recipient, channel, content type) and the grammar is its arguments'
  // schema. With several tools to choose from ("required"), the header stops after
  // " to=functions." and the model writes the name first (HarmonyChoice, choose_and_call).
  void force_harmony_call(const GenerationRequest& r, Job& job, const std::string& name) {
    auto schema_grammar = [&](const ojson& fn) {
      try {
        return json_schema_grammar(tool_parameters(fn));
      } catch (const SchemaError& e) {
        throw RequestError(
            400, fmt::format("tool '{}': parameters: {}", fn["name"].get<std::string>(), e.what()),
            "tools", "invalid_tool_parameters");
      }
    };
    // The header as openai-harmony writes a call (recipient first), after "<|start|>assistant".
    std::string header = " to=functions.";
    if (name.empty() && r.tools.size() > 1) {
      HarmonyChoice hc;
      std::vector<Expr> names;
      for (const ojson& t : r.tools) {
        const std::string n = t["function"]["name"].get<std::string>();
        hc.arguments[n] = schema_grammar(t["function"]);
        names.push_back(Expr::literal(n));
      }
      GrammarBuilder b;
      b.define("root", Expr::alt(std::move(names)));
      hc.names = b.build("root");
      job.harmony_choice = std::move(hc);
    } else {
      const std::string n = name.empty() ? r.tools[0]["function"]["name"].get<std::string>() : name;
      for (const ojson& t : r.tools)
        if (t["function"]["name"] == n) job.params.grammar = schema_grammar(t["function"]);
      header += n + kHarmonyCallHeaderTail;
    }
    job.params.harmony_header = tok.encode(header, false, true);
    job.prompt.insert(job.prompt.end(), job.params.harmony_header.begin(),
                      job.params.harmony_header.end());
  }

  // response_format: the vocabulary's bytes and trie are built once, on the first request that
  // needs them, and shared. Harmony's reply is framed by channel tokens a grammar would have to
  // spell out, so there it is refused.
  void constrain(Job& job) {
    if (job.harmony_choice) {
      std::call_once(vocab_once, [&] { vocab = TokenVocab::from_tokenizer(tok); });
      job.params.token_vocab = vocab;
      return;
    }
    if (job.params.harmony && job.params.harmony_header.empty())
      throw RequestError(400,
                         "'response_format' json_object / json_schema is not supported with this "
                         "model's harmony (gpt-oss) chat format",
                         "response_format");
    std::call_once(vocab_once, [&] { vocab = TokenVocab::from_tokenizer(tok); });
    job.params.token_vocab = vocab;
  }

  // Before tokenizing: a token covers at most max_token_bytes bytes of text (its vocabulary
  // string, which is never shorter than the input it matches), so a prompt of B bytes has at
  // least B / max_token_bytes tokens. Whitespace is left out of B, as a chat template may trim
  // it. A prompt that cannot fit the context by that bound is refused without tokenizing it.
  void check_prompt_bytes(const GenerationRequest& r, bool chat) const {
    auto solid = [](const std::string& s) {
      size_t n = 0;
      for (unsigned char c : s) n += !(c == ' ' || c == '\t' || c == '\n' || c == '\r');
      return n;
    };
    size_t bytes = 0;
    if (chat) {
      for (const ojson& m : r.messages)
        if (const auto it = m.find("content"); it != m.end() && it->is_string())
          bytes += solid(it->get_ref<const std::string&>());
    } else if (r.prompt_is_text) {
      bytes = solid(r.prompt_text);
    }
    const int64_t at_least = (int64_t)((bytes + max_token_bytes - 1) / max_token_bytes);
    if (at_least >= n_ctx)
      throw RequestError(
          400,
          fmt::format("This model's context is {} tokens; the prompt has at least {} tokens ({} "
                      "bytes of text, at most {} bytes per token), which leaves no room to "
                      "generate",
                      n_ctx, at_least, bytes, max_token_bytes),
          chat ? "messages" : "prompt", "context_length_exceeded");
  }

  // The prompt must leave room in the context; max_tokens is clamped to what is left.
  void fit_context(Job& job, bool chat) {
    const int64_t n = (int64_t)job.prompt.size();
    if (n == 0) throw RequestError(400, "the prompt is empty", "prompt");
    if (n >= n_ctx)
      throw RequestError(
          400,
          fmt::format(
              "This model's context is {} tokens; the prompt has {} tokens, which leaves no "
              "room to generate",
              n_ctx, n),
          chat ? "messages" : "prompt", "context_length_exceeded");
    const int64_t room = n_ctx - n;
    job.params.max_tokens =
        job.params.max_tokens < 0 ? (int)room : (int)std::min<int64_t>(job.params.max_tokens, room);
  }

  void handle(const httplib::Request& req, httplib::Response& res,
              const httplib::ContentReader& reader, Endpoint ep) {
    const bool chat = ep == Endpoint::Chat;
    // Whether the client is still there: looked at while the request waits and generates.
    std::function<bool()> gone = GuardedHttpServer::client_gone_probe();
    std::string body;
    try {
      if (req.is_multipart_form_data())
        throw RequestError(415,
                           "multipart/form-data is not supported: send the request as a JSON body");
      bool too_large = false;
      const std::string cl = req.get_header_value("Content-Length");
      if (!cl.empty() && cl.size() < 12)
        body.reserve(std::min<size_t>(std::stoull(cl), opt.limits.max_body_bytes));
      reader([&](const char* d, size_t n) {
        if (body.size() + n > opt.limits.max_body_bytes) {
          too_large = true;
          return false;
        }
        body.append(d, n);
        return true;
      });
      if (too_large)
        throw RequestError(413, fmt::format("the request body is larger than {} bytes",
                                            opt.limits.max_body_bytes));
      GenerationRequest r = parse_generation_request(body, ep, rctx);
      check_prompt_bytes(r, chat);
      auto job = std::make_shared<Job>();
      if (chat) {
        job->prompt = chat_prompt(r);
      } else if (r.prompt_is_text) {
        job->prompt = tok.encode(r.prompt_text, true, true);
      } else {
        job->prompt = std::move(r.prompt_ids);
      }
      job->params = std::move(r.gen);
      job->params.harmony = chat && tmpl.harmony;  // the reply is harmony's final channel
      if (chat && !r.tools.is_null()) use_tools(r, *job);
      if (job->params.grammar || job->harmony_choice) constrain(*job);
      job->n = r.n;
      job->stream = r.stream;
      if (!r.seed_given && opt.random_seed)
        job->params.sampling.seed =
            std::random_device{}() ^ ((uint64_t)std::random_device{}() << 32);
      fit_context(*job, chat);
      std::string echo;
      if (r.echo) echo = r.prompt_is_text ? r.prompt_text : tok.decode(job->prompt);
      ResponseHead head{fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", next_id++), opt.model_id,
                        (int64_t)std::time(nullptr), chat};
      const bool include_usage = r.include_usage;
      r = GenerationRequest{};  // the parsed messages are not needed any more
      enqueue(job);
      if (job->stream)
        stream_response(res, job, head, std::move(echo), include_usage, std::move(gone));
      else
        json_response(res, *job, head, echo, gone);
    } catch (const RequestError& e) {
      send_error(res, e);
    }
  }

  ojson choice_json(const TextGenResult& r, int index, bool chat, const std::string& echo,
                    bool logprobs) const {
    ojson c = {{"index", index}};
    if (chat) {
      c["message"] = {{"role", "assistant"}, {"content", r.text}};
      if (!r.tool_calls.empty()) {
        if (r.text.find_first_not_of(" \t\r\n") == std::string::npos)
          c["message"]["content"] = nullptr;  // OpenAI's reply that only calls tools
        c["message"]["tool_calls"] = tool_calls_json(r.tool_calls);
      }
      if (!r.reasoning.empty()) c["message"]["reasoning_content"] = r.reasoning;  // harmony
    } else {
      c["text"] = echo + r.text;
    }
    if (!logprobs)
      c["logprobs"] = nullptr;
    else if (chat)
      c["logprobs"] = chat_logprobs_json(tok, r.logprobs);
    else
      c["logprobs"] = completion_logprobs_json(tok, r.logprobs, echo.size(), true);
    c["finish_reason"] = finish_reason_json(r.finish_reason);
    return c;
  }

  static ojson total_usage(const std::deque<TextGenResult>& rs) {
    int completion = 0;
    for (const TextGenResult& r : rs) completion += r.n_generated;
    return usage_json(rs.empty() ? 0 : rs[0].n_prompt, rs.empty() ? 0 : rs[0].n_cached, completion);
  }

  void json_response(httplib::Response& res, Job& job, const ResponseHead& head,
                     const std::string& echo, const std::function<bool()>& gone) {
    bool left = false;
    {
      std::unique_lock lk(job.mu);
      if (!job.wait_or_gone(lk, gone, [&] { return job.done; })) {
        lk.unlock();
        client_left(job);  // its choices stop between tokens; nobody reads the answer
        left = true;
        lk.lock();
        job.cv.wait(lk, [&] { return job.done; });
      }
    }
    if (left) {
      res.status = 499;  // nginx's "client closed request", for the log and /metrics
      return;
    }
    if (job.error == kShuttingDown)
      throw server_error(503, "the server is shutting down: the request did not finish in time",
                         "shutting_down");
    if (!job.error.empty()) throw server_error(500, job.error);
    ojson j = response_base(head, false);
    j["choices"] = ojson::array();
    for (size_t i = 0; i < job.results.size(); ++i)
      j["choices"].push_back(
          choice_json(job.results[i], (int)i, head.chat, echo, job.params.logprobs));
    j["usage"] = total_usage(job.results);
    res.set_content(dump_json(j), "application/json");
  }

  // Server-Sent Events: per choice a first chunk (chat: the role; completions with echo: the
  // prompt), the text pieces, and a chunk with its finish_reason; with include_usage a last
  // chunk with empty choices and the usage (OpenAI's layout), else the usage rides on the last
  // finish chunk (as llama.cpp's server sends it); then [DONE].
  // A stream cut short (the server stopped, or generation failed) ends every open choice with a
  // finish_reason ("cancelled"), then the usage, then an error event, then [DONE]: the openai
  // client raises the error after the chunks, and no client takes the cut text for a whole one.
  void stream_response(httplib::Response& res, const std::shared_ptr<Job>& job,
                       const ResponseHead& head, std::string echo, bool include_usage,
                       std::function<bool()> gone) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, job, head, echo, include_usage, gone](size_t, httplib::DataSink& sink) -> bool {
          const bool chat = head.chat;
          auto send = [&](const std::string& payload) {
            const std::string s = "data: " + payload + "\n\n";
            if (sink.write(s.data(), s.size())) return true;
            client_left(*job);
            return false;
          };
          auto chunk = [&](int index, const std::string* text, const std::vector<TokenLogprob>* lps,
                           const ojson& finish, bool reasoning = false) {
            ojson j = response_base(head, true);
            ojson c = {{"index", index}};
            if (chat)
              c["delta"] = text ? ojson{{reasoning ? "reasoning_content" : "content", *text}}
                                : ojson::object();
            else
              c["text"] = text ? *text : std::string();
            if (!job->params.logprobs || !lps)
              c["logprobs"] = nullptr;
            else if (chat)
              c["logprobs"] = chat_logprobs_json(tok, *lps);
            else
              c["logprobs"] = completion_logprobs_json(tok, *lps, echo.size(), true);
            c["finish_reason"] = finish;
            j["choices"] = ojson::array({c});
            if (include_usage) j["usage"] = nullptr;
            return j;
          };
          std::vector<bool> started((size_t)job->n, false), ended((size_t)job->n, false);
          std::vector<int> calls_sent((size_t)job->n, 0);
          auto start = [&](int i) {
            if (started[(size_t)i]) return true;
            started[(size_t)i] = true;
            if (chat) {
              ojson first = chunk(i, nullptr, nullptr, nullptr);
              first["choices"][0]["delta"] = {{"role", "assistant"}, {"content", ""}};
              return send(dump_json(first));
            }
            return echo.empty() || send(dump_json(chunk(i, &echo, nullptr, nullptr)));
          };
          if (!start(0)) return false;
          int finished = 0;
          auto end_choice = [&](int index, const std::string& reason, bool cut = false) {
            ended[(size_t)index] = true;
            // A choice the server cut says so; a finished one says how it finished.
            ojson last = chunk(index, nullptr, nullptr, cut ? reason : finish_reason_json(reason));
            if (++finished == job->n && !include_usage) last["usage"] = total_usage(job->results);
            return send(dump_json(last));
          };
          for (;;) {
            std::deque<StreamEvent> batch;
            bool done;
            {
              std::unique_lock lk(job->mu);
              if (!job->wait_or_gone(lk, gone, [&] { return !job->events.empty() || job->done; })) {
                lk.unlock();
                client_left(*job);
                return false;
              }
              batch.swap(job->events);
              done = job->done;
            }
            job->cv.notify_all();  // room for the engine thread again
            for (const StreamEvent& ev : batch) {
              if (!start(ev.index)) return false;
              if (ev.finished) {
                if (!end_choice(ev.index, ev.finished->finish_reason)) return false;
              } else if (!ev.delta.tool_calls.empty() || !ev.delta.text.empty() ||
                         (ev.delta.reasoning.empty() && !ev.delta.logprobs.empty())) {
                if (!ev.delta.text.empty() || !ev.delta.logprobs.empty())
                  if (!send(
                          dump_json(chunk(ev.index, &ev.delta.text, &ev.delta.logprobs, nullptr))))
                    return false;
                if (!ev.delta.tool_calls.empty()) {
                  // Each call whole in one delta, numbered within its choice: the openai client
                  // accumulates deltas by index.
                  ojson j = chunk(ev.index, nullptr, nullptr, nullptr);
                  ojson calls = tool_calls_json(ev.delta.tool_calls);
                  for (ojson& c : calls) c["index"] = calls_sent[(size_t)ev.index]++;
                  j["choices"][0]["delta"] = {{"tool_calls", std::move(calls)}};
                  if (!send(dump_json(j))) return false;
                }
              } else if (!ev.delta.reasoning.empty()) {  // harmony's other channels
                if (chat &&
                    !send(dump_json(chunk(ev.index, &ev.delta.reasoning, nullptr, nullptr, true))))
                  return false;
              } else if (!send(dump_json(
                             chunk(ev.index, &ev.delta.text, &ev.delta.logprobs, nullptr)))) {
                return false;
              }
            }
            if (done && batch.empty()) break;
          }
          if (!job->error.empty())
            for (int i = 0; i < job->n; ++i)
              if (!ended[(size_t)i] && !(start(i) && end_choice(i, kCutReason, true))) return false;
          if (include_usage) {
            ojson u = response_base(head, true);
            u["choices"] = ojson::array();
            u["usage"] = total_usage(job->results);
            if (!send(dump_json(u))) return false;
          }
          if (!job->error.empty()) {
            const bool shut = job->error == kShuttingDown;
            RequestError e =
                server_error(shut ? 503 : 500,
                             shut ? "the server is shutting down: generation stopped before the end"
                                  : job->error,
                             shut ? "shutting_down" : "");
            if (!send(dump_json(error_json(e)))) return false;
          }
          if (!send("[DONE]")) return false;
          sink.done();
          return true;
        },
        [this, job](bool success) {
          if (!success) client_left(*job);  // the client went away: stop generating
        });
  }

  ojson model_json() const {
    return {{"id", opt.model_id},
            {"object", "model"},
            {"created", created},
            {"owned_by", "moeflow"},
            {"meta",
             {{"n_ctx", n_ctx},
              {"n_vocab", eng.n_vocab()},
              {"chat_template", tmpl.tmpl.source()},
              {"chat_template_origin", template_line}}}};
  }

  void routes() {
    using httplib::ContentReader;
    using httplib::Request;
    using httplib::Response;
    for (const char* p : {"/v1/chat/completions", "/chat/completions"})
      http.Post(p, [this](const Request& q, Response& r, const ContentReader& c) {
        handle(q, r, c, Endpoint::Chat);
      });
    // Aliases without the /v1 prefix, as llama.cpp's server accepts.
    for (const char* p : {"/v1/completions", "/completions"})
      http.Post(p, [this](const Request& q, Response& r, const ContentReader& c) {
        handle(q, r, c, Endpoint::Completion);
      });
    http.Get("/v1/models", [this](const Request&, Response& r) {
      r.set_content(dump_json(ojson{{"object", "list"}, {"data", ojson::array({model_json()})}}),
                    "application/json");
    });
    // The openai client's models.retrieve(id).
    http.Get(R"(/v1/models/(.+))", [this](const Request& q, Response& r) {
      const std::string id = q.matches.size() > 1 ? std::string(q.matches[1]) : "";
      if (id == opt.model_id) return r.set_content(dump_json(model_json()), "application/json");
      send_error(
          r, RequestError(404,
                          fmt::format("The model '{}' does not exist (this server serves '{}')", id,
                                      opt.model_id),
                          "model", "model_not_found"));
    });
    http.Get("/health", [this](const Request&, Response& r) {
      size_t q;
      bool busy, leaving;
      {
        std::lock_guard lk(qmu);
        q = queue.size();
        busy = running != nullptr;
        leaving = draining || stopping;
      }
      if (leaving) r.status = 503;  // a load balancer stops sending requests here
      r.set_content(dump_json(ojson{{"status", leaving ? "shutting_down" : "ok"},
                                    {"model", opt.model_id},
                                    {"busy", busy},
                                    {"queued", q}}),
                    "application/json");
    });
    http.Get("/metrics", [this](const Request&, Response& r) {
      r.set_content(metrics(), "text/plain; version=0.0.4");
    });
    http.set_exception_handler([](const Request&, Response& r, std::exception_ptr ep) {
      std::string msg = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const RequestError& e) {
        send_error(r, e);
        return;
      } catch (const std::exception& e) {
        msg = e.what();
      } catch (...) {}
      send_error(r, server_error(500, msg));
    });
    http.set_error_handler([](const Request& q, Response& r) {
      if (!r.body.empty()) return;
      std::string msg = fmt::format("HTTP {}", r.status);
      if (r.status == 404)
        msg = fmt::format("no route for {} {}", q.method, q.path);
      else if (r.status == 400)
        msg = "malformed HTTP request";
      else if (r.status == 413)
        msg = fmt::format("the request body is too large");
      else if (r.status == 414)
        msg = "the request line is too long";
      send_error(r, RequestError(r.status, msg, "", r.status == 404 ? "not_found" : ""));
    });
    http.set_logger([this](const Request& q, const Response& r) {
      stats.http_request(metric_path(q.path), r.status);
      if (opt.log_requests)
        std::fprintf(stderr, "moeflow serve: %s %s -> %d\n", q.method.c_str(), q.path.c_str(),
                     r.status);
    });
    http.set_payload_max_length(opt.limits.max_body_bytes);
  }

  std::string metrics() const {
    ServerMetrics::Gauges g;
    {
      std::lock_guard lk(qmu);
      g.queue_length = queue.size();
      g.busy = running != nullptr;
    }
    g.n_ctx = n_ctx;
    g.open_connections = http.open_connections();
    std::optional<OffloadStats> st;
    if (offload_stats) st = offload_stats();
    return stats.render(g, st);
  }

  void stop_accepting() {
    {
      std::lock_guard lk(qmu);
      if (accept_stopped) return;
      accept_stopped = true;
    }
    http.stop();  // closes the listening socket: listen() returns
  }

  // New requests are refused (503) and no connection is accepted; what is queued or running
  // may finish for up to shutdown_timeout_s; then shutdown() cancels the rest.
  void drain() {
    {
      std::lock_guard lk(qmu);
      if (stopped) return;
      draining = true;
    }
    stop_accepting();
    {
      std::unique_lock lk(qmu);
      qcv.wait_for(lk, std::chrono::duration<double>(opt.shutdown_timeout_s),
                   [&] { return stopped || (queue.empty() && !running); });
    }
    shutdown();
  }

  // Idempotent; a second caller waits until the first has finished.
  void shutdown() {
    std::call_once(shutdown_once, [this] {
      std::vector<std::shared_ptr<Job>> jobs;
      {
        std::lock_guard lk(qmu);
        stopped = stopping = true;
        jobs.assign(queue.begin(), queue.end());
        if (running) jobs.push_back(running);
      }
      qcv.notify_all();
      for (auto& j : jobs) j->set_cancel(true);
      if (engine_thread.joinable()) engine_thread.join();  // finishes queued jobs with an error
      stop_accepting();
      if (listen_thread.joinable()) listen_thread.join();
      http.shutdown_guard();  // running requests write their last events first
    });
  }
};

Server::Server(Engine& engine, const Tokenizer& tok, ServerOptions opt,
               std::function<std::optional<OffloadStats>()> offload_stats)
    : impl_(std::make_unique<Impl>(engine, tok, std::move(opt), std::move(offload_stats))) {}

Server::~Server() { stop(); }

int Server::bind() {
  if (impl_->port >= 0) return impl_->port;
  signal(SIGPIPE, SIG_IGN);  // a client that closes mid-stream must not kill the process
  const ServerOptions& o = impl_->opt;
  if (o.port < 0 || o.port > 65535) fail("--port must be in 0..65535, got {}", o.port);
  if (o.port == 0) {
    impl_->port = impl_->http.bind_to_any_port(o.host);
    if (impl_->port < 0) fail("cannot bind {}: no free port", o.host);
  } else {
    if (!impl_->http.bind_to_port(o.host, o.port))
      fail("cannot bind {}:{} (in use, or not a local address)", o.host, o.port);
    impl_->port = o.port;
  }
  impl_->http.set_backlog(1024);
  return impl_->port;
}

void Server::listen() {
  bind();
  {
    std::lock_guard lk(impl_->qmu);
    if (impl_->accept_stopped) return;  // stopped (a signal) before listening began
  }
  impl_->http.listen_after_bind();
}

void Server::start() {
  bind();
  impl_->listen_thread = std::thread([this] { impl_->http.listen_after_bind(); });
  for (int i = 0; i < 2000 && !impl_->http.is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void Server::stop() { impl_->shutdown(); }

void Server::stop_gracefully() { impl_->drain(); }

int Server::port() const { return impl_->port; }

const std::string& Server::template_description() const { return impl_->template_line; }

std::string Server::metrics() const { return impl_->metrics(); }

}  // namespace moeflow
