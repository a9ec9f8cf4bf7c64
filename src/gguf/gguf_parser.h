#pragma once
// Internal to the gguf module: parses one mapped GGUF file (one split part) after checking
// every length, count, shape and byte range against the mapping size.
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"

namespace moeflow {

// A read-only mapping of one file. `data_start` is where that file's aligned data section begins.
struct GgufFile::Mapping {
  std::string path;
  const uint8_t* base = nullptr;
  uint64_t size = 0;
  uint64_t data_start = 0;
  uint64_t alignment = 32;
  std::vector<uint8_t> owned;  // in-memory images only
  // The file's bytes read into anonymous memory (GgufFile::read_into_memory), not its mapping.
  bool anonymous = false;

  explicit Mapping(const std::string& p);  // opens and maps; throws naming the file
  Mapping(const std::string& name, const void* data, uint64_t n);  // owned heap copy
  struct ReadTag {};
  // Reads the n bytes of file p into anonymous memory, writable until protect(); throws naming
  // the file and the byte where a read failed, or if the file is no longer n bytes long.
  Mapping(const std::string& p, uint64_t n, ReadTag);
  // Makes an anonymous copy read-only, as a mapping is: a stray write faults instead of
  // changing a weight.
  void protect() const;
  // Page-cache hints apply to file mappings only: on anonymous or heap memory MADV_DONTNEED
  // would discard the bytes themselves.
  bool file_backed() const { return owned.empty() && !anonymous; }
  // madvise over bytes [off, off + n) (page-aligned down); nothing unless file_backed().
  void advise(uint64_t off, uint64_t n, int advice) const;
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
};

struct GgufPart {
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_start = 0;
  std::vector<GgufKV> kv;
  std::vector<GgufTensorInfo> tensors;  // file_offset already absolute, split set
};

class GgufParser {
 public:
  // Parses the mapped bytes of `path`; `split` is stored in each tensor's info.
  static GgufPart parse(const std::string& path, const uint8_t* data, uint64_t size,
                        uint32_t split);
  // Builds the complete GgufFile (all split parts).
  static std::unique_ptr<GgufFile> open(const std::string& path);
  static std::unique_ptr<GgufFile> open(std::unique_ptr<GgufFile::Mapping> first);
};

}  // namespace moeflow
