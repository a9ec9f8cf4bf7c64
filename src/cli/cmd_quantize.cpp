// `moeflow quantize -m IN -o OUT --type T`: rewrite a GGUF with its weight matrices in another
// block format (llama-quantize's job, done with moeflow's own encoders and writer). Used to
// turn the trained demo model's F32 export into the shipped file, and by users who want a
// smaller copy of a model. Norms, biases and the router stay F32 as llama.cpp keeps them: the
// router's top-k is the most precision-sensitive decision in an MoE layer (1-D tensors, biases
// and routers are copied as they are).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/command.h"
#include "cli/common_options.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "gguf/tensor_names.h"
#include "model/gen/model_generator.h"
#include "quant/quant.h"

namespace moeflow::cli {
namespace {

struct QuantizeArgs {
  std::string in, out, type, expert_type, embd_type, output_type;
  int threads = 0;
  bool quiet = false;
};

GgmlType parse_type(const std::string& opt, const std::string& name) {
  const auto t = type_from_name(name);
  if (!t) fail("{}: unknown type '{}'", opt, name);
  if (!can_quantize(*t)) fail("{}: moeflow cannot write tensors of type {}", opt, name);
  return *t;
}

// Biases stay too, 2-D ones included (gpt-oss's expert biases), as llama.cpp keeps them.
bool keeps_f32(const GgufTensorInfo& t) {
  const auto ends_with = [&](std::string_view s) {
    return t.name.size() >= s.size() && t.name.compare(t.name.size() - s.size(), s.size(), s) == 0;
  };
  return t.dims.size() < 2 || t.name.find("ffn_gate_inp") != std::string::npos ||
         t.name.find("_norm") != std::string::npos || ends_with(".bias");
}

// Re-encodes `rows` rows of `src` (type `from`) into `dst` (type `to`), rows split over the pool.
void convert_rows(ThreadPool& pool, const uint8_t* src, GgmlType from, uint8_t* dst, GgmlType to,
                  int64_t row_len, int64_t rows) {
  const size_t in_rb = row_bytes(from, row_len), out_rb = row_bytes(to, row_len);
  pool.parallel_for(rows, [&](int64_t b, int64_t e, int) {
    std::vector<float> buf((size_t)row_len);
    for (int64_t r = b; r < e; ++r) {
      dequantize_row(from, src + r * in_rb, buf.data(), row_len);
      quantize_row(to, buf.data(), dst + r * out_rb, row_len);
    }
  });
}

int run_quantize(const QuantizeArgs& a) {
  const GgmlType base = parse_type("--type", a.type);
  const GgmlType expert = a.expert_type.empty() ? base : parse_type("--expert-type", a.expert_type);
  const GgmlType embd = a.embd_type.empty() ? base : parse_type("--embd-type", a.embd_type);
  const GgmlType output = a.output_type.empty() ? base : parse_type("--output-type", a.output_type);
  MOEFLOW_CHECK(a.in != a.out, "quantize: output '{}' would overwrite the input", a.out);

  auto in = GgufFile::open(a.in);
  GgufWriter w(in->alignment());
  for (const GgufKV& kv : in->metadata()) {
    // file_type describes the old mix; a stale value would mislabel the new file.
    if (kv.key == "general.file_type") continue;
    w.set(kv.key, kv.value);
  }
  w.set_string("moeflow.quantized_from", a.in);

  const int n_threads =
      a.threads > 0 ? a.threads : (int)std::max(1u, std::thread::hardware_concurrency());
  auto pool = std::make_shared<ThreadPool>(n_threads);
  int64_t n_converted = 0, n_fallback = 0;
  for (const GgufTensorInfo& t : in->tensors()) {
    GgmlType want = base;
    if (parse_expert_tensor_name(t.name))
      want = expert;
    else if (t.name.rfind("token_embd", 0) == 0)
      want = embd;
    else if (t.name.rfind("output.", 0) == 0)
      want = output;
    if (keeps_f32(t)) want = t.type;  // copied unchanged
    const GgmlType to = keeps_f32(t) ? want : gen::resolve_type(want, t.dims[0]);
    if (to != want) ++n_fallback;
    const uint8_t* src = in->data(t);
    if (to == t.type) {
      w.add_tensor(t.name, t.type, t.dims,
                   [src](uint8_t* dst, uint64_t n) { std::memcpy(dst, src, n); });
      continue;
    }
    if (!can_dequantize(t.type))
      fail("{}: tensor '{}' is {}, which moeflow cannot decode", a.in, t.name, type_name(t.type));
    ++n_converted;
    const GgmlType from = t.type;
    const int64_t row_len = t.dims[0], rows = t.rows();
    w.add_tensor(t.name, to, t.dims, [pool, src, from, to, row_len, rows](uint8_t* dst, uint64_t) {
      convert_rows(*pool, src, from, dst, to, row_len, rows);
    });
  }
  int last_pct = -1;
  w.write(a.out, [&](uint64_t done, uint64_t total) {
    if (a.quiet || total == 0) return;
    const int pct = (int)(100 * done / total);
    if (pct != last_pct) std::fprintf(stderr, "\rquantize: %3d%%", last_pct = pct);
  });
  if (!a.quiet) std::fprintf(stderr, "\n");
  std::fprintf(stderr,
               "quantize: %s -> %s: %lld tensors re-encoded, %lld stored in a fallback type\n",
               a.in.c_str(), a.out.c_str(), (long long)n_converted, (long long)n_fallback);
  return 0;
}

const bool registered_quantize = register_command(
    "quantize", "Rewrite a GGUF with its weights in another block format", [](CLI::App& sub) {
      auto a = std::make_shared<QuantizeArgs>();
      sub.add_option("-m,--model", a->in, "input GGUF")->required();
      sub.add_option("-o,--output", a->out, "output GGUF")->required();
      sub.add_option("--type", a->type, "weight type (F16, Q8_0, Q4_K, Q6_K, ...)")->required();
      sub.add_option("--expert-type", a->expert_type,
                     "type of the routed experts (default: --type)");
      sub.add_option("--embd-type", a->embd_type, "type of token_embd (default: --type)");
      sub.add_option("--output-type", a->output_type,
                     "type of the output matrix (default: --type)");
      add_threads_option(sub, a->threads, "threads (default: all cores)");
      sub.add_flag("-q,--quiet", a->quiet, "no progress");
      return CommandMain([a] { return run_quantize(*a); });
    });

}  // namespace
}  // namespace moeflow::cli
