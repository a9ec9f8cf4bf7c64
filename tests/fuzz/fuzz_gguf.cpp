// fuzz-link: moeflow_gguf moeflow_tokenizer
// The GGUF reader on arbitrary bytes: GgufFile::open_bytes (the same parser and validation as
// a mapped file, on an exact-size heap copy so ASan sees any read past the end), then
// everything a model load does with the header before touching weights: every typed metadata
// getter, every tensor's byte range, the expert index (own and "low" copies) and the tokenizer
// built from tokenizer.ggml.* with a short encode/decode.
//
// Properties (a violation aborts, libFuzzer saves the input):
//   * malformed input throws moeflow::Error and nothing else (any other exception escapes and
//     aborts), never crashes, hangs or leaks;
//   * an accepted file's tensors and expert slices all lie inside the file;
//   * the heap the input makes moeflow allocate is linear in its size (kHeapPerByte per input
//     byte plus kHeapSlack): counts and lengths in the header are bounded by what the file holds.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/error.h"
#include "fuzz_util.h"
#include "gguf/expert_index.h"
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

using namespace moeflow;

namespace {

// One metadata value costs at most sizeof(GgufValue) (~104 bytes) per encoded byte (a UINT8
// array element); the tokenizer keeps a few more copies of its strings.
constexpr int64_t kHeapPerByte = 256;
constexpr int64_t kHeapSlack = 8 << 20;

void exercise_metadata(const GgufFile& f) {
  for (const GgufKV& kv : f.metadata()) {
    // Each getter either returns or throws Error naming the key; which one depends on the type.
    try {
      (void)f.get_string(kv.key);
    } catch (const Error&) {}
    try {
      (void)f.get_int(kv.key);
    } catch (const Error&) {}
    try {
      (void)f.get_float(kv.key);
    } catch (const Error&) {}
    try {
      (void)f.get_bool(kv.key, false);
    } catch (const Error&) {}
    try {
      (void)f.get_string_array(kv.key);
    } catch (const Error&) {}
    try {
      (void)f.get_int_array(kv.key);
    } catch (const Error&) {}
    try {
      (void)f.get_float_array(kv.key);
    } catch (const Error&) {}
  }
}

void exercise_tensors(const GgufFile& f) {
  uint64_t sum = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    FUZZ_CHECK(t.nbytes > 0, t.name);
    FUZZ_CHECK(
        t.file_offset <= f.file_size(t.split) && t.nbytes <= f.file_size(t.split) - t.file_offset,
        t.name + " outside the file");
    const uint8_t* p = f.data(t);
    sum += p[0] + p[t.nbytes - 1];  // ASan checks both ends are inside the image
    FUZZ_CHECK(f.find_tensor(t.name) == &t, t.name);
  }
  (void)sum;
}

void exercise_expert_index(const GgufFile& f, const char* suffix) {
  try {
    const ExpertIndex idx = build_expert_index(f, suffix);
    FUZZ_CHECK(idx.layers.size() == static_cast<size_t>(idx.n_layers), "layer count");
    for (const ExpertLayerIndex& l : idx.layers) {
      FUZZ_CHECK(l.slices.size() == static_cast<size_t>(l.n_expert), "slice count");
      for (const auto& e : l.slices)
        for (const ExpertSlice& s : e) {
          if (s.nbytes == 0) continue;  // the fused layer's unused Up slot
          FUZZ_CHECK(s.file_offset <= f.file_size(s.split) &&
                         s.nbytes <= f.file_size(s.split) - s.file_offset,
                     "expert slice outside the file");
        }
    }
    if (!idx.layers.empty() && idx.layers.back().n_expert > 0)
      (void)idx.expert_bytes(idx.n_layers - 1, 0);
  } catch (const Error&) {}
}

void exercise_tokenizer(const GgufFile& f) {
  if (!f.has("tokenizer.ggml.model")) return;
  try {
    auto tok = Tokenizer::from_gguf(f);
    const auto ids = tok->encode("Hello world, 123 <s> \xE2\x96\x81x \xFF", true, true);
    for (int32_t id : ids)
      FUZZ_CHECK(id >= 0 && id < tok->n_vocab(), "encode gave an id outside the vocabulary");
    (void)tok->decode(ids, true);
    const int32_t n = std::min<int32_t>(tok->n_vocab(), 512);
    StreamDecoder sd(*tok, true);
    for (int32_t id = 0; id < n; ++id) {
      (void)tok->token_to_piece(id, id & 1);
      (void)sd.push(id);
    }
    (void)sd.flush();
  } catch (const Error&) {}
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::HeapMeter::install();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::HeapMeter::start();
  {
    std::unique_ptr<GgufFile> f;
    try {
      f = GgufFile::open_bytes("fuzz.gguf", data, size);
    } catch (const Error& e) {
      FUZZ_CHECK(std::strstr(e.what(), "fuzz.gguf") != nullptr,
                 std::string("error does not name the file: ") + e.what());
    }
    if (f) {
      exercise_metadata(*f);
      exercise_tensors(*f);
      exercise_expert_index(*f, "weight");
      exercise_expert_index(*f, "low");
      exercise_tokenizer(*f);
    }
  }
  const int64_t peak = fuzz::HeapMeter::stop();
  const int64_t bound = kHeapPerByte * static_cast<int64_t>(size) + kHeapSlack;
  FUZZ_CHECK(peak <= bound, std::to_string(size) + " input bytes made moeflow allocate " +
                                std::to_string(peak) + " bytes at once (bound " +
                                std::to_string(bound) + ")");
  return 0;
}
