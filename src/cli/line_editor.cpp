#include "cli/line_editor.h"

#include <errno.h>
#include <poll.h>
#include <termios.h>
#include <unistd.h>

#include <fmt/format.h>

namespace moeflow::cli {
namespace {

constexpr int kEnd = -1, kSignal = -2;

// The terminal in raw mode for the time of one read: keys arrive one by one, unechoed, and
// Ctrl-C is a key (ISIG off) rather than a signal.
class RawMode {
 public:
  explicit RawMode(int fd) : fd_(fd) {
    if (tcgetattr(fd_, &saved_) != 0) return;
    termios raw = saved_;
    raw.c_iflag &= ~(tcflag_t)(IXON | ICRNL | BRKINT | INPCK | ISTRIP);
    raw.c_lflag &= ~(tcflag_t)(ECHO | ICANON | ISIG | IEXTEN);
    raw.c_cflag |= CS8;
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    ok_ = tcsetattr(fd_, TCSAFLUSH, &raw) == 0;
  }
  ~RawMode() {
    if (ok_) tcsetattr(fd_, TCSAFLUSH, &saved_);
  }
  RawMode(const RawMode&) = delete;
  RawMode& operator=(const RawMode&) = delete;

 private:
  int fd_;
  termios saved_{};
  bool ok_ = false;
};

bool continuation(char c) { return ((unsigned char)c & 0xC0) == 0x80; }

size_t prev_char(const std::string& s, size_t i) {
  if (i == 0) return 0;
  --i;
  while (i > 0 && continuation(s[i])) --i;
  return i;
}

size_t next_char(const std::string& s, size_t i) {
  if (i >= s.size()) return s.size();
  ++i;
  while (i < s.size() && continuation(s[i])) ++i;
  return i;
}

size_t chars(const std::string& s, size_t from) {
  size_t n = 0;
  for (size_t i = from; i < s.size(); ++i) n += !continuation(s[i]);
  return n;
}

}  // namespace

LineEditor::LineEditor(int in_fd, int out_fd)
    : in_(in_fd), out_(out_fd), tty_(isatty(in_fd) && isatty(out_fd)) {}

void LineEditor::add_history(const std::string& line) {
  if (line.empty() || (!history_.empty() && history_.back() == line)) return;
  history_.push_back(line);
}

int LineEditor::next_byte() {
  if (pending_.empty()) {
    char buf[256];
    const ssize_t n = ::read(in_, buf, sizeof buf);
    if (n < 0) return errno == EINTR ? kSignal : kEnd;
    if (n == 0) return kEnd;
    pending_.assign(buf, (size_t)n);
  }
  const unsigned char c = (unsigned char)pending_.front();
  pending_.erase(0, 1);
  return c;
}

LineEditor::Result LineEditor::read(const std::string& prompt, std::string& line) {
  return tty_ ? read_raw(prompt, line) : read_plain(line);
}

LineEditor::Result LineEditor::read_plain(std::string& line) {
  line.clear();
  for (;;) {
    const int c = next_byte();
    if (c == kSignal) return Result::Interrupted;
    if (c == kEnd) return line.empty() ? Result::Eof : Result::Line;
    if (c == '\n') break;
    line += (char)c;
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return Result::Line;
}

void LineEditor::redraw(const std::string& prompt, const std::string& text, size_t cursor) {
  std::string s = "\r" + prompt + text + "\x1b[K";
  const size_t back = chars(text, cursor);
  if (back) s += fmt::format("\x1b[{}D", back);
  [[maybe_unused]] ssize_t r = ::write(out_, s.data(), s.size());
}

LineEditor::Result LineEditor::read_raw(const std::string& prompt, std::string& line) {
  RawMode raw(in_);
  std::string text, draft;
  size_t cursor = 0, h = history_.size();
  auto out = [&](const char* s) {
    [[maybe_unused]] ssize_t r = ::write(out_, s, std::char_traits<char>::length(s));
  };
  auto recall = [&](size_t to) {
    if (h == history_.size()) draft = text;
    h = to;
    text = h == history_.size() ? draft : history_[h];
    cursor = text.size();
  };
  redraw(prompt, text, cursor);
  for (;;) {
    int c = next_byte();
    if (c == kSignal) {
      out("\r\n");
      line = text;
      return Result::Interrupted;
    }
    if (c == kEnd) {
      out("\r\n");
      line = text;
      return text.empty() ? Result::Eof : Result::Line;
    }
    switch (c) {
      case '\r':
      case '\n':
        out("\r\n");
        line = text;
        return Result::Line;
      case 3:  // Ctrl-C
        out("^C\r\n");
        line = text;  // discarded; the caller sees whether there was anything
        return Result::Interrupted;
      case 4:  // Ctrl-D
        if (text.empty()) {
          out("\r\n");
          return Result::Eof;
        }
        if (cursor < text.size()) text.erase(cursor, next_char(text, cursor) - cursor);
        break;
      case 127:
      case 8:  // Backspace
        if (cursor > 0) {
          const size_t p = prev_char(text, cursor);
          text.erase(p, cursor - p);
          cursor = p;
        }
        break;
      case 1: cursor = 0; break;                        // Ctrl-A
      case 5: cursor = text.size(); break;              // Ctrl-E
      case 2: cursor = prev_char(text, cursor); break;  // Ctrl-B
      case 6: cursor = next_char(text, cursor); break;  // Ctrl-F
      case 11: text.erase(cursor); break;               // Ctrl-K
      case 21:                                          // Ctrl-U
        text.erase(0, cursor);
        cursor = 0;
        break;
      case 23: {  // Ctrl-W: the word before the cursor and the spaces after it
        size_t p = cursor;
        while (p > 0 && text[p - 1] == ' ') --p;
        while (p > 0 && text[p - 1] != ' ') --p;
        text.erase(p, cursor - p);
        cursor = p;
        break;
      }
      case 12: out("\x1b[H\x1b[2J"); break;  // Ctrl-L
      case 16:                               // Ctrl-P
        if (h > 0) recall(h - 1);
        break;
      case 14:  // Ctrl-N
        if (h < history_.size()) recall(h + 1);
        break;
      case 27: {  // an escape sequence: ESC [ ... final, or ESC O x
        pollfd p{in_, POLLIN, 0};
        if (pending_.empty() && poll(&p, 1, 50) <= 0) break;  // a lone Escape
        const int k = next_byte();
        std::string seq;
        if (k == '[') {
          for (int b = next_byte(); b >= 0; b = next_byte()) {
            seq += (char)b;
            if (b >= 0x40 && b <= 0x7E) break;
          }
        } else if (k == 'O') {
          const int b = next_byte();
          if (b >= 0) seq += (char)b;
        }
        if (seq == "A") {
          if (h > 0) recall(h - 1);
        } else if (seq == "B") {
          if (h < history_.size()) recall(h + 1);
        } else if (seq == "C") {
          cursor = next_char(text, cursor);
        } else if (seq == "D") {
          cursor = prev_char(text, cursor);
        } else if (seq == "H" || seq == "1~" || seq == "7~") {
          cursor = 0;
        } else if (seq == "F" || seq == "4~" || seq == "8~") {
          cursor = text.size();
        } else if (seq == "3~" && cursor < text.size()) {
          text.erase(cursor, next_char(text, cursor) - cursor);
        }
        break;
      }
      default:
        if (c >= 32 || c == '\t') {
          text.insert(cursor, 1, (char)c);
          ++cursor;
        }
        break;
    }
    redraw(prompt, text, cursor);
  }
}

}  // namespace moeflow::cli
