#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>

#include "core/error.h"
#include "core/fp16.h"
#include "trace/trace.h"

namespace moeflow::trace {
namespace {

constexpr char kMagic[8] = {'M', 'F', 'T', 'R', 'A', 'C', 'E', '\0'};
constexpr uint32_t kVersion = 1;
constexpr uint8_t kHasWeights = 1, kHasHidden = 2;

class Writer {
 public:
  template <typename T>
  void put(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    buf.append(b, sizeof(T));
  }
  void str(const std::string& s) {
    put<uint32_t>((uint32_t)s.size());
    buf += s;
  }
  std::string buf;
};

class Reader {
 public:
  Reader(const std::string& data, const std::string& path) : d_(data), path_(path) {}
  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, d_.data() + p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  std::string str() {
    uint32_t n = get<uint32_t>();
    need(n);
    std::string s = d_.substr(p_, n);
    p_ += n;
    return s;
  }
  void need(size_t n) {
    if (n > d_.size() - p_)
      fail("trace '{}': truncated at byte {} (needs {} more bytes)", path_, p_, n);
  }
  size_t left() const { return d_.size() - p_; }

 private:
  const std::string& d_;
  const std::string& path_;
  size_t p_ = 0;
};

}  // namespace

std::vector<int> Trace::recorded_layers() const {
  std::set<int> s;
  for (auto& st : steps)
    for (auto& r : st.routes) s.insert(r.layer);
  return {s.begin(), s.end()};
}

size_t Trace::n_routes() const {
  size_t n = 0;
  for (auto& st : steps) n += st.routes.size();
  return n;
}

void Trace::validate(const std::string& what) const {
  MOEFLOW_CHECK(n_layers > 0 && n_layers < 65536, "trace '{}': bad n_layers {}", what, n_layers);
  MOEFLOW_CHECK(n_experts > 0 && n_experts < 65536, "trace '{}': bad n_experts {}", what,
                n_experts);
  MOEFLOW_CHECK(top_k > 0 && top_k <= n_experts && top_k < 256, "trace '{}': bad top_k {}", what,
                top_k);
  MOEFLOW_CHECK(hidden_dim >= 0 && hidden_dim < (1 << 24), "trace '{}': bad hidden_dim {}", what,
                hidden_dim);
  MOEFLOW_CHECK(routers.empty() || (int)routers.size() == n_layers,
                "trace '{}': {} router matrices for {} layers", what, routers.size(), n_layers);
  for (size_t l = 0; l < routers.size(); ++l)
    MOEFLOW_CHECK(routers[l].empty() || routers[l].size() == (size_t)n_experts * hidden_dim,
                  "trace '{}': router of layer {} has {} values, expected {}", what, l,
                  routers[l].size(), (size_t)n_experts * hidden_dim);
  for (size_t i = 0; i < steps.size(); ++i) {
    int prev = -1;
    for (auto& r : steps[i].routes) {
      MOEFLOW_CHECK(r.layer > prev && r.layer < n_layers,
                    "trace '{}': step {} has layer {} out of order or >= {}", what, i, r.layer,
                    n_layers);
      prev = r.layer;
      MOEFLOW_CHECK(!r.experts.empty() && r.experts.size() < 256,
                    "trace '{}': step {} layer {} has {} experts", what, i, r.layer,
                    r.experts.size());
      for (int e : r.experts)
        MOEFLOW_CHECK(e >= 0 && e < n_experts,
                      "trace '{}': step {} layer {} expert {} out of range [0,{})", what, i,
                      r.layer, e, n_experts);
      MOEFLOW_CHECK(r.weights.empty() || r.weights.size() == r.experts.size(),
                    "trace '{}': step {} layer {}: {} weights for {} experts", what, i, r.layer,
                    r.weights.size(), r.experts.size());
      MOEFLOW_CHECK(r.hidden.empty() || (int)r.hidden.size() == hidden_dim,
                    "trace '{}': step {} layer {}: hidden has {} values, hidden_dim is {}", what, i,
                    r.layer, r.hidden.size(), hidden_dim);
    }
  }
}

void write_trace(const Trace& t, const std::string& path) {
  t.validate(path);
  Writer w;
  w.buf.append(kMagic, 8);
  w.put<uint32_t>(kVersion);
  w.put<uint32_t>(t.n_layers);
  w.put<uint32_t>(t.n_experts);
  w.put<uint32_t>(t.top_k);
  w.put<uint32_t>(t.hidden_dim);
  w.str(t.model);
  w.str(t.source);
  w.put<uint32_t>((uint32_t)t.routers.size());
  for (auto& r : t.routers) {
    w.put<uint32_t>((uint32_t)r.size());
    w.buf.append(reinterpret_cast<const char*>(r.data()), r.size() * sizeof(float));
  }
  w.put<uint64_t>(t.steps.size());
  for (auto& s : t.steps) {
    w.put<uint32_t>(s.request);
    w.put<uint8_t>((uint8_t)s.phase);
    w.put<uint32_t>(s.pos);
    w.put<int32_t>(s.token_id);
    w.put<uint16_t>((uint16_t)s.routes.size());
    for (auto& r : s.routes) {
      w.put<uint16_t>((uint16_t)r.layer);
      w.put<uint8_t>((uint8_t)r.experts.size());
      w.put<uint8_t>((r.weights.empty() ? 0 : kHasWeights) | (r.hidden.empty() ? 0 : kHasHidden));
      for (int e : r.experts) w.put<uint16_t>((uint16_t)e);
      for (float f : r.weights) w.put<float>(f);
      for (float f : r.hidden) w.put<uint16_t>(fp32_to_fp16(f));
    }
  }
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail("trace '{}': cannot open for writing", path);
  f.write(w.buf.data(), (std::streamsize)w.buf.size());
  if (!f) fail("trace '{}': write failed", path);
}

Trace read_trace(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("trace '{}': cannot open", path);
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (data.size() < 8 || std::memcmp(data.data(), kMagic, 8) != 0)
    fail("trace '{}': not a moeflow trace (bad magic; import JSONL with `moeflow trace --import`)",
         path);
  Reader r(data, path);
  r.need(8);
  for (int i = 0; i < 8; ++i) r.get<char>();
  uint32_t ver = r.get<uint32_t>();
  if (ver != kVersion) fail("trace '{}': unsupported version {}", path, ver);
  Trace t;
  t.n_layers = (int)r.get<uint32_t>();
  t.n_experts = (int)r.get<uint32_t>();
  t.top_k = (int)r.get<uint32_t>();
  t.hidden_dim = (int)r.get<uint32_t>();
  t.model = r.str();
  t.source = r.str();
  MOEFLOW_CHECK(t.n_layers > 0 && t.n_layers < 65536 && t.n_experts > 0 && t.n_experts < 65536 &&
                    t.hidden_dim >= 0 && t.hidden_dim < (1 << 24),
                "trace '{}': bad header (layers {}, experts {}, hidden {})", path, t.n_layers,
                t.n_experts, t.hidden_dim);
  uint32_t nr = r.get<uint32_t>();
  MOEFLOW_CHECK(nr == 0 || nr == (uint32_t)t.n_layers,
                "trace '{}': {} router matrices for {} layers", path, nr, t.n_layers);
  t.routers.resize(nr);
  for (auto& m : t.routers) {
    uint32_t n = r.get<uint32_t>();
    r.need((size_t)n * 4);
    m.resize(n);
    for (auto& x : m) x = r.get<float>();
  }
  uint64_t ns = r.get<uint64_t>();
  // Each step takes at least 15 bytes: bound the count before reserving memory.
  MOEFLOW_CHECK(ns <= r.left() / 15, "trace '{}': claims {} steps but only {} bytes follow", path,
                ns, r.left());
  t.steps.resize(ns);
  for (auto& s : t.steps) {
    s.request = r.get<uint32_t>();
    uint8_t ph = r.get<uint8_t>();
    MOEFLOW_CHECK(ph <= 1, "trace '{}': bad phase {}", path, ph);
    s.phase = (Phase)ph;
    s.pos = r.get<uint32_t>();
    s.token_id = r.get<int32_t>();
    uint16_t n = r.get<uint16_t>();
    s.routes.resize(n);
    for (auto& lr : s.routes) {
      lr.layer = r.get<uint16_t>();
      uint8_t k = r.get<uint8_t>();
      uint8_t flags = r.get<uint8_t>();
      lr.experts.resize(k);
      for (auto& e : lr.experts) e = r.get<uint16_t>();
      if (flags & kHasWeights) {
        lr.weights.resize(k);
        for (auto& w : lr.weights) w = r.get<float>();
      }
      if (flags & kHasHidden) {
        r.need((size_t)t.hidden_dim * 2);
        lr.hidden.resize(t.hidden_dim);
        for (auto& h : lr.hidden) h = fp16_to_fp32(r.get<uint16_t>());
      }
    }
  }
  if (r.left() != 0) fail("trace '{}': {} trailing bytes", path, r.left());
  t.validate(path);
  return t;
}

Trace filter_steps(const Trace& t, bool keep_prefill, bool keep_decode) {
  Trace o = t;
  o.steps.clear();
  for (auto& s : t.steps)
    if (s.phase == Phase::prefill ? keep_prefill : keep_decode) o.steps.push_back(s);
  return o;
}

}  // namespace moeflow::trace
