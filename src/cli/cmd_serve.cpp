// `moeflow serve`: the OpenAI-compatible HTTP server (src/server/) over one model, with the
// same engine, sampling and offloading options as `moeflow run`. SIGINT/SIGTERM stop it cleanly.
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "cli/command.h"
#include "cli/common_options.h"
#include "cli/offload_flags.h"
#include "core/error.h"
#include "gguf/gguf_file.h"
#include "runtime/engine.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

namespace moeflow::cli {
namespace {

struct ServeArgs {
  std::string model, host = "127.0.0.1", alias, template_file;
  int port = 8080;
  int threads = 0;
  int64_t ctx = 0;
  int batch = 256;
  int n_predict = -1;
  int max_queue = 8;
  int http_threads = 0;
  double header_timeout = 10, idle_timeout = 5, shutdown_timeout = 5;
  int max_connections = 512;
  bool no_prefix_cache = false;
  bool verbose = false;
  CLI::Option* seed_opt = nullptr;
  SamplerParams sp;
  OffloadOptions offload;
  SnapshotFlags snapshots;
};

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("--chat-template-file: cannot open '{}'", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Every connection is a file descriptor: the soft limit (often 1024) goes up to what
// --max-connections needs, within the hard limit.
void raise_open_files_limit(rlim_t want) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want) return;
  rl.rlim_cur = std::min(want, rl.rlim_max);
  setrlimit(RLIMIT_NOFILE, &rl);
}

int run_serve(ServeArgs& a) {
  // SIGINT/SIGTERM are taken by a waiting thread (blocked everywhere else, so every thread
  // started below inherits the mask) which stops the server.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  // Request bodies (up to 8 MiB) are allocated on one thread and freed on another. With glibc's
  // sliding mmap threshold they soon come from the arenas' heaps, where freed memory stays
  // resident; a fixed threshold keeps every allocation of 1 MiB or more an mmap that free()
  // returns to the system at once.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);

  if (a.port < 0 || a.port > 65535) usage_fail("--port must be in 0..65535, got {}", a.port);
  if (a.max_queue < 0) usage_fail("--max-queue must be >= 0, got {}", a.max_queue);
  if (a.http_threads < 0) usage_fail("--http-threads must be >= 0, got {}", a.http_threads);
  if (!(a.header_timeout > 0))
    usage_fail("--header-timeout must be > 0 seconds, got {}", a.header_timeout);
  if (!(a.idle_timeout > 0))
    usage_fail("--idle-timeout must be > 0 seconds, got {}", a.idle_timeout);
  if (!(a.shutdown_timeout >= 0 && a.shutdown_timeout <= 86400))
    usage_fail("--shutdown-timeout must be in [0, 86400] seconds, got {}", a.shutdown_timeout);
  if (a.max_connections < 16)
    usage_fail("--max-connections must be >= 16, got {}", a.max_connections);
  raise_open_files_limit((rlim_t)a.max_connections + 64);

  EngineOptions opt;
  opt.n_threads = a.threads;
  opt.n_ctx = a.ctx;
  opt.batch = a.batch;
  opt.state_snapshots = a.no_prefix_cache ? 0 : a.snapshots.count;
  opt.snapshot_interval = a.snapshots.interval;
  LoadedEngine loaded = load_engine(a.model, opt, a.offload);
  Engine& eng = *loaded.engine;
  const OffloadSession& offload = loaded.offload;
  std::unique_ptr<Tokenizer> tok = require_tokenizer(eng.file(), "serve");

  ServerOptions so;
  so.host = a.host;
  so.port = a.port;
  so.model_id = a.alias.empty() ? std::filesystem::path(a.model).filename().string() : a.alias;
  so.max_queue = a.max_queue;
  so.http_threads = a.http_threads;
  so.sampling = a.sp;
  so.random_seed = a.seed_opt->count() == 0;
  so.default_max_tokens = a.n_predict;
  so.log_requests = a.verbose;
  so.prefix_cache = !a.no_prefix_cache;
  so.header_timeout_s = a.header_timeout;
  so.idle_timeout_s = a.idle_timeout;
  so.max_connections = (size_t)a.max_connections;
  so.shutdown_timeout_s = a.shutdown_timeout;
  if (!a.template_file.empty()) so.chat_template = read_text_file(a.template_file);
  std::function<std::optional<OffloadStats>()> stats;
  if (offload.provider) {
    auto provider = offload.provider;
    stats = [provider]() -> std::optional<OffloadStats> { return provider->stats(); };
  }
  Server server(eng, *tok, so, stats);
  const int port = server.bind();
  std::fprintf(stderr, "moeflow serve: %s\n", server.template_description().c_str());
  std::fprintf(stderr, "moeflow serve: model '%s', context %lld, %d threads, offloading %s\n",
               so.model_id.c_str(), (long long)eng.context().n_ctx(), eng.pool().size(),
               offload.provider ? "on" : "off");
  std::fprintf(stderr, "moeflow serve: memory: %s\n", loaded.plan.fit.reason.c_str());
  std::fprintf(stderr, "moeflow serve: listening on http://%s:%d (Ctrl-C to stop)\n",
               a.host.c_str(), port);
  // The first signal stops gracefully (running requests get --shutdown-timeout to finish); a
  // second one cuts that short.
  std::atomic<bool> exiting{false}, signalled{false};
  const double grace = a.shutdown_timeout;
  std::thread waiter([&server, &exiting, &signalled, sigs, grace] {
    int sig = 0;
    sigwait(&sigs, &sig);
    if (exiting) return;  // the main thread's wake-up on exit
    signalled = true;
    std::fprintf(stderr,
                 "moeflow serve: signal %d, stopping (running requests may finish for %g s; "
                 "again to stop now)\n",
                 sig, grace);
    std::atomic<bool> drained{false};
    std::thread second([&server, &drained, sigs] {
      int s2 = 0;
      sigwait(&sigs, &s2);
      if (drained) return;
      std::fprintf(stderr, "moeflow serve: signal %d, stopping now\n", s2);
      server.stop();
    });
    server.stop_gracefully();
    drained = true;
    pthread_kill(second.native_handle(), SIGTERM);
    second.join();
  });
  server.listen();  // returns once accepting stops
  if (!signalled) {
    exiting = true;
    pthread_kill(waiter.native_handle(), SIGTERM);  // wakes the waiter: no signal came
  }
  waiter.join();
  server.stop();
  return 0;
}

const bool registered_serve =
    register_command("serve", "OpenAI-compatible HTTP server", [](CLI::App& app) {
      auto a = std::make_shared<ServeArgs>();
      app.add_option("-m,--model", a->model, "GGUF model")->required();
      app.add_option("--host", a->host, "address to listen on (0.0.0.0: all interfaces)");
      app.add_option("--port", a->port, "port (0: any free port, printed on stderr)");
      app.add_option("--alias", a->alias,
                     "model name reported by /v1/models (default: the file name)");
      add_threads_option(app, a->threads, "compute threads (0 = all cores)");
      app.add_option("-c,--ctx-size", a->ctx, "context size (0 = min(4096, trained))");
      app.add_option("-b,--batch-size", a->batch, "prefill chunk size");
      app.add_option("-n,--n-predict", a->n_predict, "default max_tokens (-1 = up to the context)");
      app.add_option("--max-queue", a->max_queue,
                     "requests waiting behind the running one before 503");
      app.add_option("--http-threads", a->http_threads,
                     "HTTP workers for generation requests (0 = max-queue + 4); /health, /metrics "
                     "and /v1/models have 2 more");
      app.add_option("--chat-template-file", a->template_file,
                     "Jinja chat template overriding the model's");
      app.add_flag(
          "--no-prefix-cache", a->no_prefix_cache,
          "prefill every prompt from the start (no reuse of the previous request's KV cache)");
      add_snapshot_options(app, a->snapshots);
      app.add_option("--header-timeout", a->header_timeout,
                     "seconds a request may take to arrive whole, from its first byte (else 408)");
      app.add_option("--idle-timeout", a->idle_timeout,
                     "seconds an idle keep-alive connection stays open");
      app.add_option("--shutdown-timeout", a->shutdown_timeout,
                     "seconds running requests may go on after SIGTERM/SIGINT before they are "
                     "cut (streams end with an error event)");
      app.add_option(
          "--max-connections", a->max_connections,
          "open connections; beyond it the one waiting longest for its request is dropped");
      a->seed_opt = app.add_option("--seed", a->sp.seed,
                                   "seed for requests that give none (default: a random one each)");
      add_sampling_options(app, a->sp, "default ");
      app.add_flag("-v,--verbose", a->verbose, "log every request on stderr");
      add_offload_options(app, a->offload);
      return CommandMain([a] { return run_serve(*a); });
    });

}  // namespace
}  // namespace moeflow::cli
