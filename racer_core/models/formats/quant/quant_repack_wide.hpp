// The repacked kernel (quant_repack.hpp) on 512-bit vectors, for AVX-512 VNNI: one vector holds two
// groups of eight output rows, so one dpbusd, one conversion and one multiply-add serve sixteen
// output rows where quant_repack.hpp's 256-bit tile needs two of each. Q4_0, Q4_1 and Q8_0 (the
// common GGUF blocks; the K and Q5 types keep the 256-bit tile). Included after quant_repack.hpp by
// the VNNI translation unit only.
//
// The bits are quant_repack.hpp's: lane o of a vector does what lane o % 8 of group o / 8's 256-bit
// tile does, the same exact integer dot of each 32-block, then the same float operations in the same
// order (acc = fma(f32(dw * dx), f32(dot), acc) over the blocks ascending, then + the offsets' own
// sum), whatever the tile, the row count or the thread.

namespace {

template <int TYPE>
constexpr bool rp_wide_type() {
    return TYPE == racer_quant::Q4_0 || TYPE == racer_quant::Q4_1 || TYPE == racer_quant::Q8_0;
}

inline __m512i rp_load2(const uint8_t* lo, const uint8_t* hi) {  // 32 bytes of each group, side by side
    return _mm512_inserti64x4(_mm512_castsi256_si512(rp_load(lo)), rp_load(hi), 1);
}

inline __m512 rp_join(__m256 lo, __m256 hi) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
}

inline __m512i rp_bcast4_wide(const int8_t* p) {  // four activation bytes in every lane
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

// The integer dots of 32-block b of two groups (blocks a and b2) with R activation rows: lanes 0-7 of
// out[r] are group a's rows, lanes 8-15 group b2's.
template <int TYPE, int R>
inline void rp_block_dots_wide(const uint8_t* a, const uint8_t* b2, const int8_t* xq, int64_t cols, __m512i* out) {
    for (int r = 0; r < R; ++r) out[r] = _mm512_setzero_si512();
    if constexpr (TYPE == racer_quant::Q8_0) {  // xq holds x + 128 (RpRows' bias): (x + 128) w, less 128 sum(w)
        static_assert(DOT::BIAS_Q8, "the 512-bit Q8_0 dots read biased activations");
        __m512i sum = _mm512_setzero_si512();
        for (int c = 0; c < 8; ++c) {
            const __m512i w = rp_load2(a + 16 + 32 * c, b2 + 16 + 32 * c);
            sum = _mm512_dpbusd_epi32(sum, _mm512_set1_epi8(1), w);  // the block's sum of w, once for every row
            for (int r = 0; r < R; ++r) out[r] = _mm512_dpbusd_epi32(out[r], rp_bcast4_wide(xq + r * cols + 4 * c), w);
        }
        const __m512i bias = _mm512_slli_epi32(sum, 7);
        for (int r = 0; r < R; ++r) out[r] = _mm512_sub_epi32(out[r], bias);
    } else {  // Q4_0 / Q4_1: 4 chunks, low nibbles elements 4c..4c+3, high 16+4c..16+4c+3
        const __m512i mask = _mm512_set1_epi8(0x0F);
        const uint8_t* qa = a + rp_nibbles<TYPE>();
        const uint8_t* qb = b2 + rp_nibbles<TYPE>();
        for (int c = 0; c < 4; ++c) {
            const __m512i raw = rp_load2(qa + 32 * c, qb + 32 * c);
            const __m512i lo = _mm512_and_si512(raw, mask), hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), mask);
            for (int r = 0; r < R; ++r) {
                const int8_t* x = xq + r * cols;
                out[r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(out[r], lo, rp_bcast4_wide(x + 4 * c)), hi,
                                             rp_bcast4_wide(x + 16 + 4 * c));
            }
        }
    }
}

// P pairs of groups (16 P output rows) times R activation rows.
template <int TYPE, int P, int R>
inline void rp_tile_wide(const uint8_t* w, int64_t group_bytes, int64_t nb, const int8_t* xq, const float* xd,
                         const float* xs, int64_t cols, float* y, int64_t ldy, int64_t ahead) {
    __m512 acc[P][R];
    for (int p = 0; p < P; ++p)
        for (int r = 0; r < R; ++r) acc[p][r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        for (int p = 0; p < P; ++p) {
            const uint8_t* a = rp_block<TYPE>(w + 2 * p * group_bytes, b);
            const uint8_t* b2 = rp_block<TYPE>(w + (2 * p + 1) * group_bytes, b);
            if (ahead) {
                rp_prefetch(w + 2 * p * group_bytes, group_bytes, nb, b, ahead);
                rp_prefetch(w + (2 * p + 1) * group_bytes, group_bytes, nb, b, ahead);
            }
            __m512i dots[R];
            rp_block_dots_wide<TYPE, R>(a, b2, xq + 32 * b, cols, dots);
            const __m512 dw = rp_join(rp_dw<TYPE>(a, 0, nullptr), rp_dw<TYPE>(b2, 0, nullptr));
            for (int r = 0; r < R; ++r) {
                const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(xd[r * nb + b]));  // dw * dx, rounded once
                acc[p][r] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(dots[r]), acc[p][r]);
            }
        }
    }
    if constexpr (rp_has_offset<TYPE>()) {  // the offsets' own sum per column, then added (as quant_repack.hpp)
        for (int p = 0; p < P; ++p) {
            __m512 sum[R];
            for (int r = 0; r < R; ++r) sum[r] = _mm512_setzero_ps();
            for (int64_t b = 0; b < nb; ++b) {
                const __m512 o = rp_join(rp_offset<TYPE>(rp_block<TYPE>(w + 2 * p * group_bytes, b), 0, nullptr),
                                         rp_offset<TYPE>(rp_block<TYPE>(w + (2 * p + 1) * group_bytes, b), 0, nullptr));
                for (int r = 0; r < R; ++r) sum[r] = _mm512_fmadd_ps(o, _mm512_set1_ps(xs[r * nb + b]), sum[r]);
            }
            for (int r = 0; r < R; ++r) acc[p][r] = _mm512_add_ps(acc[p][r], sum[r]);
        }
    }
    for (int p = 0; p < P; ++p)
        for (int r = 0; r < R; ++r) _mm512_storeu_ps(y + r * ldy + 16 * p, acc[p][r]);
}

// A tile kind for rp_groups (quant_repack.hpp): P group pairs by R activation rows in rp_tile_wide.
template <int TYPE, int P>
struct RpTileWide {
    static constexpr int GROUPS = 2 * P;
    template <int R>
    static void run(const uint8_t* w, int64_t group_bytes, int64_t nb, const int8_t* xq, const float* xd,
                    const float* xs, int64_t cols, float* y, int64_t ldy, int64_t ahead) {
        rp_tile_wide<TYPE, P, R>(w, group_bytes, nb, xq, xd, xs, cols, y, ldy, ahead);
    }
};

// Up to this many activation rows the 256-bit tiles of one group (quant_repack.hpp) run even the wide
// types: a step of so few rows is bound by reading the weights, and a 512-bit tile reads two groups, two
// streams (6 Dec 2026, embedded model: 1-4 rows 1.28-1.37x faster; at 0.8B 1.02-1.11x, and 6 rows 0.96x).
// And for rows of at most NARROW_COLS values (a small model's: the embedded one's 576), up to 6 activation
// rows, 8 for Q8_0. In a step, where each matrix's blocks come from memory, the 512-bit tiles lost there
// though they win on the same matrix warm in the caches: on an AMD Zen 4, per matrix in a whole step at
// 5 rows, the embedded model's 49152 x 576 Q8_0 head 1.5x slower, its 576-wide Q4_1 linears 1.1-1.2x
// (docs/performance.md, 6 Dec 2026, 14:05); a step's linears at 5-8 rows 1.19, 1.12, 1.07 and 1.05x
// faster this way. Wider rows (a 0.8B model's 2048) keep the 512-bit tiles from 5 rows: 256-bit ones were
// 0.84-0.93x there, Q4_1 and Q8_0 alike.
constexpr int64_t NARROW_ROWS = 4;
constexpr int64_t NARROW_COLS = 1024;

template <int TYPE>
void rp_wide_matmul_typed(const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                          int threads) {
    if constexpr (!rp_wide_type<TYPE>()) {
        rp_matmul_typed<TYPE>(w, rows, cols, x, T, y, threads);
    } else if (T <= NARROW_ROWS || (cols <= NARROW_COLS && T <= (TYPE == racer_quant::Q8_0 ? 8 : 6))) {
        rp_matmul_typed<TYPE>(w, rows, cols, x, T, y, threads);  // the 256-bit tiles of one group
    } else {
        const int64_t nb = cols / 32, groups = rows / 8;
        rp_quantized<rp_bias_q8<TYPE>()>(x, T, cols, [&](const RpRows& a) {
            rp_groups<TYPE, RpTileWide<TYPE, 1>, DOT::WR>(w, groups, nb, a, cols, T, y, rows, threads);
        });
    }
}

void rp_wide_matmul_any(int type, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                        int threads) {
    layout_dispatch(type, [&](auto t) { rp_wide_matmul_typed<decltype(t)::value>(w, rows, cols, x, T, y, threads); });
}

}  // namespace
