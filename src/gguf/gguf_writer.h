#pragma once
// Writes GGUF v3 files. Tensor data is produced on demand by a callback at write time, one
// tensor at a time, so files much larger than RAM (a full Mixtral-8x7B shape) can be written
// with a small buffer.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/ggml_type.h"
#include "gguf/gguf_value.h"

namespace moeflow {

class GgufWriter {
 public:
  using FillFn = std::function<void(uint8_t* dst, uint64_t nbytes)>;
  using ProgressFn = std::function<void(uint64_t bytes_done, uint64_t bytes_total)>;

  explicit GgufWriter(uint64_t alignment = 32) : alignment_(alignment) {}

  // Replaces an existing key of the same name.
  void set(const std::string& key, GgufValue value);
  void set_string(const std::string& key, const std::string& v) {
    set(key, GgufValue::make_string(v));
  }
  void set_u32(const std::string& key, uint32_t v) { set(key, GgufValue::make_u32(v)); }
  void set_f32(const std::string& key, float v) { set(key, GgufValue::make_f32(v)); }
  void set_bool(const std::string& key, bool v) { set(key, GgufValue::make_bool(v)); }

  // dims in ggml order (dims[0] = row length). nbytes is derived from type and dims.
  void add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> dims, FillFn fill);
  // Convenience: copies `data` (must be exactly the tensor's byte size).
  void add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> dims,
                  const void* data, uint64_t nbytes);

  // Writes to path (via a temporary file renamed at the end, so a failed write never leaves a
  // half-written model under the final name). Throws moeflow::Error on I/O failure.
  void write(const std::string& path, const ProgressFn& progress = nullptr) const;

 private:
  struct PendingTensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> dims;
    uint64_t nbytes;
    FillFn fill;
  };
  uint64_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace moeflow
