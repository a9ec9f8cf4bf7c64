#include "gguf/gguf_parser.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <unordered_map>

#include "core/error.h"

namespace moeflow {
namespace {

constexpr uint32_t kMaxDims = 4;
// Real files nest arrays at most one level; the bound keeps a hostile file from exhausting the
// stack through recursion.
constexpr int kMaxArrayDepth = 8;
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;

// Sequential reader over the mapped bytes. Every read checks the remaining length first, so no
// byte sequence can make it touch memory outside the mapping.
class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* data, uint64_t size)
      : path_(path), data_(data), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  const std::string& path() const { return path_; }
  // What is being read, for error messages (set once per key/tensor, not per element).
  void set_context(std::string ctx) { ctx_ = std::move(ctx); }
  const std::string& context() const { return ctx_; }

  void need(uint64_t n) const {
    if (n > remaining())
      fail("{}: file is truncated: {} needs {} bytes at offset {} but the file has {} bytes", path_,
           ctx_, n, pos_, size_);
  }

  template <typename T>
  T read() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string() {
    const uint64_t len = read<uint64_t>();
    if (len > remaining())
      fail("{}: {}: string length {} exceeds the {} bytes left in the file", path_, ctx_, len,
           remaining());
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

 private:
  const std::string& path_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::string ctx_ = "the header";
};

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::FLOAT64); }

// Smallest encoding of one value of type t: bounds array counts by the bytes that remain.
uint64_t min_encoded_size(GgufType t) {
  switch (t) {
    case GgufType::UINT8:
    case GgufType::INT8:
    case GgufType::BOOL: return 1;
    case GgufType::UINT16:
    case GgufType::INT16: return 2;
    case GgufType::UINT32:
    case GgufType::INT32:
    case GgufType::FLOAT32: return 4;
    case GgufType::UINT64:
    case GgufType::INT64:
    case GgufType::FLOAT64:
    case GgufType::STRING: return 8;
    case GgufType::ARRAY: return 12;
  }
  return 1;
}

GgufValue read_value(Cursor& c, GgufType t, int depth) {
  GgufValue v;
  v.type = t;
  switch (t) {
    case GgufType::UINT8:
      v.u = c.read<uint8_t>();
      v.i = static_cast<int64_t>(v.u);
      break;
    case GgufType::UINT16:
      v.u = c.read<uint16_t>();
      v.i = static_cast<int64_t>(v.u);
      break;
    case GgufType::UINT32:
      v.u = c.read<uint32_t>();
      v.i = static_cast<int64_t>(v.u);
      break;
    case GgufType::UINT64:
      v.u = c.read<uint64_t>();
      v.i = static_cast<int64_t>(v.u);
      break;
    case GgufType::INT8:
      v.i = c.read<int8_t>();
      v.u = static_cast<uint64_t>(v.i);
      break;
    case GgufType::INT16:
      v.i = c.read<int16_t>();
      v.u = static_cast<uint64_t>(v.i);
      break;
    case GgufType::INT32:
      v.i = c.read<int32_t>();
      v.u = static_cast<uint64_t>(v.i);
      break;
    case GgufType::INT64:
      v.i = c.read<int64_t>();
      v.u = static_cast<uint64_t>(v.i);
      break;
    case GgufType::FLOAT32: v.f = c.read<float>(); break;
    case GgufType::FLOAT64: v.f = c.read<double>(); break;
    case GgufType::BOOL: {
      const uint8_t b = c.read<uint8_t>();
      if (b > 1)
        fail("{}: {}: invalid bool byte {} at offset {}", c.path(), c.context(), b, c.pos() - 1);
      v.b = b != 0;
      v.u = b;
      v.i = b;
      break;
    }
    case GgufType::STRING: v.s = c.read_string(); break;
    case GgufType::ARRAY: {
      if (depth >= kMaxArrayDepth)
        fail("{}: {}: arrays nested deeper than {} levels", c.path(), c.context(), kMaxArrayDepth);
      const uint32_t et = c.read<uint32_t>();
      if (!valid_value_type(et))
        fail("{}: {}: unknown array element type id {}", c.path(), c.context(), et);
      v.elem_type = static_cast<GgufType>(et);
      const uint64_t n = c.read<uint64_t>();
      const uint64_t min_size = min_encoded_size(v.elem_type);
      if (n > c.remaining() / min_size)
        fail("{}: {}: array of {} {} items cannot fit in the {} bytes left in the file", c.path(),
             c.context(), n, gguf_type_name(v.elem_type), c.remaining());
      v.arr.reserve(static_cast<size_t>(n));
      for (uint64_t k = 0; k < n; ++k) v.arr.push_back(read_value(c, v.elem_type, depth + 1));
      break;
    }
  }
  return v;
}

bool same_value(const GgufValue& a, const GgufValue& b) {
  if (a.type != b.type) return false;
  switch (a.type) {
    case GgufType::STRING: return a.s == b.s;
    case GgufType::BOOL: return a.b == b.b;
    case GgufType::FLOAT32:
    case GgufType::FLOAT64: return std::memcmp(&a.f, &b.f, sizeof(double)) == 0;
    case GgufType::ARRAY:
      if (a.elem_type != b.elem_type || a.arr.size() != b.arr.size()) return false;
      for (size_t k = 0; k < a.arr.size(); ++k)
        if (!same_value(a.arr[k], b.arr[k])) return false;
      return true;
    default: return a.u == b.u && a.i == b.i;
  }
}

uint64_t checked_mul(uint64_t a, uint64_t b, const std::string& path, const std::string& what) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) fail("{}: {}: size overflows 64 bits", path, what);
  return r;
}

uint64_t checked_add(uint64_t a, uint64_t b, const std::string& path, const std::string& what) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) fail("{}: {}: offset overflows 64 bits", path, what);
  return r;
}

GgufTensorInfo read_tensor_info(Cursor& c, uint64_t index) {
  const std::string& path = c.path();
  GgufTensorInfo t;
  c.set_context(fmt::format("the name of tensor #{}", index));
  t.name = c.read_string();
  c.set_context(fmt::format("tensor '{}'", t.name));
  const std::string& what = c.context();

  const uint32_t n_dims = c.read<uint32_t>();
  if (n_dims == 0 || n_dims > kMaxDims)
    fail("{}: tensor '{}' has n_dims {} (must be 1..{})", path, t.name, n_dims, kMaxDims);
  int64_t n_elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t raw = c.read<uint64_t>();
    const int64_t dim = static_cast<int64_t>(raw);
    if (dim <= 0)
      fail("{}: tensor '{}' has dimension {} = {} (must be positive)", path, t.name, d, dim);
    if (__builtin_mul_overflow(n_elements, dim, &n_elements))
      fail("{}: tensor '{}': element count overflows 64 bits", path, t.name);
    t.dims.push_back(dim);
  }

  const uint32_t type_id = c.read<uint32_t>();
  if (!is_known_type(type_id))
    fail("{}: unknown tensor type id {} in tensor '{}'", path, type_id, t.name);
  t.type = static_cast<GgmlType>(type_id);
  const TypeTraits& tr = type_traits(t.type);
  if (t.dims[0] % tr.block_size != 0)
    fail("{}: tensor '{}' has row length {}, not a multiple of the {} block size {}", path, t.name,
         t.dims[0], tr.name, tr.block_size);
  const uint64_t row =
      checked_mul(static_cast<uint64_t>(t.dims[0] / tr.block_size), tr.type_size, path, what);
  t.nbytes = checked_mul(row, static_cast<uint64_t>(n_elements / t.dims[0]), path, what);
  t.offset = c.read<uint64_t>();
  return t;
}

}  // namespace

GgufPart GgufParser::parse(const std::string& path, const uint8_t* data, uint64_t size,
                           uint32_t split) {
  Cursor c(path, data, size);
  GgufPart part;

  c.set_context("the GGUF magic");
  const uint32_t magic = c.read<uint32_t>();
  if (std::memcmp(&magic, "GGUF", 4) != 0) fail("{}: not a GGUF file (bad magic)", path);
  c.set_context("the GGUF version");
  const uint32_t version = c.read<uint32_t>();
  if (version == 1)
    fail("{}: GGUF version 1 is not supported (re-convert the model to GGUF v3)", path);
  if (version != 2 && version != 3) {
    if (__builtin_bswap32(version) >= 1 && __builtin_bswap32(version) <= 3)
      fail("{}: big-endian GGUF files are not supported", path);
    fail("{}: unsupported GGUF version {}", path, version);
  }
  part.version = version;

  c.set_context("the tensor count");
  const uint64_t n_tensors = c.read<uint64_t>();
  c.set_context("the metadata count");
  const uint64_t n_kv = c.read<uint64_t>();
  // Smallest key/value: 8-byte key length + 4-byte type + 1-byte value.
  if (n_kv > c.remaining() / 13)
    fail("{}: metadata count {} cannot fit in the {} bytes left in the file", path, n_kv,
         c.remaining());
  // Smallest tensor info: name length 8 + n_dims 4 + one dim 8 + type 4 + offset 8.
  if (n_tensors > c.remaining() / 32)
    fail("{}: tensor count {} cannot fit in the {} bytes left in the file", path, n_tensors,
         c.remaining());

  std::unordered_map<std::string, size_t> seen;
  part.kv.reserve(static_cast<size_t>(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    c.set_context(fmt::format("the key of metadata entry #{}", k));
    std::string key = c.read_string();
    c.set_context(fmt::format("metadata key '{}'", key));
    const uint32_t type_id = c.read<uint32_t>();
    if (!valid_value_type(type_id))
      fail("{}: metadata key '{}' has unknown value type id {}", path, key, type_id);
    GgufValue value = read_value(c, static_cast<GgufType>(type_id), 0);
    auto it = seen.find(key);
    if (it != seen.end()) {
      // Some published files (llama.cpp's own ggml-vocab-dbrx.gguf) repeat a key with the same
      // value; only a conflicting repeat is ambiguous.
      if (same_value(part.kv[it->second].value, value)) continue;
      fail("{}: duplicate metadata key '{}' with a different value", path, key);
    }
    seen.emplace(key, part.kv.size());
    part.kv.push_back({std::move(key), std::move(value)});
  }

  if (auto it = seen.find("general.alignment"); it != seen.end()) {
    const GgufValue& a = part.kv[it->second].value;
    if (!a.is_integer() || a.type == GgufType::BOOL)
      fail("{}: metadata key 'general.alignment' is {}, expected an integer", path,
           gguf_type_name(a.type));
    const uint64_t al = a.u;
    if (a.i <= 0 || al > kMaxAlignment || (al & (al - 1)) != 0)
      fail("{}: metadata key 'general.alignment' = {} is not a power of two in 1..{}", path, a.i,
           kMaxAlignment);
    part.alignment = al;
  }

  std::unordered_map<std::string, size_t> names;
  part.tensors.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo t = read_tensor_info(c, k);
    if (t.offset % part.alignment != 0)
      fail("{}: tensor '{}' has offset {}, not a multiple of the alignment {}", path, t.name,
           t.offset, part.alignment);
    if (!names.emplace(t.name, k).second) fail("{}: duplicate tensor name '{}'", path, t.name);
    t.split = split;
    part.tensors.push_back(std::move(t));
  }

  const uint64_t header_end = c.pos();
  part.data_start = (header_end + part.alignment - 1) / part.alignment * part.alignment;
  for (auto& t : part.tensors) {
    const std::string what = fmt::format("tensor '{}'", t.name);
    t.file_offset = checked_add(part.data_start, t.offset, path, what);
    const uint64_t end = checked_add(t.file_offset, t.nbytes, path, what);
    if (end > size)
      fail("{}: tensor '{}' ends at byte {}, past the end of the file ({} bytes)", path, t.name,
           end, size);
  }
  // Every tensor owns its bytes (llama.cpp even requires them back to back, in order). Shared
  // bytes would let a small file describe any number of tensors, layers and experts over the
  // same data, so that what moeflow builds from it (the expert index) grows with the square of
  // the file's size.
  std::vector<size_t> order(part.tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {  // ties: file order
    return part.tensors[a].file_offset < part.tensors[b].file_offset;
  });
  for (size_t k = 1; k < order.size(); ++k) {
    const GgufTensorInfo& prev = part.tensors[order[k - 1]];
    const GgufTensorInfo& t = part.tensors[order[k]];
    if (t.file_offset < prev.file_offset + prev.nbytes)
      fail("{}: tensors '{}' (bytes {}..{}) and '{}' (bytes {}..{}) overlap", path, prev.name,
           prev.file_offset, prev.file_offset + prev.nbytes, t.name, t.file_offset,
           t.file_offset + t.nbytes);
  }
  return part;
}

}  // namespace moeflow
