// row_scan.hpp: a sampled row's largest scores and its mass, 8 values at a time.
#include "row_scan.hpp"

#include <immintrin.h>

#include <cmath>

namespace racer {

namespace {

constexpr int64_t kLanes = 8;

// exp(x) of 8 lanes, x <= 0 (Cephes' expf: range reduction by ln 2 in two parts, a degree-5
// polynomial); below -87.3 it is 0, as a float32's exp underflows there.
__attribute__((target("avx2,fma"))) inline __m256 exp8_nonpositive(__m256 x) {
    const __m256 low = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(low, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

// exp(s - best) of s = row[0..8) / divisor: the weights of a group of 8.
__attribute__((target("avx2,fma"))) inline __m256 weights8(const float* row, __m256 d, __m256 best) {
    return exp8_nonpositive(_mm256_sub_ps(_mm256_div_ps(_mm256_loadu_ps(row), d), best));
}

// The weight of one value past the last group of 8.
inline double tail_weight(float x, float divisor, float best) {
    return std::exp(static_cast<double>(x / divisor - best));
}

// Keeps values[0..count) sorted, largest first, at most `cap` of them; a value equal to some already
// there goes after them (the scan meets indices in order: the lower index stays first).
inline void insert(float* values, int64_t* ids, int32_t& count, int32_t cap, float x, int64_t i) {
    int32_t at = count < cap ? count++ : cap - 1;
    while (at > 0 && values[at - 1] < x) {
        values[at] = values[at - 1];
        ids[at] = ids[at - 1];
        --at;
    }
    values[at] = x;
    ids[at] = i;
}

}  // namespace

bool row_top_available() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

__attribute__((target("avx2,fma"))) bool row_top(const float* row, int64_t n, float divisor, int32_t k,
                                                 int64_t* ids, float* values, double* total) {
    if (k < 1 || k > kRowTopMax || n <= k || !(divisor > 0.0f) || !row_top_available()) return false;
    const __m256 d = _mm256_set1_ps(divisor);
    // Nothing at or below the threshold enters; until k values are kept it is -inf (so -inf never enters).
    float threshold = -INFINITY;
    int32_t count = 0;
    bool nan = false;
    auto consider = [&](float x, int64_t i) {
        if (x <= threshold) return;
        if (std::isnan(x)) { nan = true; return; }
        insert(values, ids, count, k, x, i);
        if (count == k) threshold = values[k - 1];
    };
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
        const __m256 s = _mm256_div_ps(_mm256_loadu_ps(row + i), d);
        // lanes above the threshold, or NaN (unordered: not <=)
        int above = _mm256_movemask_ps(_mm256_cmp_ps(s, _mm256_set1_ps(threshold), _CMP_NLE_UQ));
        if (!above) continue;
        alignas(32) float lane[kLanes];
        _mm256_store_ps(lane, s);
        for (int j = 0; j < kLanes; ++j) consider(lane[j], i + j);
    }
    for (; i < n; ++i) consider(row[i] / divisor, i);
    if (nan || count < k || !std::isfinite(values[0])) return false;
    if (total != nullptr) {
        const __m256 best = _mm256_set1_ps(values[0]);
        __m256d sum0 = _mm256_setzero_pd(), sum1 = _mm256_setzero_pd();
        int64_t j = 0;
        for (; j + kLanes <= n; j += kLanes) {
            const __m256 e = weights8(row + j, d, best);
            sum0 = _mm256_add_pd(sum0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
            sum1 = _mm256_add_pd(sum1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
        }
        alignas(32) double lanes[4];
        _mm256_store_pd(lanes, _mm256_add_pd(sum0, sum1));
        double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
        for (; j < n; ++j) sum += tail_weight(row[j], divisor, values[0]);
        *total = sum;
    }
    return true;
}

__attribute__((target("avx2,fma"))) int64_t row_sample(const float* row, int64_t n, float divisor, double u) {
    if (n < 1 || !(divisor > 0.0f) || !(u >= 0.0 && u < 1.0) || !row_top_available()) return -1;
    const __m256 d = _mm256_set1_ps(divisor);
    float best = -INFINITY;
    bool nan = false;
    for (int64_t i = 0; i < n; ++i) {
        const float x = row[i] / divisor;
        nan |= std::isnan(x);
        best = x > best ? x : best;
    }
    if (nan || !std::isfinite(best)) return -1;
    const __m256 vbest = _mm256_set1_ps(best);
    double total = 0.0;
    int64_t i = 0;
    alignas(32) float w[kLanes];
    for (; i + kLanes <= n; i += kLanes) {
        _mm256_store_ps(w, weights8(row + i, d, vbest));
        for (int j = 0; j < kLanes; ++j) total += w[j];
    }
    for (; i < n; ++i) total += tail_weight(row[i], divisor, best);
    // the same weights summed again in the same order, up to the draw
    const double target = u * total;
    double sum = 0.0;
    int64_t last = -1;  // the last index of positive weight so far
    for (i = 0; i + kLanes <= n; i += kLanes) {
        _mm256_store_ps(w, weights8(row + i, d, vbest));
        for (int j = 0; j < kLanes; ++j) {
            if (w[j] <= 0.0f) continue;
            sum += w[j];
            last = i + j;
            if (sum > target) return last;
        }
    }
    for (; i < n; ++i) {
        const double x = tail_weight(row[i], divisor, best);
        if (x <= 0.0) continue;
        sum += x;
        last = i;
        if (sum > target) return last;
    }
    return last;
}

}  // namespace racer
