// Opening a model: the first file, then (for llama.cpp gguf-split models) every other part,
// merged into one tensor list.
#include <sys/stat.h>

#include <regex>

#include "core/error.h"
#include "gguf/gguf_parser.h"

namespace moeflow {
namespace {

constexpr int64_t kMaxSplits = 99999;  // five digits in the gguf-split file name

const GgufValue* find_kv(const GgufPart& p, const char* key) {
  for (const auto& kv : p.kv)
    if (kv.key == key) return &kv.value;
  return nullptr;
}

// Value of an integer key, or `fallback` when absent.
int64_t split_int(const GgufPart& p, const std::string& path, const char* key, int64_t fallback) {
  const GgufValue* v = find_kv(p, key);
  if (!v) return fallback;
  if (!v->is_integer() || v->type == GgufType::BOOL)
    fail("{}: metadata key '{}' is {}, expected an integer", path, key, gguf_type_name(v->type));
  if (v->type == GgufType::UINT64 && v->u > static_cast<uint64_t>(kMaxSplits))
    fail("{}: metadata key '{}' = {} is out of range", path, key, v->u);
  return v->i;
}

struct SplitName {
  std::string prefix;
  int64_t no = 0;
  int64_t count = 0;
};

bool parse_split_name(const std::string& path, SplitName& out) {
  static const std::regex re(R"(^(.*)-([0-9]{5})-of-([0-9]{5})\.gguf$)");
  std::smatch m;
  if (!std::regex_match(path, m, re)) return false;
  out.prefix = m[1].str();
  out.no = std::stoll(m[2].str());
  out.count = std::stoll(m[3].str());
  return true;
}

std::string split_path(const std::string& prefix, int64_t no, int64_t count) {
  return fmt::format("{}-{:05d}-of-{:05d}.gguf", prefix, no, count);
}

}  // namespace

std::unique_ptr<GgufFile> GgufParser::open(const std::string& path) {
  return open(std::make_unique<GgufFile::Mapping>(path));
}

std::unique_ptr<GgufFile> GgufParser::open(std::unique_ptr<GgufFile::Mapping> first) {
  const std::string path = first->path;
  const bool in_memory = !first->owned.empty();
  GgufPart p0 = parse(path, first->base, first->size, 0);
  first->data_start = p0.data_start;
  first->alignment = p0.alignment;

  const int64_t count = split_int(p0, path, "split.count", 1);
  if (count < 1 || count > kMaxSplits)
    fail("{}: metadata key 'split.count' = {} is out of range 1..{}", path, count, kMaxSplits);
  const int64_t no = split_int(p0, path, "split.no", 0);
  if (no < 0 || no >= count)
    fail("{}: metadata key 'split.no' = {} is out of range for {} parts", path, no, count);

  SplitName name;
  if (count > 1 && in_memory)
    fail("{}: split model (part {} of {}) must be opened from its files", path, no + 1, count);
  if (count > 1) {
    if (!parse_split_name(path, name) || name.count != count)
      fail(
          "{}: file is part {} of a {}-part split model but its name does not end in "
          "'-{:05d}-of-{:05d}.gguf'",
          path, no + 1, count, no + 1, count);
    if (name.no != no + 1)
      fail("{}: file name says split part {} but metadata 'split.no' says part {}", path, name.no,
           no + 1);
    if (no != 0) {
      // Opening any part opens the whole model, starting from its first part.
      return open(split_path(name.prefix, 1, count));
    }
  }

  const int64_t split_tensors =
      count > 1 ? split_int(p0, path, "split.tensors.count", -1) : int64_t{-1};

  std::unique_ptr<GgufFile> f(new GgufFile());
  f->paths_.push_back(path);
  f->maps_.push_back(std::move(first));
  f->version_ = p0.version;
  f->alignment_ = p0.alignment;
  f->kv_ = std::move(p0.kv);
  for (size_t k = 0; k < f->kv_.size(); ++k) f->kv_index_.emplace(f->kv_[k].key, k);
  f->tensors_ = std::move(p0.tensors);

  for (int64_t i = 1; i < count; ++i) {
    const std::string part_path = split_path(name.prefix, i + 1, count);
    struct stat st {};
    if (::stat(part_path.c_str(), &st) != 0)
      fail("{}: split part {} of {} is missing: '{}'", path, i + 1, count, part_path);
    auto map = std::make_unique<GgufFile::Mapping>(part_path);
    GgufPart p = parse(part_path, map->base, map->size, static_cast<uint32_t>(i));
    map->data_start = p.data_start;
    map->alignment = p.alignment;
    const int64_t pno = split_int(p, part_path, "split.no", -1);
    const int64_t pcount = split_int(p, part_path, "split.count", -1);
    if (pno != i || pcount != count)
      fail("{}: expected split part {} of {} but its metadata says split.no={} split.count={}",
           part_path, i + 1, count, pno, pcount);
    for (auto& t : p.tensors) f->tensors_.push_back(std::move(t));
    f->paths_.push_back(part_path);
    f->maps_.push_back(std::move(map));
  }

  for (size_t k = 0; k < f->tensors_.size(); ++k) {
    const auto& t = f->tensors_[k];
    if (!f->tensor_index_.emplace(t.name, k).second)
      fail("{}: duplicate tensor name '{}' (in split part {})", path, t.name, t.split + 1);
  }
  if (split_tensors >= 0 && static_cast<uint64_t>(split_tensors) != f->tensors_.size())
    fail("{}: metadata key 'split.tensors.count' = {} but the {} parts hold {} tensors", path,
         split_tensors, count, f->tensors_.size());
  return f;
}

}  // namespace moeflow
