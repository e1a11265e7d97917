#include "attention_kernel.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace racer {
namespace {

constexpr int kLanes = 8;
constexpr int kBlock = 8;  // value chunks (of 8 floats) kept in registers at once

struct Half {  // an IEEE float16: a key or value in a float16 cache
    uint16_t bits;
};

inline float half_to_float(Half h) {  // exact: every float16 is a float
    _Float16 x;
    std::memcpy(&x, &h.bits, sizeof x);
    return static_cast<float>(x);
}

inline float bf16_to_float(uint16_t bits) {
    uint32_t wide = static_cast<uint32_t>(bits) << 16;
    float out;
    std::memcpy(&out, &wide, sizeof out);
    return out;
}

inline uint16_t float_to_bf16(float value) {  // round to nearest even, as torch's .to(bfloat16)
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    if (std::isnan(value)) return 0x7fc0;
    bits += 0x7fff + ((bits >> 16) & 1);
    return static_cast<uint16_t>(bits >> 16);
}

template <typename T>
inline float to_float(T x);
template <>
inline float to_float<float>(float x) { return x; }
template <>
inline float to_float<uint16_t>(uint16_t x) { return bf16_to_float(x); }
template <>
inline float to_float<Half>(Half x) { return half_to_float(x); }

// One row of `dim` values as floats, zero-padded to a multiple of 8.
template <typename T>
inline void widen(const T* src, int64_t dim, float* dst, int64_t padded) {
    for (int64_t d = 0; d < dim; ++d) dst[d] = to_float(src[d]);
    for (int64_t d = dim; d < padded; ++d) dst[d] = 0.0f;
}

// exp for x <= 0 (Cephes' expf polynomial); the same operations in both paths.
constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kExpMin = -87.3365447505f;
constexpr float kP0 = 1.9875691500E-4f, kP1 = 1.3981999507E-3f, kP2 = 8.3334519073E-3f,
                kP3 = 4.1665795894E-2f, kP4 = 1.6666665459E-1f, kP5 = 5.0000001201E-1f;

inline float exp_portable(float x) {
    x = std::max(x, kExpMin);
    float n = std::nearbyint(x * kLog2e);
    float r = std::fma(n, -kLn2Hi, x);
    r = std::fma(n, -kLn2Lo, r);
    float p = kP0;
    p = std::fma(p, r, kP1);
    p = std::fma(p, r, kP2);
    p = std::fma(p, r, kP3);
    p = std::fma(p, r, kP4);
    p = std::fma(p, r, kP5);
    float y = std::fma(p, r * r, r) + 1.0f;
    int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return y * scale;
}

// The fixed fold of 8 lanes: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
inline float fold_portable(const float* l) {
    float a0 = l[0] + l[4], a1 = l[1] + l[5], a2 = l[2] + l[6], a3 = l[3] + l[7];
    return (a0 + a2) + (a1 + a3);
}

// The inner loops, in two paths with the same operations in the same order.
// Keys and values come as float rows `stride` apart, each padded with zeros to
// a multiple of 8 (`padded`); `keys` are indices into them.

struct Portable {
    // scores[i] = q . k[keys[i]] * scale + mask[keys[i]]
    template <typename E>
    static void dots(const float* q, int64_t padded, const E* k, int64_t stride, const int32_t* keys, int64_t n,
                     float scale, const float* mask, float* scores) {
        for (int64_t i = 0; i < n; ++i) {
            const E* kj = k + keys[i] * stride;
            float lanes[kLanes] = {};
            for (int64_t c = 0; c < padded; c += kLanes)
                for (int l = 0; l < kLanes; ++l) lanes[l] = std::fma(q[c + l], to_float(kj[c + l]), lanes[l]);
            scores[i] = fold_portable(lanes) * scale + mask[keys[i]];
        }
    }

    // scores -> exp(score - max) in place; returns their sum (8 lanes by place, then the fold).
    static float softmax(float* scores, int64_t n) {
        float top = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < n; ++i) top = std::max(top, scores[i]);
        float lanes[kLanes] = {};
        for (int64_t i = 0; i < n; i += kLanes)
            for (int l = 0; l < kLanes; ++l) {
                float e = i + l < n ? exp_portable(scores[i + l] - top) : 0.0f;
                if (i + l < n) scores[i + l] = e;
                lanes[l] = lanes[l] + e;
            }
        return fold_portable(lanes);
    }

    // acc += p[i] * v[keys[i]], key by key
    template <typename E>
    static void accumulate(const float* p, const E* v, int64_t stride, const int32_t* keys, int64_t n,
                           int64_t padded, float* acc) {
        for (int64_t i = 0; i < n; ++i) {
            const E* vj = v + keys[i] * stride;
            for (int64_t d = 0; d < padded; ++d) acc[d] = std::fma(p[i], to_float(vj[d]), acc[d]);
        }
    }

    static void finish(float* acc, int64_t padded, float sum) {
        for (int64_t d = 0; d < padded; ++d) acc[d] = acc[d] / sum;
    }

    // Two heads over the same keys (query heads sharing a key/value head).
    template <typename E>
    static void dots2(const float* q0, const float* q1, int64_t padded, const E* k, int64_t stride,
                      const int32_t* keys, int64_t n, float scale, const float* mask, float* out0, float* out1) {
        dots(q0, padded, k, stride, keys, n, scale, mask, out0);
        dots(q1, padded, k, stride, keys, n, scale, mask, out1);
    }

    template <typename E>
    static void accumulate2(const float* p0, const float* p1, const E* v, int64_t stride, const int32_t* keys,
                            int64_t n, int64_t padded, float* acc0, float* acc1) {
        accumulate(p0, v, stride, keys, n, padded, acc0);
        accumulate(p1, v, stride, keys, n, padded, acc1);
    }

    template <typename E>
    static void accumulate3(const float* p, int64_t p_step, const E* v, int64_t stride, const int32_t* keys,
                            int64_t n, int64_t padded, float* acc, int64_t acc_step) {
        for (int e = 0; e < 3; ++e) accumulate(p + e * p_step, v, stride, keys, n, padded, acc + e * acc_step);
    }

    // Three heads over the same keys; `q` and `out` rows `q_step` and `out_step` apart.
    template <typename E>
    static void dots3(const float* q, int64_t q_step, int64_t padded, const E* k, int64_t stride,
                      const int32_t* keys, int64_t n, float scale, const float* mask, float* out, int64_t out_step) {
        for (int e = 0; e < 3; ++e) dots(q + e * q_step, padded, k, stride, keys, n, scale, mask, out + e * out_step);
    }
};

#define RACER_AVX2 __attribute__((target("avx2,fma,f16c")))

// Eight keys' or values' elements as floats (bf16 and float16 widened: exact).
RACER_AVX2 inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
RACER_AVX2 inline __m256 load8(const Half* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
RACER_AVX2 inline __m256 load8(const uint16_t* p) {  // bf16: the high half of a float
    const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}

RACER_AVX2 inline float fold(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // l0+l4 .. l3+l7
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));                                         // (a0+a2), (a1+a3)
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

RACER_AVX2 inline __m256 exp8(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(kExpMin));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Hi), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Lo), r);
    __m256 p = _mm256_set1_ps(kP0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
}

// fold() of four vectors at once: the same additions, so the same bits.
RACER_AVX2 inline __m128 fold4(__m256 s0, __m256 s1, __m256 s2, __m256 s3) {
    __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    __m128 t1 = _mm_add_ps(_mm256_castps256_ps128(s1), _mm256_extractf128_ps(s1, 1));
    __m128 t2 = _mm_add_ps(_mm256_castps256_ps128(s2), _mm256_extractf128_ps(s2, 1));
    __m128 t3 = _mm_add_ps(_mm256_castps256_ps128(s3), _mm256_extractf128_ps(s3, 1));
    t0 = _mm_add_ps(t0, _mm_movehl_ps(t0, t0));  // (a0+a2), (a1+a3), ..
    t1 = _mm_add_ps(t1, _mm_movehl_ps(t1, t1));
    t2 = _mm_add_ps(t2, _mm_movehl_ps(t2, t2));
    t3 = _mm_add_ps(t3, _mm_movehl_ps(t3, t3));
    __m128 x01 = _mm_unpacklo_ps(t0, t1), x23 = _mm_unpacklo_ps(t2, t3);  // b0 of 0, 1 / b1 of 0, 1 ...
    return _mm_add_ps(_mm_movelh_ps(x01, x23), _mm_movehl_ps(x23, x01));
}

// [x: l0+l4, l1+l5, l2+l6, l3+l7 | y: the same]
RACER_AVX2 inline __m256 halves(__m256 x, __m256 y) {
    return _mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20), _mm256_permute2f128_ps(x, y, 0x31));
}

// From halves of keys 0|1 and 2|3: [k0: (l0+l4)+(l2+l6), (l1+l5)+(l3+l7), k2: the same | k1, k3: the same].
RACER_AVX2 inline __m256 pairs(__m256 s01, __m256 s23) {
    return _mm256_add_ps(_mm256_shuffle_ps(s01, s23, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm256_shuffle_ps(s01, s23, _MM_SHUFFLE(3, 2, 3, 2)));
}

// fold() of three heads' sums over the same four keys (a[j], b[j], c[j]: key j) at
// once, each key's lanes added by fold's tree (operands swapped at most, which
// changes no bit); out[0..2]: the four keys' results of each head.
RACER_AVX2 inline void fold12(const __m256* a, const __m256* b, const __m256* c, __m128* out) {
    const __m256 va = pairs(halves(a[0], a[1]), halves(a[2], a[3]));
    const __m256 vb = pairs(halves(b[0], b[1]), halves(b[2], b[3]));
    const __m256 vc = pairs(halves(c[0], c[1]), halves(c[2], c[3]));
    // the last addition: [a.k0, a.k2, b.k0, b.k2 | a.k1, a.k3, b.k1, b.k3], and c's likewise
    const __m256 ab = _mm256_add_ps(_mm256_shuffle_ps(va, vb, _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm256_shuffle_ps(va, vb, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m256 cc = _mm256_add_ps(_mm256_shuffle_ps(vc, vc, _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm256_shuffle_ps(vc, vc, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m128 lo = _mm256_castps256_ps128(ab), hi = _mm256_extractf128_ps(ab, 1);
    out[0] = _mm_unpacklo_ps(lo, hi);
    out[1] = _mm_unpackhi_ps(lo, hi);
    out[2] = _mm_unpacklo_ps(_mm256_castps256_ps128(cc), _mm256_extractf128_ps(cc, 1));
}

// The mask entries of four keys; keys in a row (a block the row sees whole, the
// usual case) are read at once.
RACER_AVX2 inline __m128 mask4(const float* mask, const int32_t* keys) {
    return keys[3] - keys[0] == 3 ? _mm_loadu_ps(mask + keys[0])
                                  : _mm_setr_ps(mask[keys[0]], mask[keys[1]], mask[keys[2]], mask[keys[3]]);
}

RACER_AVX2 inline void store4(__m128 folded, float scale, __m128 mask, float* out) {
    _mm_storeu_ps(out, _mm_add_ps(_mm_mul_ps(folded, _mm_set1_ps(scale)), mask));
}

RACER_AVX2 inline void store4(__m128 folded, float scale, const float* mask, const int32_t* keys, float* out) {
    store4(folded, scale, mask4(mask, keys), out);
}

struct Avx2 {
    template <typename E>
    RACER_AVX2 static void dots2(const float* q0, const float* q1, int64_t padded, const E* k, int64_t stride,
                                 const int32_t* keys, int64_t n, float scale, const float* mask, float* out0,
                                 float* out1) {
        int64_t i = 0;
        for (; i + 4 <= n; i += 4) {  // 2 heads x 4 keys: each chunk loaded once for 2 (or 4) products
            const E* k0 = k + keys[i] * stride;
            const E* k1 = k + keys[i + 1] * stride;
            const E* k2 = k + keys[i + 2] * stride;
            const E* k3 = k + keys[i + 3] * stride;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
            for (int64_t c = 0; c < padded; c += kLanes) {
                const __m256 x = _mm256_loadu_ps(q0 + c), y = _mm256_loadu_ps(q1 + c);
                __m256 kc = load8(k0 + c);
                a0 = _mm256_fmadd_ps(x, kc, a0);
                b0 = _mm256_fmadd_ps(y, kc, b0);
                kc = load8(k1 + c);
                a1 = _mm256_fmadd_ps(x, kc, a1);
                b1 = _mm256_fmadd_ps(y, kc, b1);
                kc = load8(k2 + c);
                a2 = _mm256_fmadd_ps(x, kc, a2);
                b2 = _mm256_fmadd_ps(y, kc, b2);
                kc = load8(k3 + c);
                a3 = _mm256_fmadd_ps(x, kc, a3);
                b3 = _mm256_fmadd_ps(y, kc, b3);
            }
            const __m128 m = mask4(mask, keys + i);
            store4(fold4(a0, a1, a2, a3), scale, m, out0 + i);
            store4(fold4(b0, b1, b2, b3), scale, m, out1 + i);
        }
        if (i < n) {
            dots(q0, padded, k, stride, keys + i, n - i, scale, mask, out0 + i);
            dots(q1, padded, k, stride, keys + i, n - i, scale, mask, out1 + i);
        }
    }

    template <typename E>
    RACER_AVX2 static void dots3(const float* q, int64_t q_step, int64_t padded, const E* k, int64_t stride,
                                 const int32_t* keys, int64_t n, float scale, const float* mask, float* out,
                                 int64_t out_step) {
        const float* q0 = q;
        const float* q1 = q + q_step;
        const float* q2 = q + 2 * q_step;
        int64_t i = 0;
        for (; i + 4 <= n; i += 4) {  // 3 heads x 4 keys: 12 sums in registers, 7 loads for 12 products
            const E* kk[4] = {k + keys[i] * stride, k + keys[i + 1] * stride, k + keys[i + 2] * stride,
                                  k + keys[i + 3] * stride};
            __m256 a[4], b[4], c[4];
            for (int j = 0; j < 4; ++j) a[j] = b[j] = c[j] = _mm256_setzero_ps();
            for (int64_t d = 0; d < padded; d += kLanes) {
                const __m256 x = _mm256_loadu_ps(q0 + d), y = _mm256_loadu_ps(q1 + d), z = _mm256_loadu_ps(q2 + d);
                for (int j = 0; j < 4; ++j) {
                    const __m256 kc = load8(kk[j] + d);
                    a[j] = _mm256_fmadd_ps(x, kc, a[j]);
                    b[j] = _mm256_fmadd_ps(y, kc, b[j]);
                    c[j] = _mm256_fmadd_ps(z, kc, c[j]);
                }
            }
            __m128 folded[3];
            fold12(a, b, c, folded);
            const __m128 m = mask4(mask, keys + i);
            store4(folded[0], scale, m, out + i);
            store4(folded[1], scale, m, out + out_step + i);
            store4(folded[2], scale, m, out + 2 * out_step + i);
        }
        if (i < n)
            for (int e = 0; e < 3; ++e)
                dots(q + e * q_step, padded, k, stride, keys + i, n - i, scale, mask, out + e * out_step + i);
    }

    template <typename E>
    RACER_AVX2 static void accumulate3(const float* p, int64_t p_step, const E* v, int64_t stride,
                                       const int32_t* keys, int64_t n, int64_t padded, float* acc, int64_t acc_step) {
        const float* p0 = p;
        const float* p1 = p + p_step;
        const float* p2 = p + 2 * p_step;
        float* acc0 = acc;
        float* acc1 = acc + acc_step;
        float* acc2 = acc + 2 * acc_step;
        int64_t c0 = 0;
        for (; c0 + 4 * kLanes <= padded; c0 += 4 * kLanes) {  // 32 outputs of 3 heads in registers
            __m256 a[4], b[4], c[4];
            for (int j = 0; j < 4; ++j) {
                a[j] = _mm256_loadu_ps(acc0 + c0 + j * kLanes);
                b[j] = _mm256_loadu_ps(acc1 + c0 + j * kLanes);
                c[j] = _mm256_loadu_ps(acc2 + c0 + j * kLanes);
            }
            for (int64_t i = 0; i < n; ++i) {
                const E* vi = v + keys[i] * stride + c0;
                const __m256 x = _mm256_set1_ps(p0[i]), y = _mm256_set1_ps(p1[i]), z = _mm256_set1_ps(p2[i]);
                for (int j = 0; j < 4; ++j) {
                    const __m256 vc = load8(vi + j * kLanes);
                    a[j] = _mm256_fmadd_ps(x, vc, a[j]);
                    b[j] = _mm256_fmadd_ps(y, vc, b[j]);
                    c[j] = _mm256_fmadd_ps(z, vc, c[j]);
                }
            }
            for (int j = 0; j < 4; ++j) {
                _mm256_storeu_ps(acc0 + c0 + j * kLanes, a[j]);
                _mm256_storeu_ps(acc1 + c0 + j * kLanes, b[j]);
                _mm256_storeu_ps(acc2 + c0 + j * kLanes, c[j]);
            }
        }
        if (c0 < padded) {  // the last outputs: two heads, then one
            accumulate2(p0, p1, v + c0, stride, keys, n, padded - c0, acc0 + c0, acc1 + c0);
            accumulate(p2, v + c0, stride, keys, n, padded - c0, acc2 + c0);
        }
    }

    template <typename E>
    RACER_AVX2 static void accumulate2(const float* p0, const float* p1, const E* v, int64_t stride,
                                       const int32_t* keys, int64_t n, int64_t padded, float* acc0, float* acc1) {
        int64_t c0 = 0;
        for (; c0 + 4 * kLanes <= padded; c0 += 4 * kLanes) {  // 32 outputs of 2 heads in registers
            __m256 a[4], b[4];
            for (int j = 0; j < 4; ++j) {
                a[j] = _mm256_loadu_ps(acc0 + c0 + j * kLanes);
                b[j] = _mm256_loadu_ps(acc1 + c0 + j * kLanes);
            }
            for (int64_t i = 0; i < n; ++i) {
                const E* vi = v + keys[i] * stride + c0;
                const __m256 x = _mm256_set1_ps(p0[i]), y = _mm256_set1_ps(p1[i]);
                for (int j = 0; j < 4; ++j) {
                    const __m256 vc = load8(vi + j * kLanes);
                    a[j] = _mm256_fmadd_ps(x, vc, a[j]);
                    b[j] = _mm256_fmadd_ps(y, vc, b[j]);
                }
            }
            for (int j = 0; j < 4; ++j) {
                _mm256_storeu_ps(acc0 + c0 + j * kLanes, a[j]);
                _mm256_storeu_ps(acc1 + c0 + j * kLanes, b[j]);
            }
        }
        for (; c0 < padded; c0 += kLanes) {
            __m256 a = _mm256_loadu_ps(acc0 + c0), b = _mm256_loadu_ps(acc1 + c0);
            for (int64_t i = 0; i < n; ++i) {
                const __m256 vc = load8(v + keys[i] * stride + c0);
                a = _mm256_fmadd_ps(_mm256_set1_ps(p0[i]), vc, a);
                b = _mm256_fmadd_ps(_mm256_set1_ps(p1[i]), vc, b);
            }
            _mm256_storeu_ps(acc0 + c0, a);
            _mm256_storeu_ps(acc1 + c0, b);
        }
    }

    template <typename E>
    RACER_AVX2 static void dots(const float* q, int64_t padded, const E* k, int64_t stride, const int32_t* keys,
                                int64_t n, float scale, const float* mask, float* scores) {
        int64_t i = 0;
        for (; i + 4 <= n; i += 4) {  // four keys at a time: each query chunk loaded once
            const E* k0 = k + keys[i] * stride;
            const E* k1 = k + keys[i + 1] * stride;
            const E* k2 = k + keys[i + 2] * stride;
            const E* k3 = k + keys[i + 3] * stride;
            __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
            for (int64_t c = 0; c < padded; c += kLanes) {
                __m256 qc = _mm256_loadu_ps(q + c);
                s0 = _mm256_fmadd_ps(qc, load8(k0 + c), s0);
                s1 = _mm256_fmadd_ps(qc, load8(k1 + c), s1);
                s2 = _mm256_fmadd_ps(qc, load8(k2 + c), s2);
                s3 = _mm256_fmadd_ps(qc, load8(k3 + c), s3);
            }
            store4(fold4(s0, s1, s2, s3), scale, mask, keys + i, scores + i);
        }
        for (; i < n; ++i) {
            const E* k0 = k + keys[i] * stride;
            __m256 s0 = _mm256_setzero_ps();
            for (int64_t c = 0; c < padded; c += kLanes) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), load8(k0 + c), s0);
            scores[i] = fold(s0) * scale + mask[keys[i]];
        }
    }

    // The largest score, 8 lanes at a time: a maximum is the same value in any
    // order (a NaN score is passed over, as std::max(top, x) does; the sign of a
    // zero maximum changes no exp below), so this equals the portable path's.
    RACER_AVX2 static float top_score(const float* scores, int64_t n) {
        __m256 most = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
        int64_t j = 0;
        for (; j + kLanes <= n; j += kLanes) most = _mm256_max_ps(_mm256_loadu_ps(scores + j), most);
        alignas(32) float lanes8[kLanes];
        _mm256_store_ps(lanes8, most);
        float top = lanes8[0];
        for (int l = 1; l < kLanes; ++l) top = std::max(top, lanes8[l]);
        for (; j < n; ++j) top = std::max(top, scores[j]);
        return top;
    }

    RACER_AVX2 static float softmax(float* scores, int64_t n) {
        return exp_sum(scores, 0, n, top_score(scores, n), _mm256_setzero_ps());
    }

    // scores[i..n) -> exp(score - top) in place, added to `lanes` 8 keys at a time;
    // returns the folded sum (softmax's, from key i on).
    RACER_AVX2 static float exp_sum(float* scores, int64_t i, int64_t n, float top, __m256 lanes) {
        const __m256 vtop = _mm256_set1_ps(top);
        for (; i + kLanes <= n; i += kLanes) {
            __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(scores + i), vtop));
            _mm256_storeu_ps(scores + i, e);
            lanes = _mm256_add_ps(lanes, e);
        }
        if (i < n) {  // the last few: zero in the lanes past the end
            alignas(32) float x[kLanes] = {};
            std::memcpy(x, scores + i, (n - i) * sizeof(float));
            _mm256_store_ps(x, exp8(_mm256_sub_ps(_mm256_load_ps(x), vtop)));
            for (int64_t l = n - i; l < kLanes; ++l) x[l] = 0.0f;
            std::memcpy(scores + i, x, (n - i) * sizeof(float));
            lanes = _mm256_add_ps(lanes, _mm256_load_ps(x));
        }
        return fold(lanes);
    }

    template <typename E>
    RACER_AVX2 static void accumulate(const float* p, const E* v, int64_t stride, const int32_t* keys, int64_t n,
                                      int64_t padded, float* acc) {
        int64_t c0 = 0;
        for (; c0 + kBlock * kLanes <= padded; c0 += kBlock * kLanes) {  // 64 outputs in registers
            __m256 r[kBlock];
            for (int b = 0; b < kBlock; ++b) r[b] = _mm256_loadu_ps(acc + c0 + b * kLanes);
            for (int64_t i = 0; i < n; ++i) {
                const E* vj = v + keys[i] * stride + c0;
                const __m256 pi = _mm256_set1_ps(p[i]);
                for (int b = 0; b < kBlock; ++b) r[b] = _mm256_fmadd_ps(pi, load8(vj + b * kLanes), r[b]);
            }
            for (int b = 0; b < kBlock; ++b) _mm256_storeu_ps(acc + c0 + b * kLanes, r[b]);
        }
        for (; c0 < padded; c0 += kLanes) {
            __m256 r = _mm256_loadu_ps(acc + c0);
            for (int64_t i = 0; i < n; ++i) r = _mm256_fmadd_ps(_mm256_set1_ps(p[i]), load8(v + keys[i] * stride + c0), r);
            _mm256_storeu_ps(acc + c0, r);
        }
    }

    RACER_AVX2 static void finish(float* acc, int64_t padded, float sum) {
        const __m256 s = _mm256_set1_ps(sum);
        for (int64_t c = 0; c < padded; c += kLanes) _mm256_storeu_ps(acc + c, _mm256_div_ps(_mm256_loadu_ps(acc + c), s));
    }
};

#define RACER_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

// The 512-bit path (CPUs with AVX-512F): Avx2's arithmetic, two of its 8-lane
// vectors side by side in one. A dot product's lanes still take d mod 8 (two
// keys share a vector, one per half) and fold by fold()'s tree; a weighted
// sum's outputs are independent lanes, 16 at a time; exp is lane by lane; the
// softmax sum still adds 8 keys at a time in key order. So every result has
// Avx2's bits, and what is left over (under 8 keys, under 64 outputs) is
// Avx2's own code.

// Elements c..c+7 of two rows: [a | b].
RACER_AVX512 inline __m512 load8x2(const float* a, const float* b) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(a))),
                                               _mm256_castps_pd(_mm256_loadu_ps(b)), 1));
}
RACER_AVX512 inline __m256i bits8x2(const void* a, const void* b) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(static_cast<const __m128i*>(a))),
                                   _mm_loadu_si128(static_cast<const __m128i*>(b)), 1);
}
RACER_AVX512 inline __m512 load8x2(const Half* a, const Half* b) { return _mm512_cvtph_ps(bits8x2(a, b)); }
RACER_AVX512 inline __m512 load8x2(const uint16_t* a, const uint16_t* b) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits8x2(a, b)), 16));
}

// Sixteen consecutive elements as floats.
RACER_AVX512 inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
RACER_AVX512 inline __m512 load16(const Half* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
RACER_AVX512 inline __m512 load16(const uint16_t* p) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

RACER_AVX512 inline __m512 twice8(const float* p) {  // [p[0..7] | p[0..7]]
    return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(p))));
}

// fold() of keys 0|1 and 2|3 (each key's 8 lanes in one half), by fold()'s
// additions: [fold(k0), fold(k1), fold(k2), fold(k3)].
RACER_AVX512 inline __m128 fold4x2(__m512 s01, __m512 s23) {
    const __m512 lo = _mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0));  // l0..l3 of k0, k1, k2, k3
    const __m512 hi = _mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1));  // l4..l7 of the same
    const __m512 a = _mm512_add_ps(lo, hi);                                      // l0+l4 .. l3+l7, per key
    const __m512 b = _mm512_add_ps(a, _mm512_permute_ps(a, _MM_SHUFFLE(3, 2, 3, 2)));  // (a0+a2), (a1+a3)
    const __m512 c = _mm512_add_ps(b, _mm512_permute_ps(b, _MM_SHUFFLE(1, 1, 1, 1)));  // their sum, first of four
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                                          0, 0, 0), c));
}

RACER_AVX512 inline __m512 exp16(__m512 x) {  // exp8's operations, lane by lane
    x = _mm512_max_ps(x, _mm512_set1_ps(kExpMin));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2Hi), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2Lo), r);
    __m512 p = _mm512_set1_ps(kP0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP5));
    __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(y, _mm512_castsi512_ps(bits));
}

struct Avx512 {
    // H heads' scores over the same keys, 8 keys at a time (4 vectors of two
    // keys per head: 12 sums in registers for 3 heads); the last few keys by Avx2.
    template <int H, typename E>
    RACER_AVX512 static void dots_n(const float* const* q, int64_t padded, const E* k, int64_t stride,
                                    const int32_t* keys, int64_t n, float scale, const float* mask, float* const* out) {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            const E* kk[8];
            for (int j = 0; j < 8; ++j) kk[j] = k + keys[i + j] * stride;
            __m512 s[H][4];
            for (int h = 0; h < H; ++h)
                for (int j = 0; j < 4; ++j) s[h][j] = _mm512_setzero_ps();
            for (int64_t c = 0; c < padded; c += kLanes) {
                __m512 x[H];
                for (int h = 0; h < H; ++h) x[h] = twice8(q[h] + c);
                for (int j = 0; j < 4; ++j) {
                    const __m512 kc = load8x2(kk[2 * j] + c, kk[2 * j + 1] + c);
                    for (int h = 0; h < H; ++h) s[h][j] = _mm512_fmadd_ps(x[h], kc, s[h][j]);
                }
            }
            const __m128 m0 = mask4(mask, keys + i), m1 = mask4(mask, keys + i + 4);
            for (int h = 0; h < H; ++h) {
                store4(fold4x2(s[h][0], s[h][1]), scale, m0, out[h] + i);
                store4(fold4x2(s[h][2], s[h][3]), scale, m1, out[h] + i + 4);
            }
        }
        if (i < n)
            for (int h = 0; h < H; ++h) Avx2::dots(q[h], padded, k, stride, keys + i, n - i, scale, mask, out[h] + i);
    }

    template <typename E>
    RACER_AVX512 static void dots(const float* q, int64_t padded, const E* k, int64_t stride, const int32_t* keys,
                                  int64_t n, float scale, const float* mask, float* scores) {
        const float* qs[1] = {q};
        float* outs[1] = {scores};
        dots_n<1>(qs, padded, k, stride, keys, n, scale, mask, outs);
    }

    template <typename E>
    RACER_AVX512 static void dots2(const float* q0, const float* q1, int64_t padded, const E* k, int64_t stride,
                                   const int32_t* keys, int64_t n, float scale, const float* mask, float* out0,
                                   float* out1) {
        const float* qs[2] = {q0, q1};
        float* outs[2] = {out0, out1};
        dots_n<2>(qs, padded, k, stride, keys, n, scale, mask, outs);
    }

    template <typename E>
    RACER_AVX512 static void dots3(const float* q, int64_t q_step, int64_t padded, const E* k, int64_t stride,
                                   const int32_t* keys, int64_t n, float scale, const float* mask, float* out,
                                   int64_t out_step) {
        const float* qs[3] = {q, q + q_step, q + 2 * q_step};
        float* outs[3] = {out, out + out_step, out + 2 * out_step};
        dots_n<3>(qs, padded, k, stride, keys, n, scale, mask, outs);
    }

    // H heads' weighted values over the same keys, W vectors (16 W outputs) of
    // each head in registers at a time; the outputs past them by Avx2, head by head.
    template <int H, int W, typename E>
    RACER_AVX512 static int64_t accumulate_n(const float* const* p, const E* v, int64_t stride, const int32_t* keys,
                                             int64_t n, int64_t padded, float* const* acc, int64_t c0) {
        for (; c0 + 16 * W <= padded; c0 += 16 * W) {
            __m512 a[H][W];
            for (int h = 0; h < H; ++h)
                for (int w = 0; w < W; ++w) a[h][w] = _mm512_loadu_ps(acc[h] + c0 + 16 * w);
            for (int64_t i = 0; i < n; ++i) {
                const E* vi = v + keys[i] * stride + c0;
                __m512 x[H];
                for (int h = 0; h < H; ++h) x[h] = _mm512_set1_ps(p[h][i]);
                for (int w = 0; w < W; ++w) {
                    const __m512 vc = load16(vi + 16 * w);
                    for (int h = 0; h < H; ++h) a[h][w] = _mm512_fmadd_ps(x[h], vc, a[h][w]);
                }
            }
            for (int h = 0; h < H; ++h)
                for (int w = 0; w < W; ++w) _mm512_storeu_ps(acc[h] + c0 + 16 * w, a[h][w]);
        }
        return c0;
    }

    template <int H, typename E>
    RACER_AVX512 static void accumulate_heads(const float* const* p, const E* v, int64_t stride, const int32_t* keys,
                                              int64_t n, int64_t padded, float* const* acc) {
        int64_t c0 = accumulate_n<H, H == 1 ? 8 : 4>(p, v, stride, keys, n, padded, acc, 0);
        if constexpr (H == 1) c0 = accumulate_n<1, 4>(p, v, stride, keys, n, padded, acc, c0);
        c0 = accumulate_n<H, 2>(p, v, stride, keys, n, padded, acc, c0);  // a share of a row's outputs (one_row_split)
        c0 = accumulate_n<H, 1>(p, v, stride, keys, n, padded, acc, c0);
        if (c0 < padded)
            for (int h = 0; h < H; ++h) Avx2::accumulate(p[h], v + c0, stride, keys, n, padded - c0, acc[h] + c0);
    }

    template <typename E>
    RACER_AVX512 static void accumulate(const float* p, const E* v, int64_t stride, const int32_t* keys, int64_t n,
                                        int64_t padded, float* acc) {
        const float* ps[1] = {p};
        float* accs[1] = {acc};
        accumulate_heads<1>(ps, v, stride, keys, n, padded, accs);
    }

    template <typename E>
    RACER_AVX512 static void accumulate2(const float* p0, const float* p1, const E* v, int64_t stride,
                                         const int32_t* keys, int64_t n, int64_t padded, float* acc0, float* acc1) {
        const float* ps[2] = {p0, p1};
        float* accs[2] = {acc0, acc1};
        accumulate_heads<2>(ps, v, stride, keys, n, padded, accs);
    }

    template <typename E>
    RACER_AVX512 static void accumulate3(const float* p, int64_t p_step, const E* v, int64_t stride,
                                         const int32_t* keys, int64_t n, int64_t padded, float* acc, int64_t acc_step) {
        const float* ps[3] = {p, p + p_step, p + 2 * p_step};
        float* accs[3] = {acc, acc + acc_step, acc + 2 * acc_step};
        accumulate_heads<3>(ps, v, stride, keys, n, padded, accs);
    }

    RACER_AVX512 static float softmax(float* scores, int64_t n) {
        const float top = Avx2::top_score(scores, n);
        const __m512 vtop = _mm512_set1_ps(top);
        __m256 lanes = _mm256_setzero_ps();
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) {  // the sum still 8 keys at a time, in key order
            const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(scores + i), vtop));
            _mm512_storeu_ps(scores + i, e);
            lanes = _mm256_add_ps(lanes, _mm512_castps512_ps256(e));
            lanes = _mm256_add_ps(lanes, _mm512_castps512_ps256(_mm512_shuffle_f32x4(e, e, _MM_SHUFFLE(3, 2, 3, 2))));
        }
        return Avx2::exp_sum(scores, i, n, top, lanes);  // the last few keys as Avx2 adds them
    }

    RACER_AVX512 static void finish(float* acc, int64_t padded, float sum) {
        int64_t c = 0;
        for (; c + 16 <= padded; c += 16)
            _mm512_storeu_ps(acc + c, _mm512_div_ps(_mm512_loadu_ps(acc + c), _mm512_set1_ps(sum)));
        if (c < padded) Avx2::finish(acc + c, padded - c, sum);
    }
};

// Multiply-adds below which one thread does it all. The loop's OpenMP workers
// spin between a step's parallel regions (openmp_threads.py), so handing a few
// rows' items to them pays from here (it was 1 << 20 while they slept).
constexpr int64_t kThreadedWork = int64_t{1} << 16;
constexpr int64_t kKeyBlock = 32;  // keys whose rows one item keeps in L1 while every query row uses them
constexpr int64_t kInPlaceRows = 8;  // rows per item up to which a 16-bit cache is read in place (run)
constexpr int64_t kOneRowWork = int64_t{1} << 16;  // one row's multiply-adds from which one_row_split shares them

// A row's query heads of one key/value head share its keys: three at a time,
// then two, then one (e: the head's place in the group). Every caller groups
// them so, and which group a head falls in changes none of its bits.
template <class Three, class Two, class One>
inline void head_groups(int64_t group, Three&& three, Two&& two, One&& one) {
    for (int64_t e = 0; e < group;) {
        if (group - e >= 3) { three(e); e += 3; }
        else if (e + 1 < group) { two(e); e += 2; }
        else { one(e); e += 1; }
    }
}

// One query row's scores for the `group` query heads of one key/value head
// over keys[0..m): qg the group's first head (heads a.q_head apart), kg its
// keys, sg the first head's scores (heads `stride` apart).
template <class Path, typename KV>
inline void group_scores(const AttendArgs& a, int64_t group, int64_t padded, const float* qg, const KV* kg,
                         const int32_t* keys, int64_t m, const float* mask, float* sg, int64_t stride) {
    head_groups(
        group,
        [&](int64_t e) {
            Path::dots3(qg + e * a.q_head, a.q_head, padded, kg, a.k_row, keys, m, a.scale, mask, sg + e * stride,
                        stride);
        },
        [&](int64_t e) {
            Path::dots2(qg + e * a.q_head, qg + (e + 1) * a.q_head, padded, kg, a.k_row, keys, m, a.scale, mask,
                        sg + e * stride, sg + (e + 1) * stride);
        },
        [&](int64_t e) { Path::dots(qg + e * a.q_head, padded, kg, a.k_row, keys, m, a.scale, mask, sg + e * stride); });
}

// The same heads' weighted values over keys[0..n), `width` outputs: pg the
// first head's n weights (heads n apart), vg its values at the first output,
// og the first head's outputs (heads `padded` apart).
template <class Path, typename KV>
inline void group_values(const AttendArgs& a, int64_t group, int64_t padded, const float* pg, const KV* vg,
                         const int32_t* keys, int64_t n, int64_t width, float* og) {
    head_groups(
        group,
        [&](int64_t e) { Path::accumulate3(pg + e * n, n, vg, a.v_row, keys, n, width, og + e * padded, padded); },
        [&](int64_t e) {
            Path::accumulate2(pg + e * n, pg + (e + 1) * n, vg, a.v_row, keys, n, width, og + e * padded,
                              og + (e + 1) * padded);
        },
        [&](int64_t e) { Path::accumulate(pg + e * n, vg, a.v_row, keys, n, width, og + e * padded); });
}

// One query row (plain decoding, and a tree of the root alone: most steps) on
// all the threads. run()'s items are key/value heads, and 3 of them on 2
// threads leave one thread idle a third of the call; with a single row they
// were also below kThreadedWork up to about 1,800 keys, so one thread did it
// all while the other waited. Here the work is split three times, each
// split changing no bit: the scores by ranges of keys (each score is its own
// dot product), each head's softmax whole (its sum in its one order), and
// the weighted values by ranges of outputs (each output still sums its keys
// in order). Float32 keys and values, a head 32 floats or a multiple wide
// (what the CPU models have); false where it does not apply (run() goes on).
template <class Path, typename KV>
bool one_row_split(const AttendArgs& a, const float* q, const KV* k, const KV* v, const float* mask,
                   const int32_t* keys, int64_t n, int64_t padded, int64_t group, float* out) {
    constexpr int64_t kOutputs = 4 * kLanes;  // the width the accumulations keep in registers
    const int team = std::max(1, a.threads);
    if (team == 1 || n == 0 || a.dim != padded || padded % kOutputs != 0 || n * a.heads * a.dim < kOneRowWork)
        return false;
    thread_local std::vector<float> kept_scores, kept_acc, kept_sums;
    std::vector<float>& scores = kept_scores;  // heads x n
    std::vector<float>& acc = kept_acc;        // heads x padded
    std::vector<float>& sums = kept_sums;
    scores.resize(static_cast<size_t>(a.heads * n));
    acc.assign(static_cast<size_t>(a.heads * padded), 0.0f);
    sums.resize(static_cast<size_t>(a.heads));
    // key ranges of whole blocks, and output ranges of whole register widths
    const int64_t key_part = (n + team * kKeyBlock - 1) / (team * kKeyBlock) * kKeyBlock;
    const int64_t key_parts = (n + key_part - 1) / key_part;
    const int64_t out_parts = std::min<int64_t>(team, padded / kOutputs);
    const int64_t out_part = (padded / kOutputs + out_parts - 1) / out_parts * kOutputs;
#pragma omp parallel num_threads(team)
    {
#pragma omp for schedule(static)
        for (int64_t item = 0; item < a.kv_heads * key_parts; ++item) {
            const int64_t g = item / key_parts, i0 = item % key_parts * key_part, m = std::min(n, i0 + key_part) - i0;
            // head h's query at q + h * q_head, its scores at scores + h * n
            group_scores<Path>(a, group, padded, q + g * group * a.q_head, k + g * a.k_head, keys + i0, m, mask,
                               scores.data() + g * group * n + i0, n);
        }
#pragma omp for schedule(static)
        for (int64_t h = 0; h < a.heads; ++h) sums[h] = Path::softmax(scores.data() + h * n, n);
#pragma omp for schedule(static)
        for (int64_t item = 0; item < a.kv_heads * out_parts; ++item) {
            const int64_t g = item / out_parts, c0 = item % out_parts * out_part;
            const int64_t width = std::min(padded, c0 + out_part) - c0;
            if (width <= 0) continue;
            float* o = acc.data() + c0;
            group_values<Path>(a, group, padded, scores.data() + g * group * n, v + g * a.v_head + c0, keys, n, width,
                               o + g * group * padded);
            for (int64_t e = 0; e < group; ++e) {
                const int64_t h = g * group + e;
                Path::finish(o + h * padded, width, sums[h]);
                std::memcpy(out + h * a.out_head + c0, o + h * padded, static_cast<size_t>(width) * sizeof(float));
            }
        }
    }
    return true;
}

// widen() of a bf16 (uint16_t) or float16 (Half) row, 8 values at a time;
// either widening is exact, so any way of doing it gives the same bits.
template <typename T>
RACER_AVX2 void widen_avx2(const T* src, int64_t dim, float* dst, int64_t padded) {
    int64_t d = 0;
    for (; d + kLanes <= dim; d += kLanes) _mm256_storeu_ps(dst + d, load8(src + d));
    for (; d < dim; ++d) dst[d] = to_float(src[d]);
    for (; d < padded; ++d) dst[d] = 0.0f;
}

// Keys [first, last) of one head as float rows: the cache itself where it is
// float32 and a multiple of 8 wide, else widened (and zero-padded) into `buffer`.
template <typename T>
const float* block_rows(const T* base, int64_t row_stride, int64_t first, int64_t last, int64_t dim, int64_t padded,
                        float* buffer, int64_t* stride, bool avx2_widen) {
    if constexpr (std::is_same_v<T, float>) {
        if (dim % kLanes == 0) {
            *stride = row_stride;
            return base + first * row_stride;
        }
    }
    for (int64_t j = first; j < last; ++j) {
        float* dst = buffer + (j - first) * padded;
        if constexpr (!std::is_same_v<T, float>) {
            if (avx2_widen) {
                widen_avx2(base + j * row_stride, dim, dst, padded);
                continue;
            }
        }
        widen(base + j * row_stride, dim, dst, padded);
    }
    *stride = padded;
    return buffer;
}

// T: the queries' and outputs' type; KV: the keys' and values' (T, or float16 beside float32 queries).
template <class Path, typename T, typename M, typename KV>
void run(const AttendArgs& a) {
    const T* q = static_cast<const T*>(a.q);
    const KV* k = static_cast<const KV*>(a.k);
    const KV* v = static_cast<const KV*>(a.v);
    const M* mask = static_cast<const M*>(a.mask);
    T* out = static_cast<T*>(a.out);
    const int64_t padded = (a.dim + kLanes - 1) / kLanes * kLanes;
    const int64_t group = a.heads / a.kv_heads;

    // The mask as floats (a float32 mask is read where it is) and each row's
    // visible keys (ascending), once for all heads; the buffers are kept
    // between calls (a call per layer: no allocation, no fresh pages each time).
    // (thread_local objects are named through references: an item running on
    // another thread must read the calling thread's.)
    thread_local std::vector<float> kept_floats;
    thread_local std::vector<int32_t> kept_keys;
    thread_local std::vector<int64_t> kept_starts, kept_first, kept_end;
    std::vector<float>& converted = kept_floats;
    std::vector<int32_t>& visible = kept_keys;
    std::vector<int64_t>& starts = kept_starts;
    std::vector<int64_t>& run_first = kept_first;
    std::vector<int64_t>& run_end = kept_end;
    const float* masks;
    int64_t masks_row;
    if constexpr (std::is_same_v<M, float>) {
        masks = mask;
        masks_row = a.mask_row;
    } else {
        converted.resize(static_cast<size_t>(a.rows * a.keys));
        for (int64_t r = 0; r < a.rows; ++r)
            for (int64_t j = 0; j < a.keys; ++j) converted[r * a.keys + j] = to_float(mask[r * a.mask_row + j]);
        masks = converted.data();
        masks_row = a.keys;
    }
    visible.resize(static_cast<size_t>(a.rows * a.keys));
    starts.assign(a.rows + 1, 0);
    // Each row's first run of consecutive visible keys [run_first, run_end) (the
    // cached prefix, or a window of it): a key block inside it is seen whole.
    run_first.assign(a.rows, 0);
    run_end.assign(a.rows, 0);
    int64_t count = 0;
    for (int64_t r = 0; r < a.rows; ++r) {
        const float* row = masks + r * masks_row;
        for (int64_t j = 0; j < a.keys; ++j) {  // without a branch: most rows see most keys
            visible[count] = static_cast<int32_t>(j);
            count += row[j] > a.masked_below;
        }
        starts[r + 1] = count;
        if (count > starts[r]) {
            int64_t end = starts[r] + 1;
            while (end < count && visible[end] == visible[end - 1] + 1) ++end;
            run_first[r] = visible[starts[r]];
            run_end[r] = visible[end - 1] + 1;
        }
    }
    int64_t most = 0;
    for (int64_t r = 0; r < a.rows; ++r) most = std::max(most, starts[r + 1] - starts[r]);
    if constexpr (std::is_same_v<T, float>) {
        if (a.rows == 1 && one_row_split<Path>(a, q, k, v, masks, visible.data(), starts[1], padded, group, out))
            return;
    }

    // An item: one key/value head, some query rows, every query head
    // of the group. Its keys and values are read block by block, each block
    // used by all of the item's (row, head) pairs while in cache; each pair's
    // sums still run over its own keys in order, so blocking changes no bit.
    // Row chunks per head: the fewest that make the items a multiple of the
    // threads (3 key/value heads on 2 threads: 6 items, not 3 with one thread
    // idle for the last); each item reads, and in bf16 widens, its head's keys
    // and values once.
    const int64_t team = std::max(1, a.threads);
    int64_t split = 1;
    while ((a.kv_heads * split) % team != 0) ++split;
    const int64_t row_chunk = (a.rows + split - 1) / split;
    const int64_t chunks = (a.rows + row_chunk - 1) / row_chunk;
    // A float16 or bf16 cache is read in place, each load widened inside the products (as one_row_split
    // does), where an item has few rows: widening a block into L1 first pays only when many (row, head)
    // pairs read it. The widening is exact, so either way gives the same bits.
    const bool in_place = !std::is_same_v<KV, float> && !std::is_same_v<Path, Portable> && a.dim == padded &&
                          row_chunk <= kInPlaceRows;
    auto item = [&](int64_t index) {
        const int64_t g = index / chunks, r0 = index % chunks * row_chunk, r1 = std::min(a.rows, r0 + row_chunk);
        const int64_t pairs = (r1 - r0) * group;  // pair = (row r0 + p / group, head g * group + p % group)
        thread_local std::vector<float> scratch;
        thread_local std::vector<int32_t> local;
        thread_local std::vector<int64_t> cursor;
        thread_local std::vector<float> sums;
        sums.assign(static_cast<size_t>(pairs), 0.0f);
        const size_t floats = static_cast<size_t>(pairs * (2 * padded + most) + 2 * kKeyBlock * padded);
        scratch.resize(floats);
        float* qs = scratch.data();
        float* acc = qs + pairs * padded;
        float* scores = acc + pairs * padded;
        float* kbuf = scores + pairs * most;
        float* vbuf = kbuf + kKeyBlock * padded;
        for (int64_t p = 0; p < pairs; ++p) {
            const int64_t r = r0 + p / group, h = g * group + p % group;
            widen(q + h * a.q_head + r * a.q_row, a.dim, qs + p * padded, padded);
        }
        std::fill(acc, acc + pairs * padded, 0.0f);
        local.resize(static_cast<size_t>(kKeyBlock));
        static const std::vector<int32_t> identity = [] {
            std::vector<int32_t> all(kKeyBlock);
            for (int32_t j = 0; j < kKeyBlock; ++j) all[j] = j;
            return all;
        }();
        cursor.assign(static_cast<size_t>(r1 - r0), 0);
        const KV* kg = k + g * a.k_head;
        const KV* vg = v + g * a.v_head;
        // Visible keys of row r in [first, last), relative to `first`, as `*indices`; returns the count.
        auto in_block = [&](int64_t r, int64_t first, int64_t last, int64_t* from, const int32_t** indices) {
            const int32_t* keys = visible.data() + starts[r];
            const int64_t count = starts[r + 1] - starts[r];
            int64_t& at = cursor[r - r0];
            *from = at;
            if (first >= run_first[r] && last <= run_end[r]) {  // inside the row's run: all of it
                const int64_t whole = last - first;
                at += whole;
                *indices = identity.data();
                return whole;
            }
            int64_t n = 0;
            for (; at < count && keys[at] < last; ++at) local[n++] = static_cast<int32_t>(keys[at] - first);
            *indices = local.data();
            return n;
        };
        for (int pass = 0; pass < 2; ++pass) {  // 0: scores, 1: weighted values
            std::fill(cursor.begin(), cursor.end(), 0);
            for (int64_t first = 0; first < a.keys; first += kKeyBlock) {
                const int64_t last = std::min(a.keys, first + kKeyBlock);
                bool seen = false;
                for (int64_t r = r0; r < r1 && !seen; ++r) {
                    const int64_t at = cursor[r - r0];
                    seen = (first < run_end[r] && last > run_first[r]) ||
                           (at < starts[r + 1] - starts[r] && visible[starts[r] + at] < last);
                }
                if (!seen) continue;
                // `rows`: the block's keys (pass 0) or values as E (float, or the cache's own type where read in place)
                auto use_block = [&](const auto* rows, int64_t stride) {
                    for (int64_t r = r0; r < r1; ++r) {
                        int64_t from;
                        const int32_t* idx;
                        const int64_t n = in_block(r, first, last, &from, &idx);
                        if (n == 0) continue;
                        const float* m = masks + r * masks_row + first;
                        const int64_t p0 = (r - r0) * group;  // the row's first pair
                        auto sc = [&](int64_t e) { return scores + (p0 + e) * most + from; };
                        auto qa = [&](int64_t e) { return (pass == 0 ? qs : acc) + (p0 + e) * padded; };
                        head_groups(
                            group,
                            [&](int64_t e) {
                                if (pass == 0)
                                    Path::dots3(qa(e), padded, padded, rows, stride, idx, n, a.scale, m, sc(e), most);
                                else Path::accumulate3(sc(e), most, rows, stride, idx, n, padded, qa(e), padded);
                            },
                            [&](int64_t e) {
                                if (pass == 0)
                                    Path::dots2(qa(e), qa(e + 1), padded, rows, stride, idx, n, a.scale, m, sc(e),
                                                sc(e + 1));
                                else Path::accumulate2(sc(e), sc(e + 1), rows, stride, idx, n, padded, qa(e), qa(e + 1));
                            },
                            [&](int64_t e) {
                                if (pass == 0) Path::dots(qa(e), padded, rows, stride, idx, n, a.scale, m, sc(e));
                                else Path::accumulate(sc(e), rows, stride, idx, n, padded, qa(e));
                            });
                    }
                };
                if (in_place) {
                    if (pass == 0) use_block(kg + first * a.k_row, a.k_row);
                    else use_block(vg + first * a.v_row, a.v_row);
                } else {
                    int64_t stride;
                    constexpr bool wide = !std::is_same_v<Path, Portable>;
                    const float* rows = pass == 0
                        ? block_rows(kg, a.k_row, first, last, a.dim, padded, kbuf, &stride, wide)
                        : block_rows(vg, a.v_row, first, last, a.dim, padded, vbuf, &stride, wide);
                    use_block(rows, stride);
                }
            }
            if (pass == 1) break;
            for (int64_t p = 0; p < pairs; ++p) {
                const int64_t r = r0 + p / group;
                sums[p] = Path::softmax(scores + p * most, starts[r + 1] - starts[r]);
            }
        }
        for (int64_t p = 0; p < pairs; ++p) {
            const int64_t r = r0 + p / group, h = g * group + p % group;
            float* o = acc + p * padded;
            if (starts[r + 1] == starts[r]) std::fill(o, o + padded, std::numeric_limits<float>::quiet_NaN());
            else Path::finish(o, padded, sums[p]);
            T* dst = out + h * a.out_head + r * a.out_row;
            for (int64_t d = 0; d < a.dim; ++d) {
                if constexpr (std::is_same_v<T, float>) dst[d] = o[d];
                else dst[d] = float_to_bf16(o[d]);
            }
        }
    };
    const int64_t items = a.kv_heads * chunks;
    const int64_t work = static_cast<int64_t>(visible.size()) * a.heads * a.dim;
    if (a.threads <= 1 || items == 1 || work < kThreadedWork) {
        for (int64_t index = 0; index < items; ++index) item(index);
    } else {
        // OpenMP, as in the 4-bit kernel's extension: torch's own threads (the
        // same libgomp), not a second set competing with them for the cores.
        // Which thread computes an item changes nothing in its bits.
        const int threads = static_cast<int>(std::min<int64_t>(a.threads, items));
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
        for (int64_t index = 0; index < items; ++index) item(index);
    }
}

template <typename T, typename M, typename KV = T>
void dispatch(const AttendArgs& a) {
    if (a.portable || !avx2_available()) run<Portable, T, M, KV>(a);
    else if (a.wide && avx512_available()) run<Avx512, T, M, KV>(a);
    else run<Avx2, T, M, KV>(a);
}

// Round to nearest even, as torch's .to(float16); the F16C and scalar conversions agree.
inline Half float_to_half(float value) {
    const _Float16 x = static_cast<_Float16>(value);
    Half h;
    std::memcpy(&h.bits, &x, sizeof h.bits);
    return h;
}

RACER_AVX2 void half_row_avx2(const float* src, int64_t n, uint16_t* dst) {
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; ++i) dst[i] = float_to_half(src[i]).bits;
}

// One key/value head of a one-row call, whole, on the calling thread: the
// inner loops one_row_split shares out (group_scores, group_values: each
// score its own dot product, each head's softmax whole, each output summing
// its keys in order), so the same bits as the call alone.
template <class Path, typename KV>
void one_row_head(const AttendArgs& a, int64_t g, const int32_t* keys, int64_t n) {
    const int64_t padded = a.dim, group = a.heads / a.kv_heads;
    const float* q = static_cast<const float*>(a.q);
    const float* mask = static_cast<const float*>(a.mask);
    float* out = static_cast<float*>(a.out);
    if (n == 0) {  // no visible key: NaN, as run() gives
        for (int64_t e = 0; e < group; ++e) {
            float* dst = out + (g * group + e) * a.out_head;
            std::fill(dst, dst + a.dim, std::numeric_limits<float>::quiet_NaN());
        }
        return;
    }
    const KV* kg = static_cast<const KV*>(a.k) + g * a.k_head;
    const KV* vg = static_cast<const KV*>(a.v) + g * a.v_head;
    thread_local std::vector<float> kept_scores, kept_acc;
    std::vector<float>& scores = kept_scores;  // group x n
    std::vector<float>& acc = kept_acc;        // group x padded
    scores.resize(static_cast<size_t>(group * n));
    acc.assign(static_cast<size_t>(group * padded), 0.0f);
    float* s = scores.data();
    float* o = acc.data();
    group_scores<Path>(a, group, padded, q + g * group * a.q_head, kg, keys, n, mask, s, n);
    float sums[64];
    for (int64_t e = 0; e < group; ++e) sums[e] = Path::softmax(s + e * n, n);
    group_values<Path>(a, group, padded, s, vg, keys, n, padded, o);
    for (int64_t e = 0; e < group; ++e) {
        Path::finish(o + e * padded, padded, sums[e]);
        std::memcpy(out + (g * group + e) * a.out_head, o + e * padded, static_cast<size_t>(a.dim) * sizeof(float));
    }
}

void check(const AttendArgs& a) {
    if (a.heads <= 0 || a.kv_heads <= 0 || a.heads % a.kv_heads != 0)
        throw std::invalid_argument("heads must be a positive multiple of kv_heads");
    if (a.rows < 0 || a.keys < 0 || a.dim <= 0 || a.keys > std::numeric_limits<int32_t>::max())
        throw std::invalid_argument("rows, keys and dim must be non-negative (dim positive)");
}

// Whether attend_rows can compute the call's rows in its shared region: float32
// query rows over a float32 mask, a head a multiple of 8 wide, on AVX2 or AVX-512.
bool shareable_call(const AttendArgs& a) {
    return a.rows >= 1 && a.keys > 0 && a.dtype == Dtype::float32 && a.mask_dtype == Dtype::float32 &&
           !a.portable && a.dim % kLanes == 0 && a.heads / a.kv_heads <= 64 && avx2_available();
}

// A batched pass's trees up to this many rows join the shared region row by row: with
// a parallel region of its own per layer, a 2- or 4-row tree beside 7 one-row sequences
// made their pass about 3% dearer (the embedded model; docs/performance.md, 6 Dec 2026).
// A larger call (a prompt chunk) keeps attend()'s own threads, which convert each key
// once for all its rows.
constexpr int64_t kSharedTreeRows = 16;

// Row r of call `a` as a one-row call: its query, mask and output rows.
AttendArgs row_of(const AttendArgs& a, int64_t r) {
    AttendArgs one = a;
    one.q = static_cast<const float*>(a.q) + r * a.q_row;
    one.mask = static_cast<const float*>(a.mask) + r * a.mask_row;
    one.out = static_cast<float*>(a.out) + r * a.out_row;
    one.rows = 1;
    return one;
}

}  // namespace

bool avx2_available() {
    static const bool found =
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    return found;
}

bool avx512_available() {
    static const bool found = avx2_available() && __builtin_cpu_supports("avx512f");
    return found;
}

const char* path_for(bool portable, bool wide) {
    if (portable || !avx2_available()) return "portable";
    return wide && avx512_available() ? "avx512" : "avx2";
}

void attend(const AttendArgs& a) {
    check(a);
    if (a.rows == 0) return;
    if (a.kv_float16) {
        if (a.dtype != Dtype::float32) throw std::invalid_argument("float16 keys and values take float32 queries");
        if (a.mask_dtype == Dtype::float32) dispatch<float, float, Half>(a);
        else dispatch<float, uint16_t, Half>(a);
        return;
    }
    if (a.dtype == Dtype::float32) {
        if (a.mask_dtype == Dtype::float32) dispatch<float, float>(a);
        else dispatch<float, uint16_t>(a);
    } else {
        if (a.mask_dtype == Dtype::float32) dispatch<uint16_t, float>(a);
        else dispatch<uint16_t, uint16_t>(a);
    }
}

void attend_rows(const AttendArgs* calls, int64_t count, int threads) {
    thread_local std::vector<int32_t> kept_keys;
    thread_local std::vector<int64_t> kept_starts;
    thread_local std::vector<AttendArgs> kept_units;
    thread_local std::vector<char> kept_shared;
    std::vector<int32_t>& keys = kept_keys;      // each unit's visible keys, one list after another
    std::vector<int64_t>& starts = kept_starts;  // per unit: its keys' start in `keys`
    std::vector<AttendArgs>& units = kept_units;  // the shared region's one-row calls (a tree's rows each one)
    std::vector<char>& shared = kept_shared;     // per call: its rows are units
    units.clear();
    shared.assign(static_cast<size_t>(count), 0);
    int64_t total = 0;
    for (int64_t c = 0; c < count; ++c) {
        const AttendArgs& a = calls[c];
        check(a);
        // A tree's rows join only beside other calls: a conversation alone keeps attend()'s own threads.
        if (!shareable_call(a) || (a.rows > 1 && (count < 2 || a.rows > kSharedTreeRows))) continue;
        shared[static_cast<size_t>(c)] = 1;
        for (int64_t r = 0; r < a.rows; ++r) units.push_back(row_of(a, r));
        total += a.rows * a.keys;
    }
    // One call (a conversation alone: every step of a chat), or too few items to keep the
    // threads busy: attend() splits a single row's keys and outputs among the threads itself.
    const int64_t per = units.empty() ? 0 : units[0].kv_heads;
    bool same = true;
    for (const AttendArgs& u : units) same = same && u.kv_heads == per;
    const int64_t slots = static_cast<int64_t>(units.size());
    if (slots < 2 || !same || (threads > 1 && slots * per < 2 * threads)) {
        for (int64_t c = 0; c < count; ++c) attend(calls[c]);
        return;
    }
    keys.resize(static_cast<size_t>(total));
    starts.assign(units.size() + 1, 0);
    int64_t work = 0;
    for (size_t i = 0; i < units.size(); ++i) {
        const AttendArgs& a = units[i];
        const float* mask = static_cast<const float*>(a.mask);
        int64_t n = starts[i];
        for (int64_t j = 0; j < a.keys; ++j) {
            keys[n] = static_cast<int32_t>(j);
            n += mask[j] > a.masked_below;
        }
        starts[i + 1] = n;
        work += (n - starts[i]) * a.heads * a.dim;
    }
    // The other calls each as attend() does them, with their own threads.
    for (int64_t c = 0; c < count; ++c)
        if (!shared[static_cast<size_t>(c)]) attend(calls[c]);
    // An item: one unit's key/value head.
    auto item = [&](int64_t slot, int64_t g) {
        const AttendArgs& a = units[static_cast<size_t>(slot)];
        const int32_t* k = keys.data() + starts[slot];
        const int64_t n = starts[slot + 1] - starts[slot];
        const bool wide = a.wide && avx512_available();
        if (a.kv_float16) {
            if (wide) one_row_head<Avx512, Half>(a, g, k, n);
            else one_row_head<Avx2, Half>(a, g, k, n);
        } else {
            if (wide) one_row_head<Avx512, float>(a, g, k, n);
            else one_row_head<Avx2, float>(a, g, k, n);
        }
    };
    if (threads <= 1 || work < kThreadedWork) {
        for (int64_t index = 0; index < slots * per; ++index) item(index / per, index % per);
        return;
    }
    const int64_t items_count = slots * per;
    const int team = static_cast<int>(std::min<int64_t>(threads, items_count));
#pragma omp parallel for num_threads(team) schedule(dynamic, 1)
    for (int64_t index = 0; index < items_count; ++index) item(index / per, index % per);
}

void float_to_half_row(const float* src, int64_t n, uint16_t* dst) {
    if (avx2_available()) {
        half_row_avx2(src, n, dst);
        return;
    }
    for (int64_t i = 0; i < n; ++i) dst[i] = float_to_half(src[i]).bits;
}

}  // namespace racer
