#pragma once
// A small line editor for `moeflow chat` (no readline dependency): on a terminal, the line is
// edited in raw mode with the usual keys and earlier lines are recalled with Up/Down; when stdin
// is not a terminal, lines are read as they come and no prompt is shown.
//
// Keys: Left/Right (Ctrl-B/F), Home/End (Ctrl-A/E), Backspace, Delete, Ctrl-K / Ctrl-U (kill to
// end / start), Ctrl-W (word before), Up/Down (Ctrl-P/N) history, Ctrl-L redraw, Enter accepts,
// Ctrl-C discards the line, Ctrl-D on an empty line is end of input.
#include <string>
#include <vector>

namespace moeflow::cli {

class LineEditor {
 public:
  enum class Result { Line, Eof, Interrupted };

  LineEditor(int in_fd, int out_fd);
  bool interactive() const { return tty_; }

  // Reads one line into `line` (without its newline). Interrupted (Ctrl-C, or a signal while
  // reading a pipe): `line` holds what had been typed, which the caller discards.
  Result read(const std::string& prompt, std::string& line);
  // Adds a line to the history (consecutive duplicates and empty lines are not kept).
  void add_history(const std::string& line);

 private:
  Result read_raw(const std::string& prompt, std::string& line);
  Result read_plain(std::string& line);
  int next_byte();  // -1 at end of input or on error (EINTR included: a signal ends the read)
  void redraw(const std::string& prompt, const std::string& text, size_t cursor);

  int in_, out_;
  bool tty_;
  std::string pending_;  // bytes read past the end of the last line
  std::vector<std::string> history_;
};

}  // namespace moeflow::cli
