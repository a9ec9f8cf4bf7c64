#pragma once
// Model files for the architecture tests' "a bad file names what is wrong" cases: a file written
// by `moeflow gen-model`, a copy of one with metadata keys and tensors filtered, renamed or added
// (tensors copied byte for byte), and the message its load fails with. One definition for every
// test file (the sanitizer builds compile test files in unity batches, where two files' helpers
// of the same name would collide).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "support/run_binary.h"
#include "support/test_helpers.h"

namespace moeflow::test {

// `moeflow gen-model --arch ARCH --preset PRESET --type TYPE --seed SEED` into the test process's
// temp folder; `tag` keeps apart files of tests that make the same model with other settings.
inline std::string gen_model_file(const std::string& arch, const std::string& preset,
                                  const std::string& type = "F32", int seed = 5,
                                  const std::string& tag = "") {
  const std::string path = temp_path(tag + arch + "_" + preset + "_" + type + ".gguf");
  const Cmd c = run_moeflow("gen-model --arch " + arch + " --preset " + preset + " --type " + type +
                            " --seed " + std::to_string(seed) + " -q -o " + path);
  EXPECT_EQ(c.rc, 0) << c.out;
  return path;
}

using KeepName = std::function<bool(const std::string&)>;

// A copy of `src` named `name` with the metadata keys and tensors `keep_key` / `keep_tensor`
// accept, then what `extra` adds; `rename` maps the kept tensors' names.
inline std::string rewrite_model_file(
    const std::string& src, const std::string& name, const KeepName& keep_key,
    const KeepName& keep_tensor, const std::function<void(GgufWriter&)>& extra = nullptr,
    const std::function<std::string(const std::string&)>& rename = nullptr) {
  auto f = GgufFile::open(src);
  GgufWriter w;
  for (const auto& kv : f->metadata())
    if (keep_key(kv.key)) w.set(kv.key, kv.value);
  if (extra) extra(w);
  for (const auto& t : f->tensors())
    if (keep_tensor(t.name))
      w.add_tensor(rename ? rename(t.name) : t.name, t.type, t.dims, f->data(t), t.nbytes);
  const std::string path = temp_path(name + ".gguf");
  w.write(path);
  return path;
}

// The message loading `path` as a model fails with ("" when it loads).
inline std::string model_load_error(const std::string& path) {
  try {
    auto f = GgufFile::open(path);
    Model m(*f);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline bool keep_all(const std::string&) { return true; }
// Every name but `name`.
inline KeepName without(const std::string& name) {
  return [name](const std::string& s) { return s != name; };
}

// The KV cache bytes a model file needs for n_ctx positions, read from its tensors alone (not from
// the loader's layer specs): a layer with attention has attn_k.weight, whose rows are its kv heads
// x head size, and as many value floats (attn_v.weight's rows, or the keys' own width when the
// layer takes its values from the key projection); a recurrent layer has no attn_k and no rows.
inline uint64_t kv_bytes_from_tensors(const std::string& path, int64_t n_ctx) {
  auto f = GgufFile::open(path);
  uint64_t floats = 0;
  for (int il = 0;; ++il) {
    const std::string blk = "blk." + std::to_string(il) + ".";
    if (!f->find_tensor(blk + "attn_norm.weight")) break;
    const GgufTensorInfo* k = f->find_tensor(blk + "attn_k.weight");
    if (!k) continue;
    const GgufTensorInfo* v = f->find_tensor(blk + "attn_v.weight");
    floats += (uint64_t)(k->rows() + (v ? v->rows() : k->rows())) * (uint64_t)n_ctx;
  }
  return floats * sizeof(float);
}

// The model at `path` gives the same logits (1e-5) whether `toks` are prefilled as one batch, one
// token at a time, or in chunks of 4 (cache rows written at an offset), and after a rewind to
// position 5 and another token as a fresh run of those 6 tokens (stale rows must not leak in).
// Returns the one-batch run's logits, toks.size() x n_vocab, for checks of their own.
inline std::vector<float> expect_batched_chunked_and_rewound_runs_agree(
    const std::string& path, const std::vector<int32_t>& toks) {
  EngineOptions opt;
  opt.n_threads = 2;
  opt.n_ctx = 32;
  Engine a(path, opt), b(path, opt);
  opt.batch = 4;
  Engine c(path, opt);
  std::vector<float> la, lb, lc;
  a.prefill(toks, true, &la);
  b.prefill_sequential(toks, true, &lb);
  c.prefill(toks, true, &lc);
  const size_t V = a.n_vocab();
  EXPECT_EQ(la.size(), toks.size() * V);
  if (la.size() != toks.size() * V) return la;
  for (size_t t = 0; t < toks.size(); ++t) {
    EXPECT_LT(rel_max_diff(la.data() + t * V, lb.data() + t * V, V), 1e-5) << "pos " << t;
    EXPECT_LT(rel_max_diff(la.data() + t * V, lc.data() + t * V, V), 1e-5) << "pos " << t;
  }
  a.context().truncate(5);
  auto alt = a.decode(33);
  std::vector<float> got(alt.begin(), alt.end()), ref;
  std::vector<int32_t> alt_toks(toks.begin(), toks.begin() + 5);
  alt_toks.push_back(33);
  Engine d(path, opt);
  d.prefill(alt_toks, false, &ref);
  EXPECT_LT(rel_max_diff(got.data(), ref.data(), V), 1e-5);
  return la;
}

}  // namespace moeflow::test
