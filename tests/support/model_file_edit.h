#pragma once
// Model files for the architecture tests' "a bad file names what is wrong" cases: a file written
// by `moeflow gen-model`, a copy of one with metadata keys and tensors filtered, renamed or added
// (tensors copied byte for byte), and the message its load fails with. One definition for every
// test file (the sanitizer builds compile test files in unity batches, where two files' helpers
// of the same name would collide).
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/model.h"
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

}  // namespace moeflow::test
