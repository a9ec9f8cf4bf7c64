#include "experts/expert_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "gguf/gguf_file.h"

namespace moeflow {

namespace {

uint64_t round_down(uint64_t v, uint64_t a) { return v / a * a; }
uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

const char* proj_name(int p) {
  static const char* names[] = {"gate", "up", "down"};
  return p >= 0 && p < kNumExpertProj ? names[p] : "?";
}

// Some filesystems accept O_DIRECT at open() and refuse it only at the first read, so the
// probe is an actual aligned read.
bool direct_read_works(int fd) {
  void* buf = std::aligned_alloc(kDirectAlign, kDirectAlign);
  if (!buf) return false;
  const ssize_t r = ::pread(fd, buf, kDirectAlign, 0);
  const int err = errno;
  std::free(buf);
  return r >= 0 || err != EINVAL;
}

}  // namespace

ExpertStore::ExpertStore(std::vector<std::string> paths, ExpertIndex index, StoreOptions opt,
                         ExpertIndex low)
    : paths_(std::move(paths)) {
  MOEFLOW_CHECK(!paths_.empty(), "expert store: no model file given");
  tiers_[0].index = std::move(index);
  build_tier(tiers_[0], "expert");
  for (const ExpertLayerIndex& li : low.layers) has_low_ |= li.n_expert > 0;
  if (has_low_) {
    const ExpertIndex& hi = tiers_[0].index;
    MOEFLOW_CHECK(low.layers.size() == hi.layers.size(),
                  "{}: the low-precision expert copies cover {} layers, the model has {}",
                  paths_[0], low.layers.size(), hi.layers.size());
    for (size_t l = 0; l < hi.layers.size(); ++l) {
      const ExpertLayerIndex& h = hi.layers[l];
      const ExpertLayerIndex& w = low.layers[l];
      MOEFLOW_CHECK(h.n_expert == w.n_expert && h.fused_gate_up == w.fused_gate_up,
                    "{}: layer {} has {} experts but {} low-precision copies (re-run moeflow pack "
                    "--low)",
                    paths_[0], l, h.n_expert, w.n_expert);
      for (int e = 0; e < h.n_expert; ++e)
        for (int p = 0; p < kNumExpertProj; ++p) {
          const ExpertSlice& a = h.slices[e][p];
          const ExpertSlice& b = w.slices[e][p];
          MOEFLOW_CHECK(a.rows == b.rows && a.cols == b.cols,
                        "{}: layer {}: the low-precision copy of expert {} ({}) is {}x{}, the "
                        "expert is {}x{}",
                        paths_[0], l, e, proj_name(p), b.rows, b.cols, a.rows, a.cols);
        }
    }
    tiers_[1].index = std::move(low);
    build_tier(tiers_[1], "low-precision expert");
  }
  open_files(opt.direct_io);
}

void ExpertStore::build_tier(Tier& t, const char* what) {
  t.locs.resize(t.index.layers.size());
  t.regions.resize(t.index.layers.size());
  for (size_t l = 0; l < t.index.layers.size(); ++l) {
    const ExpertLayerIndex& li = t.index.layers[l];
    max_experts_ = std::max(max_experts_, li.n_expert);
    MOEFLOW_CHECK(li.slices.size() == static_cast<size_t>(li.n_expert),
                  "{}: {} index of layer {} lists {} slices for {} experts", paths_[0], what, l,
                  li.slices.size(), li.n_expert);
    t.locs[l].resize(static_cast<size_t>(li.n_expert) * kNumExpertProj);
    t.regions[l].resize(t.locs[l].size());
    for (int e = 0; e < li.n_expert; ++e) {
      uint64_t region = 0;
      for (int p = 0; p < kNumExpertProj; ++p) {
        const ExpertSlice& s = li.slices[e][p];
        ChunkLoc& c = t.locs[l][e * kNumExpertProj + p];
        MOEFLOW_CHECK(s.split < paths_.size(),
                      "{}: {} {} of layer {} ({}) lives in split {}, but only {} files given",
                      paths_[0], what, e, l, proj_name(p), s.split, paths_.size());
        c.split = s.split;
        c.nbytes = s.nbytes;
        if (s.nbytes > 0) {
          c.aligned_offset = round_down(s.file_offset, kDirectAlign);
          c.inner_offset = s.file_offset - c.aligned_offset;
          c.aligned_len = round_up(s.file_offset + s.nbytes, kDirectAlign) - c.aligned_offset;
        }
        t.regions[l][e * kNumExpertProj + p] = region;
        region += c.aligned_len;
        t.total_bytes += s.nbytes;
      }
      t.slot_bytes = std::max(t.slot_bytes, region);
    }
  }
}

const ExpertStore::Tier& ExpertStore::tier(Precision p) const {
  if (p == Precision::Low && !has_low_)
    fail(
        "{}: the model has no low-precision expert copies (pack it with `moeflow pack --low "
        "TYPE`)",
        paths_[0]);
  return tiers_[p == Precision::Low ? 1 : 0];
}

std::unique_ptr<ExpertStore> ExpertStore::open(const GgufFile& f, StoreOptions opt) {
  return std::make_unique<ExpertStore>(f.split_paths(), build_expert_index(f), opt,
                                       build_expert_index(f, "low"));
}

void ExpertStore::open_files(bool want_direct) {
  direct_ = want_direct;
  for (const std::string& p : paths_) {
    int fd = -1;
    if (direct_) {
      fd = ::open(p.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
      if (fd >= 0 && !direct_read_works(fd)) {
        ::close(fd);
        fd = -1;
        errno = EINVAL;
      }
      if (fd < 0 && errno == EINVAL) {
        std::fprintf(stderr,
                     "moeflow: warning: %s: the filesystem refuses O_DIRECT; expert reads go "
                     "through the page cache (RAM use will exceed the expert budget)\n",
                     p.c_str());
        direct_ = false;
        // Files opened direct so far must match: reopen everything buffered.
        for (int old : fds_) ::close(old);
        fds_.clear();
        open_files(false);
        return;
      }
    } else {
      fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0) {
      const int err = errno;
      for (int old : fds_) ::close(old);
      fds_.clear();
      fail("{}: cannot open for expert reads: {}", p, std::strerror(err));
    }
    fds_.push_back(fd);
  }
}

ExpertStore::~ExpertStore() {
  for (int fd : fds_) ::close(fd);
}

int ExpertStore::n_experts(int layer) const {
  const ExpertIndex& idx = tiers_[0].index;
  if (layer < 0 || static_cast<size_t>(layer) >= idx.layers.size()) return 0;
  return idx.layers[layer].n_expert;
}

const ChunkLoc& ExpertStore::chunk(int layer, int expert, int proj, Precision p) const {
  MOEFLOW_CHECK(expert >= 0 && expert < n_experts(layer) && proj >= 0 && proj < kNumExpertProj,
                "{}: no expert {} (proj {}) in layer {}", paths_[0], expert, proj, layer);
  return tier(p).locs[layer][expert * kNumExpertProj + proj];
}

uint64_t ExpertStore::slot_region(int layer, int expert, int proj, Precision p) const {
  chunk(layer, expert, proj, p);  // validates
  return tier(p).regions[layer][expert * kNumExpertProj + proj];
}

bool ExpertStore::slices_aligned(Precision p) const {
  for (const auto& layer : tier(p).locs)
    for (const ChunkLoc& c : layer)
      if (c.nbytes != 0 && !c.exact()) return false;
  return true;
}

void ExpertStore::set_fault_hook(FaultHook hook) {
  std::lock_guard lk(hook_mu_);
  hook_ = std::move(hook);
}

void ExpertStore::read(int layer, int expert, int proj, uint8_t* dst, Precision p) const {
  read_part(layer, expert, proj, dst, 0, chunk(layer, expert, proj, p).aligned_len, p);
}

void ExpertStore::read_part(int layer, int expert, int proj, uint8_t* dst, uint64_t begin,
                            uint64_t end, Precision p) const {
  read_range(layer, expert, proj, dst + begin, begin, end, p);
}

void ExpertStore::read_range(int layer, int expert, int proj, uint8_t* out, uint64_t begin,
                             uint64_t end, Precision p) const {
  const ChunkLoc& c = chunk(layer, expert, proj, p);
  const char* prec = p == Precision::Low ? " low-precision copy" : "";
  MOEFLOW_CHECK(begin <= end && end <= c.aligned_len && begin % kDirectAlign == 0 &&
                    (end % kDirectAlign == 0 || end == c.aligned_len),
                "expert store: bad part [{}, {}) of a {}-byte chunk", begin, end, c.aligned_len);
  if (begin == end) return;
  const int fd = fds_[c.split];
  // The aligned superset may run past the end of the file (last tensor): a short read is an
  // error only when it stops before the slice itself ends.
  uint64_t done = begin;
  int64_t result = 0;
  while (done < end) {
    const ssize_t r =
        ::pread(fd, out + (done - begin), end - done, static_cast<off_t>(c.aligned_offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      result = -errno;
      break;
    }
    if (r == 0) break;
    done += static_cast<uint64_t>(r);
    // O_DIRECT reads end on block boundaries; a partial block means end of file.
    if (direct_ && done % kDirectAlign != 0) break;
  }
  if (result == 0) result = static_cast<int64_t>(done - begin);
  {
    std::lock_guard lk(hook_mu_);
    if (hook_) hook_(ReadEvent{layer, expert, proj, &c, p, begin, end}, result);
  }
  if (result < 0) {
    fail("{}: read error at offset {} ({} bytes) for expert {}{} of layer {} ({}): {}",
         paths_[c.split], c.aligned_offset + begin, end - begin, expert, prec, layer,
         proj_name(proj), std::strerror(static_cast<int>(-result)));
  }
  const uint64_t covered = begin + static_cast<uint64_t>(result);
  const uint64_t needed = std::min(end, c.inner_offset + c.nbytes);
  if (covered < needed) {
    fail(
        "{}: short read for expert {}{} of layer {} ({}): got {} of {} bytes at offset {} "
        "(file truncated?)",
        paths_[c.split], expert, prec, layer, proj_name(proj), covered, c.inner_offset + c.nbytes,
        c.aligned_offset);
  }
}

}  // namespace moeflow
