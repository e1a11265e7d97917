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

// A sample of softmax(s), s[i] = row[i] / divisor (float32 division): the first index whose running
// sum of exp(s[j] - max s) (float32 exponentials, 0 below -87.3, summed in float64 in index order) exceeds
// u times their total; the last index of positive weight where rounding leaves none. -1, nothing drawn,
// where the row holds a NaN or no finite largest value, or the CPU lacks AVX2 and FMA. Needs
// 0 <= u < 1, n >= 1 and divisor > 0.
int64_t row_sample(const float* row, int64_t n, float divisor, double u);

// Whether row_top and row_sample run on this CPU (AVX2 and FMA).
bool row_top_available();

}  // namespace racer
