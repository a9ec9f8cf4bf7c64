// Damaged copies of a valid model, parsed in-process so sanitizers watch every access:
// truncations at every header byte and sampled data bytes, and seeded random bit flips over
// the header. Each must either load (and then be safe to use) or throw moeflow::Error naming
// the file; any other exception fails the test, a crash or hang fails the run.
#include <random>

#include "core/error.h"
#include "gguf/expert_index.h"
#include "gguf/gguf_file.h"
#include "gguf_test_util.h"
#include "moe_fixture.h"

namespace moeflow {
namespace {

using test::TempDir;

// Returns true when the image loaded; on success touches every tensor byte range. In-memory
// images are exact-size heap copies, so ASan flags any read past their end.
bool load_or_error(const std::string& path, const std::string* image = nullptr) {
  try {
    auto f =
        image ? GgufFile::open_bytes(path, image->data(), image->size()) : GgufFile::open(path);
    const ExpertIndex idx = build_expert_index(*f);
    // Every tensor the parser accepted lies inside its split's mapping, at the offset the
    // header gives; its first and last bytes are read (under ASan a wrong bound is a report).
    for (const auto& t : f->tensors()) {
      const std::span<const uint8_t> map = f->mapping(t.split);
      const uint8_t* p = f->data(t);
      EXPECT_GT(t.nbytes, 0u) << t.name;
      if (t.nbytes == 0) continue;
      EXPECT_EQ(p, map.data() + t.file_offset) << t.name;
      EXPECT_LE(t.file_offset + t.nbytes, map.size()) << t.name;
      volatile uint8_t first = p[0], last = p[t.nbytes - 1];
      (void)first;
      (void)last;
    }
    for (const auto& l : idx.layers)
      for (const auto& e : l.slices)
        for (const auto& s : e) EXPECT_LE(s.file_offset + s.nbytes, f->file_size(s.split));
    return true;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    return false;
  }
}

struct Fixture {
  TempDir dir;
  std::string good;
  std::string bytes;
  uint64_t header_end = 0;  // where the data section begins
  uint64_t data_end = 0;    // end of the last tensor's bytes
  Fixture() {
    good = dir.file("good.gguf");
    test::write_moe_fixture(good);
    bytes = test::read_bytes(good);
    auto f = GgufFile::open(good);
    header_end = f->data_section_offset();
    for (const auto& t : f->tensors()) data_end = std::max(data_end, t.file_offset + t.nbytes);
  }
};

TEST(GgufFuzz, TruncationAnywhereIsRefused) {
  Fixture fx;
  const std::string path = fx.dir.file("cut.gguf");
  std::vector<uint64_t> cuts;
  for (uint64_t n = 0; n <= fx.header_end; ++n) cuts.push_back(n);
  for (uint64_t n = fx.header_end; n < fx.bytes.size(); n += 97) cuts.push_back(n);
  cuts.push_back(fx.data_end - 1);
  for (uint64_t n : cuts) {
    const std::string cut = fx.bytes.substr(0, n);
    // Only cutting into the final padding leaves every tensor intact.
    EXPECT_EQ(load_or_error(path, &cut), n >= fx.data_end) << "cut at " << n;
    if (n % 61 == 0) {  // and through the file + mmap path now and then
      test::write_bytes(path, cut);
      EXPECT_EQ(load_or_error(path), n >= fx.data_end) << "file cut at " << n;
    }
  }
}

TEST(GgufFuzz, RandomBitFlipsInHeader) {
  Fixture fx;
  const std::string path = fx.dir.file("flip.gguf");
  std::mt19937_64 rng(20261122);
  int loaded = 0, refused = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::string b = fx.bytes;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) {
      const uint64_t pos = rng() % fx.header_end;
      b[pos] = static_cast<char>(b[pos] ^ (1 << (rng() % 8)));
    }
    (load_or_error(path, &b) ? loaded : refused)++;
  }
  // Both outcomes occur: flips inside string payloads are harmless, flips in lengths are not.
  EXPECT_GT(refused, 0);
  EXPECT_GT(loaded, 0);
}

TEST(GgufFuzz, RandomByteOverwritesInHeader) {
  Fixture fx;
  const std::string path = fx.dir.file("bytes.gguf");
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string b = fx.bytes;
    // Overwrite an 8-byte window with extreme values: lengths/counts/dims become huge,
    // negative or zero.
    const uint64_t pos = rng() % (fx.header_end - 8);
    const uint64_t vals[] = {0, ~0ull, 1ull << 63, 0x7fffffffffffffffull, rng()};
    const uint64_t v = vals[rng() % 5];
    std::memcpy(b.data() + pos, &v, 8);
    load_or_error(path, &b);
  }
}

}  // namespace
}  // namespace moeflow
