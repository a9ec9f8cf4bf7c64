#include "gguf/gguf_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace moeflow {
namespace {

constexpr uint64_t kDefaultAlignment = 32;
constexpr int kMaxTensorDims = 4;

bool power_of_two(uint64_t a) { return a != 0 && (a & (a - 1)) == 0; }

template <typename T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.append(s);
}

void put_value(std::string& out, const GgufValue& v, const std::string& key) {
  switch (v.type) {
    case GgufType::UINT8: put<uint8_t>(out, static_cast<uint8_t>(v.u)); break;
    case GgufType::INT8: put<int8_t>(out, static_cast<int8_t>(v.i)); break;
    case GgufType::UINT16: put<uint16_t>(out, static_cast<uint16_t>(v.u)); break;
    case GgufType::INT16: put<int16_t>(out, static_cast<int16_t>(v.i)); break;
    case GgufType::UINT32: put<uint32_t>(out, static_cast<uint32_t>(v.u)); break;
    case GgufType::INT32: put<int32_t>(out, static_cast<int32_t>(v.i)); break;
    case GgufType::UINT64: put<uint64_t>(out, v.u); break;
    case GgufType::INT64: put<int64_t>(out, v.i); break;
    case GgufType::FLOAT32: put<float>(out, static_cast<float>(v.f)); break;
    case GgufType::FLOAT64: put<double>(out, v.f); break;
    case GgufType::BOOL: put<uint8_t>(out, v.b ? 1 : 0); break;
    case GgufType::STRING: put_string(out, v.s); break;
    case GgufType::ARRAY:
      put<uint32_t>(out, static_cast<uint32_t>(v.elem_type));
      put<uint64_t>(out, v.arr.size());
      for (const auto& e : v.arr) {
        if (e.type != v.elem_type)
          fail("GGUF writer: metadata key '{}': array of {} holds an item of type {}", key,
               gguf_type_name(v.elem_type), gguf_type_name(e.type));
        put_value(out, e, key);
      }
      break;
    default:
      fail("GGUF writer: metadata key '{}' has invalid type id {}", key,
           static_cast<uint32_t>(v.type));
  }
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Owns the temporary output file; removes it unless commit() renamed it into place.
class TempFile {
 public:
  TempFile(std::string final_path) : final_(std::move(final_path)), tmp_(final_ + ".tmp") {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("{}: cannot create: {}", tmp_, std::strerror(errno));
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(const void* data, uint64_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n > (1u << 30) ? (1u << 30) : n);
      if (w < 0) {
        if (errno == EINTR) continue;
        fail("{}: write failed: {}", tmp_, std::strerror(errno));
      }
      p += w;
      n -= static_cast<uint64_t>(w);
    }
  }

  void pad_to(uint64_t pos, uint64_t alignment) {
    static const uint8_t zeros[256] = {};
    uint64_t n = align_up(pos, alignment) - pos;
    while (n > 0) {
      const uint64_t k = n < sizeof(zeros) ? n : sizeof(zeros);
      write(zeros, k);
      n -= k;
    }
  }

  void commit() {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("{}: close failed: {}", tmp_, std::strerror(errno));
    if (std::rename(tmp_.c_str(), final_.c_str()) != 0)
      fail("{}: cannot rename {} into place: {}", final_, tmp_, std::strerror(errno));
    committed_ = true;
  }

 private:
  std::string final_;
  std::string tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue value) {
  if (key == "general.alignment") {
    if (!value.is_integer() || value.type == GgufType::BOOL || value.i <= 0 ||
        !power_of_two(static_cast<uint64_t>(value.i)))
      fail("GGUF writer: 'general.alignment' must be a positive power of two");
    alignment_ = static_cast<uint64_t>(value.i);
  }
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  kv_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> dims,
                            FillFn fill) {
  for (const auto& t : tensors_)
    if (t.name == name) fail("GGUF writer: duplicate tensor name '{}'", name);
  if (dims.empty() || dims.size() > kMaxTensorDims)
    fail("GGUF writer: tensor '{}' has {} dimensions (must be 1..{})", name, dims.size(),
         kMaxTensorDims);
  if (!is_known_type(static_cast<uint32_t>(type)))
    fail("GGUF writer: unknown tensor type id {} in tensor '{}'", static_cast<uint32_t>(type),
         name);
  int64_t rows = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] <= 0)
      fail("GGUF writer: tensor '{}' has dimension {} = {} (must be positive)", name, d, dims[d]);
    if (d > 0 && __builtin_mul_overflow(rows, dims[d], &rows))
      fail("GGUF writer: tensor '{}': element count overflows", name);
  }
  const TypeTraits& tr = type_traits(type);
  if (dims[0] % tr.block_size != 0)
    fail("GGUF writer: tensor '{}' has row length {}, not a multiple of the {} block size {}", name,
         dims[0], tr.name, tr.block_size);
  uint64_t nbytes;
  if (__builtin_mul_overflow(static_cast<uint64_t>(dims[0] / tr.block_size) * tr.type_size,
                             static_cast<uint64_t>(rows), &nbytes))
    fail("GGUF writer: tensor '{}': byte size overflows", name);
  if (!fill) fail("GGUF writer: tensor '{}' has no fill function", name);
  tensors_.push_back({name, type, std::move(dims), nbytes, std::move(fill)});
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> dims,
                            const void* data, uint64_t nbytes) {
  auto copy = std::make_shared<std::vector<uint8_t>>(static_cast<const uint8_t*>(data),
                                                     static_cast<const uint8_t*>(data) + nbytes);
  add_tensor(name, type, std::move(dims), [copy, name](uint8_t* dst, uint64_t n) {
    if (n != copy->size())
      fail("GGUF writer: tensor '{}' needs {} bytes but {} were given", name, n, copy->size());
    std::memcpy(dst, copy->data(), n);
  });
  if (tensors_.back().nbytes != nbytes) {
    const uint64_t need = tensors_.back().nbytes;
    tensors_.pop_back();
    fail("GGUF writer: tensor '{}' needs {} bytes but {} were given", name, need, nbytes);
  }
}

void GgufWriter::write(const std::string& path, const ProgressFn& progress) const {
  if (!power_of_two(alignment_))
    fail("{}: GGUF alignment {} is not a power of two", path, alignment_);

  std::string header;
  header.append("GGUF", 4);
  put<uint32_t>(header, 3);
  put<uint64_t>(header, tensors_.size());
  bool has_alignment = false;
  for (const auto& kv : kv_) has_alignment |= kv.first == "general.alignment";
  const bool add_alignment = !has_alignment && alignment_ != kDefaultAlignment;
  put<uint64_t>(header, kv_.size() + (add_alignment ? 1 : 0));
  if (add_alignment) {
    // Readers assume 32 unless told; a different alignment must be stated in the file.
    put_string(header, "general.alignment");
    put<uint32_t>(header, static_cast<uint32_t>(GgufType::UINT32));
    put<uint32_t>(header, static_cast<uint32_t>(alignment_));
  }
  for (const auto& [key, value] : kv_) {
    put_string(header, key);
    put<uint32_t>(header, static_cast<uint32_t>(value.type));
    try {
      put_value(header, value, key);
    } catch (const Error& e) {
      fail("{}: {}", path, e.what());
    }
  }

  uint64_t offset = 0, total = 0;
  for (const auto& t : tensors_) {
    put_string(header, t.name);
    put<uint32_t>(header, static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) put<uint64_t>(header, static_cast<uint64_t>(d));
    put<uint32_t>(header, static_cast<uint32_t>(t.type));
    put<uint64_t>(header, offset);
    offset = align_up(offset + t.nbytes, alignment_);
    total += t.nbytes;
  }

  TempFile out(path);
  out.write(header.data(), header.size());
  out.pad_to(header.size(), alignment_);

  // One buffer, reused: only the largest single tensor is ever held in memory.
  std::vector<uint8_t> buf;
  uint64_t done = 0;
  if (progress) progress(0, total);
  for (const auto& t : tensors_) {
    if (buf.size() < t.nbytes) buf.resize(t.nbytes);
    try {
      t.fill(buf.data(), t.nbytes);
    } catch (const Error& e) {
      fail("{}: while producing tensor '{}': {}", path, t.name, e.what());
    }
    out.write(buf.data(), t.nbytes);
    out.pad_to(t.nbytes, alignment_);
    done += t.nbytes;
    if (progress) progress(done, total);
  }
  out.commit();
}

}  // namespace moeflow
