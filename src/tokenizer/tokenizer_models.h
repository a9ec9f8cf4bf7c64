#pragma once
// Factories for the concrete tokenizer models (internal to the tokenizer module).
#include <memory>

#include "tokenizer/tokenizer.h"

namespace moeflow {

std::unique_ptr<Tokenizer> make_spm_tokenizer(const GgufFile& f);
std::unique_ptr<Tokenizer> make_bpe_tokenizer(const GgufFile& f);

// The byte a BYTE token "<0xHH>" stands for, or -1 when `text` is not exactly of that form.
int byte_token_value(std::string_view text);

}  // namespace moeflow
