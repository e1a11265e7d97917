// Linear layers on GGUF block-quantized weights, made for verifying trees.
//
// y[t, o] = sum_k W[o, k] * x[t, k] for T rows of float32 activations, with W
// kept in ggml's blocks (Q4_0, Q4_1, Q8_0: 32 values per block; Q4_K, Q6_K:
// 256 values in eight 32-value sub-blocks; quant_layout.hpp). Each weight is unpacked to float32 once per call, for
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

enum Type : int { Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12, Q5_K = 13, Q6_K = 14 };  // ggml's type ids
// AVX2_VNNI: the AVX2 kernel with AVX-VNNI's dpbusd for the integer dots (matmul_q8; else as AVX2).
enum Isa : int { NONE = 0, AVX2 = 1, AVX512 = 2, AVX2_VNNI = 3 };

// Added to any block type here: the blocks of each eight rows interleaved for
// the integer kernel (quant_repack.hpp; rows a multiple of 8). Only matmul_q8 reads them.
constexpr int REPACKED = 0x100;

// From this many rows a call's row-wise work (norms, rope, the activations' quantization) is split
// between its threads; fewer rows stay on the calling thread. Each row is computed alone, so the
// split changes no bit.
constexpr int64_t SPLIT_ROWS = 4;

// Whether `type` is a repacked type id.
bool is_repacked(int type);

// Bytes per block of `type` (32 values; 256 for the K types), 0 if unknown (a repacked type: its base type's).
int64_t block_bytes(int type);

// Values per block of `type`: 32, or 256 for Q4_K, Q5_K and Q6_K (0 if unknown).
int64_t block_values(int type);

// The best ISA this CPU has (AVX2 needs AVX2+FMA+F16C; AVX512 also F+BW+VL; AVX2_VNNI is AVX2 with
// AVX-VNNI where AVX512 is missing).
int best_isa();

// Whether this CPU runs `isa` (AVX2 wherever AVX2_VNNI or AVX512 runs).
bool isa_available(int isa);

// w: rows x (cols/block_values * block_bytes) bytes; x: T x cols; y: T x rows.
// cols must be a multiple of block_values. isa: AVX2 or AVX512 (must be supported).
void matmul(int isa, int type, const uint8_t* w, int64_t rows, int64_t cols,
            const float* x, int64_t T, float* y, int threads);

// The same product with each activation row quantized to 8 bits per 32-value
// block (quantize_rows), integer dot products per block and one float scale per
// (weight block, activation block), as llama.cpp multiplies its Q4/Q8 weights.
// Row-invariant, and the same bits on every ISA (AVX2: maddubs; AVX-512
// VNNI: dpbusd, used where the CPU has it and isa is AVX512; AVX-VNNI's dpbusd
// for isa AVX2_VNNI). A repacked type
// goes through quant_repack.hpp (its own summation order, also row-invariant).
void matmul_q8(int isa, int type, const uint8_t* w, int64_t rows, int64_t cols,
               const float* x, int64_t T, float* y, int threads);

// Whether matmul_q8 uses VNNI here for isa AVX512.
bool has_vnni();

// x (T x cols) to q (T x cols int8), d and s (T x cols/32): per 32-block
// d = amax / 127, q = nearest-even(x * (127 / amax)), s = d * sum(q). Needs AVX2.
void quantize_rows(const float* x, int64_t T, int64_t cols, int8_t* q, float* d, float* s);

// The integer dot instruction matmul_q8 uses for `isa` (must be supported), timed alone: its multiply-adds
// per second over `threads` threads, `iters` rounds of 32-value blocks each (quant_peak.hpp). floats 2 or 3
// adds each block's float work beside its dots (2: the scale and the multiply-add into the row's sum; 3:
// Q4_1's offset term too); 0 the dots alone. Measuring only (scripts/kernel_floor.py).
double dot_peak(int isa, int threads, int64_t iters, int floats);

// The weights as float32, exactly the values the kernel multiplies with.
void dequantize(int isa, int type, const uint8_t* w, int64_t rows, int64_t cols, float* out);

}  // namespace racer_quant
