// fuzz-sources: src/server/request_parse.cpp src/server/response_format.cpp
// fuzz-link: moeflow_grammar moeflow_sampling moeflow_core
// libFuzzer target: the server's request parsing (src/server/request_parse.h), the JSON body of
// POST /v1/chat/completions and /v1/completions turned into generation parameters. Any input
// must end in parameters that hold the documented invariants, or in a RequestError with a 4xx
// status and a message; anything else (another exception, a crash, a sanitizer report, an
// allocation the limits should have prevented) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/request_parse.h"

namespace {

using moeflow::Endpoint;
using moeflow::GenerationRequest;

const moeflow::RequestContext& context() {
  static const moeflow::RequestContext ctx = [] {
    moeflow::RequestContext c;
    c.model_id = "fuzz";
    c.n_vocab = 512;
    c.default_max_tokens = -1;
    return c;
  }();
  return ctx;
}

void check(bool ok) {
  if (!ok) std::abort();
}

void check_request(const GenerationRequest& r, Endpoint ep) {
  const moeflow::RequestContext& ctx = context();
  const moeflow::RequestLimits& lim = ctx.limits;
  check(r.endpoint == ep);
  check(r.n >= 1 && r.n <= lim.max_n);
  check(r.gen.max_tokens == ctx.default_max_tokens || r.gen.max_tokens >= 1);
  check(!moeflow::check_sampler_params(r.gen.sampling));
  for (const auto& [id, bias] : r.gen.sampling.logit_bias) check(id >= 0 && id < ctx.n_vocab);
  check(r.gen.stop.size() <= lim.max_stop);
  for (const auto& s : r.gen.stop) check(s.size() <= lim.max_stop_bytes);
  check(!r.gen.logprobs || (r.gen.top_logprobs >= 0 && r.gen.top_logprobs <= lim.max_top_logprobs));
  check(!r.include_usage || r.stream);
  if (ep == Endpoint::Chat) {
    check(r.messages.is_array() && !r.messages.empty() && r.messages.size() <= lim.max_messages);
    for (const auto& m : r.messages)
      check(m.is_object() && m["role"].is_string() && m["content"].is_string());
    check(r.tools.is_null() || r.tools.is_array());
  } else {
    check(r.prompt_is_text || !r.prompt_ids.empty());
    for (int32_t id : r.prompt_ids) check(id >= 0 && id < ctx.n_vocab);
    check(!(r.echo && r.gen.logprobs));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (Endpoint ep : {Endpoint::Chat, Endpoint::Completion}) {
    try {
      check_request(moeflow::parse_generation_request(body, ep, context()), ep);
    } catch (const moeflow::RequestError& e) {
      check(e.status >= 400 && e.status < 500 && !e.message.empty());
    }
  }
  return 0;
}
