// A sampled row's largest scores and its total mass in one pass over the row
// (racer_core/verify/kept_tokens.py; its torch reference is kept_tokens.reference_top).
#pragma once

#include <cstdint>

namespace racer {

constexpr int32_t kRowTopMax = 256;

// The k largest of s[i] = row[i] / divisor (a float32 division, as torch divides a float32 row by a
// Python float), largest first, into ids[0..k) and values[0..k); among equal values the lower index
// first. With `total`, also the sum over the whole row of exp(s[i] - values[0]) (float32 exponentials
// summed in float64). Returns false, its outputs meaningless, where the row holds a NaN, fewer than k
// values above -inf, or its largest value is not finite, or where the CPU lacks AVX2 and FMA: the
// caller then takes its reference. Needs 1 <= k <= kRowTopMax, k < n and divisor > 0.
bool row_top(const float* row, int64_t n, float divisor, int32_t k, int64_t* ids, float* values, double* total);

// Whether row_top runs on this CPU (AVX2 and FMA).
bool row_top_available();

}  // namespace racer
