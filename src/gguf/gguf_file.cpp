#include "gguf/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "gguf/gguf_parser.h"

namespace moeflow {

// Threads that read a file into memory, and that transform its tensors: the CPUs, at most 4.
static int load_threads() {
  return (int)std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 4);
}

// Magic + version + tensor count + metadata count.
constexpr uint64_t kMinHeaderBytes = 24;

GgufFile::Mapping::Mapping(const std::string& p) : path(p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", p, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail("{}: cannot stat: {}", p, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: not a regular file", p);
  }
  size = static_cast<uint64_t>(st.st_size);
  if (size < kMinHeaderBytes) {
    ::close(fd);
    fail("{}: file is truncated: {} bytes is too small for a GGUF header", p, size);
  }
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  // The mapping keeps the file referenced; the descriptor is not needed any more.
  ::close(fd);
  if (m == MAP_FAILED) fail("{}: cannot mmap {} bytes: {}", p, size, std::strerror(err));
  base = static_cast<const uint8_t*>(m);
}

GgufFile::Mapping::Mapping(const std::string& name, const void* data, uint64_t n) : path(name) {
  if (n < kMinHeaderBytes)
    fail("{}: file is truncated: {} bytes is too small for a GGUF header", name, n);
  // Exactly n bytes on the heap, so a sanitizer flags any read past the end.
  owned.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + n);
  base = owned.data();
  size = n;
}

GgufFile::Mapping::Mapping(const std::string& p, uint64_t n, ReadTag) : path(p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", p, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != n) {
    ::close(fd);
    fail("{}: changed on disk since it was opened (was {} bytes)", p, n);
  }
  void* m = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    fail("{}: cannot allocate {} bytes of memory for its weights: {}", p, n, std::strerror(err));
  }
  // A hint: without huge pages the copy still works, at 4 KiB pages.
  (void)::madvise(m, n, MADV_HUGEPAGE);
  auto* dst = static_cast<uint8_t*>(m);
  // Several readers, each a 2 MiB-aligned share in 8 MiB reads: the copy's cost is mostly the
  // page faults that zero the new huge pages, and on the 2-vCPU VM a 3.4 GB file (in the page
  // cache) took 0.4-0.9 s with two readers against 0.7-6.5 s with one (64 MiB reads: 1.7-6.5).
  const int readers = load_threads();
  constexpr uint64_t kAlign = uint64_t{2} << 20, kChunk = uint64_t{8} << 20;
  std::mutex mu;
  std::string error;  // the first failure
  auto read_share = [&](uint64_t begin, uint64_t end) {
    for (uint64_t at = begin; at < end;) {
      const ssize_t r = ::pread(fd, dst + at, std::min(end - at, kChunk), static_cast<off_t>(at));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        const std::string why =
            r == 0 ? fmt::format("{}: ends at byte {}, {} expected (changed on disk while read)", p,
                                 at, n)
                   : fmt::format("{}: read error at byte {}: {}", p, at, std::strerror(errno));
        std::lock_guard<std::mutex> lock(mu);
        if (error.empty()) error = why;
        return;
      }
      at += static_cast<uint64_t>(r);
    }
  };
  {
    std::vector<std::jthread> workers;
    const uint64_t share = (n / readers + kAlign - 1) / kAlign * kAlign;
    for (int k = 0; k < readers; ++k) {
      const uint64_t b = std::min(n, share * k),
                     e = k + 1 == readers ? n : std::min(n, share * (k + 1));
      if (b < e) workers.emplace_back(read_share, b, e);
    }
  }
  ::close(fd);
  if (!error.empty()) {
    ::munmap(m, n);
    fail("{}", error);
  }
  base = dst;
  size = n;
  anonymous = true;
}

void GgufFile::Mapping::protect() const {
  if (anonymous) (void)::mprotect(const_cast<uint8_t*>(base), size, PROT_READ);
}

GgufFile::Mapping::~Mapping() {
  if (base && owned.empty()) ::munmap(const_cast<uint8_t*>(base), size);
}

namespace {

// transform(t, bytes) for every tensor, on up to 4 threads claiming tensors as they go; the
// types it returns replace the tensors' own. Rethrows the first failure.
void transform_tensors(std::vector<GgufTensorInfo>& tensors, const GgufFile& f,
                       const GgufFile::TensorTransform& transform) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::exception_ptr error;
  auto work = [&] {
    for (size_t k; (k = next.fetch_add(1)) < tensors.size();) {
      GgufTensorInfo& t = tensors[k];
      try {
        const GgmlType to = transform(t, const_cast<uint8_t*>(f.data(t)));
        if (to != t.type && row_bytes(to, t.dims[0]) != row_bytes(t.type, t.dims[0]))
          fail("{}: tensor '{}' rewritten from {} to {}, which take different bytes", f.path(),
               t.name, type_name(t.type), type_name(to));
        t.type = to;
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
        next = tensors.size();
      }
    }
  };
  {
    const int n = load_threads();
    std::vector<std::jthread> workers;
    for (int k = 1; k < n; ++k) workers.emplace_back(work);
    work();
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace

std::shared_ptr<const GgufFile> GgufFile::read_into_memory(const TensorTransform& transform) const {
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->paths_ = paths_;
  f->version_ = version_;
  f->alignment_ = alignment_;
  f->kv_ = kv_;
  f->kv_index_ = kv_index_;
  f->tensors_ = tensors_;
  f->tensor_index_ = tensor_index_;
  for (const auto& m : maps_) {
    std::unique_ptr<Mapping> c =
        m->owned.empty() ? std::make_unique<Mapping>(m->path, m->size, Mapping::ReadTag{})
                         : std::make_unique<Mapping>(m->path, m->base, m->size);
    // The metadata and tensor table were parsed from the first bytes: the copy must hold the
    // same ones, or the file was rewritten in between.
    if (std::memcmp(c->base, m->base, m->data_start) != 0)
      fail("{}: changed on disk since it was opened (its header differs)", m->path);
    c->data_start = m->data_start;
    c->alignment = m->alignment;
    f->maps_.push_back(std::move(c));
  }
  if (transform) transform_tensors(f->tensors_, *f, transform);
  for (const auto& m : f->maps_) m->protect();
  return f;
}

bool GgufFile::in_anonymous_memory() const {
  return !maps_.empty() &&
         std::all_of(maps_.begin(), maps_.end(), [](const auto& m) { return m->anonymous; });
}

GgufFile::~GgufFile() = default;

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) { return GgufParser::open(path); }

std::unique_ptr<GgufFile> GgufFile::open_bytes(const std::string& name, const void* data,
                                               uint64_t size) {
  auto m = std::make_unique<Mapping>(name, data, size);
  return GgufParser::open(std::move(m));
}

int64_t GgufTensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

int64_t GgufTensorInfo::rows() const {
  int64_t n = 1;
  for (size_t k = 1; k < dims.size(); ++k) n *= dims[k];
  return n;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].value;
}

namespace {

const GgufValue& require(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (!v) fail("{}: missing metadata key '{}'", f.path(), key);
  return *v;
}

[[noreturn]] void wrong_type(const GgufFile& f, const std::string& key, const GgufValue& v,
                             const char* expected) {
  std::string got = gguf_type_name(v.type);
  if (v.type == GgufType::ARRAY) got += fmt::format(" of {}", gguf_type_name(v.elem_type));
  fail("{}: metadata key '{}' is {}, expected {}", f.path(), key, got, expected);
}

int64_t int_of(const GgufFile& f, const std::string& key, const GgufValue& v) {
  if (!v.is_integer()) wrong_type(f, key, v, "an integer");
  try {
    return v.as_int();
  } catch (const Error& e) {
    fail("{}: metadata key '{}': {}", f.path(), key, e.what());
  }
}

const GgufValue& array_of(const GgufFile& f, const std::string& key, const char* expected) {
  const GgufValue& v = require(f, key);
  if (v.type != GgufType::ARRAY) wrong_type(f, key, v, expected);
  return v;
}

}  // namespace

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue& v = require(*this, key);
  if (v.type != GgufType::STRING) wrong_type(*this, key, v, "a string");
  return v.s;
}

int64_t GgufFile::get_int(const std::string& key) const {
  return int_of(*this, key, require(*this, key));
}

int64_t GgufFile::get_int(const std::string& key, int64_t fallback) const {
  const GgufValue* v = find(key);
  return v ? int_of(*this, key, *v) : fallback;
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue& v = require(*this, key);
  if (!v.is_float() && !v.is_integer()) wrong_type(*this, key, v, "a number");
  return v.as_float();
}

double GgufFile::get_float(const std::string& key, double fallback) const {
  return find(key) ? get_float(key) : fallback;
}

bool GgufFile::get_bool(const std::string& key, bool fallback) const {
  const GgufValue* v = find(key);
  if (!v) return fallback;
  if (v->type != GgufType::BOOL) wrong_type(*this, key, *v, "a bool");
  return v->b;
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue& v = array_of(*this, key, "an array of strings");
  if (v.elem_type != GgufType::STRING) wrong_type(*this, key, v, "an array of strings");
  std::vector<std::string> out;
  out.reserve(v.arr.size());
  for (const auto& e : v.arr) out.push_back(e.s);
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue& v = array_of(*this, key, "an array of integers");
  GgufValue probe;
  probe.type = v.elem_type;
  if (!probe.is_integer()) wrong_type(*this, key, v, "an array of integers");
  std::vector<int64_t> out;
  out.reserve(v.arr.size());
  for (const auto& e : v.arr) out.push_back(int_of(*this, key, e));
  return out;
}

std::vector<float> GgufFile::get_float_array(const std::string& key) const {
  const GgufValue& v = array_of(*this, key, "an array of numbers");
  GgufValue probe;
  probe.type = v.elem_type;
  if (!probe.is_integer() && !probe.is_float()) wrong_type(*this, key, v, "an array of numbers");
  std::vector<float> out;
  out.reserve(v.arr.size());
  for (const auto& e : v.arr) out.push_back(static_cast<float>(e.as_float()));
  return out;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor(const std::string& name) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (!t) fail("{}: missing tensor '{}'", path(), name);
  return *t;
}

const uint8_t* GgufFile::data(const GgufTensorInfo& t) const {
  if (t.split >= maps_.size() || t.file_offset > maps_[t.split]->size ||
      t.nbytes > maps_[t.split]->size - t.file_offset)
    fail("{}: tensor '{}' is not inside split {}", path(), t.name, t.split);
  return maps_[t.split]->base + t.file_offset;
}

std::span<const uint8_t> GgufFile::mapping(uint32_t split) const {
  file_size(split);  // validates
  return {maps_[split]->base, maps_[split]->size};
}

uint64_t GgufFile::file_size(uint32_t split) const {
  if (split >= maps_.size())
    fail("{}: no split part {} (model has {})", path(), split, maps_.size());
  return maps_[split]->size;
}

uint64_t GgufFile::data_section_offset(uint32_t split) const {
  file_size(split);
  return maps_[split]->data_start;
}

void GgufFile::Mapping::advise(uint64_t off, uint64_t n, int advice) const {
  if (n == 0 || !file_backed()) return;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t start = off / page * page;
  const uint64_t end = std::min(size, off + n);
  // Advice is only a hint: a failure changes performance, never results.
  (void)::madvise(const_cast<uint8_t*>(base) + start, end - start, advice);
}

void GgufFile::prefetch(const GgufTensorInfo& t) const {
  data(t);
  maps_[t.split]->advise(t.file_offset, t.nbytes, MADV_WILLNEED);
}

void GgufFile::drop_mapped(const void* p, uint64_t n) const {
  const auto* u = static_cast<const uint8_t*>(p);
  for (const auto& m : maps_) {
    if (!m->file_backed() || u < m->base || u + n > m->base + m->size || n == 0) continue;
    const uint64_t off = static_cast<uint64_t>(u - m->base);
    m->advise(off, n, MADV_DONTNEED);
    const int fd = ::open(m->path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    (void)::posix_fadvise(fd, static_cast<off_t>(off), static_cast<off_t>(n), POSIX_FADV_DONTNEED);
    ::close(fd);
    return;
  }
}

void GgufFile::release(const GgufTensorInfo& t) const {
  data(t);
  maps_[t.split]->advise(t.file_offset, t.nbytes, MADV_DONTNEED);
}

void GgufFile::advise_random() const {
  for (const auto& m : maps_) m->advise(0, m->size, MADV_RANDOM);
}

}  // namespace moeflow
