#pragma once
// Read-only view of a GGUF model (v2 and v3; little-endian), memory-mapped. Validates the
// whole header on open: every string, array, tensor shape, type and byte range is checked
// against the file size, and any problem throws moeflow::Error naming the file and the key or
// tensor at fault. Split models ("name-00001-of-00003.gguf") open as one: pass the first part.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/ggml_type.h"
#include "gguf/gguf_value.h"

namespace moeflow {

struct GgufTensorInfo {
  std::string name;
  GgmlType type;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the contiguous (row) length
  uint64_t offset = 0;        // relative to the data section of its split file
  uint64_t file_offset = 0;   // absolute offset in its split file
  uint64_t nbytes = 0;
  uint32_t split = 0;  // which split file holds the data

  int64_t n_elements() const;
  int64_t rows() const;  // product of dims[1..]
};

struct GgufKV {
  std::string key;
  GgufValue value;
};

class GgufFile {
 public:
  // Opens and validates; throws moeflow::Error ("model.gguf: tensor 'x' ends at byte N,
  // past the end of the file (M bytes)").
  static std::unique_ptr<GgufFile> open(const std::string& path);
  // Parses a GGUF image held in memory (a copy is kept), validated exactly like a file; `name`
  // stands in for the path in messages. Split models must be opened from files.
  static std::unique_ptr<GgufFile> open_bytes(const std::string& name, const void* data,
                                              uint64_t size);
  ~GgufFile();

  const std::string& path() const { return paths_[0]; }
  const std::vector<std::string>& split_paths() const { return paths_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }

  // Metadata (from the first split)
  const std::vector<GgufKV>& metadata() const { return kv_; }
  const GgufValue* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }
  // Typed getters throw moeflow::Error naming the key if missing or of the wrong type.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_float(const std::string& key) const;
  double get_float(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;
  std::vector<float> get_float_array(const std::string& key) const;

  // Tensors (from all splits)
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  const GgufTensorInfo& tensor(const std::string& name) const;  // throws naming the tensor
  // Pointer into the mapping; valid while this object lives.
  const uint8_t* data(const GgufTensorInfo& t) const;
  uint64_t file_size(uint32_t split = 0) const;
  // The whole mapped split file (what a device tier page-locks to copy experts from).
  std::span<const uint8_t> mapping(uint32_t split = 0) const;
  // Absolute offset of the aligned data section of a split file.
  uint64_t data_section_offset(uint32_t split = 0) const;

  // This model with every split part's bytes read into the process's anonymous memory instead
  // of mapped from the page cache: the same metadata and tensors, data() pointing into the copy.
  // Asks for transparent huge pages (2 MiB), which the page cache of a regular file does not
  // give: one TLB entry per 2 MiB instead of per 4 KiB, and a weight stream the hardware
  // prefetchers follow further. Costs a read of the whole file up front, and the memory is the
  // process's own (not shared with other processes, not evicted under pressure): for a model
  // that fits, read from RAM every token (runtime/engine_assembly.cpp decides). Throws naming
  // the file on a read error, or if the file changed on disk since it was opened. The
  // page-cache hints below do nothing on the copy.
  //
  // `transform`, if given, may rewrite each tensor's bytes in the copy before it turns
  // read-only, and returns the type they hold then (the tensor's own to leave it alone; a new
  // type must take the same bytes). It runs once per tensor, on several threads at once for
  // different tensors; its first exception is rethrown.
  using TensorTransform = std::function<GgmlType(const GgufTensorInfo& t, uint8_t* bytes)>;
  std::shared_ptr<const GgufFile> read_into_memory(const TensorTransform& transform = {}) const;
  // True for a read_into_memory copy.
  bool in_anonymous_memory() const;

  // Page-cache hints for the mapping (never change results): prefetch = MADV_WILLNEED,
  // release = MADV_DONTNEED (drops this process's pages of the tensor), advise_random stops
  // kernel read-ahead from pulling neighbouring experts in on every fault.
  void prefetch(const GgufTensorInfo& t) const;
  void release(const GgufTensorInfo& t) const;
  void advise_random() const;
  // Drops the cached pages of bytes [p, p + n) of the mapping, from this process
  // (MADV_DONTNEED) and from the page cache (POSIX_FADV_DONTNEED), once they live elsewhere
  // (copied by a backend), so that they are not counted twice against a memory limit. Pages
  // are read back from the file if touched again. Does nothing for memory outside the mapping.
  // A hint: errors are ignored.
  void drop_mapped(const void* p, uint64_t n) const;

 private:
  GgufFile() = default;
  struct Mapping;
  std::vector<std::string> paths_;
  std::vector<std::unique_ptr<Mapping>> maps_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<GgufKV> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;

  friend class GgufParser;
};

}  // namespace moeflow
