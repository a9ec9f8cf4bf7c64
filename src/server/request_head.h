#pragma once
// Where a buffered HTTP/1.1 request stands, from its bytes alone: incomplete, complete (head and
// body, Content-Length or chunked), or to be refused (malformed, head or body too large). The
// connection guard (http_guard.h) reads requests with this before a worker thread sees them, so a
// client that trickles its request, or never finishes it, holds no thread. Pure and bounded:
// it never allocates more than the method and path.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace moeflow {

struct HeadLimits {
  size_t max_head_bytes = 16 * 1024;  // request line and headers, through the blank line
  size_t max_body_bytes = 8u << 20;
};

struct RequestScan {
  enum class State { Incomplete, Complete, Malformed, HeadTooLarge, BodyTooLarge };
  State state = State::Incomplete;
  size_t head_bytes = 0;      // once the head is complete: through the blank line
  size_t total_bytes = 0;     // Complete: head and body
  uint64_t body_bytes = 0;    // Content-Length, or the chunk data so far
  bool scan_chunked = false;  // the body is chunked (its end is only found by walking it)
  // "Expect: 100-continue": where the header line is (expect_len 0: none), so the guard can answer
  // it and drop it; expect_continue: it is there and no byte of the body has arrived yet.
  size_t expect_line = 0, expect_len = 0;
  bool expect_continue = false;
  std::string method, path;  // once the head is complete; path without the query
  std::string error;         // Malformed / too large: why, for the response
};

RequestScan scan_request(std::string_view buf, const HeadLimits& lim);

}  // namespace moeflow
