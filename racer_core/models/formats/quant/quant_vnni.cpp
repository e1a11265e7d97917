// The integer kernel compiled for AVX-512 VNNI: one dpbusd instead of
// maddubs + madd per block, on 256-bit vectors (32 registers with AVX-512VL),
// and repacked Q4_0/Q4_1/Q8_0 on 512-bit ones (quant_repack_wide.hpp).
#include <cstdint>
#include <cstring>
#include <immintrin.h>

#include "quant.hpp"

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")

namespace {
struct VnniDot {
    static constexpr int P = 4, P2 = 8, P1 = 8, R = 4;  // output rows per tile for 3-4, 2 and 1 activation rows
    // repacked (quant_repack.hpp), measured on a Sapphire-Rapids-class Xeon (docs/performance.md): tiles of up
    // to 8 rows (5 Dec 2026: 8 rows 2.03x one row, from 2.20x); one group a tile for 1 and 2 rows (6 Dec 2026:
    // a tile's groups are that many streams of weights, and at a row or two, bound by reading the weights,
    // one stream the prefetchers follow read them 1.1-1.3x faster than four)
    static constexpr int G1 = 1, G2 = 1, RR = 8;
    // 512-bit tiles (quant_repack_wide.hpp): rows per tile, from NARROW_ROWS + 1 rows. 10, not 8 (6 Dec 2026, a
    // step's linears): 9-10 rows in one tile, 1.08-1.10x faster (at 0.8B 1.05x), and 16 as 10 + 6 1.06x; tiles of
    // 12 rows were slower from 24 rows on (0.90x)
    static constexpr int WR = 10;
    static constexpr bool PAIRS16 = false;  // dpbusd accumulates in int32 itself
    static constexpr bool BIAS_Q8 = true;  // Q8_0's dots on x + 128 (quant_repack.hpp, rp_bias_q8)
    static __m256i dot(__m256i u8, __m256i s8) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u8, s8); }
    static __m256i dot_add(__m256i acc, __m256i u8, __m256i s8) { return _mm256_dpbusd_epi32(acc, u8, s8); }
};
}  // namespace
#define DOT VnniDot
#include "quant_q8.hpp"
#include "quant_repack.hpp"
#include "quant_repack_wide.hpp"
#define RACER_PEAK_512
#include "quant_peak.hpp"

namespace racer_quant {
void matmul_q8_vnni(int type, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                    int threads) {
    q8_matmul_any(type, w, rows, cols, x, T, y, threads);
}
void matmul_rp_vnni(int type, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                    int threads) {
    rp_wide_matmul_any(type, w, rows, cols, x, T, y, threads);
}
double dot_peak_vnni(int threads, int64_t iters, int floats) {  // the wide tile's 512-bit dpbusd
    return peak_rate_any<__m512i, 12>([](__m512i acc, __m512i u, __m512i s) { return _mm512_dpbusd_epi32(acc, u, s); },
                                      [](__m512i v) { return v; }, threads, iters, floats);
}
}  // namespace racer_quant
