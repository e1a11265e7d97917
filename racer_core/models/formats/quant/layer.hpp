// One decoder layer of the lean forward on block-quantized linears, in C++.
//
// The lean forward's layer on a small model is mostly glue: about thirty
// small torch ops a layer (norms, rope, the residual adds, silu), each a few
// microseconds of dispatch, around four kernel calls. Here the layer is one
// call: RMSNorm, q|k|v through the block kernel (quant.hpp), the optional
// bias and q/k norms, rope, the keys and values written into each sequence's
// cache, the batch-invariant attention (racer_core/verify/attention_kernel.hpp)
// per sequence, o, the residual, the second norm, gate|up, silu(gate) * up,
// down and the residual. Python (racer_core/models/formats/quant_layer.py)
// keeps the loop over layers and the caches' bookkeeping.
//
// Batch-invariant like the pieces it joins: every value of a row is computed
// from that row alone, each sum in one fixed order (RMSNorm's squares in 8
// lanes folded by one fixed tree), so a row's result is the same bits alone,
// beside other rows, or beside other sequences' rows.
#pragma once

#include <cstdint>

namespace racer_quant {

struct QuantLinear {  // a (rows, cols) weight in ggml blocks of `type`
    int type;
    const uint8_t* blocks;
    int64_t rows, cols;
};

struct LayerWeights {
    QuantLinear qkv, o, gate_up, down;       // qkv: q heads, k heads, v heads; gate_up: gate, then up
    // q, k and v of different block types (Q4_K_M gives some layers' v Q6_K): qkv_parts of them in
    // qkv_split, each multiplied alone, their outputs side by side; 0: qkv is one weight.
    QuantLinear qkv_split[3];
    int qkv_parts;
    const float* input_norm;                 // hidden
    const float* post_norm;                  // hidden
    const float* qkv_bias;                   // qkv.rows, or null
    const float* q_norm;                     // head_dim, or null (then k_norm is null too)
    const float* k_norm;
};

struct LayerShape {
    int64_t hidden, heads, kv_heads, head_dim, inter;
    float eps, scale;
    int isa;      // Isa (quant.hpp)
    bool q8;      // activations quantized to 8 bits (matmul_q8), else float (matmul)
    bool wide_attention;  // the attention's 512-bit path where the CPU has AVX-512F (attention_kernel.hpp)
    int threads;
};

struct PartCache {  // one sequence's rows of the pass
    int64_t rows;            // its rows, consecutive in h after the previous parts'
    void* k;                 // its cache: kv_heads x capacity x head_dim, float32 or float16
    void* v;
    bool kv_float16;         // the cache holds float16 (each written row rounded to nearest even)
    int64_t head_stride;     // capacity * head_dim
    int64_t length;          // cached rows before this pass; this pass's go at [length, length + rows)
    const float* mask;       // rows x (length + rows), additive; visible above masked_below
    int64_t mask_row;
    float masked_below;
};

// h: T x hidden float32, updated in place (the layer's output). cos and
// sin_signed: T x head_dim, the rows' rope tables (sin_signed = [-sin, sin] by halves).
// Throws std::invalid_argument on inconsistent sizes.
void decoder_layer(const LayerShape& shape, const LayerWeights& w, float* h, int64_t T, const float* cos,
                   const float* sin_signed, const PartCache* parts, int64_t n_parts);

// out = RMSNorm(x) * weight for T rows of n (the layers' own norm, so a model's final norm is
// computed as its layers' are: each row alone, in one fixed order whatever the rows beside it).
void rms_norm_rows(const float* x, const float* weight, int64_t T, int64_t n, float eps, float* out, int threads);

}  // namespace racer_quant
