#include "server/request_head.h"

#include <fmt/format.h>

namespace moeflow {
namespace {

using State = RequestScan::State;

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = (char)(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = (char)(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

RequestScan refuse(RequestScan r, State s, std::string why) {
  r.state = s;
  r.error = std::move(why);
  return r;
}

// Chunked body from `pos`: complete at the blank line after the last (0) chunk's trailers.
RequestScan scan_chunked(std::string_view buf, size_t pos, RequestScan r, const HeadLimits& lim) {
  uint64_t data = 0;
  for (;;) {
    const size_t eol = buf.find("\r\n", pos);
    if (eol == std::string_view::npos) {
      if (buf.size() - pos > 1024)
        return refuse(r, State::Malformed, "a chunk-size line is longer than 1024 bytes");
      r.body_bytes = data;
      return r;
    }
    std::string_view line = buf.substr(pos, eol - pos);
    line = line.substr(0, line.find(';'));  // chunk extensions are ignored
    line = trim(line);
    if (line.empty() || line.size() > 15)
      return refuse(r, State::Malformed, "a chunk size is not a hex number");
    uint64_t size = 0;
    for (char c : line) {
      int v = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (v < 0) return refuse(r, State::Malformed, "a chunk size is not a hex number");
      size = size * 16 + (uint64_t)v;
    }
    pos = eol + 2;
    if (size == 0) break;
    data += size;
    if (data > lim.max_body_bytes)
      return refuse(r, State::BodyTooLarge,
                    fmt::format("the request body is more than {} bytes; the limit is {}", data,
                                lim.max_body_bytes));
    if (buf.size() < pos + size + 2) {
      r.body_bytes = data;
      return r;
    }
    if (buf.substr(pos + size, 2) != "\r\n")
      return refuse(r, State::Malformed, "a chunk does not end with CRLF");
    pos += size + 2;
  }
  // Trailer fields, then the blank line.
  for (;;) {
    const size_t eol = buf.find("\r\n", pos);
    if (eol == std::string_view::npos) {
      if (buf.size() - pos > lim.max_head_bytes)
        return refuse(r, State::HeadTooLarge, "the trailer fields are too large");
      r.body_bytes = data;
      return r;
    }
    if (eol == pos) {
      r.state = State::Complete;
      r.body_bytes = data;
      r.total_bytes = eol + 2;
      return r;
    }
    pos = eol + 2;
  }
}

}  // namespace

RequestScan scan_request(std::string_view buf, const HeadLimits& lim) {
  RequestScan r;
  // Blank lines before a request line are allowed (RFC 9112 2.2).
  size_t start = 0;
  while (start + 1 < buf.size() && buf[start] == '\r' && buf[start + 1] == '\n') start += 2;
  const size_t end = buf.find("\r\n\r\n", start);
  if (end == std::string_view::npos) {
    if (buf.size() > lim.max_head_bytes)
      return refuse(
          r, State::HeadTooLarge,
          fmt::format("the request line and headers are longer than {} bytes", lim.max_head_bytes));
    return r;
  }
  r.head_bytes = end + 4;
  if (r.head_bytes > lim.max_head_bytes)
    return refuse(
        r, State::HeadTooLarge,
        fmt::format("the request line and headers are longer than {} bytes", lim.max_head_bytes));
  const std::string_view head = buf.substr(start, end - start);
  const size_t line_end = head.find("\r\n");
  const std::string_view line = head.substr(0, line_end);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == 0 || sp2 == std::string_view::npos || line.substr(sp2 + 1).substr(0, 5) != "HTTP/")
    return refuse(r, State::Malformed, "the request line is not 'METHOD PATH HTTP/1.1'");
  r.method = std::string(line.substr(0, sp1));
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  r.path = std::string(target.substr(0, target.find('?')));

  bool has_length = false, chunked = false;
  uint64_t length = 0;
  size_t pos = line_end == std::string_view::npos ? head.size() : line_end + 2;
  while (pos < head.size()) {
    size_t e = head.find("\r\n", pos);
    if (e == std::string_view::npos) e = head.size();
    const std::string_view h = head.substr(pos, e - pos);
    const size_t colon = h.find(':');
    if (colon == std::string_view::npos || colon == 0)
      return refuse(r, State::Malformed, "a header line has no name");
    const std::string_view name = h.substr(0, colon), value = trim(h.substr(colon + 1));
    if (iequals(name, "content-length")) {
      if (value.empty() || value.size() > 19 ||
          value.find_first_not_of("0123456789") != std::string_view::npos)
        return refuse(r, State::Malformed, "Content-Length is not a number");
      uint64_t v = 0;
      for (char c : value) v = v * 10 + (uint64_t)(c - '0');
      if (has_length && v != length)
        return refuse(r, State::Malformed, "two different Content-Length headers");
      has_length = true;
      length = v;
    } else if (iequals(name, "transfer-encoding")) {
      if (!iequals(value, "chunked"))
        return refuse(r, State::Malformed, "only the chunked transfer encoding is supported");
      chunked = true;
    } else if (iequals(name, "expect") && iequals(value, "100-continue")) {
      r.expect_line = start + pos;
      r.expect_len = e + 2 - pos;
    }
    pos = e + 2;
  }
  // Both framings at once is how requests are smuggled past proxies: refused, as RFC 9112 allows.
  if (has_length && chunked)
    return refuse(r, State::Malformed, "both Content-Length and Transfer-Encoding given");
  if (chunked) {
    r.scan_chunked = true;
    r.expect_continue = r.expect_len > 0 && buf.size() == r.head_bytes;
    return scan_chunked(buf, r.head_bytes, std::move(r), lim);
  }
  r.body_bytes = length;
  if (length > lim.max_body_bytes)
    return refuse(
        r, State::BodyTooLarge,
        fmt::format("the request body is {} bytes; the limit is {}", length, lim.max_body_bytes));
  r.expect_continue = r.expect_len > 0 && length > 0 && buf.size() == r.head_bytes;
  if (buf.size() - r.head_bytes >= length) {
    r.state = State::Complete;
    r.total_bytes = r.head_bytes + (size_t)length;
  }
  return r;
}

}  // namespace moeflow
