// ggml's block layouts as 32-value blocks, shared by both kernels' bodies
// (included inside their unnamed namespace, after the target pragma).
//
// Q4_0 (18 bytes: d, 16 nibble bytes), Q4_1 (20: d, m, 16), Q8_0 (34: d, 32
// int8), Q5_0 (22: d, 4 bytes of fifth bits, 16 nibble bytes) and Q5_1 (24: d,
// m, 4, 16) hold 32 values a block. Q4_K (144 bytes: d, dmin, 12 bytes of 6-bit
// scales and mins, 128 nibble bytes), Q5_K (176: Q4_K's d, dmin and scales, 32
// bytes of fifth bits, 128 nibble bytes) and Q6_K (210: 128 low-nibble bytes, 64
// bytes of high 2-bit pairs, 16 int8 scales, d) hold 256 values in eight
// 32-value sub-blocks; block b of a row is sub-block b % 8 of super-block b / 8.
// Needs <cstring>, <type_traits> and <immintrin.h> included before the namespace opens.
#pragma once

// fn(std::integral_constant<int, TYPE>{}) for a runtime type id (nothing for an unknown one).
template <typename Fn>
inline void layout_dispatch(int type, Fn&& fn) {
    switch (type) {
        case racer_quant::Q4_0: fn(std::integral_constant<int, racer_quant::Q4_0>{}); break;
        case racer_quant::Q4_1: fn(std::integral_constant<int, racer_quant::Q4_1>{}); break;
        case racer_quant::Q5_0: fn(std::integral_constant<int, racer_quant::Q5_0>{}); break;
        case racer_quant::Q5_1: fn(std::integral_constant<int, racer_quant::Q5_1>{}); break;
        case racer_quant::Q8_0: fn(std::integral_constant<int, racer_quant::Q8_0>{}); break;
        case racer_quant::Q4_K: fn(std::integral_constant<int, racer_quant::Q4_K>{}); break;
        case racer_quant::Q5_K: fn(std::integral_constant<int, racer_quant::Q5_K>{}); break;
        case racer_quant::Q6_K: fn(std::integral_constant<int, racer_quant::Q6_K>{}); break;
        default: break;
    }
}

// The sum of 8 lanes in one fixed order: halves, then pairs.
inline float layout_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

template <int TYPE>
constexpr int64_t layout_bytes() {  // bytes of one (super-)block
    return TYPE == racer_quant::Q4_0 ? 18 : TYPE == racer_quant::Q4_1 ? 20 : TYPE == racer_quant::Q5_0 ? 22
         : TYPE == racer_quant::Q5_1 ? 24 : TYPE == racer_quant::Q8_0 ? 34 : TYPE == racer_quant::Q4_K ? 144
         : TYPE == racer_quant::Q5_K ? 176 : 210;
}

template <int TYPE>
constexpr bool layout_k() {  // 256 values per block
    return TYPE == racer_quant::Q4_K || TYPE == racer_quant::Q5_K || TYPE == racer_quant::Q6_K;
}

template <int TYPE>
constexpr int64_t layout_row_bytes(int64_t cols) {  // bytes of a row of `cols` values
    return cols / (layout_k<TYPE>() ? 256 : 32) * layout_bytes<TYPE>();
}

template <int TYPE>
inline const uint8_t* layout_block(const uint8_t* row, int64_t b) {  // the (super-)block holding 32-block b
    return layout_k<TYPE>() ? row + (b >> 3) * layout_bytes<TYPE>() : row + b * layout_bytes<TYPE>();
}

inline float layout_half(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

// Q4_K's 6-bit scale and min of sub-block j (ggml's get_scale_min_k4).
inline void q4k_scale_min(const uint8_t* scales, int j, int* sc, int* m) {
    if (j < 4) {
        *sc = scales[j] & 63;
        *m = scales[j + 4] & 63;
    } else {
        *sc = (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
        *m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
    }
}

// Sub-block s's 32 nibbles (0..15) of a K super-block's 128 nibble bytes `qs`, as bytes in element order:
// chunk s / 2 of 32 bytes, its low nibbles for an even s, high for an odd one.
inline __m256i k_nibbles(const uint8_t* qs, int s) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * (s >> 1)));
    const __m256i shifted = (s & 1) ? _mm256_srli_epi16(q, 4) : q;
    return _mm256_and_si256(shifted, _mm256_set1_epi8(0x0F));
}

// Q4_K sub-block s's 32 quants (0..15) as bytes in element order.
inline __m256i q4k_quants(const uint8_t* sb, int s) { return k_nibbles(sb + 16, s); }

// Q5_K sub-block s's 32 quants (0..31) as bytes in element order: its nibbles,
// and as fifth bit bit s of byte l of the 32 qh bytes (ggml's dequantize_row_q5_K).
inline __m256i q5k_quants(const uint8_t* sb, int s) {
    __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 16));
    hi = _mm256_srl_epi16(hi, _mm_cvtsi32_si128(s));  // bit s of each byte to its bit 0 (the high byte's own bit s)
    hi = _mm256_slli_epi16(_mm256_and_si256(hi, _mm256_set1_epi8(0x01)), 4);  // 0x10 at most a byte: no carry
    return _mm256_or_si256(k_nibbles(sb + 48, s), hi);
}

// Q5_0 / Q5_1's 32 quants (0..31) as bytes in element order: the 16 nibble
// bytes at qh + 4 (low nibbles values 0..15, high 16..31), value j's fifth bit
// bit j of the little-endian 32-bit qh (ggml's dequantize_row_q5_0).
inline __m256i q5_quants(const uint8_t* qh) {
    uint32_t bits;
    std::memcpy(&bits, qh, 4);
    // byte j of the result: 0xFF where bit j is set (each lane's bytes spread, every other bit forced on)
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)),
                                          _mm256_set1_epi64x(-1));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qh + 4));
    const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
    const __m256i nibbles = _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
    return _mm256_or_si256(nibbles, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
}

// Q6_K sub-block s's 32 quants minus 32 (-32..31) as signed bytes in element order.
inline __m256i q6k_quants(const uint8_t* sb, int s) {
    const int n = s >> 2, k = s & 3;  // the 128-value half, the quarter in it
    __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 64 * n + 32 * (k & 1)));
    if (k >> 1) lo = _mm256_srli_epi16(lo, 4);
    lo = _mm256_and_si256(lo, _mm256_set1_epi8(0x0F));
    __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 128 + 32 * n));
    hi = _mm256_srl_epi16(hi, _mm_cvtsi32_si128(2 * k));
    hi = _mm256_slli_epi16(_mm256_and_si256(hi, _mm256_set1_epi8(0x03)), 4);  // at most 0x30 a byte: no carry
    return _mm256_sub_epi8(_mm256_or_si256(lo, hi), _mm256_set1_epi8(32));
}

// Q6_K sub-block s's two int8 scales (its first and second 16 values).
inline void q6k_scales(const uint8_t* sb, int s, int* first, int* second) {
    const int8_t* sc = reinterpret_cast<const int8_t*>(sb + 192);
    *first = sc[2 * s];
    *second = sc[2 * s + 1];
}
