// Linear layers on GGUF block-quantized weights, made for verifying trees.
//
// y[t, o] = sum_k W[o, k] * x[t, k] for T rows of float32 activations, with W
// kept in ggml's blocks (Q4_0, Q4_1, Q8_0: 32 values per block, one row of W
// is cols/32 blocks). Each weight is unpacked to float32 once per call, for
// all T rows (a panel of output rows at a time, in a small per-thread
// buffer), then multiplied in float32: nothing is rounded but the weights,
// which are the file's own values.
//
// Row-invariant: each y[t, o] is summed in one fixed order (lane k mod W,
// k ascending, then a fixed horizontal sum) that depends on neither T, the
// row's place among the others, nor the thread count; threads split output
// rows, never a dot product.
#pragma once

#include <cstdint>

namespace racer_quant {

enum Type : int { Q4_0 = 2, Q4_1 = 3, Q8_0 = 8 };  // ggml's type ids
enum Isa : int { NONE = 0, AVX2 = 1, AVX512 = 2 };

// Bytes per 32-value block of `type`, 0 if unknown.
int64_t block_bytes(int type);

// The best ISA this CPU has (AVX2 needs AVX2+FMA+F16C; AVX512 also F+BW+VL).
int best_isa();

// w: rows x (cols/32 * block_bytes) bytes; x: T x cols; y: T x rows (row stride ldy).
// cols must be a multiple of 32. isa: AVX2 or AVX512 (must be supported).
void matmul(int isa, int type, const uint8_t* w, int64_t rows, int64_t cols,
            const float* x, int64_t T, float* y, int threads);

// The weights as float32, exactly the values the kernel multiplies with.
void dequantize(int isa, int type, const uint8_t* w, int64_t rows, int64_t cols, float* out);

}  // namespace racer_quant
