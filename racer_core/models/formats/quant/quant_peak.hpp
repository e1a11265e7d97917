// The integer dot instruction's own rate on this CPU, for scripts/kernel_floor.py: what the 4-bit kernel's
// extra rows would cost if nothing but its dots ran, and what they cost when each block's float work runs
// beside them. Included by one translation unit per ISA after its DOT (quant_avx2.cpp: maddubs, pairs
// added in int16, one madd a block; quant_avxvnni.cpp: 256-bit dpbusd; quant_vnni.cpp: 512-bit dpbusd, the
// wide tile's); nothing here is used by a forward pass.
//
// Why the float work is counted (6 Dec 2026, an AMD Zen 4): a 512-bit dpbusd there issues on the same two
// pipes as a float multiply or multiply-add, so each block's dw * dx, its multiply-add into the row's sum
// and Q4_1's offset term take three dot issues of every eleven; conversions and adds run elsewhere.
#include <chrono>
#include <cstdint>

namespace {

// Lanes of a vector of the dot's width: V is __m256i or __m512i.
template <class V>
struct PeakOps;

template <>
struct PeakOps<__m256i> {
    using F = __m256;
    static __m256i zero() { return _mm256_setzero_si256(); }
    static __m256i bytes(int b) { return _mm256_set1_epi8(static_cast<char>(b)); }
    static F fzero() { return _mm256_setzero_ps(); }
    static F fone() { return _mm256_set1_ps(1.0f); }
    static F to_float(__m256i v) { return _mm256_cvtepi32_ps(v); }
    static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
    static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
    static __m256i add(__m256i a, __m256i b) { return _mm256_add_epi32(a, b); }
    static __m256i fbits(F f) { return _mm256_castps_si256(f); }
    static int64_t sum(__m256i v) {
        alignas(32) int32_t l[8];
        _mm256_store_si256(reinterpret_cast<__m256i*>(l), v);
        int64_t s = 0;
        for (int i = 0; i < 8; ++i) s += l[i];
        return s;
    }
    static constexpr int MACS = 32;  // multiply-adds of one 256-bit dot instruction
};

#ifdef RACER_PEAK_512
template <>
struct PeakOps<__m512i> {
    using F = __m512;
    static __m512i zero() { return _mm512_setzero_si512(); }
    static __m512i bytes(int b) { return _mm512_set1_epi8(static_cast<char>(b)); }
    static F fzero() { return _mm512_setzero_ps(); }
    static F fone() { return _mm512_set1_ps(1.0f); }
    static F to_float(__m512i v) { return _mm512_cvtepi32_ps(v); }
    static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
    static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
    static __m512i add(__m512i a, __m512i b) { return _mm512_add_epi32(a, b); }
    static __m512i fbits(F f) { return _mm512_castps_si512(f); }
    static int64_t sum(__m512i v) { return _mm512_reduce_add_epi32(v); }
    static constexpr int MACS = 64;
};
#endif

// `iters` rounds on each of `threads` threads of CHAINS independent sums, each taking one 32-value block's
// dots a round (8 dot instructions: 32 values of 8 outputs (256-bit) or of 16 (512-bit) a row; `finish`
// then makes them int32, as maddubs' int16 pair sums take one madd a block), then, where FLOATS > 0, the
// block's float work: its dots converted, and FLOATS multiplies or multiply-adds (2: dw * dx and the
// multiply-add into the row's sum; 3: Q4_1's offset term as well). Returns the dots' multiply-adds per
// second. `dot(acc, u8, s8)` adds one dot instruction's products to acc.
template <class V, int CHAINS, int FLOATS, class Dot, class Finish>
double peak_rate(Dot&& dot, Finish&& finish, int threads, int64_t iters) {
    using O = PeakOps<V>;
    using F = typename O::F;
    int64_t sink = 0;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
        V u = O::bytes(3), s = O::bytes(5);
        F scale = O::fone();
        V acc[FLOATS ? 1 : CHAINS];
        F f[FLOATS ? CHAINS : 1];
        for (V& a : acc) a = O::zero();
        for (F& x : f) x = O::fzero();
        for (int64_t k = 0; k < iters; ++k) {
            for (int c = 0; c < CHAINS; ++c) {
                V block = O::zero();
                __asm__ volatile("" : "+v"(block));  // each chain's start opaque: the chains are not one computation
                for (int i = 0; i < 8; ++i) block = dot(block, u, s);
                block = finish(block);
                if constexpr (FLOATS > 0) {
                    const F x = O::to_float(block);
                    const F sc = O::mul(scale, x);                    // dw * dx
                    f[c] = O::fma(sc, x, f[c]);                       // into the row's sum
                    if constexpr (FLOATS > 2) f[c] = O::fma(scale, sc, f[c]);  // Q4_1's offset
                } else {
                    acc[c] = O::add(acc[c], block);
                }
            }
            // Opaque to the compiler: the inputs may have changed, so no round is folded away.
            __asm__ volatile("" : "+v"(u), "+v"(s), "+v"(scale));
        }
        for (const V& a : acc) sink += O::sum(a);
        for (const F& x : f) sink += O::sum(O::fbits(x));
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    static volatile int64_t keep;
    keep = sink;
    return static_cast<double>(threads) * static_cast<double>(iters) * CHAINS * 8 * O::MACS / seconds;
}

// peak_rate for floats 0, 2 or 3 (anything else: 0).
template <class V, int CHAINS, class Dot, class Finish>
double peak_rate_any(Dot&& dot, Finish&& finish, int threads, int64_t iters, int floats) {
    if (floats == 0) return peak_rate<V, CHAINS, 0>(dot, finish, threads, iters);
    if (floats == 2) return peak_rate<V, CHAINS, 2>(dot, finish, threads, iters);
    if (floats == 3) return peak_rate<V, CHAINS, 3>(dot, finish, threads, iters);
    return 0.0;
}

}  // namespace
