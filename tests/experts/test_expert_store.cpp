#include <gtest/gtest.h>

#include <cstring>

#include "core/aligned_buffer.h"
#include "core/error.h"
#include "experts/expert_store.h"
#include "support/offload_fixture.h"

namespace moeflow {
namespace {

TEST(ExpertStore, ReadsEverySliceExactly) {
  test::FakeModel m;
  test::make_fake_model(m, "store", 3, 4, 40, 1);
  ExpertStore store({m.path}, m.index);
  EXPECT_EQ(store.max_experts(), 4);
  EXPECT_FALSE(store.is_moe_layer(0));
  uint64_t total = 0;
  AlignedBuffer buf(store.slot_bytes(), kDirectAlign);
  for (int l = 1; l < 3; ++l) {
    for (int e = 0; e < 4; ++e) {
      for (int p = 0; p < kNumExpertProj; ++p) {
        const ChunkLoc& c = store.chunk(l, e, p);
        EXPECT_EQ(c.aligned_offset % kDirectAlign, 0u);
        EXPECT_EQ(c.aligned_len % kDirectAlign, 0u);
        EXPECT_EQ(store.slot_region(l, e, p) % kDirectAlign, 0u);
        EXPECT_LE(store.slot_region(l, e, p) + c.aligned_len, store.slot_bytes());
        std::memset(buf.data(), 0, buf.size());
        uint8_t* dst = buf.data() + store.slot_region(l, e, p);
        store.read(l, e, p, dst);
        ASSERT_EQ(0, std::memcmp(dst + c.inner_offset, m.slice(l, e, p), m.nbytes(l, e, p)))
            << "layer " << l << " expert " << e << " proj " << p;
        total += m.nbytes(l, e, p);
      }
    }
  }
  EXPECT_EQ(store.total_expert_bytes(), total);
}

// The fixture's slices sit at 32-byte offsets, as in a GGUF file; the same index moved onto
// 4 KiB boundaries with page-multiple sizes is what `moeflow pack` writes.
TEST(ExpertStore, SlicesAlignedOnlyWhenEveryReadIsExact) {
  test::FakeModel m;
  test::make_fake_model(m, "aligned", 3, 2, 40, 2);
  EXPECT_FALSE(ExpertStore({m.path}, m.index).slices_aligned());
  ExpertIndex packed = m.index;
  uint64_t off = 0;
  for (auto& layer : packed.layers)
    for (auto& expert : layer.slices)
      for (auto& s : expert) {
        s.type = GgmlType::F32;
        s.rows = 1, s.cols = 1024, s.nbytes = 4096;
        s.file_offset = off, off += 4096;
      }
  ASSERT_LE(off, m.bytes.size());
  EXPECT_TRUE(ExpertStore({m.path}, packed).slices_aligned());
  packed.layers[2].slices[1][2].file_offset += 32;  // one slice off its boundary is enough
  EXPECT_FALSE(ExpertStore({m.path}, packed).slices_aligned());
}

TEST(ExpertStore, BufferedModeReadsTheSameBytes) {
  test::FakeModel m;
  test::make_fake_model(m, "store_buf", 2, 3, 32, 2);
  ExpertStore store({m.path}, m.index, StoreOptions{false});
  EXPECT_FALSE(store.direct_io());
  AlignedBuffer buf(store.slot_bytes(), kDirectAlign);
  const ChunkLoc& c = store.chunk(1, 2, 2);
  store.read(1, 2, 2, buf.data());
  EXPECT_EQ(0, std::memcmp(buf.data() + c.inner_offset, m.slice(1, 2, 2), c.nbytes));
}

TEST(ExpertStore, MissingFileAndBadSplitAreClearErrors) {
  test::FakeModel m;
  test::make_fake_model(m, "store_bad", 2, 2, 32, 3);
  try {
    ExpertStore store({m.path + ".missing"}, m.index);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(".missing"), std::string::npos) << e.what();
  }
  ExpertIndex bad = m.index;
  bad.layers[1].slices[0][1].split = 3;
  EXPECT_THROW(ExpertStore({m.path}, bad), Error);
}

TEST(ExpertStore, FaultHookTurnsReadsIntoErrors) {
  test::FakeModel m;
  test::make_fake_model(m, "store_fault", 2, 2, 32, 4);
  ExpertStore store({m.path}, m.index);
  AlignedBuffer buf(store.slot_bytes(), kDirectAlign);
  store.set_fault_hook([](const ReadEvent& ev, int64_t& r) {
    if (ev.proj == 1) r = -EIO;
    if (ev.proj == 2) r = 100;
  });
  EXPECT_NO_THROW(store.read(1, 0, 0, buf.data()));
  try {
    store.read(1, 0, 1, buf.data());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("read error"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(m.path), std::string::npos) << e.what();
  }
  try {
    store.read(1, 1, 2, buf.data());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("short read"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moeflow
