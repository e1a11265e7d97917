// The logits table's top-k of one logits row, where the answer is unique
// (racer_core/drafting/top_k.py; docs/design.md 1.2).
#pragma once

#include <cstdint>

namespace racer {

// Writes the indices of the k largest of row[0..n), largest first, to out[0..k)
// and returns true when that answer is unique: the k + 1 largest values are
// distinct and no value is NaN. Otherwise returns false (out is then
// meaningless) and the caller asks torch.topk, whose order among equal
// values is its own. Needs 1 <= k < n and k <= kTopKMax.
bool top_k_row(const float* row, int64_t n, int32_t k, int64_t* out);

constexpr int32_t kTopKMax = 64;

}  // namespace racer
