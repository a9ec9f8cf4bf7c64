#pragma once
// Helpers shared by the gguf tests: a per-test temporary directory and a little-endian byte
// builder for hand-made GGUF files (written independently of GgufWriter).
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace moeflow::test {

// GGUF tensor type ids the byte-built files use (the GGUF spec's ggml_type numbers).
constexpr uint32_t kF32 = 0, kQ8_0 = 8;

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info ? std::string(info->test_suite_name()) + "_" + info->name() : "t";
    for (char& c : name)
      if (c == '/') c = '_';
    path_ = std::filesystem::temp_directory_path() /
            ("moeflow_gguf_" + std::to_string(::getpid()) + "_" + name);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream o(path, std::ios::binary | std::ios::trunc);
  o.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream i(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(i)), std::istreambuf_iterator<char>());
}

struct Bytes {
  std::string b;
  template <typename T>
  Bytes& put(T v) {
    char tmp[sizeof(T)];
    std::memcpy(tmp, &v, sizeof(T));
    b.append(tmp, sizeof(T));
    return *this;
  }
  Bytes& u8(uint8_t v) { return put(v); }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& str(const std::string& s) {
    u64(s.size());
    b += s;
    return *this;
  }
  Bytes& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b += "GGUF";
    return u32(version).u64(n_tensors).u64(n_kv);
  }
  // key of type UINT32 (4)
  Bytes& kv_u32(const std::string& k, uint32_t v) { return str(k).u32(4).u32(v); }
  Bytes& kv_str(const std::string& k, const std::string& v) { return str(k).u32(8).str(v); }
  Bytes& tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
                uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }
  Bytes& pad(uint64_t a) {
    while (b.size() % a) b.push_back('\0');
    return *this;
  }
  Bytes& fill(uint64_t n, uint8_t v) {
    b.append(n, static_cast<char>(v));
    return *this;
  }
};

}  // namespace moeflow::test
