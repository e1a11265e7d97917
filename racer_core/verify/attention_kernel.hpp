// Batch-invariant attention (racer_core/verify/attention.py is its Python face).
//
// Each (query row, head) is reduced by one thread over the keys its mask lets it
// see, in cache order, with every reduction in one fixed order: a dot product
// in 8 lanes (lane l takes the elements d = l mod 8) folded by one fixed tree,
// the softmax sum in 8 lanes by the key's place among the row's visible keys,
// the weighted sum of values key by key. Nothing depends on how many rows the
// call has, where a row sits in a tree, or how many threads run: a tree row
// gives the bits its token gets alone after the same prefix. The AVX-512 path,
// the AVX2 path and the portable path do the same operations in the same order
// (the 512-bit one as two 8-lane halves; compiled with
// -ffp-contract=off), so they agree bit for bit too.
#pragma once

#include <cstdint>

namespace racer {

enum class Dtype : int { float32 = 0, bfloat16 = 1 };

struct AttendArgs {
    // q: heads x rows x dim; k, v: kv_heads x keys x dim; out: heads x rows x dim;
    // strides in elements, the last dimension contiguous.
    const void* q;
    int64_t q_head, q_row;
    const void* k;
    int64_t k_head, k_row;
    const void* v;
    int64_t v_head, v_row;
    // mask: rows x keys, additive; a key is visible where the entry is above `masked_below`.
    const void* mask;
    int64_t mask_row;
    void* out;
    int64_t out_head, out_row;
    int64_t heads, kv_heads, rows, keys, dim;
    float scale, masked_below;
    Dtype dtype;       // of q, k, v and out
    Dtype mask_dtype;
    bool kv_float16;   // k and v are IEEE float16 (a float16 cache) beside float32 q and out
    int threads;       // at most this many threads work on the call (1: the caller alone)
    bool portable;     // the portable path even where AVX2 runs (tests compare the two)
    bool wide;         // the 512-bit path where the CPU has AVX-512F (the same bits as the AVX2 path)
};

// Throws std::invalid_argument on inconsistent sizes.
void attend(const AttendArgs& args);

// Several calls at once (the sequences of a batched pass): the one-row calls,
// and the rows of small trees beside them, share one parallel region of
// `threads`, an item a row's key/value head, each computed as attend()
// computes a row alone (the same bits); the other calls run as attend() runs
// them. Throws as attend() does.
void attend_rows(const AttendArgs* calls, int64_t count, int threads);

bool avx2_available();  // with FMA and F16C, which every AVX2 CPU has
bool avx512_available();  // AVX-512F besides

// The path attend() takes for these flags here: "portable", "avx2" or "avx512".
const char* path_for(bool portable, bool wide);

// dst[i] = src[i] rounded to the nearest float16 (ties to even), as torch's .to(float16).
void float_to_half_row(const float* src, int64_t n, uint16_t* dst);

}  // namespace racer
