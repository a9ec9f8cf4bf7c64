#pragma once
// A small deterministic GGUF file holding every metadata value type (nested arrays included)
// and tensors of several types and ranks. Other implementations (gguf-py, llama.cpp) read it
// back in tests/python/test_gguf_interop.py, which knows the same contents independently.
#include <cstdint>
#include <string>

namespace moeflow {

// Byte k of selftest tensor number j (in writing order).
inline uint8_t gguf_selftest_byte(uint64_t j, uint64_t k) {
  return static_cast<uint8_t>((k * 131 + j * 17 + 1) & 0xFF);
}

// Writes the file with alignment 64.
void write_gguf_selftest(const std::string& path);

}  // namespace moeflow
