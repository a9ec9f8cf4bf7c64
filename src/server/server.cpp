#include "server/server.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/engine.h"
#include "server/text_generation.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace moeflow {
namespace {

using ojson = nlohmann::ordered_json;

// Text deltas a streaming job may have waiting for its writer before the engine thread waits:
// generation runs at most this far ahead of the socket, so a client that has gone away is
// noticed within a few tokens.
constexpr size_t kMaxPendingDeltas = 8;

struct HttpError {
  int status;
  std::string message;
  std::string type;
  std::string code;
  std::string param;
  HttpError(int s, std::string m, std::string t = "invalid_request_error", std::string c = "",
            std::string p = "")
      : status(s), message(std::move(m)), type(std::move(t)), code(std::move(c)), param(std::move(p)) {}
};

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

ojson error_json(const HttpError& e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? ojson(nullptr) : ojson(e.param)},
            {"code", e.code.empty() ? ojson(nullptr) : ojson(e.code)}}}};
}

HttpError bad_request(std::string msg, std::string param = "", std::string code = "") {
  return {400, std::move(msg), "invalid_request_error", std::move(code), std::move(param)};
}

struct Job {
  std::vector<int32_t> prompt;
  TextGenParams params;
  bool stream = false;
  std::atomic<bool> cancel{false};
  std::mutex mu;
  std::condition_variable cv;
  // Streaming: text not yet written to the client; `second` marks harmony reasoning text.
  std::deque<std::pair<std::string, bool>> deltas;
  bool done = false;
  TextGenResult result;
  std::string error;  // generation failed (or the server stopped) with this message

  void set_cancel() {
    {
      std::lock_guard lk(mu);
      cancel = true;
    }
    cv.notify_all();
  }
  void finish(TextGenResult r, std::string err) {
    {
      std::lock_guard lk(mu);
      result = std::move(r);
      error = std::move(err);
      done = true;
    }
    cv.notify_all();
  }
};

// Request fields -------------------------------------------------------------------------------

std::optional<double> opt_number(const ojson& b, const char* key) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) throw bad_request(fmt::format("'{}' must be a number", key), key);
  return it->get<double>();
}

std::optional<int64_t> opt_int(const ojson& b, const char* key) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number_float() && it->get<double>() == (double)(int64_t)it->get<double>())
    return (int64_t)it->get<double>();
  throw bad_request(fmt::format("'{}' must be an integer", key), key);
}

std::optional<bool> opt_bool(const ojson& b, const char* key) {
  auto it = b.find(key);
  if (it == b.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) throw bad_request(fmt::format("'{}' must be a boolean", key), key);
  return it->get<bool>();
}

// The content of a chat message as text: a string, null, or an array of {"type": "text"} parts.
std::string message_text(const ojson& content, size_t i) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (content.is_array()) {
    std::string s;
    for (const ojson& part : content) {
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
          !part["text"].is_string())
        throw bad_request(fmt::format("messages[{}].content: only text parts are supported", i), "messages");
      s += part["text"].get<std::string>();
    }
    return s;
  }
  throw bad_request(fmt::format("messages[{}].content must be a string or an array of text parts", i), "messages");
}

std::string prom_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\' || c == '"') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
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

  httplib::Server http;
  int port = -1;
  std::thread listen_thread, engine_thread;

  mutable std::mutex qmu;
  std::condition_variable qcv;
  std::deque<std::shared_ptr<Job>> queue;
  std::shared_ptr<Job> running;
  bool stopping = false, stopped = false;

  // Metrics.
  mutable std::mutex mmu;
  std::map<std::pair<std::string, int>, uint64_t> http_requests;
  std::map<std::string, uint64_t> finished;  // by finish_reason ("error" for failures)
  uint64_t prompt_tokens = 0, generated_tokens = 0, rejected = 0;
  double prefill_s = 0, decode_s = 0;
  std::atomic<uint64_t> next_id{1};

  Impl(Engine& e, const Tokenizer& t, ServerOptions o, std::function<std::optional<OffloadStats>()> os)
      : eng(e), tok(t), opt(std::move(o)), offload_stats(std::move(os)),
        tmpl(model_chat_template(t, opt.chat_template)), n_ctx(e.context().n_ctx()) {
    template_line = tmpl.describe();
    if (opt.model_id.empty()) opt.model_id = "moeflow";
    if (opt.max_queue < 0) fail("--max-queue must be >= 0, got {}", opt.max_queue);
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
      std::lock_guard lk(qmu);
      running.reset();
    }
    std::deque<std::shared_ptr<Job>> rest;
    {
      std::lock_guard lk(qmu);
      rest.swap(queue);
    }
    for (auto& j : rest) j->finish({}, "the server is shutting down");
  }

  void run_job(Job& job) {
    TextGenResult res;
    std::string err;
    if (job.cancel) {
      res.finish_reason = "cancelled";
    } else {
      try {
        auto deliver = [&](const std::string& d, bool reasoning) {
          if (!job.stream) return !job.cancel.load();
          std::unique_lock lk(job.mu);
          job.cv.wait(lk, [&] { return job.deltas.size() < kMaxPendingDeltas || job.cancel.load(); });
          if (job.cancel) return false;
          job.deltas.emplace_back(d, reasoning);
          lk.unlock();
          job.cv.notify_all();
          return true;
        };
        res = generate_text(
            eng, tok, job.prompt, job.params,
            [&](const std::string& d) { return deliver(d, false); }, &job.cancel,
            [&](const std::string& d) { deliver(d, true); });
      } catch (const std::exception& e) {
        err = e.what();
      }
    }
    {
      std::lock_guard lk(mmu);
      finished[err.empty() ? res.finish_reason : "error"]++;
      prompt_tokens += err.empty() ? res.n_prompt : 0;
      generated_tokens += res.n_generated;
      prefill_s += res.prefill_s;
      decode_s += res.decode_s;
    }
    job.finish(std::move(res), std::move(err));
  }

  // Request threads ----------------------------------------------------------------------------

  void enqueue(const std::shared_ptr<Job>& job) {
    std::lock_guard lk(qmu);
    if (stopping) throw HttpError{503, "the server is shutting down", "server_error", "shutting_down"};
    if ((int)queue.size() >= opt.max_queue && (running || !queue.empty())) {
      std::lock_guard mk(mmu);
      ++rejected;
      throw HttpError{503, fmt::format("the server is busy ({} requests queued); retry later", queue.size()),
                      "server_error", "queue_full"};
    }
    queue.push_back(job);
    qcv.notify_all();
  }

  static void send_error(httplib::Response& res, const HttpError& e) {
    res.status = e.status;
    res.set_content(dump(error_json(e)), "application/json");
  }

  ojson parse_body(const httplib::Request& req) {
    ojson body;
    try {
      body = ojson::parse(req.body);
    } catch (const std::exception& e) {
      throw bad_request(fmt::format("the request body is not valid JSON: {}", e.what()));
    }
    if (!body.is_object()) throw bad_request("the request body must be a JSON object");
    if (auto it = body.find("model"); it != body.end() && !it->is_null()) {
      if (!it->is_string()) throw bad_request("'model' must be a string", "model");
      const std::string m = it->get<std::string>();
      if (!m.empty() && m != opt.model_id)
        throw HttpError{404, fmt::format("The model '{}' does not exist (this server serves '{}')", m, opt.model_id),
                        "invalid_request_error", "model_not_found", "model"};
    }
    return body;
  }

  // Sampling and length fields, shared by both endpoints.
  void read_params(const ojson& b, Job& job) {
    TextGenParams& p = job.params;
    p.sampling = opt.sampling;
    if (auto n = opt_int(b, "n"); n && *n != 1) throw bad_request("only n = 1 is supported", "n");
    if (auto v = opt_number(b, "temperature")) {
      if (*v < 0 || *v > 100) throw bad_request("'temperature' must be >= 0", "temperature");
      p.sampling.temperature = (float)*v;
    }
    if (auto v = opt_number(b, "top_p")) {
      if (*v <= 0 || *v > 1) throw bad_request("'top_p' must be in (0, 1]", "top_p");
      p.sampling.top_p = (float)*v;
    }
    if (auto v = opt_int(b, "top_k")) p.sampling.top_k = (int)std::max<int64_t>(0, *v);
    if (auto v = opt_number(b, "min_p")) p.sampling.min_p = (float)*v;
    if (auto v = opt_number(b, "repeat_penalty")) p.sampling.repeat_penalty = (float)*v;
    if (auto v = opt_int(b, "seed")) p.sampling.seed = (uint64_t)*v;
    else if (opt.random_seed) p.sampling.seed = std::random_device{}() ^ ((uint64_t)std::random_device{}() << 32);
    if (auto v = opt_bool(b, "ignore_eos")) p.ignore_eos = *v;
    if (auto v = opt_bool(b, "stream")) job.stream = *v;
    if (auto it = b.find("stop"); it != b.end() && !it->is_null()) {
      if (it->is_string()) {
        p.stop.push_back(it->get<std::string>());
      } else if (it->is_array()) {
        for (const ojson& s : *it) {
          if (!s.is_string()) throw bad_request("'stop' must be a string or an array of strings", "stop");
          p.stop.push_back(s.get<std::string>());
        }
      } else {
        throw bad_request("'stop' must be a string or an array of strings", "stop");
      }
    }
    std::optional<int64_t> mt = opt_int(b, "max_tokens");
    if (!mt) mt = opt_int(b, "max_completion_tokens");
    if (mt && *mt < 1) throw bad_request("'max_tokens' must be at least 1", "max_tokens");
    p.max_tokens = mt ? (int)std::min<int64_t>(*mt, INT32_MAX) : opt.default_max_tokens;
  }

  // After the prompt is known: it must leave room in the context; max_tokens is clamped to it.
  void fit_context(Job& job) {
    const int64_t n = (int64_t)job.prompt.size();
    if (n == 0) throw bad_request("the prompt is empty", "prompt");
    if (n >= n_ctx)
      throw bad_request(fmt::format("This model's context is {} tokens; the prompt has {} tokens, "
                                    "which leaves no room to generate", n_ctx, n),
                        "messages", "context_length_exceeded");
    const int64_t room = n_ctx - n;
    job.params.max_tokens = job.params.max_tokens < 0 ? (int)room : (int)std::min<int64_t>(job.params.max_tokens, room);
  }

  void handle(const httplib::Request& req, httplib::Response& res, bool chat) {
    try {
      const ojson body = parse_body(req);
      auto job = std::make_shared<Job>();
      read_params(body, *job);
      if (chat) {
        auto it = body.find("messages");
        if (it == body.end() || it->is_null()) throw bad_request("'messages' is required", "messages");
        if (!it->is_array() || it->empty()) throw bad_request("'messages' must be a non-empty array", "messages");
        ojson msgs = ojson::array();
        for (size_t i = 0; i < it->size(); ++i) {
          const ojson& m = (*it)[i];
          if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
            throw bad_request(fmt::format("messages[{}] must be an object with a string 'role'", i), "messages");
          ojson mm = m;
          mm["content"] = message_text(m.contains("content") ? m["content"] : ojson(nullptr), i);
          msgs.push_back(std::move(mm));
        }
        std::string text;
        try {
          if (tmpl.harmony) {
            // gpt-oss: the answer is the final channel; reasoning_effort is OpenAI's field.
            HarmonyOptions ho = tmpl.harmony_options;
            if (auto it = body.find("reasoning_effort"); it != body.end() && it->is_string())
              ho.reasoning_effort = it->get<std::string>();
            text = render_harmony(msgs, true, ho);
            job->params.harmony = true;
          } else {
            text = tmpl.format(msgs, true);
          }
        } catch (const Error& e) {
          throw bad_request(e.what(), "messages");
        }
        job->prompt = tmpl.tokenize(tok, text);
      } else {
        auto it = body.find("prompt");
        if (it == body.end() || it->is_null()) throw bad_request("'prompt' is required", "prompt");
        const ojson* p = &*it;
        if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];
        if (p->is_string()) {
          job->prompt = tok.encode(p->get<std::string>(), true, true);
        } else if (p->is_array() && !p->empty() && std::all_of(p->begin(), p->end(), [](const ojson& x) { return x.is_number_integer(); })) {
          for (const ojson& x : *p) {
            const int64_t id = x.get<int64_t>();
            if (id < 0 || id >= eng.n_vocab())
              throw bad_request(fmt::format("token id {} is out of range (vocabulary of {})", id, eng.n_vocab()), "prompt");
            job->prompt.push_back((int32_t)id);
          }
        } else {
          throw bad_request("'prompt' must be a string, an array of one string, or an array of token ids", "prompt");
        }
      }
      fit_context(*job);
      const std::string id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", next_id++);
      enqueue(job);
      if (job->stream) stream_response(res, job, id, chat);
      else json_response(res, *job, id, chat);
    } catch (const HttpError& e) {
      send_error(res, e);
    }
  }

  ojson usage(const TextGenResult& r) const {
    return {{"prompt_tokens", r.n_prompt}, {"completion_tokens", r.n_generated},
            {"total_tokens", r.n_prompt + r.n_generated}};
  }

  ojson base(const std::string& id, bool chat, bool chunk) const {
    return {{"id", id},
            {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
            {"created", (int64_t)std::time(nullptr)},
            {"model", opt.model_id}};
  }

  static std::string finish_reason(const TextGenResult& r) {
    return r.finish_reason == "cancelled" ? "stop" : r.finish_reason;
  }

  void json_response(httplib::Response& res, Job& job, const std::string& id, bool chat) {
    {
      std::unique_lock lk(job.mu);
      job.cv.wait(lk, [&] { return job.done; });
    }
    if (!job.error.empty()) {
      throw HttpError{job.error == "the server is shutting down" ? 503 : 500, job.error, "server_error"};
    }
    ojson j = base(id, chat, false);
    ojson choice = {{"index", 0}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", job.result.text}};
      if (!job.result.reasoning.empty())
        choice["message"]["reasoning_content"] = job.result.reasoning;
    }
    else choice["text"] = job.result.text;
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = finish_reason(job.result);
    j["choices"] = ojson::array({choice});
    j["usage"] = usage(job.result);
    res.set_content(dump(j), "application/json");
  }

  void stream_response(httplib::Response& res, const std::shared_ptr<Job>& job, const std::string& id, bool chat) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, job, id, chat](size_t, httplib::DataSink& sink) -> bool {
          auto send = [&](const std::string& payload) {
            const std::string s = "data: " + payload + "\n\n";
            if (sink.write(s.data(), s.size())) return true;
            job->set_cancel();
            return false;
          };
          auto chunk = [&](const std::string* text, const ojson& finish, bool reasoning = false) {
            ojson j = base(id, chat, true);
            ojson c = {{"index", 0}};
            if (chat)
              c["delta"] = text ? ojson{{reasoning ? "reasoning_content" : "content", *text}}
                                : ojson::object();
            else c["text"] = text ? *text : std::string();
            c["logprobs"] = nullptr;
            c["finish_reason"] = finish;
            j["choices"] = ojson::array({c});
            return j;
          };
          if (chat) {
            ojson first = chunk(nullptr, nullptr);
            first["choices"][0]["delta"] = {{"role", "assistant"}, {"content", ""}};
            if (!send(dump(first))) return false;
          }
          for (;;) {
            std::deque<std::pair<std::string, bool>> batch;
            bool done;
            {
              std::unique_lock lk(job->mu);
              job->cv.wait(lk, [&] { return !job->deltas.empty() || job->done; });
              batch.swap(job->deltas);
              done = job->done;
            }
            job->cv.notify_all();  // room for the engine thread again
            for (const auto& [d, reasoning] : batch)
              if (!send(dump(chunk(&d, nullptr, reasoning)))) return false;
            if (done) break;
          }
          if (!job->error.empty()) {
            if (!send(dump(error_json(HttpError{500, job->error, "server_error"})))) return false;
          } else {
            ojson last = chunk(nullptr, finish_reason(job->result));
            last["usage"] = usage(job->result);
            if (!send(dump(last))) return false;
          }
          if (!send("[DONE]")) return false;
          sink.done();
          return true;
        },
        [job](bool success) {
          if (!success) job->set_cancel();  // the client went away: stop generating
        });
  }

  void routes() {
    http.Post("/v1/chat/completions", [this](const httplib::Request& q, httplib::Response& r) { handle(q, r, true); });
    http.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r) { handle(q, r, false); });
    // Aliases without the /v1 prefix, as llama.cpp's server accepts.
    http.Post("/chat/completions", [this](const httplib::Request& q, httplib::Response& r) { handle(q, r, true); });
    http.Post("/completions", [this](const httplib::Request& q, httplib::Response& r) { handle(q, r, false); });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& r) {
      ojson m = {{"id", opt.model_id}, {"object", "model"}, {"created", created}, {"owned_by", "moeflow"},
                 {"meta", {{"n_ctx", n_ctx}, {"n_vocab", eng.n_vocab()}, {"chat_template", template_line}}}};
      r.set_content(dump(ojson{{"object", "list"}, {"data", ojson::array({m})}}), "application/json");
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& r) {
      size_t q;
      bool busy;
      {
        std::lock_guard lk(qmu);
        q = queue.size();
        busy = running != nullptr;
      }
      r.set_content(dump(ojson{{"status", "ok"}, {"model", opt.model_id}, {"busy", busy}, {"queued", q}}),
                    "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& r) {
      r.set_content(metrics(), "text/plain; version=0.0.4");
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& r, std::exception_ptr ep) {
      std::string msg = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const HttpError& e) {
        send_error(r, e);
        return;
      } catch (const std::exception& e) {
        msg = e.what();
      } catch (...) {
      }
      send_error(r, HttpError{500, msg, "server_error"});
    });
    http.set_error_handler([](const httplib::Request& q, httplib::Response& r) {
      if (!r.body.empty()) return;
      if (r.status == 404) send_error(r, HttpError{404, fmt::format("no route for {} {}", q.method, q.path), "invalid_request_error", "not_found"});
      else send_error(r, HttpError{r.status, fmt::format("HTTP {}", r.status), "invalid_request_error"});
    });
    http.set_logger([this](const httplib::Request& q, const httplib::Response& r) {
      static const char* known[] = {"/v1/chat/completions", "/v1/completions", "/chat/completions",
                                    "/completions", "/v1/models", "/health", "/metrics"};
      std::string path = "other";
      for (const char* k : known)
        if (q.path == k) path = k;
      {
        std::lock_guard lk(mmu);
        http_requests[{path, r.status}]++;
      }
      if (opt.log_requests) std::fprintf(stderr, "moeflow serve: %s %s -> %d\n", q.method.c_str(), q.path.c_str(), r.status);
    });
    http.set_payload_max_length(16u << 20);
    http.set_keep_alive_timeout(2);
    http.set_read_timeout(30);
    http.set_write_timeout(30);
    const int threads = opt.http_threads > 0 ? opt.http_threads : opt.max_queue + 4;
    http.new_task_queue = [threads] { return new httplib::ThreadPool((size_t)threads); };
  }

  std::string metrics() const {
    std::string o;
    auto head = [&](const char* name, const char* type, const char* help) {
      o += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    };
    size_t qlen;
    bool busy;
    {
      std::lock_guard lk(qmu);
      qlen = queue.size();
      busy = running != nullptr;
    }
    {
      std::lock_guard lk(mmu);
      head("moeflow_http_requests_total", "counter", "HTTP requests answered, by path and status code.");
      for (const auto& [k, v] : http_requests)
        o += fmt::format("moeflow_http_requests_total{{path=\"{}\",code=\"{}\"}} {}\n", prom_escape(k.first), k.second, v);
      head("moeflow_completions_total", "counter", "Generations finished, by finish reason (cancelled: the client went away).");
      for (const char* r : {"stop", "length", "cancelled", "error"}) {
        auto it = finished.find(r);
        o += fmt::format("moeflow_completions_total{{finish_reason=\"{}\"}} {}\n", r, it == finished.end() ? 0 : it->second);
      }
      head("moeflow_requests_rejected_total", "counter", "Requests refused with 503 because the queue was full.");
      o += fmt::format("moeflow_requests_rejected_total {}\n", rejected);
      head("moeflow_prompt_tokens_total", "counter", "Prompt tokens processed.");
      o += fmt::format("moeflow_prompt_tokens_total {}\n", prompt_tokens);
      head("moeflow_generated_tokens_total", "counter", "Tokens generated.");
      o += fmt::format("moeflow_generated_tokens_total {}\n", generated_tokens);
      head("moeflow_prefill_seconds_total", "counter", "Time spent in prompt processing.");
      o += fmt::format("moeflow_prefill_seconds_total {:.6f}\n", prefill_s);
      head("moeflow_decode_seconds_total", "counter", "Time spent decoding after the first token.");
      o += fmt::format("moeflow_decode_seconds_total {:.6f}\n", decode_s);
    }
    head("moeflow_queue_length", "gauge", "Requests waiting for the engine.");
    o += fmt::format("moeflow_queue_length {}\n", qlen);
    head("moeflow_busy", "gauge", "1 while the engine is generating.");
    o += fmt::format("moeflow_busy {}\n", busy ? 1 : 0);
    head("moeflow_context_size", "gauge", "Context size in tokens.");
    o += fmt::format("moeflow_context_size {}\n", n_ctx);
    std::optional<OffloadStats> st;
    if (offload_stats) st = offload_stats();
    head("moeflow_offload_enabled", "gauge", "1 when experts are offloaded to a cache with a RAM budget.");
    o += fmt::format("moeflow_offload_enabled {}\n", st ? 1 : 0);
    if (!st) return o;
    head("moeflow_offload_budget_bytes", "gauge", "Expert cache budget.");
    o += fmt::format("moeflow_offload_budget_bytes {}\n", st->budget_bytes);
    head("moeflow_offload_slots", "gauge", "Expert cache slots.");
    o += fmt::format("moeflow_offload_slots {}\n", st->n_slots);
    struct Col {
      const char* name;
      const char* help;
      uint64_t LayerOffloadStats::*u;
      double LayerOffloadStats::*d;
    };
    const Col cols[] = {
        {"moeflow_expert_acquires_total", "Expert uses by the MoE block.", &LayerOffloadStats::acquires, nullptr},
        {"moeflow_expert_hits_total", "Experts resident when first requested.", &LayerOffloadStats::hits, nullptr},
        {"moeflow_expert_misses_total", "Experts neither resident nor in flight when first requested.", &LayerOffloadStats::misses, nullptr},
        {"moeflow_expert_late_total", "Experts still in flight (prefetch not done) when first requested.", &LayerOffloadStats::late, nullptr},
        {"moeflow_expert_prefetch_issued_total", "Prefetches issued.", &LayerOffloadStats::prefetch_issued, nullptr},
        {"moeflow_expert_prefetch_used_total", "Prefetched experts later used.", &LayerOffloadStats::prefetch_used, nullptr},
        {"moeflow_expert_prefetch_wasted_total", "Prefetched experts evicted or cancelled unused.", &LayerOffloadStats::prefetch_wasted, nullptr},
        {"moeflow_expert_evictions_total", "Expert evictions.", &LayerOffloadStats::evictions, nullptr},
        {"moeflow_expert_bytes_read_total", "Bytes read from the model file for experts.", &LayerOffloadStats::bytes_read, nullptr},
        {"moeflow_expert_stall_seconds_total", "Time the forward pass waited for experts (critical-path stall).", nullptr, &LayerOffloadStats::stall_s},
    };
    for (const Col& c : cols) {
      head(c.name, "counter", c.help);
      for (size_t l = 0; l < st->layers.size(); ++l) {
        const LayerOffloadStats& ls = st->layers[l];
        if (c.u) o += fmt::format("{}{{layer=\"{}\"}} {}\n", c.name, l, ls.*c.u);
        else o += fmt::format("{}{{layer=\"{}\"}} {:.6f}\n", c.name, l, ls.*c.d);
      }
    }
    return o;
  }

  void shutdown() {
    std::vector<std::shared_ptr<Job>> jobs;
    {
      std::lock_guard lk(qmu);
      if (stopped) return;
      stopped = stopping = true;
      jobs.assign(queue.begin(), queue.end());
      if (running) jobs.push_back(running);
    }
    qcv.notify_all();
    for (auto& j : jobs) j->set_cancel();
    if (engine_thread.joinable()) engine_thread.join();  // finishes queued jobs with an error
    http.stop();
    if (listen_thread.joinable()) listen_thread.join();
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
    if (!impl_->http.bind_to_port(o.host, o.port)) fail("cannot bind {}:{} (in use, or not a local address)", o.host, o.port);
    impl_->port = o.port;
  }
  return impl_->port;
}

void Server::listen() {
  bind();
  impl_->http.listen_after_bind();
}

void Server::start() {
  bind();
  impl_->listen_thread = std::thread([this] { impl_->http.listen_after_bind(); });
  for (int i = 0; i < 2000 && !impl_->http.is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void Server::stop() { impl_->shutdown(); }

int Server::port() const { return impl_->port; }

const std::string& Server::template_description() const { return impl_->template_line; }

std::string Server::metrics() const { return impl_->metrics(); }

}  // namespace moeflow
