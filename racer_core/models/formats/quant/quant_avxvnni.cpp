// The integer kernel compiled for AVX2 with AVX-VNNI (the VEX-encoded dpbusd
// of Intel's CPUs from Alder Lake on, most of which have no AVX-512): one
// dpbusd instead of maddubs + add + madd per block, on the AVX2 build's
// 256-bit tiles (16 registers). The products and their sums are exact
// integers either way, so the bits are the AVX2 build's.
#include <cstdint>
#include <cstring>
#include <immintrin.h>

#include "quant.hpp"

#pragma GCC target("avx2,fma,f16c,avxvnni")

namespace {
struct AvxVnniDot {
    static constexpr int P = 2, P2 = 4, P1 = 4, R = 4;  // output rows per tile for 3-4, 2 and 1 activation rows
    static constexpr int G1 = 4, G2 = 2, RR = 8;  // repacked: fewer registers than AVX2 needs, so larger tiles
    static constexpr bool PAIRS16 = false;              // dpbusd accumulates in int32 itself
    static constexpr bool BIAS_Q8 = true;  // Q8_0's dots on x + 128 (quant_repack.hpp, rp_bias_q8)
    static __m256i dot(__m256i u8, __m256i s8) { return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u8, s8); }
    static __m256i dot_add(__m256i acc, __m256i u8, __m256i s8) { return _mm256_dpbusd_avx_epi32(acc, u8, s8); }
};
}  // namespace
#define DOT AvxVnniDot
#include "quant_q8.hpp"
#include "quant_repack.hpp"
#include "quant_peak.hpp"

namespace racer_quant {
void matmul_q8_avxvnni(int type, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                       int threads) {
    q8_matmul_any(type, w, rows, cols, x, T, y, threads);
}
void matmul_rp_avxvnni(int type, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                       int threads) {
    rp_matmul_any(type, w, rows, cols, x, T, y, threads);
}
double dot_peak_avxvnni(int threads, int64_t iters, int floats) {
    return peak_rate_any<__m256i, 8>([](__m256i acc, __m256i u, __m256i s) { return AvxVnniDot::dot_add(acc, u, s); },
                                     [](__m256i v) { return v; }, threads, iters, floats);
}
}  // namespace racer_quant
