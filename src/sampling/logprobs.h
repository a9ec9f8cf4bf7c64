#pragma once
// Log-probabilities of the model's distribution for the OpenAI `logprobs` fields: log-softmax of
// the raw logits (before bias, penalties, temperature and filters, as OpenAI reports them), at
// the chosen token and at the most likely tokens.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace moeflow {

struct TokenLogprobs {
  float logprob = 0;                           // of the chosen token
  std::vector<std::pair<int32_t, float>> top;  // (token, logprob), most likely first, ties by id
};

// top_n may be 0 (no alternatives); it is capped at the vocabulary size.
TokenLogprobs token_logprobs(std::span<const float> logits, int32_t chosen, int top_n);

}  // namespace moeflow
