#pragma once
// Parsing of token-id lists given on the command line ("1,2,3" or "ids:1,2,3").
#include <cstdint>
#include <string>
#include <vector>

namespace moeflow {

// Throws moeflow::Error naming `what` (the flag) on an empty list or a non-integer entry.
std::vector<int32_t> parse_token_list(const std::string& s, const std::string& what);

// True when s starts with "ids:".
bool is_id_prompt(const std::string& s);

}  // namespace moeflow
