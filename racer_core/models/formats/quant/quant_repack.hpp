// The integer kernel on repacked blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K): eight
// output rows ("columns" in llama.cpp's words) interleaved so that one vector
// holds one 32-block's integer dot product for all eight, one lane each, and
// one float multiply-add scales all eight at once. Included after quant_q8.hpp
// (its activation quantizer) by one translation unit per ISA; needs DOT (as
// there, plus PAIRS16: add maddubs' int16 pair sums of a Q4 block, or half a Q5 one, before one madd).
//
// A group of eight rows holds, per block b (a K type's 256-value super-block),
// its fields in turn, each field's pieces side by side for the eight rows
// (repack.py):
//   Q4_0 / Q4_1 / Q8_0: d[8] (fp16), Q4_1 only: m[8] (fp16), then the quants
//   in chunks of 32 bytes: chunk c = for each row j, bytes 4c..4c+3 of row j's
//   quant bytes. Q4: 4 chunks; a chunk's low nibbles are elements 4c..4c+3 of
//   each row, its high nibbles elements 16+4c..16+4c+3. Q8_0: 8 chunks, elements 4c..4c+3.
//   Q4_K: d[8], dmin[8], scale byte i of the eight rows at 32 + 8i (i < 12), then
//   its 128 nibble bytes as 32 chunks: chunk 8p + c holds elements 4c..4c+3 of
//   sub-block 2p (low nibbles) and 2p + 1 (high) of each row.
//   Q5_K: Q4_K's fields at Q4_K's places, then 8 chunks of its fifth bits at 1152:
//   chunk c = bytes 4c..4c+3 of each row's qh (bit s of byte l: sub-block s's element l).
//   Q5_0 / Q5_1: d[8], Q5_1 only: m[8], the eight rows' 32-bit qh (bit j: element j's
//   fifth bit), then Q4_0's 4 chunks of nibbles.
//   Q6_K: 32 chunks of its low nibbles (bytes 4c..4c+3 of each row's ql), 16 of
//   its high bit pairs (of qh), int8 scale i of the eight rows at 1536 + 8i (i < 16), d[8].
// Every byte is the file's byte, moved: no value changes, no memory is added.
//
// Each output y[t, o] = acc + off with, over 32-blocks b ascending (a K type's
// sub-blocks in order),
//   acc = fma(f32(dw_ob * dx_tb), f32(int dot of block b), acc)
//   off = fma(offset_ob, s_tb, off)   (Q4_0: -8 dw, Q5_0: -16 dw, Q4_1 / Q5_1: m,
//                                      Q4_K / Q5_K: -(dmin * m); Q8_0, Q6_K have none)
// (the file-layout kernel's terms, quant_q8.hpp), with Q4_K's and Q5_K's dw = d * sc and
// Q6_K's dw = d, its int8 scales inside the integer dot (sc1 * dot of the first 16 values
// + sc2 * dot of the second), in the lane of column o, whatever the tile, the row count or
// the thread: row-invariant, and the same bits on every ISA (the integer dots are exact).
#include <cstring>
#include <type_traits>
#include <vector>

namespace {

template <int TYPE>
constexpr bool rp_k() {  // 256-value super-blocks of eight 32-blocks
    return layout_k<TYPE>();
}

template <int TYPE>
constexpr bool rp_q4k_scaled() {  // Q4_K's d, dmin and 6-bit scales and mins (Q5_K's, at the same places)
    return TYPE == racer_quant::Q4_K || TYPE == racer_quant::Q5_K;
}

template <int TYPE>
constexpr int64_t rp_group_block() {  // bytes of one (super-)block of eight rows
    return 8 * layout_bytes<TYPE>();
}

template <int TYPE>
constexpr bool rp_has_offset() {
    return TYPE != racer_quant::Q8_0 && TYPE != racer_quant::Q6_K;
}

template <int TYPE, int R>
constexpr int rp_step() {  // 32-blocks whose dots rp_block_dots gives at once (Q4_K / Q5_K, 1-2 rows: a sub-block pair's)
    return rp_q4k_scaled<TYPE>() && R <= 2 ? 2 : 1;
}

constexpr int64_t RP_Q6K_QH = 1024, RP_Q6K_SCALES = 1536, RP_Q6K_D = 1664;  // Q6_K's fields in a group block
constexpr int64_t RP_Q5K_QH = 1152;  // Q5_K's fifth bits in a group block (after Q4_K's fields)

template <int TYPE>
constexpr int64_t rp_q5_qh() {  // Q5_0's / Q5_1's eight 32-bit qh in a group block
    return TYPE == racer_quant::Q5_1 ? 32 : 16;
}

template <int TYPE>
constexpr int64_t rp_nibbles() {  // Q4_0's / Q4_1's / Q5_0's / Q5_1's 4 chunks of nibbles in a group block
    return TYPE == racer_quant::Q4_0 ? 16 : TYPE == racer_quant::Q4_1 ? 32 : rp_q5_qh<TYPE>() + 32;
}

inline __m256i rp_bcast4(const int8_t* p) {  // four activation bytes in every lane
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

inline __m256 rp_halves(const uint8_t* p) {  // eight fp16 to float32
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline __m256i rp_bytes(const uint8_t* p) {  // eight unsigned bytes, one int32 lane each
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

inline __m256i rp_load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Q4_K's scales and mins of one group super-block, decoded once for its eight sub-blocks:
// sc[8s + j] and m[8s + j] are row j's 6-bit scale and min of sub-block s (ggml's
// get_scale_min_k4, on scale byte i of the eight rows at blk + 32 + 8i), d and dmin as float32.
struct Q4kScales {
    alignas(32) uint8_t sc[64], m[64];
    __m256 d, dmin;
};

inline void rp_q4k_scales(const uint8_t* blk, Q4kScales* out) {
    const __m256i v0 = rp_load(blk + 32), v1 = rp_load(blk + 64), v2 = rp_load(blk + 96);  // bytes 0-3, 4-7, 8-11
    const __m256i six = _mm256_set1_epi8(63), four = _mm256_set1_epi8(0x0F), top = _mm256_set1_epi8(0x30);
    const auto hi2 = [&](__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 2), top); };  // (byte >> 6) << 4
    _mm256_store_si256(reinterpret_cast<__m256i*>(out->sc), _mm256_and_si256(v0, six));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out->sc + 32), _mm256_or_si256(_mm256_and_si256(v2, four), hi2(v0)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out->m), _mm256_and_si256(v1, six));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out->m + 32),
                       _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v2, 4), four), hi2(v1)));
    out->d = rp_halves(blk);
    out->dmin = rp_halves(blk + 16);
}

// Q4_K sub-block s's 6-bit scales (sc) or mins (!sc) of the eight rows, one int32 lane each,
// read from the group block itself (as rp_q4k_scales decodes them).
inline __m256i rp_q4k_scale(const uint8_t* blk, int s, bool sc) {
    const uint8_t* b = blk + 32;
    if (s < 4) return _mm256_and_si256(rp_bytes(b + 8 * (s + (sc ? 0 : 4))), _mm256_set1_epi32(63));
    const __m256i mixed = rp_bytes(b + 8 * (s + 4));
    const __m256i top = _mm256_slli_epi32(_mm256_srli_epi32(rp_bytes(b + 8 * (s - (sc ? 4 : 0))), 6), 4);
    return _mm256_or_si256(sc ? _mm256_and_si256(mixed, _mm256_set1_epi32(15)) : _mm256_srli_epi32(mixed, 4), top);
}

// Block b's (sub-block s's) float scale of its integer dots, for the eight rows
// (Q4_K's: d * sc, rounded once; from ks where given, else from the block).
template <int TYPE>
inline __m256 rp_dw(const uint8_t* blk, int s, const Q4kScales* ks) {
    if constexpr (rp_q4k_scaled<TYPE>())
        return ks ? _mm256_mul_ps(ks->d, _mm256_cvtepi32_ps(rp_bytes(ks->sc + 8 * s)))
                  : _mm256_mul_ps(rp_halves(blk), _mm256_cvtepi32_ps(rp_q4k_scale(blk, s, true)));
    else if constexpr (TYPE == racer_quant::Q6_K)
        return rp_halves(blk + RP_Q6K_D);
    else
        return rp_halves(blk);
}

// Block b's (sub-block s's) term per unit of s = dx * sum(qx), for the eight rows.
template <int TYPE>
inline __m256 rp_offset(const uint8_t* blk, int s, const Q4kScales* ks) {
    if constexpr (TYPE == racer_quant::Q4_1 || TYPE == racer_quant::Q5_1) {
        return rp_halves(blk + 16);
    } else if constexpr (rp_q4k_scaled<TYPE>()) {  // -(dmin * m): the product rounded, then negated
        const __m256 prod = ks ? _mm256_mul_ps(ks->dmin, _mm256_cvtepi32_ps(rp_bytes(ks->m + 8 * s)))
                               : _mm256_mul_ps(rp_halves(blk + 16), _mm256_cvtepi32_ps(rp_q4k_scale(blk, s, false)));
        return _mm256_xor_ps(prod, _mm256_set1_ps(-0.0f));
    } else {  // Q4_0: -8 d, Q5_0: -16 d
        return _mm256_mul_ps(_mm256_set1_ps(TYPE == racer_quant::Q5_0 ? -16.0f : -8.0f), rp_halves(blk));
    }
}

// Q6_K's int8 scale i of the eight rows as a madd multiplier: both int16 halves of lane j row j's.
inline __m256i rp_q6k_multiplier(const uint8_t* blk, int i) {
    const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + RP_Q6K_SCALES + 8 * i)));
    return _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(v, 16));
}

// Adds the products of 4-bit quants u4 and activations x: with PAIRS16 maddubs' int16 pair sums
// (a block's eight, at most 8 * 2 * 15 * 127, fit in int16), else DOT's int32 sums; rp_q4_sum finishes.
inline __m256i rp_q4_add(__m256i acc, __m256i u4, __m256i x) {
    if constexpr (DOT::PAIRS16) return _mm256_add_epi16(acc, _mm256_maddubs_epi16(u4, x));
    else return DOT::dot_add(acc, u4, x);
}

// rp_q4_add of two pairs (PAIRS16: their pair sums added first, a shorter chain).
inline __m256i rp_q4_add2(__m256i acc, __m256i u4a, __m256i xa, __m256i u4b, __m256i xb) {
    if constexpr (DOT::PAIRS16)
        return _mm256_add_epi16(acc, _mm256_add_epi16(_mm256_maddubs_epi16(u4a, xa), _mm256_maddubs_epi16(u4b, xb)));
    else return DOT::dot_add(DOT::dot_add(acc, u4a, xa), u4b, xb);
}

inline __m256i rp_q4_sum(__m256i acc) {
    if constexpr (DOT::PAIRS16) return _mm256_madd_epi16(acc, _mm256_set1_epi16(1));
    else return acc;
}

// maddubs' int16 pair sums a Q4 / Q5 type's acc may add before rp_flush: a 4-bit quant's pairs are at
// most 2 * 15 * 127 (eight fit in int16: a block's), a 5-bit one's 2 * 31 * 127 = 7874 (four fit).
template <int TYPE>
constexpr int rp_pairs16() {
    return TYPE == racer_quant::Q5_0 || TYPE == racer_quant::Q5_1 || TYPE == racer_quant::Q5_K ? 4 : 8;
}

// Adds the sums so far (rp_q4_add's) to the int32 dots and starts them again.
inline void rp_flush(__m256i* dots, __m256i* acc, int n) {
    for (int i = 0; i < n; ++i) {
        dots[i] = _mm256_add_epi32(dots[i], rp_q4_sum(acc[i]));
        acc[i] = _mm256_setzero_si256();
    }
}

// Q5_K's fifth bits as 0x10 in each byte of chunk c of sub-block s (bit s of each qh byte; the
// 16-bit shifts move bits across bytes, but never into the bit kept).
inline __m256i rp_q5k_high(const uint8_t* blk, int c, int s) {
    const __m256i qh = _mm256_srl_epi16(rp_load(blk + RP_Q5K_QH + 32 * c), _mm_cvtsi32_si128(s));
    return _mm256_and_si256(_mm256_slli_epi16(qh, 4), _mm256_set1_epi8(0x10));  // bit 0 to bit 4 of the same byte
}

// Q5_0 / Q5_1's fifth bits as 0x10 in byte k of lane j for element 4c + k (chunk c's low nibbles)
// or 16 + 4c + k (its high ones) of row j: byte c / 2 (or 2 + c / 2) of the lane's qh spread over its
// four bytes, each byte's own bit picked (as quant_layout.hpp's q5_quants).
inline __m256i rp_q5_high(__m256i qh, int c, bool high) {
    const __m256i lanes = _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0C0C0C0C, 0, 0x04040404, 0x08080808, 0x0C0C0C0C);
    const __m256i spread = _mm256_shuffle_epi8(qh, _mm256_add_epi8(lanes, _mm256_set1_epi8(static_cast<char>((high ? 2 : 0) + (c >> 1)))));
    const __m256i others = _mm256_set1_epi32(c & 1 ? 0x7FBFDFEF : static_cast<int>(0xF7FBFDFE));  // every bit but byte k's own
    const __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi8(-1));
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// The integer dot products of block b (at blk; a K type's sub-block s) with R
// activation rows (xq: row r's 32 values at xq + r * cols): lane j of out[r] is row j's
// (Q4_K at 1-2 rows: of sub-blocks s and s + 1, out[r] and out[R + r]).
template <int TYPE, int R>
inline void rp_block_dots(const uint8_t* blk, int s, const int8_t* xq, int64_t cols, __m256i* out) {
    const __m256i mask = _mm256_set1_epi8(0x0F);
    if constexpr (TYPE == racer_quant::Q8_0) {
        const uint8_t* q = blk + 16;
        for (int r = 0; r < R; ++r) out[r] = _mm256_setzero_si256();
        if constexpr (DOT::BIAS_Q8) {  // xq holds x + 128 (RpRows' bias): (x + 128) w, less 128 sum(w)
            __m256i sum = _mm256_setzero_si256();
            for (int c = 0; c < 8; ++c) {
                const __m256i w = rp_load(q + 32 * c);
                sum = DOT::dot_add(sum, _mm256_set1_epi8(1), w);  // the block's sum of w, once for every row
                for (int r = 0; r < R; ++r) out[r] = DOT::dot_add(out[r], rp_bcast4(xq + r * cols + 4 * c), w);
            }
            const __m256i bias = _mm256_slli_epi32(sum, 7);
            for (int r = 0; r < R; ++r) out[r] = _mm256_sub_epi32(out[r], bias);
        } else {
            for (int c = 0; c < 8; ++c) {
                const __m256i w = rp_load(q + 32 * c);
                const __m256i wabs = _mm256_sign_epi8(w, w);  // signed x signed: |w| times x with w's sign
                for (int r = 0; r < R; ++r)
                    out[r] = DOT::dot_add(out[r], wabs, _mm256_sign_epi8(rp_bcast4(xq + r * cols + 4 * c), w));
            }
        }
    } else if constexpr (TYPE == racer_quant::Q6_K) {
        // quants - 32 in -32..31: |w| times x with w's sign, maddubs pairs of at most 2*32*127; a
        // 16-value half's four chunks added in int16 (at most 32512), then madd by its int8 scale
        const int n = s >> 2, k = s & 3;
        const uint8_t* ql = blk + 32 * (16 * n + 8 * (k & 1));
        const uint8_t* qh = blk + RP_Q6K_QH + 32 * (8 * n);
        const __m128i lo_shift = _mm_cvtsi32_si128(4 * (k >> 1)), hi_shift = _mm_cvtsi32_si128(2 * k);
        for (int h = 0; h < 2; ++h) {
            __m256i s16[R];
            for (int r = 0; r < R; ++r) s16[r] = _mm256_setzero_si256();
            for (int c = 4 * h; c < 4 * h + 4; ++c) {
                const __m256i lo = _mm256_and_si256(_mm256_srl_epi16(rp_load(ql + 32 * c), lo_shift), mask);
                const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(rp_load(qh + 32 * c), hi_shift), _mm256_set1_epi8(0x03));
                const __m256i w = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), _mm256_set1_epi8(32));
                const __m256i wabs = _mm256_sign_epi8(w, w);
                for (int r = 0; r < R; ++r) {
                    const __m256i p = _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(rp_bcast4(xq + r * cols + 4 * c), w));
                    s16[r] = _mm256_add_epi16(s16[r], p);
                }
            }
            const __m256i mult = rp_q6k_multiplier(blk, 2 * s + h);
            for (int r = 0; r < R; ++r) {
                const __m256i part = _mm256_madd_epi16(s16[r], mult);
                out[r] = h ? _mm256_add_epi32(out[r], part) : part;
            }
        }
    } else if constexpr (rp_q4k_scaled<TYPE>()) {  // Q5_K: each nibble with its fifth bit
        constexpr bool FIVE = TYPE == racer_quant::Q5_K;
        const uint8_t* q = blk + 128 + 256 * (s >> 1);  // 8 chunks of sub-blocks s & ~1 (low nibbles) and s | 1 (high)
        if constexpr (rp_step<TYPE, R>() == 2) {  // s even: out[r] its dots, out[R + r] s + 1's
            __m256i acc[2 * R];
            for (int r = 0; r < 2 * R; ++r) acc[r] = out[r] = _mm256_setzero_si256();
            for (int c = 0; c < 8; ++c) {
                const __m256i raw = rp_load(q + 32 * c);
                __m256i lo = _mm256_and_si256(raw, mask), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
                if constexpr (FIVE) {
                    lo = _mm256_or_si256(lo, rp_q5k_high(blk, c, s));
                    hi = _mm256_or_si256(hi, rp_q5k_high(blk, c, s + 1));
                }
                for (int r = 0; r < R; ++r) {
                    const int8_t* x = xq + r * cols + 4 * c;
                    acc[r] = rp_q4_add(acc[r], lo, rp_bcast4(x));
                    acc[R + r] = rp_q4_add(acc[R + r], hi, rp_bcast4(x + 32));
                }
                if ((c + 1) % rp_pairs16<TYPE>() == 0) rp_flush(out, acc, 2 * R);
            }
        } else {  // sub-block s alone (more rows: fewer registers): chunks c and c + 4 together
            const bool high = s & 1;  // the nibbles of s: the high ones for an odd s
            __m256i acc[R];
            for (int r = 0; r < R; ++r) acc[r] = out[r] = _mm256_setzero_si256();
            for (int c = 0; c < 4; ++c) {
                const __m256i raw = rp_load(q + 32 * c), raw2 = rp_load(q + 32 * (c + 4));
                __m256i a = _mm256_and_si256(high ? _mm256_srli_epi16(raw, 4) : raw, mask);
                __m256i b = _mm256_and_si256(high ? _mm256_srli_epi16(raw2, 4) : raw2, mask);
                if constexpr (FIVE) {
                    a = _mm256_or_si256(a, rp_q5k_high(blk, c, s));
                    b = _mm256_or_si256(b, rp_q5k_high(blk, c + 4, s));
                }
                for (int r = 0; r < R; ++r) {
                    const int8_t* x = xq + r * cols;
                    acc[r] = rp_q4_add2(acc[r], a, rp_bcast4(x + 4 * c), b, rp_bcast4(x + 16 + 4 * c));
                }
                if ((2 * c + 2) % rp_pairs16<TYPE>() == 0) rp_flush(out, acc, R);
            }
        }
    } else {  // Q4_0 / Q4_1 / Q5_0 / Q5_1: 4 chunks, low nibbles elements 4c..4c+3, high 16+4c..16+4c+3
        constexpr bool FIVE = TYPE == racer_quant::Q5_0 || TYPE == racer_quant::Q5_1;
        const uint8_t* q = blk + rp_nibbles<TYPE>();
        __m256i qh = _mm256_setzero_si256();
        if constexpr (FIVE) qh = rp_load(blk + rp_q5_qh<TYPE>());
        __m256i acc[R];
        for (int r = 0; r < R; ++r) acc[r] = out[r] = _mm256_setzero_si256();
        for (int c = 0; c < 4; ++c) {
            const __m256i raw = rp_load(q + 32 * c);
            __m256i lo = _mm256_and_si256(raw, mask), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
            if constexpr (FIVE) {
                lo = _mm256_or_si256(lo, rp_q5_high(qh, c, false));
                hi = _mm256_or_si256(hi, rp_q5_high(qh, c, true));
            }
            for (int r = 0; r < R; ++r) {
                const int8_t* x = xq + r * cols;
                acc[r] = rp_q4_add2(acc[r], lo, rp_bcast4(x + 4 * c), hi, rp_bcast4(x + 16 + 4 * c));
                // each chunk's sums kept in their register as made (the compiler would otherwise hold every
                // product of the block to add them in a tree, spilling most of them on 16 registers)
                __asm__("" : "+x"(acc[r]));
            }
            if ((2 * c + 2) % rp_pairs16<TYPE>() == 0) rp_flush(out, acc, R);
        }
    }
}

// The group block holding 32-block b (a K type's super-block b / 8).
template <int TYPE>
inline const uint8_t* rp_block(const uint8_t* group, int64_t b) {
    return group + (rp_k<TYPE>() ? b >> 3 : b) * rp_group_block<TYPE>();
}

// Asks for 32-block b's bytes of the group at `group`, `ahead` bytes on, to be brought into L1: the
// tile after this one reads them next (rp_groups asks in a chunk's first row tile only; the others
// read the same groups again, from L1 or L2). A step streams its weights from L3 or memory, and a tile
// otherwise stalls at each group it starts on (one row ran 1.2-1.5x slower on AVX2 and at 0.8B;
// docs/design.md, "Prefetching the next tile"). A prefetch never faults and changes no value; the
// address is formed as an integer, so one past the weights' end is no pointer arithmetic out of bounds.
inline void rp_prefetch(const uint8_t* group, int64_t group_bytes, int64_t nb, int64_t b, int64_t ahead) {
    const int64_t per = group_bytes / nb;
    const uintptr_t at = reinterpret_cast<uintptr_t>(group) + static_cast<uintptr_t>(b * per + ahead);
    for (int64_t i = 0; i < per; i += 64) _mm_prefetch(reinterpret_cast<const char*>(at + i), _MM_HINT_T0);
}

// G groups (8 G output rows) times R activation rows. The offsets are a sum of
// their own per column, in a second pass over the blocks (fewer registers);
// Q4_K's and Q5_K's at 1-2 rows in the same pass, its scales decoded once per super-block.
template <int TYPE, int G, int R>
inline void rp_tile(const uint8_t* w, int64_t group_bytes, int64_t nb, const int8_t* xq, const float* xd,
                    const float* xs, int64_t cols, float* y, int64_t ldy, int64_t ahead) {
    constexpr int STEP = rp_step<TYPE, R>();
    constexpr bool ONE_PASS = rp_q4k_scaled<TYPE>() && STEP == 2;
    constexpr int OG = ONE_PASS ? G : 1, OR = ONE_PASS ? R : 1;
    __m256 acc[G][R], off[OG][OR];  // off: the one pass's (a second pass keeps its own, fewer registers live)
    Q4kScales ks[OG];
    for (int g = 0; g < G; ++g)
        for (int r = 0; r < R; ++r) acc[g][r] = _mm256_setzero_ps();
    for (int g = 0; g < OG; ++g)
        for (int r = 0; r < OR; ++r) off[g][r] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += STEP) {
        const int s0 = static_cast<int>(b0 & 7);
        for (int g = 0; g < G; ++g) {
            const uint8_t* blk = rp_block<TYPE>(w + g * group_bytes, b0);
            if (ahead)
                for (int i = 0; i < STEP; ++i) rp_prefetch(w + g * group_bytes, group_bytes, nb, b0 + i, ahead);
            const Q4kScales* k = ONE_PASS ? &ks[g] : nullptr;
            if constexpr (ONE_PASS) {
                if (s0 == 0) rp_q4k_scales(blk, &ks[g]);
            }
            __m256i dots[STEP * R];
            rp_block_dots<TYPE, R>(blk, s0, xq + 32 * b0, cols, dots);
            for (int i = 0; i < STEP; ++i) {  // the 32-blocks in order
                const int64_t b = b0 + i;
                const __m256 dw = rp_dw<TYPE>(blk, s0 + i, k);
                for (int r = 0; r < R; ++r) {
                    const __m256 scale = _mm256_mul_ps(dw, _mm256_broadcast_ss(xd + r * nb + b));  // dw * dx, rounded once
                    acc[g][r] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(dots[i * R + r]), acc[g][r]);
                }
                if constexpr (ONE_PASS) {
                    const __m256 o = rp_offset<TYPE>(blk, s0 + i, k);
                    for (int r = 0; r < OR; ++r)
                        off[g][r] = _mm256_fmadd_ps(o, _mm256_broadcast_ss(xs + r * nb + b), off[g][r]);
                }
            }
        }
    }
    if constexpr (ONE_PASS) {
        for (int g = 0; g < G; ++g)
            for (int r = 0; r < R; ++r) acc[g][r] = _mm256_add_ps(acc[g][r], off[g][r]);
    } else if constexpr (rp_has_offset<TYPE>()) {
        for (int g = 0; g < G; ++g) {
            __m256 sum[R];
            for (int r = 0; r < R; ++r) sum[r] = _mm256_setzero_ps();
            for (int64_t b = 0; b < nb; ++b) {
                const __m256 o = rp_offset<TYPE>(rp_block<TYPE>(w + g * group_bytes, b), static_cast<int>(b & 7), nullptr);
                for (int r = 0; r < R; ++r) sum[r] = _mm256_fmadd_ps(o, _mm256_broadcast_ss(xs + r * nb + b), sum[r]);
            }
            for (int r = 0; r < R; ++r) acc[g][r] = _mm256_add_ps(acc[g][r], sum[r]);
        }
    }
    for (int g = 0; g < G; ++g)
        for (int r = 0; r < R; ++r) _mm256_storeu_ps(y + r * ldy + 8 * g, acc[g][r]);
}

// A tile kind: G groups (8 G output rows) by R activation rows in rp_tile.
template <int TYPE, int G>
struct RpTile {
    static constexpr int GROUPS = G;
    template <int R>
    static void run(const uint8_t* w, int64_t group_bytes, int64_t nb, const int8_t* xq, const float* xd,
                    const float* xs, int64_t cols, float* y, int64_t ldy, int64_t ahead) {
        rp_tile<TYPE, G, R>(w, group_bytes, nb, xq, xd, xs, cols, y, ldy, ahead);
    }
};

// Tile's tile for r activation rows (1 <= r <= R).
template <class Tile, int R>
inline void rp_tile_rows(int r, const uint8_t* w, int64_t group_bytes, int64_t nb, const int8_t* xq, const float* xd,
                         const float* xs, int64_t cols, float* y, int64_t ldy, int64_t ahead) {
    if constexpr (R > 1) {
        if (r < R) return rp_tile_rows<Tile, R - 1>(r, w, group_bytes, nb, xq, xd, xs, cols, y, ldy, ahead);
    }
    Tile::template run<R>(w, group_bytes, nb, xq, xd, xs, cols, y, ldy, ahead);
}

// The T activation rows of a multiply and their 8-bit blocks (8 bits per 32-block, quant_q8.hpp).
// bias: each quantized value as the unsigned byte x + 128 (its sign bit flipped; x is -127..127),
// for the dpbusd builds' Q8_0 dots (rp_bias_q8).
struct RpRows {
    const float* x;
    int8_t* xq;
    float* xd;
    float* xs;
    bool bias;

    // Row t quantized: each row alone, so which thread does it changes no bit.
    void quantize(int64_t t, int64_t cols) const {
        const int64_t nb = cols / 32;
        int8_t* q = xq + t * cols;
        q8_quantize_rows(x + t * cols, 1, cols, q, xd + t * nb, xs + t * nb);
        if (bias)
            for (int64_t i = 0; i < cols; ++i) q[i] = static_cast<int8_t>(static_cast<uint8_t>(q[i]) ^ 0x80u);
    }
};

// Tile::GROUPS groups at a time, all T rows in tiles of up to R; the groups past the last whole
// chunk one at a time. SPLIT_ROWS rows or more are quantized in the same parallel region, before the
// tiles: a step's rows split between the threads rather than left to one while the others wait.
template <int TYPE, class Tile, int R>
void rp_groups(const uint8_t* w, int64_t groups, int64_t nb, const RpRows& a, int64_t cols, int64_t T, float* y,
               int64_t rows, int threads) {
    constexpr int G = Tile::GROUPS;
    const int64_t group_bytes = 8 * layout_row_bytes<TYPE>(cols);
    const int64_t chunks = (groups + G - 1) / G;
    const int8_t* xq = a.xq;
    const float *xd = a.xd, *xs = a.xs;
    const bool split = T >= racer_quant::SPLIT_ROWS;  // fewer: quantized before the region, not behind one more barrier
    if (!split)
        for (int64_t t = 0; t < T; ++t) a.quantize(t, cols);
#pragma omp parallel num_threads(threads) if (threads > 1 && chunks > 1)
    {
        if (split) {
#pragma omp for schedule(static)
            for (int64_t t = 0; t < T; ++t) a.quantize(t, cols);
        }
#pragma omp for schedule(static)
        for (int64_t i = 0; i < chunks; ++i) {
            const int64_t g0 = i * G;
            const uint8_t* wg = w + g0 * group_bytes;
            for (int64_t t = 0; t < T; t += R) {
                const int rr = static_cast<int>(T - t < R ? T - t : R);
                const int8_t* xt = xq + t * cols;
                float* yt = y + t * rows + 8 * g0;
                if (groups - g0 >= G)
                    rp_tile_rows<Tile, R>(rr, wg, group_bytes, nb, xt, xd + t * nb, xs + t * nb, cols, yt, rows,
                                          t == 0 ? G * group_bytes : 0);
                else  // the last groups, one at a time
                    for (int64_t g = g0; g < groups; ++g)
                        rp_tile_rows<RpTile<TYPE, 1>, R>(rr, w + g * group_bytes, group_bytes, nb, xt, xd + t * nb,
                                                         xs + t * nb, cols, y + t * rows + 8 * g, rows, 0);
            }
        }
    }
}

// multiply(rows): RpRows over x with room for its 8-bit blocks, kept by the calling thread and
// reused, so a step's many calls neither allocate nor zero them.
template <bool BIAS = false, class Multiply>
void rp_quantized(const float* x, int64_t T, int64_t cols, Multiply&& multiply) {
    const int64_t nb = cols / 32;
    thread_local std::vector<int8_t> kept_q;
    thread_local std::vector<float> kept_d, kept_s;
    if (kept_q.size() < static_cast<size_t>(T * cols)) kept_q.resize(static_cast<size_t>(T * cols));
    if (kept_d.size() < static_cast<size_t>(T * nb)) {
        kept_d.resize(static_cast<size_t>(T * nb));
        kept_s.resize(static_cast<size_t>(T * nb));
    }
    multiply(RpRows{x, kept_q.data(), kept_d.data(), kept_s.data(), BIAS});
}

// Whether TYPE's dots read biased activations (rp_quantized's BIAS): Q8_0 where DOT's integer dot
// takes unsigned bytes times signed ones into int32 (dpbusd). Its weights are signed, so without the
// bias each chunk's activations took w's sign per row (the sign trick, as maddubs needs: its int16 pair
// sums would saturate at 255 * 127 * 2); with it one sum of w per block serves every row.
template <int TYPE>
constexpr bool rp_bias_q8() {
    return TYPE == racer_quant::Q8_0 && DOT::BIAS_Q8;
}

template <int TYPE>
void rp_matmul_typed(const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
                     int threads) {
    const int64_t nb = cols / 32, groups = rows / 8;
    constexpr int G2 = TYPE == racer_quant::Q6_K ? 2 : DOT::G2;
    // Few rows: several groups per tile keep independent accumulators in flight.
    rp_quantized<rp_bias_q8<TYPE>()>(x, T, cols, [&](const RpRows& a) {
        if (T == 1) rp_groups<TYPE, RpTile<TYPE, DOT::G1>, 1>(w, groups, nb, a, cols, T, y, rows, threads);
        else if (T == 2) rp_groups<TYPE, RpTile<TYPE, G2>, 2>(w, groups, nb, a, cols, T, y, rows, threads);
        else rp_groups<TYPE, RpTile<TYPE, 1>, DOT::RR>(w, groups, nb, a, cols, T, y, rows, threads);
    });
}

[[maybe_unused]] void rp_matmul_any(int type, const uint8_t* w, int64_t rows, int64_t cols, const float* x,
                                    int64_t T, float* y, int threads) {  // (the VNNI build calls rp_wide_matmul_any)
    layout_dispatch(type, [&](auto t) { rp_matmul_typed<decltype(t)::value>(w, rows, cols, x, T, y, threads); });
}

}  // namespace
