// Bad models give moeflow::Error naming what is wrong, never a crash.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/model.h"
#include "support/run_binary.h"
#include "support/test_helpers.h"
#include "support/tiny_model.h"

namespace moeflow::test {
namespace {

std::string error_of(const std::string& path) {
  try {
    auto f = GgufFile::open(path);
    Model m(*f);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Rewrites a tiny model with one tensor dropped, renamed or reshaped, or a key changed.
std::string variant(
    const std::string& name,
    const std::function<void(GgufWriter&, const std::string&, const TinyTensor&)>& per_tensor,
    const std::function<void(GgufWriter&)>& extra = nullptr, const std::string& arch = "qwen2moe") {
  TinySpec s;
  s.arch = arch;
  const std::string base = temp_path("base_" + name + ".gguf");
  const TinyWeights W = write_tiny_model(s, base);
  auto f = GgufFile::open(base);
  GgufWriter w;
  for (const auto& kv : f->metadata()) w.set(kv.key, kv.value);
  for (const auto& [n, t] : W) per_tensor(w, n, t);
  if (extra) extra(w);
  const std::string path = temp_path(name + ".gguf");
  w.write(path);
  return path;
}

void copy_f32(GgufWriter& w, const std::string& n, const TinyTensor& t) {
  w.add_tensor(n, GgmlType::F32, t.dims, t.v.data(), t.v.size() * sizeof(float));
}

TEST(ModelErrors, MissingTensorIsNamed) {
  const std::string p =
      variant("missing", [](GgufWriter& w, const std::string& n, const TinyTensor& t) {
        if (n != "blk.1.attn_k.bias") copy_f32(w, n, t);
      });
  EXPECT_NE(error_of(p).find("blk.1.attn_k.bias"), std::string::npos) << error_of(p);
}

TEST(ModelErrors, MissingSharedExpertIsNamed) {
  const std::string p =
      variant("noshexp", [](GgufWriter& w, const std::string& n, const TinyTensor& t) {
        if (n != "blk.0.ffn_down_shexp.weight") copy_f32(w, n, t);
      });
  EXPECT_NE(error_of(p).find("ffn_down_shexp"), std::string::npos) << error_of(p);
}

TEST(ModelErrors, WrongShapeIsNamed) {
  const std::string p =
      variant("shape", [](GgufWriter& w, const std::string& n, const TinyTensor& t) {
        if (n == "blk.0.attn_q.weight") {
          std::vector<float> v(t.v.begin(), t.v.begin() + t.dims[0] * (t.dims[1] - 1));
          w.add_tensor(n, GgmlType::F32, {t.dims[0], t.dims[1] - 1}, v.data(), v.size() * 4);
        } else {
          copy_f32(w, n, t);
        }
      });
  EXPECT_NE(error_of(p).find("blk.0.attn_q.weight"), std::string::npos) << error_of(p);
}

TEST(ModelErrors, UnknownArchitectureIsNamed) {
  const std::string p = variant(
      "arch", copy_f32, [](GgufWriter& w) { w.set_string("general.architecture", "gpt-j-moe"); });
  EXPECT_NE(error_of(p).find("gpt-j-moe"), std::string::npos) << error_of(p);
}

TEST(ModelErrors, MissingHyperParameterIsNamed) {
  TinySpec s;
  s.arch = "olmoe";
  const std::string base = temp_path("base_hp.gguf");
  const TinyWeights W = write_tiny_model(s, base);
  auto f = GgufFile::open(base);
  GgufWriter w;
  for (const auto& kv : f->metadata())
    if (kv.key != "olmoe.attention.layer_norm_rms_epsilon") w.set(kv.key, kv.value);
  for (const auto& [n, t] : W) copy_f32(w, n, t);
  const std::string path = temp_path("hp.gguf");
  w.write(path);
  EXPECT_NE(error_of(path).find("layer_norm_rms_epsilon"), std::string::npos) << error_of(path);
}

TEST(ModelErrors, BadExpertCountIsRejected) {
  const std::string p =
      variant("topk", copy_f32, [](GgufWriter& w) { w.set_u32("qwen2moe.expert_used_count", 99); });
  EXPECT_NE(error_of(p).find("expert_used_count"), std::string::npos) << error_of(p);
}

// The command line: a file of an architecture or block type moeflow does not support is refused
// with the name of what is unsupported and a non-zero exit, for the new architectures too.
TEST(ModelErrors, UnsupportedArchitectureOrTypeFailsTheCommandNamingIt) {
  const std::string base = temp_path("oss_base.gguf");
  ASSERT_EQ(run_moeflow("gen-model --arch gpt-oss --preset tiny -q -o " + base).rc, 0);
  auto f = GgufFile::open(base);
  auto rewrite = [&](const std::string& name, const std::string& arch, const std::string& retype) {
    GgufWriter w;
    for (const auto& kv : f->metadata())
      w.set(kv.key, kv.key == "general.architecture" ? GgufValue::make_string(arch) : kv.value);
    for (const auto& t : f->tensors()) {
      if (t.name == retype) {  // the same bytes would do: the type alone must stop it
        const uint64_t nb = row_bytes(GgmlType::Q8_1, t.dims[0]) * (uint64_t)t.rows();
        std::vector<uint8_t> zeros(nb, 0);
        w.add_tensor(t.name, GgmlType::Q8_1, t.dims, zeros.data(), nb);
      } else {
        w.add_tensor(t.name, t.type, t.dims, f->data(t), t.nbytes);
      }
    }
    const std::string path = temp_path(name);
    w.write(path);
    return path;
  };
  EXPECT_EQ(run_moeflow("run -m " + base + " -p ids:1,2 -n 1").rc, 0);
  const Cmd arch =
      run_moeflow("run -m " + rewrite("oss_arch.gguf", "mamba", "") + " -p ids:1,2 -n 1");
  EXPECT_NE(arch.rc, 0);
  EXPECT_NE(arch.out.find("unsupported architecture 'mamba'"), std::string::npos) << arch.out;
  const std::string bad_type = rewrite("oss_type.gguf", "gpt-oss", "blk.1.ffn_up_exps.weight");
  const Cmd type = run_moeflow("run -m " + bad_type + " -p ids:1,2 -n 1");
  EXPECT_NE(type.rc, 0);
  EXPECT_NE(type.out.find("blk.1.ffn_up_exps.weight"), std::string::npos) << type.out;
  EXPECT_NE(type.out.find("Q8_1"), std::string::npos) << type.out;
}

}  // namespace
}  // namespace moeflow::test
