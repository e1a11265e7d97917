#include "top_k.hpp"

#include <cmath>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace racer {

namespace {

constexpr int64_t kBlock = 32;

// Whether any of row[0..kBlock) is not <= threshold (NaN included): most
// blocks hold nothing above it, and this test is what the scan mostly does.
inline bool any_above(const float* row, float threshold) {
#if defined(__SSE2__)
  const __m128 t = _mm_set1_ps(threshold);
  __m128 acc = _mm_setzero_ps();
  for (int64_t j = 0; j < kBlock; j += 4) acc = _mm_or_ps(acc, _mm_cmpnle_ps(_mm_loadu_ps(row + j), t));
  return _mm_movemask_ps(acc) != 0;
#else
  int hit = 0;
  for (int64_t j = 0; j < kBlock; ++j) hit |= !(row[j] <= threshold);
  return hit != 0;
#endif
}

// Keeps values[0..count) sorted, largest first, at most `cap` of them; an
// equal value goes after those already there (which of them is kept does not
// matter: equal values among the k + 1 largest make the answer not unique).
inline void insert(float* values, int64_t* indices, int32_t& count, int32_t cap, float x, int64_t i) {
  int32_t at = count < cap ? count++ : cap - 1;
  while (at > 0 && values[at - 1] < x) {
    values[at] = values[at - 1];
    indices[at] = indices[at - 1];
    --at;
  }
  values[at] = x;
  indices[at] = i;
}

}  // namespace

bool top_k_row(const float* row, int64_t n, int32_t k, int64_t* out) {
  if (k < 1 || k > kTopKMax || n <= k) return false;
  float values[kTopKMax + 1];
  int64_t indices[kTopKMax + 1];
  const int32_t cap = k + 1;
  int32_t count = 0;
  // Below the threshold nothing enters; until k + 1 values are kept it is -inf
  // (so a -inf never enters, and a row of too few larger values is left to torch).
  float threshold = -INFINITY;
  bool nan = false;
  auto consider = [&](int64_t j) {
    const float x = row[j];
    if (x <= threshold) return;
    if (std::isnan(x)) {
      nan = true;
      return;
    }
    insert(values, indices, count, cap, x, j);
    if (count == cap) threshold = values[cap - 1];
  };
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    if (!any_above(row + i, threshold)) continue;
    for (int64_t j = i; j < i + kBlock; ++j) consider(j);
  }
  for (; i < n; ++i) consider(i);
  if (nan || count < cap) return false;
  for (int32_t j = 0; j < k; ++j) {
    if (!(values[j] > values[j + 1])) return false;
    out[j] = indices[j];
  }
  return true;
}

}  // namespace racer
