// The integer kernel's body: activations quantized per row to 8 bits per
// 32-value block (as llama.cpp's Q8 x Q4 dot products), integer products per
// block, one float scale per (weight block, activation block). Included by
// one translation unit per ISA (quant_avx2.cpp: maddubs + madd; quant_vnni.cpp:
// dpbusd), each under its own target pragma; needs DOT (a struct with
// `static __m256i dot(__m256i u8, __m256i s8)`, eight int32 sums of four
// products each; R, activation rows per tile; P, P2, P1, output rows per tile
// for R, two and one activation rows).
//
// Both DOTs give the same integers (no pair sum can saturate: 15*127*2,
// 32*127*2 and 128*127*2 fit in int16), and every float operation is the same
// and in the same order, so the ISAs agree bit for bit, and each output
// depends on its own activation row only (row-invariant).
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

namespace {

#include "quant_layout.hpp"

// One block of 32 activations: d = amax / 127, q = round-to-nearest-even(x * (127 / amax)),
// s = d * sum(q). All-zero blocks get d = 0, q = 0.
inline void q8_quantize_block(const float* x, int8_t* q, float* d, float* s) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float top = _mm_cvtss_f32(m);
    const float id = top > 0.0f ? 127.0f / top : 0.0f;
    const __m256 idv = _mm256_set1_ps(id);
    __m256i i32[4];
    __m256i total = _mm256_setzero_si256();
    for (int i = 0; i < 4; ++i) {
        i32[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], idv));  // MXCSR's default: nearest, ties to even
        total = _mm256_add_epi32(total, i32[i]);
    }
    // packs works per 128-bit lane; put the eight 4-byte groups back in order
    const __m256i i8 = _mm256_permutevar8x32_epi32(
        _mm256_packs_epi16(_mm256_packs_epi32(i32[0], i32[1]), _mm256_packs_epi32(i32[2], i32[3])),
        _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), i8);
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
    *d = top / 127.0f;
    *s = *d * static_cast<float>(_mm_cvtsi128_si32(t));
}

void q8_quantize_rows(const float* x, int64_t T, int64_t cols, int8_t* q, float* d, float* s) {
    const int64_t nb = cols / 32;
    for (int64_t t = 0; t < T; ++t)
        for (int64_t b = 0; b < nb; ++b)
            q8_quantize_block(x + t * cols + 32 * b, q + t * cols + 32 * b, d + t * nb + b, s + t * nb + b);
}

// Block b's 32 quants as bytes in element order: Q4 nibbles 0..15 and Q5
// quants 0..31 (unsigned), Q8_0's own int8, Q6_K's quants minus 32 (signed).
template <int TYPE>
inline __m256i q8_weights(const uint8_t* row, int64_t b) {
    const uint8_t* blk = layout_block<TYPE>(row, b);
    if constexpr (TYPE == racer_quant::Q8_0) {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    } else if constexpr (TYPE == racer_quant::Q4_K) {
        return q4k_quants(blk, static_cast<int>(b & 7));
    } else if constexpr (TYPE == racer_quant::Q5_K) {
        return q5k_quants(blk, static_cast<int>(b & 7));
    } else if constexpr (TYPE == racer_quant::Q5_0 || TYPE == racer_quant::Q5_1) {
        return q5_quants(blk + (TYPE == racer_quant::Q5_1 ? 4 : 2));
    } else if constexpr (TYPE == racer_quant::Q6_K) {
        return q6k_quants(blk, static_cast<int>(b & 7));
    } else {
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (TYPE == racer_quant::Q4_1 ? 4 : 2)));
        const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
        return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));  // byte j: element j (low), j + 16 (high)
    }
}

// Block b's float scale of its integer quants (Q6_K: d; its int8 scales go in the integer products).
template <int TYPE>
inline float q8_scale(const uint8_t* row, int64_t b) {
    const uint8_t* blk = layout_block<TYPE>(row, b);
    if constexpr (TYPE == racer_quant::Q4_K || TYPE == racer_quant::Q5_K) {
        int sc, m;
        q4k_scale_min(blk + 4, static_cast<int>(b & 7), &sc, &m);
        return layout_half(blk) * static_cast<float>(sc);
    } else if constexpr (TYPE == racer_quant::Q6_K) {
        return layout_half(blk + 208);
    } else {
        return layout_half(blk);
    }
}

// Q6_K's two int8 scales of block b as 16-bit multipliers: the first 16 values' in the low half.
inline __m256i q6k_multipliers(const uint8_t* row, int64_t b) {
    int first, second;
    q6k_scales(layout_block<racer_quant::Q6_K>(row, b), static_cast<int>(b & 7), &first, &second);
    return _mm256_setr_m128i(_mm_set1_epi16(static_cast<int16_t>(first)), _mm_set1_epi16(static_cast<int16_t>(second)));
}

// The block's term independent of its quants, per unit of s = dx * sum(qx):
// Q4_0's values are d * (q - 8), Q5_0's d * (q - 16), Q4_1's and Q5_1's d * q + m,
// Q4_K's and Q5_K's (d * sc) * q - dmin * m; Q8_0 and Q6_K have none.
template <int TYPE>
constexpr bool q8_has_offset() {
    return TYPE != racer_quant::Q8_0 && TYPE != racer_quant::Q6_K;
}

template <int TYPE>
inline float q8_offset(const uint8_t* row, int64_t b) {
    const uint8_t* blk = layout_block<TYPE>(row, b);
    if constexpr (TYPE == racer_quant::Q4_0) {
        return -8.0f * layout_half(blk);
    } else if constexpr (TYPE == racer_quant::Q5_0) {
        return -16.0f * layout_half(blk);
    } else if constexpr (TYPE == racer_quant::Q4_1 || TYPE == racer_quant::Q5_1) {
        return layout_half(blk + 2);
    } else if constexpr (TYPE == racer_quant::Q4_K || TYPE == racer_quant::Q5_K) {
        int sc, m;
        q4k_scale_min(blk + 4, static_cast<int>(b & 7), &sc, &m);
        return -(layout_half(blk + 2) * static_cast<float>(m));
    } else {
        return 0.0f;
    }
}

// P output rows times R activation rows. y[r][p] = hsum over lanes of
// sum_b (dw_b * dx_rb) * int_rb, blocks in ascending order; the offsets are
// added by the caller.
template <int TYPE, int P, int R>
inline void q8_tile(const uint8_t* w, int64_t row_bytes, int64_t nb, const int8_t* xq, const float* xd,
                    int64_t cols, float* y, int64_t ldy) {
    __m256 acc[P][R];
    for (int p = 0; p < P; ++p)
        for (int r = 0; r < R; ++r) acc[p][r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        __m256i xv[R];
        for (int r = 0; r < R; ++r) xv[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + r * cols + 32 * b));
        for (int p = 0; p < P; ++p) {
            const uint8_t* row = w + p * row_bytes;
            const __m256i wq = q8_weights<TYPE>(row, b);
            const __m256 dw = _mm256_set1_ps(q8_scale<TYPE>(row, b));
            __m256i mult;
            if constexpr (TYPE == racer_quant::Q6_K) mult = q6k_multipliers(row, b);
            for (int r = 0; r < R; ++r) {
                __m256i sums;
                if constexpr (TYPE == racer_quant::Q8_0)  // signed x signed: |w| times x with w's sign
                    sums = DOT::dot(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(xv[r], wq));
                else if constexpr (TYPE == racer_quant::Q6_K)  // the same, pairs then weighted by the int8 scales
                    sums = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(xv[r], wq)), mult);
                else
                    sums = DOT::dot(wq, xv[r]);
                const __m256 scale = _mm256_mul_ps(dw, _mm256_broadcast_ss(xd + r * nb + b));  // dw * dx, rounded once
                acc[p][r] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sums), acc[p][r]);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) y[r * ldy + p] = layout_hsum(acc[p][r]);
}

template <int TYPE, int P, int R>
inline void q8_tile_rows(int r, const uint8_t* w, int64_t row_bytes, int64_t nb, const int8_t* xq, const float* xd,
                         int64_t cols, float* y, int64_t ldy) {
    if constexpr (R > 1) {
        if (r < R) return q8_tile_rows<TYPE, P, R - 1>(r, w, row_bytes, nb, xq, xd, cols, y, ldy);
    }
    q8_tile<TYPE, P, R>(w, row_bytes, nb, xq, xd, cols, y, ldy);
}

// n <= 8 output rows times rr <= DOT::R activation rows, in tiles as wide as
// the registers allow for rr rows (few rows: more output rows in flight).
template <int TYPE>
inline void q8_block_of_rows(int64_t n, int rr, const uint8_t* w, int64_t row_bytes, int64_t nb, const int8_t* xq,
                             const float* xd, int64_t cols, float* y, int64_t ldy) {
    const int64_t width = rr == 1 ? DOT::P1 : rr == 2 ? DOT::P2 : DOT::P;
    for (int64_t o = 0; o < n; o += width) {
        const uint8_t* wp = w + o * row_bytes;
        switch (n - o < width ? n - o : width) {
            case 8: q8_tile_rows<TYPE, 8, DOT::R>(rr, wp, row_bytes, nb, xq, xd, cols, y + o, ldy); break;
            case 7: q8_tile_rows<TYPE, 7, DOT::R>(rr, wp, row_bytes, nb, xq, xd, cols, y + o, ldy); break;
            case 6: q8_tile_rows<TYPE, 6, DOT::R>(rr, wp, row_bytes, nb, xq, xd, cols, y + o, ldy); break;
            case 5: q8_tile_rows<TYPE, 5, DOT::R>(rr, wp, row_bytes, nb, xq, xd, cols, y + o, ldy); break;
            case 4: q8_tile_rows<TYPE, 4, DOT::R>(rr, wp, row_bytes, nb, xq, xd, cols, y + o, ldy); break;
            case 3: q8_tile_rows<TYPE, 3, DOT::R>(rr, wp, row_bytes, nb, xq, xd, cols, y + o, ldy); break;
            case 2: q8_tile_rows<TYPE, 2, DOT::R>(rr, wp, row_bytes, nb, xq, xd, cols, y + o, ldy); break;
            default: q8_tile_rows<TYPE, 1, DOT::R>(rr, wp, row_bytes, nb, xq, xd, cols, y + o, ldy); break;
        }
    }
}

// A panel of P <= 8 output rows times all T rows: tiles of DOT::R rows, then
// the rest; then each output's offset term.
template <int TYPE, int P>
inline void q8_panel(const uint8_t* w, int64_t row_bytes, int64_t nb, const int8_t* xq, const float* xd,
                     const float* xs, int64_t cols, int64_t T, float* y, int64_t ldy) {
    for (int64_t t = 0; t < T; t += DOT::R) {
        const int rr = static_cast<int>(T - t < DOT::R ? T - t : DOT::R);
        q8_block_of_rows<TYPE>(P, rr, w, row_bytes, nb, xq + t * cols, xd + t * nb, cols, y + t * ldy, ldy);
    }
    if constexpr (q8_has_offset<TYPE>()) {
        thread_local std::vector<float> c;  // the panel's offsets, read once for all T rows
        if (c.size() < static_cast<size_t>(P * nb)) c.resize(static_cast<size_t>(P * nb));
        for (int p = 0; p < P; ++p)
            for (int64_t b = 0; b < nb; ++b) c[p * nb + b] = q8_offset<TYPE>(w + p * row_bytes, b);
        for (int64_t r = 0; r < T; ++r)
            for (int p = 0; p < P; ++p) {  // a fixed order for any T: 8 lanes over blocks, their sum, the tail
                const float* cp = c.data() + p * nb;
                const float* sp = xs + r * nb;
                __m256 lanes = _mm256_setzero_ps();
                int64_t b = 0;
                for (; b + 8 <= nb; b += 8) lanes = _mm256_fmadd_ps(_mm256_loadu_ps(cp + b), _mm256_loadu_ps(sp + b), lanes);
                float corr = layout_hsum(lanes);
                for (; b < nb; ++b) corr = std::fma(cp[b], sp[b], corr);
                y[r * ldy + p] += corr;
            }
    }
}

constexpr int Q8_PANEL = 8;  // output rows per panel

template <int TYPE>
void q8_tail(int64_t n, const uint8_t* w, int64_t row_bytes, int64_t nb, const int8_t* xq, const float* xd,
             const float* xs, int64_t cols, int64_t T, float* y, int64_t ldy) {
    switch (n) {
        case 7: q8_panel<TYPE, 7>(w, row_bytes, nb, xq, xd, xs, cols, T, y, ldy); break;
        case 6: q8_panel<TYPE, 6>(w, row_bytes, nb, xq, xd, xs, cols, T, y, ldy); break;
        case 5: q8_panel<TYPE, 5>(w, row_bytes, nb, xq, xd, xs, cols, T, y, ldy); break;
        case 4: q8_panel<TYPE, 4>(w, row_bytes, nb, xq, xd, xs, cols, T, y, ldy); break;
        case 3: q8_panel<TYPE, 3>(w, row_bytes, nb, xq, xd, xs, cols, T, y, ldy); break;
        case 2: q8_panel<TYPE, 2>(w, row_bytes, nb, xq, xd, xs, cols, T, y, ldy); break;
        default: q8_panel<TYPE, 1>(w, row_bytes, nb, xq, xd, xs, cols, T, y, ldy); break;
    }
}

template <int TYPE>
void q8_matmul_typed(const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                     int threads) {
    const int64_t nb = cols / 32;
    const int64_t row_bytes = layout_row_bytes<TYPE>(cols);
    std::vector<int8_t> xq(static_cast<size_t>(T * cols));
    std::vector<float> xd(static_cast<size_t>(T * nb)), xs(static_cast<size_t>(T * nb));
    q8_quantize_rows(x, T, cols, xq.data(), xd.data(), xs.data());
    const int64_t panels = (rows + Q8_PANEL - 1) / Q8_PANEL;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && panels > 1)
    for (int64_t i = 0; i < panels; ++i) {
        const int64_t o = i * Q8_PANEL;
        const uint8_t* wp = w + o * row_bytes;
        const int64_t n = rows - o < Q8_PANEL ? rows - o : Q8_PANEL;
        if (n == Q8_PANEL) q8_panel<TYPE, Q8_PANEL>(wp, row_bytes, nb, xq.data(), xd.data(), xs.data(), cols, T, y + o, rows);
        else q8_tail<TYPE>(n, wp, row_bytes, nb, xq.data(), xd.data(), xs.data(), cols, T, y + o, rows);
    }
}

void q8_matmul_any(int type, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                   int threads) {
    layout_dispatch(type, [&](auto t) { q8_matmul_typed<decltype(t)::value>(w, rows, cols, x, T, y, threads); });
}

}  // namespace
