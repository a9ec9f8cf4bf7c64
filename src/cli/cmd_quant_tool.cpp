// `moeflow quant-tool` (hidden): raw f32 <-> block bytes through the scalar reference
// conversions, so that Python tests can cross-check them against independent implementations.
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/error.h"
#include "quant/quant.h"

namespace moeflow::cli {
namespace {

std::vector<uint8_t> read_all(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("quant-tool: cannot open input file {}", path);
  std::vector<uint8_t> data;
  uint8_t buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) data.insert(data.end(), buf, buf + got);
  const bool bad = std::ferror(f);
  std::fclose(f);
  if (bad) fail("quant-tool: error reading {}", path);
  return data;
}

void write_all(const std::string& path, const void* data, size_t n) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) fail("quant-tool: cannot create output file {}", path);
  const bool ok = std::fwrite(data, 1, n, f) == n;
  if (std::fclose(f) != 0 || !ok) fail("quant-tool: error writing {}", path);
}

struct Options {
  std::string mode, type, in, out;
  int64_t row_len = 0;
};

int run(const Options& o) {
  const auto t = type_from_name(o.type);
  if (!t) fail("quant-tool: unknown --type {}", o.type);
  const TypeTraits& tr = type_traits(*t);
  const std::vector<uint8_t> in = read_all(o.in);
  if (o.mode == "quantize") {
    if (!can_quantize(*t)) fail("quant-tool: moeflow cannot quantize to {}", tr.name);
    if (in.size() % sizeof(float) != 0)
      fail("quant-tool: {} is not a whole number of f32 values", o.in);
    const int64_t n = (int64_t)(in.size() / sizeof(float));
    const int64_t row = o.row_len > 0 ? o.row_len : n;
    if (row == 0 || n % row != 0)
      fail("quant-tool: {} f32 values do not split into rows of {}", n, row);
    const size_t rb = row_bytes(*t, row);
    std::vector<float> x((size_t)n);
    std::memcpy(x.data(), in.data(), in.size());
    std::vector<uint8_t> out(rb * (size_t)(n / row));
    for (int64_t r = 0; r < n / row; ++r)
      quantize_row(*t, x.data() + r * row, out.data() + r * rb, row);
    write_all(o.out, out.data(), out.size());
  } else if (o.mode == "dequantize") {
    if (!can_dequantize(*t)) fail("quant-tool: moeflow cannot dequantize {}", tr.name);
    if (in.size() % tr.type_size != 0)
      fail("quant-tool: {} is not a whole number of {} blocks ({} bytes each)", o.in, tr.name,
           tr.type_size);
    const int64_t n = (int64_t)(in.size() / tr.type_size) * tr.block_size;
    const int64_t row = o.row_len > 0 ? o.row_len : n;
    if (row == 0 || n % row != 0)
      fail("quant-tool: {} values do not split into rows of {}", n, row);
    const size_t rb = row_bytes(*t, row);
    std::vector<float> y((size_t)n);
    for (int64_t r = 0; r < n / row; ++r)
      dequantize_row(*t, in.data() + r * rb, y.data() + r * row, row);
    write_all(o.out, y.data(), y.size() * sizeof(float));
  } else {
    fail("quant-tool: --mode must be quantize or dequantize, not {}", o.mode);
  }
  return 0;
}

const bool registered_quant_tool = register_command(
    "quant-tool", "Convert raw f32 <-> quantized blocks (testing aid)", [](CLI::App& sub) {
      auto o = std::make_shared<Options>();
      sub.group("");  // hidden from --help: a test aid, not a user command
      sub.add_option("--mode", o->mode, "quantize | dequantize")->required();
      sub.add_option("--type", o->type, "block type, e.g. Q4_K")->required();
      sub.add_option("--in", o->in, "input file (raw little-endian f32, or block bytes)")
          ->required();
      sub.add_option("--out", o->out, "output file")->required();
      sub.add_option("--row-len", o->row_len, "elements per row (default: whole file is one row)");
      return CommandMain([o] { return run(*o); });
    });

}  // namespace
}  // namespace moeflow::cli
