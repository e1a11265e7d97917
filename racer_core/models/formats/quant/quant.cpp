// Runtime dispatch between the ISA builds of the kernel.
#include "quant.hpp"

namespace racer_quant {

void matmul_avx2(int, const uint8_t*, int64_t, int64_t, const float*, int64_t, float*, int);
void matmul_avx512(int, const uint8_t*, int64_t, int64_t, const float*, int64_t, float*, int);
void dequantize_avx2(int, const uint8_t*, int64_t, int64_t, float*);
void matmul_q8_avx2(int, const uint8_t*, int64_t, int64_t, const float*, int64_t, float*, int);
void matmul_q8_vnni(int, const uint8_t*, int64_t, int64_t, const float*, int64_t, float*, int);
void matmul_rp_avx2(int, const uint8_t*, int64_t, int64_t, const float*, int64_t, float*, int);
void matmul_rp_vnni(int, const uint8_t*, int64_t, int64_t, const float*, int64_t, float*, int);
void matmul_q8_avxvnni(int, const uint8_t*, int64_t, int64_t, const float*, int64_t, float*, int);
void matmul_rp_avxvnni(int, const uint8_t*, int64_t, int64_t, const float*, int64_t, float*, int);
void quantize_rows_avx2(const float*, int64_t, int64_t, int8_t*, float*, float*);
void dequantize_avx512(int, const uint8_t*, int64_t, int64_t, float*);
double dot_peak_avx2(int, int64_t, int);
double dot_peak_vnni(int, int64_t, int);
double dot_peak_avxvnni(int, int64_t, int);

bool is_repacked(int type) {
    const int base = type & ~REPACKED;
    return (type & REPACKED) && (base == Q4_0 || base == Q4_1 || base == Q5_0 || base == Q5_1 || base == Q8_0 ||
                                 base == Q4_K || base == Q5_K || base == Q6_K);
}

int64_t block_bytes(int type) {
    if (is_repacked(type)) type &= ~REPACKED;
    switch (type) {
        case Q4_0: return 18;
        case Q4_1: return 20;
        case Q5_0: return 22;
        case Q5_1: return 24;
        case Q8_0: return 34;
        case Q4_K: return 144;
        case Q5_K: return 176;
        case Q6_K: return 210;
        default: return 0;
    }
}

int64_t block_values(int type) {
    if (is_repacked(type)) type &= ~REPACKED;
    switch (type) {
        case Q4_0: case Q4_1: case Q5_0: case Q5_1: case Q8_0: return 32;
        case Q4_K: case Q5_K: case Q6_K: return 256;
        default: return 0;
    }
}

int best_isa() {
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    if (!avx2) return NONE;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
        return AVX512;
    return __builtin_cpu_supports("avxvnni") ? AVX2_VNNI : AVX2;
}

bool isa_available(int isa) {
    __builtin_cpu_init();
    const int best = best_isa();
    switch (isa) {
        case AVX2: return best != NONE;
        case AVX512: return best == AVX512;
        case AVX2_VNNI: return best != NONE && __builtin_cpu_supports("avxvnni");
        default: return false;
    }
}

bool has_vnni() {
    __builtin_cpu_init();
    return best_isa() == AVX512 && __builtin_cpu_supports("avx512vnni");
}

void matmul_q8(int isa, int type, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T,
               float* y, int threads) {
    if (is_repacked(type)) {
        if (isa == AVX512 && has_vnni()) matmul_rp_vnni(type & ~REPACKED, w, rows, cols, x, T, y, threads);
        else if (isa == AVX2_VNNI) matmul_rp_avxvnni(type & ~REPACKED, w, rows, cols, x, T, y, threads);
        else if (isa != NONE) matmul_rp_avx2(type & ~REPACKED, w, rows, cols, x, T, y, threads);
    } else if (isa == AVX512 && has_vnni()) matmul_q8_vnni(type, w, rows, cols, x, T, y, threads);
    else if (isa == AVX2_VNNI) matmul_q8_avxvnni(type, w, rows, cols, x, T, y, threads);
    else if (isa != NONE) matmul_q8_avx2(type, w, rows, cols, x, T, y, threads);
}

void quantize_rows(const float* x, int64_t T, int64_t cols, int8_t* q, float* d, float* s) {
    quantize_rows_avx2(x, T, cols, q, d, s);
}

void matmul(int isa, int type, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y,
            int threads) {
    if (isa == AVX512) matmul_avx512(type, w, rows, cols, x, T, y, threads);
    else if (isa == AVX2 || isa == AVX2_VNNI) matmul_avx2(type, w, rows, cols, x, T, y, threads);
}

void dequantize(int isa, int type, const uint8_t* w, int64_t rows, int64_t cols, float* out) {
    if (isa == AVX512) dequantize_avx512(type, w, rows, cols, out);
    else if (isa == AVX2 || isa == AVX2_VNNI) dequantize_avx2(type, w, rows, cols, out);
}

double dot_peak(int isa, int threads, int64_t iters, int floats) {  // the dots matmul_q8 runs for isa
    if (isa == AVX512 && has_vnni()) return dot_peak_vnni(threads, iters, floats);
    if (isa == AVX2_VNNI) return dot_peak_avxvnni(threads, iters, floats);
    if (isa != NONE) return dot_peak_avx2(threads, iters, floats);
    return 0.0;
}

}  // namespace racer_quant
