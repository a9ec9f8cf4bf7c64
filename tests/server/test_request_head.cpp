// scan_request: where a buffered HTTP request stands, from its bytes alone.
#include <gtest/gtest.h>

#include <string>

#include "server/request_head.h"

namespace moeflow::test {
namespace {

using State = RequestScan::State;

RequestScan scan(const std::string& s, HeadLimits lim = {}) { return scan_request(s, lim); }

TEST(RequestHead, CompleteRequestsWithAndWithoutBodies) {
  const RequestScan g = scan("GET /health?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_EQ(g.state, State::Complete);
  EXPECT_EQ(g.method, "GET");
  EXPECT_EQ(g.path, "/health");
  EXPECT_EQ(g.total_bytes, g.head_bytes);
  const std::string head = "POST /v1/completions HTTP/1.1\r\ncontent-LENGTH: 5\r\n\r\n";
  EXPECT_EQ(scan(head).state, State::Incomplete);
  EXPECT_EQ(scan(head + "abcd").state, State::Incomplete);
  const RequestScan p = scan(head + "abcde" + "GET / HTTP/1.1\r\n");  // a pipelined next request
  EXPECT_EQ(p.state, State::Complete);
  EXPECT_EQ(p.total_bytes, head.size() + 5);
  EXPECT_EQ(p.body_bytes, 5u);
  // Blank lines before the request line are skipped.
  EXPECT_EQ(scan("\r\n\r\nGET / HTTP/1.1\r\n\r\n").state, State::Complete);
}

TEST(RequestHead, IncompleteHeadsWaitAndOversizedOnesAreRefused) {
  EXPECT_EQ(scan("").state, State::Incomplete);
  EXPECT_EQ(scan("GET /health HTTP/1.1\r\n").state, State::Incomplete);
  EXPECT_EQ(scan("GET /health HTTP/1.1\r\nX-A: 1\r\nX-B: 2\r\n").state, State::Incomplete);
  HeadLimits lim;
  lim.max_head_bytes = 64;
  EXPECT_EQ(scan("GET / HTTP/1.1\r\nX: " + std::string(100, 'a'), lim).state, State::HeadTooLarge);
  EXPECT_EQ(scan("GET / HTTP/1.1\r\nX: " + std::string(100, 'a') + "\r\n\r\n", lim).state,
            State::HeadTooLarge);
  const RequestScan big = scan("POST / HTTP/1.1\r\nContent-Length: 9999999999\r\n\r\n");
  EXPECT_EQ(big.state, State::BodyTooLarge);
  EXPECT_NE(big.error.find("limit"), std::string::npos);
}

TEST(RequestHead, MalformedHeads) {
  for (const char* bad :
       {"GARBAGE\r\n\r\n", "GET\r\n\r\n", " / HTTP/1.1\r\n\r\n", "GET / FTP/1.0\r\n\r\n",
        "GET / HTTP/1.1\r\nno colon here\r\n\r\n", "POST / HTTP/1.1\r\nContent-Length: 12a\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n"}) {
    const RequestScan r = scan(bad);
    EXPECT_EQ(r.state, State::Malformed) << bad;
    EXPECT_FALSE(r.error.empty()) << bad;
  }
  // The same Content-Length twice is allowed.
  EXPECT_EQ(scan("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx").state,
            State::Complete);
}

TEST(RequestHead, ChunkedBodies) {
  const std::string head = "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  EXPECT_EQ(scan(head).state, State::Incomplete);
  EXPECT_EQ(scan(head + "5\r\nab").state, State::Incomplete);
  EXPECT_EQ(scan(head + "5\r\nabcde\r\n").state, State::Incomplete);
  EXPECT_EQ(scan(head + "5\r\nabcde\r\n0\r\n").state, State::Incomplete);
  const std::string whole =
      head + "5;ext=1\r\nabcde\r\nA\r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\n";
  const RequestScan r = scan(whole + "GET / HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.state, State::Complete);
  EXPECT_EQ(r.total_bytes, whole.size());
  EXPECT_EQ(r.body_bytes, 15u);
  EXPECT_EQ(scan(head + "zz\r\n").state, State::Malformed);
  EXPECT_EQ(scan(head + "3\r\nabcXY").state, State::Malformed);
  HeadLimits lim;
  lim.max_body_bytes = 8;
  EXPECT_EQ(scan(head + "10\r\n", lim).state, State::BodyTooLarge);
}

TEST(RequestHead, ExpectContinueIsLocatedSoItCanBeAnsweredAndDropped) {
  const std::string head =
      "POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n";
  const RequestScan r = scan(head);
  EXPECT_EQ(r.state, State::Incomplete);
  EXPECT_TRUE(r.expect_continue);
  EXPECT_EQ(head.substr(r.expect_line, r.expect_len), "Expect: 100-continue\r\n");
  const RequestScan started = scan(head + "a");
  EXPECT_FALSE(started.expect_continue);  // the body is coming already
  EXPECT_GT(started.expect_len, 0u);
  std::string dropped = head + "abc";
  const RequestScan done = scan(dropped);
  ASSERT_EQ(done.state, State::Complete);
  dropped.erase(done.expect_line, done.expect_len);
  const RequestScan again = scan(dropped);
  EXPECT_EQ(again.state, State::Complete);
  EXPECT_EQ(again.expect_len, 0u);
  EXPECT_EQ(again.body_bytes, 3u);
}

}  // namespace
}  // namespace moeflow::test
