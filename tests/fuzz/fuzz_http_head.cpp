// fuzz-sources: src/server/request_head.cpp
// fuzz-link: moeflow_core
// libFuzzer target: scan_request (src/server/request_head.h), which the connection guard runs on
// raw bytes from the network before any worker sees them. Its verdict must be consistent with
// the bytes and the limits, and scanning a prefix must never claim more than the whole did.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/request_head.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using State = moeflow::RequestScan::State;
  moeflow::HeadLimits lim;
  lim.max_head_bytes = 1024;
  lim.max_body_bytes = 4096;
  const std::string_view buf(reinterpret_cast<const char*>(data), size);
  const moeflow::RequestScan r = moeflow::scan_request(buf, lim);
  if (r.state == State::Complete) {
    check(r.head_bytes > 0 && r.head_bytes <= r.total_bytes && r.total_bytes <= size);
    check(r.head_bytes <= lim.max_head_bytes && r.body_bytes <= lim.max_body_bytes);
    check(!r.method.empty());
    // The request alone (without what follows it) is complete too, with the same size.
    const moeflow::RequestScan alone = moeflow::scan_request(buf.substr(0, r.total_bytes), lim);
    check(alone.state == State::Complete && alone.total_bytes == r.total_bytes);
  }
  if (r.expect_len > 0) check(r.expect_line + r.expect_len <= size);
  if (r.state != State::Incomplete && r.state != State::Complete) check(!r.error.empty());
  return 0;
}
