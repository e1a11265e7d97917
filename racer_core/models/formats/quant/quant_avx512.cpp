// The kernel compiled for AVX-512 (F, BW, VL) + FMA + F16C (16 float lanes).
#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <type_traits>

#include "quant.hpp"

#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")

namespace {
#include "quant_layout.hpp"

struct Avx512 {
    using V = __m512;
    static constexpr int W = 16;
    static constexpr int R = 4;  // 4x4 accumulators + 4 x + 1 w in 32 registers
    static V zero() { return _mm512_setzero_ps(); }
    static V load(const float* p) { return _mm512_loadu_ps(p); }
    static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
    static float sum(V v) {  // fixed order: halves, then as AVX2's
        return layout_hsum(_mm256_add_ps(_mm512_castps512_ps256(v),
                                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
    }
};
}  // namespace
#define VEC Avx512
#include "quant_impl.hpp"

namespace racer_quant {
void matmul_avx512(int type, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                   int threads) {
    matmul_any(type, w, rows, cols, x, T, y, threads);
}
void dequantize_avx512(int type, const uint8_t* w, int64_t rows, int64_t cols, float* out) {
    dequantize_any(type, w, rows, cols, out);
}
}  // namespace racer_quant
