# distutils: language = c++
# cython: language_level=3, boundscheck=False, wraparound=False
"""Cython bindings of the block-quantized linear kernel (quant.hpp).

Every shape, dtype and contiguity is checked here, before the C++ touches a
byte; the multiply runs without the GIL.
"""

from libc.stdint cimport int8_t, int64_t, uint8_t

cimport numpy as cnp
import numpy as np

cnp.import_array()

cdef extern from "quant.hpp" namespace "racer_quant":
    int64_t block_bytes(int type)
    int64_t block_values(int type)
    int best_isa()
    void c_matmul "racer_quant::matmul"(int isa, int type, const uint8_t* w, int64_t rows, int64_t cols,
                                        const float* x, int64_t T, float* y, int threads) noexcept nogil
    void c_matmul_q8 "racer_quant::matmul_q8"(int isa, int type, const uint8_t* w, int64_t rows, int64_t cols,
                                              const float* x, int64_t T, float* y, int threads) noexcept nogil
    void c_quantize_rows "racer_quant::quantize_rows"(const float* x, int64_t T, int64_t cols, int8_t* q,
                                                      float* d, float* s) nogil
    void c_dequantize "racer_quant::dequantize"(int isa, int type, const uint8_t* w, int64_t rows, int64_t cols,
                                                float* out) nogil

ISA_NAMES = {0: "none", 1: "avx2", 2: "avx512"}


def best() -> str:
    """The best ISA the kernel has for this CPU: 'avx512', 'avx2' or 'none'."""
    return ISA_NAMES[best_isa()]


cdef int _isa(str isa) except -1:
    cdef int code = {"avx2": 1, "avx512": 2}.get(isa, 0)
    if code == 0 or code > best_isa():
        raise ValueError(f"ISA {isa!r} is not available on this CPU (best: {best()})")
    return code


cdef void _check_blocks(int qtype, cnp.ndarray blocks, int64_t rows, int64_t cols) except *:
    if block_bytes(qtype) == 0:
        raise ValueError(f"unsupported block type {qtype}")
    cdef int64_t values = block_values(qtype)
    if cols <= 0 or rows <= 0 or cols % values:
        raise ValueError(f"bad shape ({rows}, {cols}): columns must be a positive multiple of {values}")
    if blocks.dtype != np.uint8 or blocks.ndim != 2 or not blocks.flags.c_contiguous:
        raise ValueError("blocks must be a C-contiguous uint8 array (rows, bytes per row)")
    if blocks.shape[0] != rows or blocks.shape[1] != cols // values * block_bytes(qtype):
        raise ValueError(f"blocks of shape ({blocks.shape[0]}, {blocks.shape[1]}) do not hold a ({rows}, {cols}) matrix of type {qtype}")


cdef void _check_xy(cnp.ndarray x, cnp.ndarray y, int64_t rows, int64_t cols, int threads) except *:
    if x.dtype != np.float32 or x.ndim != 2 or not x.flags.c_contiguous or x.shape[1] != cols:
        raise ValueError(f"x must be a C-contiguous float32 array (T, {cols})")
    if y.dtype != np.float32 or y.ndim != 2 or not y.flags.c_contiguous or not y.flags.writeable \
            or y.shape[0] != x.shape[0] or y.shape[1] != rows:
        raise ValueError(f"y must be a writable C-contiguous float32 array ({x.shape[0]}, {rows})")
    if threads < 1:
        raise ValueError("threads must be at least 1")


ctypedef void (*multiply_fn)(int, int, const uint8_t*, int64_t, int64_t, const float*, int64_t, float*, int) noexcept nogil


cdef void _multiply(multiply_fn fn, int qtype, cnp.ndarray blocks, int64_t rows, int64_t cols, cnp.ndarray x,
                    cnp.ndarray y, str isa, int threads) except *:
    _check_blocks(qtype, blocks, rows, cols)
    cdef int code = _isa(isa)
    _check_xy(x, y, rows, cols, threads)
    cdef const uint8_t* w = <const uint8_t*> cnp.PyArray_DATA(blocks)
    cdef const float* xp = <const float*> cnp.PyArray_DATA(x)
    cdef float* yp = <float*> cnp.PyArray_DATA(y)
    cdef int64_t T = x.shape[0]
    if T == 0:
        return
    with nogil:
        fn(code, qtype, w, rows, cols, xp, T, yp, threads)


def matmul(int qtype, cnp.ndarray blocks, int64_t rows, int64_t cols, cnp.ndarray x, cnp.ndarray y,
           str isa, int threads=1) -> None:
    """y[t, o] = sum_k W[o, k] x[t, k], W the (rows, cols) matrix in `blocks`;
    x (T, cols) and y (T, rows) C-contiguous float32, y written in place."""
    _multiply(c_matmul, qtype, blocks, rows, cols, x, y, isa, threads)


def matmul_q8(int qtype, cnp.ndarray blocks, int64_t rows, int64_t cols, cnp.ndarray x, cnp.ndarray y,
              str isa, int threads=1) -> None:
    """As matmul, with each row of x first quantized to 8 bits per 32-value
    block (quantize_rows) and integer products per block, as llama.cpp does."""
    _multiply(c_matmul_q8, qtype, blocks, rows, cols, x, y, isa, threads)


def quantize_rows(cnp.ndarray x) -> tuple:
    """x (T, cols) float32 as matmul_q8 quantizes it: (q int8 (T, cols),
    d (T, cols/32), s (T, cols/32)) with d = amax/127 and s = d * sum(q) per block."""
    if best_isa() == 0:
        raise ValueError("quantize_rows needs AVX2")
    if x.dtype != np.float32 or x.ndim != 2 or not x.flags.c_contiguous or x.shape[1] % 32 or x.shape[1] == 0:
        raise ValueError("x must be a C-contiguous float32 array (T, a positive multiple of 32)")
    cdef int64_t T = x.shape[0], cols = x.shape[1]
    q = np.empty((T, cols), dtype=np.int8)
    d = np.empty((T, cols // 32), dtype=np.float32)
    s = np.empty((T, cols // 32), dtype=np.float32)
    cdef const float* xp = <const float*> cnp.PyArray_DATA(x)
    cdef int8_t* qp = <int8_t*> cnp.PyArray_DATA(q)
    cdef float* dp = <float*> cnp.PyArray_DATA(d)
    cdef float* sp = <float*> cnp.PyArray_DATA(s)
    with nogil:
        c_quantize_rows(xp, T, cols, qp, dp, sp)
    return q, d, s


def dequantize(int qtype, cnp.ndarray blocks, int64_t rows, int64_t cols, str isa) -> np.ndarray:
    """The (rows, cols) float32 matrix the kernel multiplies with."""
    _check_blocks(qtype, blocks, rows, cols)
    cdef int code = _isa(isa)
    out = np.empty((rows, cols), dtype=np.float32)
    cdef float* op = <float*> cnp.PyArray_DATA(out)
    cdef const uint8_t* w = <const uint8_t*> cnp.PyArray_DATA(blocks)
    with nogil:
        c_dequantize(code, qtype, w, rows, cols, op)
    return out
