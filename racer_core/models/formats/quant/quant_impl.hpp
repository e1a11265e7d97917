// The kernel's body, included by one translation unit per ISA (quant_avx2.cpp,
// quant_avx512.cpp), each compiled for its ISA by a target pragma placed after
// the standard headers. Everything here is in an unnamed namespace so the two
// units' copies never merge at link time. Needs VEC (a vector traits struct)
// and UNPACK_WIDTH defined by the includer.
#include <cstring>
#include <type_traits>

namespace {

using racer_quant::Type;

#include "quant_layout.hpp"

inline float half_to_float(const uint8_t* p) { return layout_half(p); }

// One block of 32 values to float32, written to out[0..32): ggml's formulas,
// in the same float32 operations as gguf.quants' numpy reference.
inline void unpack_q4_0(const uint8_t* b, float* out) {
    const __m256 d = _mm256_set1_ps(half_to_float(b));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(q, mask), hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
    const __m256i eight = _mm256_set1_epi32(8);
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int i = 0; i < 4; ++i) {
        __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(parts[i]), eight));
        _mm256_storeu_ps(out + 8 * i, _mm256_mul_ps(d, v));
    }
}

inline void unpack_q4_1(const uint8_t* b, float* out) {
    const __m256 d = _mm256_set1_ps(half_to_float(b));
    const __m256 m = _mm256_set1_ps(half_to_float(b + 2));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(q, mask), hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int i = 0; i < 4; ++i) {
        __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[i]));
        _mm256_storeu_ps(out + 8 * i, _mm256_add_ps(_mm256_mul_ps(d, v), m));  // mul then add, as ggml: no fma
    }
}

inline void unpack_q8_0(const uint8_t* b, float* out) {
    const __m256 d = _mm256_set1_ps(half_to_float(b));
    for (int i = 0; i < 4; ++i) {
        const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * i));
        _mm256_storeu_ps(out + 8 * i, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
    }
}

// Eight quants (epi32 lanes) times d1, minus m1 / times d1 (mul then sub, as gguf's numpy).
inline void unpack_k_part(__m128i bytes8, bool is_signed, __m256 d1, __m256 m1, bool sub, float* out) {
    const __m256i q = is_signed ? _mm256_cvtepi8_epi32(bytes8) : _mm256_cvtepu8_epi32(bytes8);
    const __m256 v = _mm256_mul_ps(d1, _mm256_cvtepi32_ps(q));
    _mm256_storeu_ps(out, sub ? _mm256_sub_ps(v, m1) : v);
}

// 32 quants (bytes in element order) through unpack_k_part, 8 at a time: d1 * q, minus m1 where `sub`.
inline void unpack_k_parts(__m256i q, bool is_signed, __m256 d1, __m256 m1, bool sub, float* out) {
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int i = 0; i < 4; ++i) unpack_k_part(parts[i], is_signed, d1, m1, sub, out + 8 * i);
}

// Q5_0: d * (q - 16).
inline void unpack_q5_0(const uint8_t* b, float* out) {
    const __m256i q = _mm256_sub_epi8(q5_quants(b + 2), _mm256_set1_epi8(16));
    unpack_k_parts(q, true, _mm256_set1_ps(half_to_float(b)), _mm256_setzero_ps(), false, out);
}

// Q5_1: d * q + m (mul then add, as ggml: d * q - (-m) is that sum exactly).
inline void unpack_q5_1(const uint8_t* b, float* out) {
    unpack_k_parts(q5_quants(b + 4), false, _mm256_set1_ps(half_to_float(b)), _mm256_set1_ps(-half_to_float(b + 2)),
                   true, out);
}

// Q4_K and Q5_K sub-block s with its quants q: (d * sc) * q - dmin * m.
inline void unpack_k_scaled(const uint8_t* sb, int s, __m256i q, float* out) {
    int sc, m;
    q4k_scale_min(sb + 4, s, &sc, &m);
    const __m256 d1 = _mm256_set1_ps(half_to_float(sb) * static_cast<float>(sc));
    const __m256 m1 = _mm256_set1_ps(half_to_float(sb + 2) * static_cast<float>(m));
    unpack_k_parts(q, false, d1, m1, true, out);
}

inline void unpack_q4_k(const uint8_t* sb, int s, float* out) { unpack_k_scaled(sb, s, q4k_quants(sb, s), out); }

inline void unpack_q5_k(const uint8_t* sb, int s, float* out) { unpack_k_scaled(sb, s, q5k_quants(sb, s), out); }

inline void unpack_q6_k(const uint8_t* sb, int s, float* out) {
    int first, second;
    q6k_scales(sb, s, &first, &second);
    const float d = half_to_float(sb + 208);
    const __m256 d1 = _mm256_set1_ps(d * static_cast<float>(first)), d2 = _mm256_set1_ps(d * static_cast<float>(second));
    const __m256i q = q6k_quants(sb, s);
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int i = 0; i < 4; ++i) unpack_k_part(parts[i], true, i < 2 ? d1 : d2, d1, false, out + 8 * i);
}

// The 32 values of block b of a row (any layout) as float32.
template <int TYPE>
inline void unpack32(const uint8_t* row, int64_t b, float* out) {
    const uint8_t* blk = layout_block<TYPE>(row, b);
    if constexpr (TYPE == racer_quant::Q4_0) unpack_q4_0(blk, out);
    else if constexpr (TYPE == racer_quant::Q4_1) unpack_q4_1(blk, out);
    else if constexpr (TYPE == racer_quant::Q8_0) unpack_q8_0(blk, out);
    else if constexpr (TYPE == racer_quant::Q5_0) unpack_q5_0(blk, out);
    else if constexpr (TYPE == racer_quant::Q5_1) unpack_q5_1(blk, out);
    else if constexpr (TYPE == racer_quant::Q4_K) unpack_q4_k(blk, static_cast<int>(b & 7), out);
    else if constexpr (TYPE == racer_quant::Q5_K) unpack_q5_k(blk, static_cast<int>(b & 7), out);
    else unpack_q6_k(blk, static_cast<int>(b & 7), out);
}

template <int TYPE>
inline void unpack_row(const uint8_t* row, int64_t cols, float* out) {
    for (int64_t b = 0; b < cols / 32; ++b) unpack32<TYPE>(row, b, out + 32 * b);
}

constexpr int PANEL = 8;  // output rows unpacked together

// P output rows (unpacked in buf, P x cols) times R activation rows: every
// (p, r) accumulator sees the same operations whatever P and R are.
template <int P, int R>
inline void tile(const float* buf, int64_t cols, const float* x, int64_t cols_x, float* y, int64_t ldy) {
    typename VEC::V acc[P][R];
    for (int p = 0; p < P; ++p)
        for (int r = 0; r < R; ++r) acc[p][r] = VEC::zero();
    for (int64_t k = 0; k < cols; k += VEC::W) {
        typename VEC::V xv[R];
        for (int r = 0; r < R; ++r) xv[r] = VEC::load(x + r * cols_x + k);
        for (int p = 0; p < P; ++p) {
            const typename VEC::V w = VEC::load(buf + p * cols + k);
            for (int r = 0; r < R; ++r) acc[p][r] = VEC::fma(w, xv[r], acc[p][r]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) y[r * ldy + p] = VEC::sum(acc[p][r]);
}

template <int P, int R>
inline void rows_tile(int r, const float* buf, int64_t cols, const float* x, float* y, int64_t ldy) {
    if constexpr (R > 1) {
        if (r < R) return rows_tile<P, R - 1>(r, buf, cols, x, y, ldy);
    }
    tile<P, R>(buf, cols, x, cols, y, ldy);
}

// P output rows (P <= 4) times all T activation rows: tiles of VEC::R rows, then the remainder.
template <int P>
inline void rows_of(const float* buf, int64_t cols, const float* x, int64_t T, float* y, int64_t ldy) {
    int64_t t = 0;
    for (; t + VEC::R <= T; t += VEC::R) tile<P, VEC::R>(buf, cols, x + t * cols, cols, y + t * ldy, ldy);
    if (t < T) rows_tile<P, VEC::R>(static_cast<int>(T - t), buf, cols, x + t * cols, y + t * ldy, ldy);
}

// A panel of P <= 8 unpacked output rows: a single activation row takes all
// of them in one tile (8 independent accumulators in flight), more rows
// take them four at a time.
template <int P>
inline void panel(const float* buf, int64_t cols, const float* x, int64_t T, float* y, int64_t ldy) {
    if (T == 1) return tile<P, 1>(buf, cols, x, cols, y, ldy);
    constexpr int A = P < 4 ? P : 4;
    rows_of<A>(buf, cols, x, T, y, ldy);
    if constexpr (P > A) rows_of<P - A>(buf + A * cols, cols, x, T, y + A, ldy);
}

// A few activation rows (T <= VEC::R): each block of the panel's P rows is
// unpacked to the stack and used at once for every row, no panel buffer.
// The same per-accumulator operations as tile(): chunks of W in k order.
template <int TYPE, int P, int R>
inline void fused(const uint8_t* w, int64_t row_bytes, int64_t cols, const float* x, float* y, int64_t ldy) {
    typename VEC::V acc[P][R];
    for (int p = 0; p < P; ++p)
        for (int r = 0; r < R; ++r) acc[p][r] = VEC::zero();
    alignas(64) float blk[32];
    for (int64_t b = 0; b < cols / 32; ++b) {
        for (int p = 0; p < P; ++p) {
            unpack32<TYPE>(w + p * row_bytes, b, blk);
            for (int c = 0; c < 32; c += VEC::W) {
                const typename VEC::V wv = VEC::load(blk + c);
                for (int r = 0; r < R; ++r) acc[p][r] = VEC::fma(wv, VEC::load(x + r * cols + b * 32 + c), acc[p][r]);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) y[r * ldy + p] = VEC::sum(acc[p][r]);
}

template <int TYPE, int P, int R>
inline void fused_rows(int r, const uint8_t* w, int64_t row_bytes, int64_t cols, const float* x, float* y,
                       int64_t ldy) {
    if constexpr (R > 1) {
        if (r < R) return fused_rows<TYPE, P, R - 1>(r, w, row_bytes, cols, x, y, ldy);
    }
    fused<TYPE, P, R>(w, row_bytes, cols, x, y, ldy);
}

template <int TYPE>
void matmul_few(const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y, int threads) {
    constexpr int FP = 4;  // output rows per fused panel
    const int64_t row_bytes = layout_row_bytes<TYPE>(cols);
    const int64_t panels = (rows + FP - 1) / FP;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && panels > 1)
    for (int64_t i = 0; i < panels; ++i) {
        const int64_t o = i * FP;
        const uint8_t* wp = w + o * row_bytes;
        const int t = static_cast<int>(T);
        switch (rows - o < FP ? rows - o : FP) {
            case 4: fused_rows<TYPE, 4, VEC::R>(t, wp, row_bytes, cols, x, y + o, rows); break;
            case 3: fused_rows<TYPE, 3, VEC::R>(t, wp, row_bytes, cols, x, y + o, rows); break;
            case 2: fused_rows<TYPE, 2, VEC::R>(t, wp, row_bytes, cols, x, y + o, rows); break;
            default: fused_rows<TYPE, 1, VEC::R>(t, wp, row_bytes, cols, x, y + o, rows); break;
        }
    }
}

template <int TYPE>
void matmul_typed(const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y, int threads) {
    // The few-rows path reloads 256-bit stores as wider vectors on AVX-512 (a
    // store-forwarding stall per load, 3x slower there): AVX2 only.
    if (VEC::W == 8 && T <= VEC::R) return matmul_few<TYPE>(w, rows, cols, x, T, y, threads);
    const int64_t row_bytes = layout_row_bytes<TYPE>(cols);
    const int64_t panels = (rows + PANEL - 1) / PANEL;
#pragma omp parallel num_threads(threads) if (threads > 1 && panels > 1)
    {
        float* buf = new float[PANEL * cols];
#pragma omp for schedule(static)
        for (int64_t i = 0; i < panels; ++i) {
            const int64_t o = i * PANEL;
            const int n = static_cast<int>(rows - o < PANEL ? rows - o : PANEL);
            for (int p = 0; p < n; ++p) unpack_row<TYPE>(w + (o + p) * row_bytes, cols, buf + p * cols);
            switch (n) {
                case 8: panel<8>(buf, cols, x, T, y + o, rows); break;
                case 7: panel<7>(buf, cols, x, T, y + o, rows); break;
                case 6: panel<6>(buf, cols, x, T, y + o, rows); break;
                case 5: panel<5>(buf, cols, x, T, y + o, rows); break;
                case 4: panel<4>(buf, cols, x, T, y + o, rows); break;
                case 3: panel<3>(buf, cols, x, T, y + o, rows); break;
                case 2: panel<2>(buf, cols, x, T, y + o, rows); break;
                default: panel<1>(buf, cols, x, T, y + o, rows); break;
            }
        }
        delete[] buf;
    }
}

void matmul_any(int type, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                int threads) {
    layout_dispatch(type, [&](auto t) { matmul_typed<decltype(t)::value>(w, rows, cols, x, T, y, threads); });
}

void dequantize_any(int type, const uint8_t* w, int64_t rows, int64_t cols, float* out) {
    const int64_t row_bytes = cols / racer_quant::block_values(type) * racer_quant::block_bytes(type);
    layout_dispatch(type, [&](auto t) {
        for (int64_t o = 0; o < rows; ++o) unpack_row<decltype(t)::value>(w + o * row_bytes, cols, out + o * cols);
    });
}

}  // namespace
