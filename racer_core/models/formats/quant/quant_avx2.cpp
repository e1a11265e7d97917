// The kernel compiled for AVX2 + FMA + F16C (8 float lanes).
#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <type_traits>

#include "quant.hpp"

#pragma GCC target("avx2,fma,f16c")

namespace {
#include "quant_layout.hpp"

struct Avx2 {
    using V = __m256;
    static constexpr int W = 8;
    static constexpr int R = 3;  // activation rows per tile: 4x3 accumulators + 3 x + 1 w in 16 registers
    static V zero() { return _mm256_setzero_ps(); }
    static V load(const float* p) { return _mm256_loadu_ps(p); }
    static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
    static float sum(V v) { return layout_hsum(v); }  // fixed order: halves, then pairs
};
}  // namespace
#define VEC Avx2
#include "quant_impl.hpp"

namespace {
struct Avx2Dot {
    static constexpr int P = 2, P2 = 4, P1 = 4, R = 4;  // output rows per tile for 3-4, 2 and 1 activation rows
    // repacked (quant_repack.hpp): groups of 8 rows per tile for 1 and 2 activation rows, else rows per tile;
    // one group, one stream of weights (6 Dec 2026: a one-row step's linears 1.3x faster than with four)
    static constexpr int G1 = 1, G2 = 1, RR = 4;
    static constexpr bool PAIRS16 = true;  // a Q4 block's int16 pair sums added before one madd
    static constexpr bool BIAS_Q8 = false;  // maddubs would saturate on x + 128: Q8_0 keeps the sign trick
    static __m256i dot(__m256i u8, __m256i s8) {
        return _mm256_madd_epi16(_mm256_maddubs_epi16(u8, s8), _mm256_set1_epi16(1));
    }
    static __m256i dot_add(__m256i acc, __m256i u8, __m256i s8) { return _mm256_add_epi32(acc, dot(u8, s8)); }
};
}  // namespace
#define DOT Avx2Dot
#include "quant_q8.hpp"
#include "quant_repack.hpp"
#include "quant_peak.hpp"

namespace racer_quant {
void matmul_avx2(int type, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                 int threads) {
    matmul_any(type, w, rows, cols, x, T, y, threads);
}
void matmul_q8_avx2(int type, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                    int threads) {
    q8_matmul_any(type, w, rows, cols, x, T, y, threads);
}
void matmul_rp_avx2(int type, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                    int threads) {
    rp_matmul_any(type, w, rows, cols, x, T, y, threads);
}
double dot_peak_avx2(int threads, int64_t iters, int floats) {  // maddubs' pair sums in int16, one madd a block
    return peak_rate_any<__m256i, 8>(
        [](__m256i acc, __m256i u, __m256i s) {
            __asm__ volatile("" : "+v"(u));  // each product opaque, as dpbusd's accumulating ones are by themselves
            return _mm256_add_epi16(acc, _mm256_maddubs_epi16(u, s));
        },
        [](__m256i v) { return _mm256_madd_epi16(v, _mm256_set1_epi16(1)); }, threads, iters, floats);
}
void quantize_rows_avx2(const float* x, int64_t T, int64_t cols, int8_t* q, float* d, float* s) {
    q8_quantize_rows(x, T, cols, q, d, s);
}
void dequantize_avx2(int type, const uint8_t* w, int64_t rows, int64_t cols, float* out) {
    dequantize_any(type, w, rows, cols, out);
}
}  // namespace racer_quant
