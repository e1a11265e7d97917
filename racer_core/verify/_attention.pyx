# distutils: language = c++
# cython: language_level=3
"""Cython binding of the batch-invariant attention kernel (attention_kernel.hpp).

Takes raw data pointers and strides; racer_core/verify/attention.py checks
the tensors (device, dtype, shapes, a contiguous last dimension) before it
calls here."""

from libc.stdint cimport int64_t
from libcpp cimport bool as cbool

cdef extern from "attention_kernel.hpp" namespace "racer":
    cdef enum class Dtype "racer::Dtype":
        float32 "racer::Dtype::float32"
        bfloat16 "racer::Dtype::bfloat16"

    cdef struct AttendArgs:
        const void* q
        int64_t q_head, q_row
        const void* k
        int64_t k_head, k_row
        const void* v
        int64_t v_head, v_row
        const void* mask
        int64_t mask_row
        void* out
        int64_t out_head, out_row
        int64_t heads, kv_heads, rows, keys, dim
        float scale, masked_below
        Dtype dtype
        Dtype mask_dtype
        cbool kv_float16
        int threads
        cbool portable
        cbool wide

    void c_attend "racer::attend"(const AttendArgs&) except + nogil
    cbool c_avx2_available "racer::avx2_available"() nogil
    const char* c_path_for "racer::path_for"(cbool portable, cbool wide) nogil


def avx2_available() -> bool:
    return c_avx2_available()


def path_for(bint portable, bint wide) -> str:
    """The path attend_raw takes here with these flags: 'portable', 'avx2' or 'avx512'."""
    return c_path_for(portable, wide).decode()


def attend_raw(size_t q, int64_t q_head, int64_t q_row, size_t k, int64_t k_head, int64_t k_row,
               size_t v, int64_t v_head, int64_t v_row, size_t mask, int64_t mask_row,
               size_t out, int64_t out_head, int64_t out_row,
               int64_t heads, int64_t kv_heads, int64_t rows, int64_t keys, int64_t dim,
               float scale, float masked_below, bint bf16, bint mask_bf16, int threads, bint portable,
               bint kv_float16=False, bint wide=True) -> None:
    """out[h, r] = softmax over row r's visible keys (mask > masked_below) of
    q[h, r] . k[h // group, j] * scale + mask[r, j], times v; pointers to
    float32 (or bfloat16 with `bf16`) buffers, strides in elements; with
    `kv_float16`, k and v are float16 beside float32 q and out; `wide` lets
    the 512-bit path run where the CPU has AVX-512F (the same bits)."""
    cdef AttendArgs a
    a.q = <const void*>q
    a.q_head = q_head
    a.q_row = q_row
    a.k = <const void*>k
    a.k_head = k_head
    a.k_row = k_row
    a.v = <const void*>v
    a.v_head = v_head
    a.v_row = v_row
    a.mask = <const void*>mask
    a.mask_row = mask_row
    a.out = <void*>out
    a.out_head = out_head
    a.out_row = out_row
    a.heads = heads
    a.kv_heads = kv_heads
    a.rows = rows
    a.keys = keys
    a.dim = dim
    a.scale = scale
    a.masked_below = masked_below
    a.dtype = Dtype.bfloat16 if bf16 else Dtype.float32
    a.mask_dtype = Dtype.bfloat16 if mask_bf16 else Dtype.float32
    a.kv_float16 = kv_float16
    a.threads = threads
    a.portable = portable
    a.wide = wide
    with nogil:
        c_attend(a)
