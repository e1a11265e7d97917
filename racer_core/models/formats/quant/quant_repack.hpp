// The integer kernel on repacked blocks (Q4_0, Q4_1, Q8_0): eight output rows
// ("columns" in llama.cpp's words) interleaved so that one vector holds one
// 32-block's integer dot product for all eight, one lane each, and one float
// multiply-add scales all eight at once. Included after quant_q8.hpp (its
// activation quantizer) by one translation unit per ISA; needs DOT (as there,
// plus PAIRS16: add maddubs' int16 pair sums of a Q4 block before one madd).
//
// A group of eight rows holds, per 32-block b, in this order (repack.py):
//   d[8] (fp16), Q4_1 only: m[8] (fp16), then the quants in chunks of 32 bytes:
//   chunk c = for each row j, bytes 4c..4c+3 of row j's own quant bytes.
// Q4: 4 chunks; a chunk's low nibbles are elements 4c..4c+3 of each row, its
// high nibbles elements 16+4c..16+4c+3. Q8_0: 8 chunks, elements 4c..4c+3.
// Every byte is the file's byte, moved: no value changes, no memory is added.
//
// Each output y[t, o] = acc + off with, over blocks b ascending,
//   acc = fma(f32(dw_ob * dx_tb), f32(int dot of block b), acc)
//   off = fma(offset_ob, s_tb, off)   (Q4_0: -8 dw, Q4_1: m; Q8_0 has none)
// in the lane of column o, whatever the tile, the row count or the thread:
// row-invariant, and the same bits on every ISA (the integer dots are exact).
#include <cstring>
#include <vector>

namespace {

template <int TYPE>
constexpr int rp_chunks() {  // 32-byte quant chunks per group block
    return TYPE == racer_quant::Q8_0 ? 8 : 4;
}

template <int TYPE>
constexpr int64_t rp_head() {  // bytes of scales before the chunks
    return TYPE == racer_quant::Q4_1 ? 32 : 16;
}

template <int TYPE>
constexpr int64_t rp_group_block() {  // bytes of one 32-block of eight rows
    return 8 * layout_bytes<TYPE>();
}

inline __m256i rp_bcast4(const int8_t* p) {  // four activation bytes in every lane
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

inline __m256 rp_halves(const uint8_t* p) {  // eight fp16 to float32
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The integer dot products of block b (at blk) with R activation rows
// (xq: row r's block at xq + r * cols): lane j of out[r] is row j's.
template <int TYPE, int R>
inline void rp_block_dots(const uint8_t* blk, const int8_t* xq, int64_t cols, __m256i* out) {
    const uint8_t* q = blk + rp_head<TYPE>();
    if constexpr (TYPE == racer_quant::Q8_0) {
        for (int r = 0; r < R; ++r) out[r] = _mm256_setzero_si256();
        for (int c = 0; c < 8; ++c) {
            const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * c));
            const __m256i wabs = _mm256_sign_epi8(w, w);  // signed x signed: |w| times x with w's sign
            for (int r = 0; r < R; ++r)
                out[r] = DOT::dot_add(out[r], wabs, _mm256_sign_epi8(rp_bcast4(xq + r * cols + 4 * c), w));
        }
    } else {
        const __m256i mask = _mm256_set1_epi8(0x0F);
        if constexpr (DOT::PAIRS16) {  // 8 int16 pair sums of at most 2*15*127 each: no overflow
            __m256i s16[R];
            for (int c = 0; c < 4; ++c) {
                const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * c));
                const __m256i lo = _mm256_and_si256(raw, mask), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
                for (int r = 0; r < R; ++r) {
                    const int8_t* x = xq + r * cols;
                    const __m256i both = _mm256_add_epi16(_mm256_maddubs_epi16(lo, rp_bcast4(x + 4 * c)),
                                                          _mm256_maddubs_epi16(hi, rp_bcast4(x + 16 + 4 * c)));
                    s16[r] = c ? _mm256_add_epi16(s16[r], both) : both;
                }
            }
            for (int r = 0; r < R; ++r) out[r] = _mm256_madd_epi16(s16[r], _mm256_set1_epi16(1));
        } else {
            for (int r = 0; r < R; ++r) out[r] = _mm256_setzero_si256();
            for (int c = 0; c < 4; ++c) {
                const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * c));
                const __m256i lo = _mm256_and_si256(raw, mask), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
                for (int r = 0; r < R; ++r) {
                    const int8_t* x = xq + r * cols;
                    out[r] = DOT::dot_add(DOT::dot_add(out[r], lo, rp_bcast4(x + 4 * c)), hi, rp_bcast4(x + 16 + 4 * c));
                }
            }
        }
    }
}

// G groups (8 G output rows) times R activation rows.
template <int TYPE, int G, int R>
inline void rp_tile(const uint8_t* w, int64_t group_bytes, int64_t nb, const int8_t* xq, const float* xd,
                    const float* xs, int64_t cols, float* y, int64_t ldy) {
    constexpr int64_t GB = rp_group_block<TYPE>();
    __m256 acc[G][R];
    for (int g = 0; g < G; ++g)
        for (int r = 0; r < R; ++r) acc[g][r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        for (int g = 0; g < G; ++g) {
            const uint8_t* blk = w + g * group_bytes + b * GB;
            __m256i dots[R];
            rp_block_dots<TYPE, R>(blk, xq + 32 * b, cols, dots);
            const __m256 dw = rp_halves(blk);
            for (int r = 0; r < R; ++r) {
                const __m256 scale = _mm256_mul_ps(dw, _mm256_broadcast_ss(xd + r * nb + b));  // dw * dx, rounded once
                acc[g][r] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(dots[r]), acc[g][r]);
            }
        }
    }
    if constexpr (TYPE != racer_quant::Q8_0) {  // the offsets, a sum of their own per column
        for (int g = 0; g < G; ++g) {
            __m256 off[R];
            for (int r = 0; r < R; ++r) off[r] = _mm256_setzero_ps();
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t* blk = w + g * group_bytes + b * GB;
                const __m256 o = TYPE == racer_quant::Q4_1 ? rp_halves(blk + 16)
                                                           : _mm256_mul_ps(_mm256_set1_ps(-8.0f), rp_halves(blk));
                for (int r = 0; r < R; ++r) off[r] = _mm256_fmadd_ps(o, _mm256_broadcast_ss(xs + r * nb + b), off[r]);
            }
            for (int r = 0; r < R; ++r) acc[g][r] = _mm256_add_ps(acc[g][r], off[r]);
        }
    }
    for (int g = 0; g < G; ++g)
        for (int r = 0; r < R; ++r) _mm256_storeu_ps(y + r * ldy + 8 * g, acc[g][r]);
}

template <int TYPE, int G, int R>
inline void rp_tile_rows(int r, const uint8_t* w, int64_t group_bytes, int64_t nb, const int8_t* xq, const float* xd,
                         const float* xs, int64_t cols, float* y, int64_t ldy) {
    if constexpr (R > 1) {
        if (r < R) return rp_tile_rows<TYPE, G, R - 1>(r, w, group_bytes, nb, xq, xd, xs, cols, y, ldy);
    }
    rp_tile<TYPE, G, R>(w, group_bytes, nb, xq, xd, xs, cols, y, ldy);
}

// G groups at a time, all T rows in tiles of up to R.
template <int TYPE, int G, int R>
void rp_groups(const uint8_t* w, int64_t groups, int64_t nb, const int8_t* xq, const float* xd, const float* xs,
               int64_t cols, int64_t T, float* y, int64_t rows, int threads) {
    const int64_t group_bytes = 8 * layout_row_bytes<TYPE>(cols);
    const int64_t chunks = (groups + G - 1) / G;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1 && chunks > 1)
    for (int64_t i = 0; i < chunks; ++i) {
        const int64_t g0 = i * G;
        const uint8_t* wg = w + g0 * group_bytes;
        for (int64_t t = 0; t < T; t += R) {
            const int rr = static_cast<int>(T - t < R ? T - t : R);
            const int8_t* x = xq + t * cols;
            float* yt = y + t * rows + 8 * g0;
            if (groups - g0 >= G)
                rp_tile_rows<TYPE, G, R>(rr, wg, group_bytes, nb, x, xd + t * nb, xs + t * nb, cols, yt, rows);
            else  // the last groups, one at a time
                for (int64_t g = g0; g < groups; ++g)
                    rp_tile_rows<TYPE, 1, R>(rr, w + g * group_bytes, group_bytes, nb, x, xd + t * nb, xs + t * nb,
                                             cols, y + t * rows + 8 * g, rows);
        }
    }
}

template <int TYPE>
void rp_matmul_typed(const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                     int threads) {
    const int64_t nb = cols / 32;
    std::vector<int8_t> xq(static_cast<size_t>(T * cols));
    std::vector<float> xd(static_cast<size_t>(T * nb)), xs(static_cast<size_t>(T * nb));
    q8_quantize_rows(x, T, cols, xq.data(), xd.data(), xs.data());
    const int64_t groups = rows / 8;
    // Few rows: several groups per tile keep independent accumulators in flight.
    if (T == 1) rp_groups<TYPE, DOT::G1, 1>(w, groups, nb, xq.data(), xd.data(), xs.data(), cols, T, y, rows, threads);
    else if (T == 2) rp_groups<TYPE, DOT::G2, 2>(w, groups, nb, xq.data(), xd.data(), xs.data(), cols, T, y, rows, threads);
    else rp_groups<TYPE, 1, DOT::RR>(w, groups, nb, xq.data(), xd.data(), xs.data(), cols, T, y, rows, threads);
}

void rp_matmul_any(int type, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                   int threads) {
    switch (type) {
        case racer_quant::Q4_0: rp_matmul_typed<racer_quant::Q4_0>(w, rows, cols, x, T, y, threads); break;
        case racer_quant::Q4_1: rp_matmul_typed<racer_quant::Q4_1>(w, rows, cols, x, T, y, threads); break;
        case racer_quant::Q8_0: rp_matmul_typed<racer_quant::Q8_0>(w, rows, cols, x, T, y, threads); break;
        default: break;
    }
}

}  // namespace
