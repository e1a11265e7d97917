# distutils: language = c++
# cython: language_level=3, boundscheck=False, wraparound=False
"""Cython bindings of the block-quantized linear kernel (quant.hpp).

Every shape, dtype and contiguity is checked here, before the C++ touches a
byte; the multiply runs without the GIL.
"""

from libc.stdint cimport int64_t, uint8_t

cimport numpy as cnp
import numpy as np

cnp.import_array()

cdef extern from "quant.hpp" namespace "racer_quant":
    int64_t block_bytes(int type)
    int best_isa()
    void c_matmul "racer_quant::matmul"(int isa, int type, const uint8_t* w, int64_t rows, int64_t cols,
                                        const float* x, int64_t T, float* y, int threads) nogil
    void c_dequantize "racer_quant::dequantize"(int isa, int type, const uint8_t* w, int64_t rows, int64_t cols,
                                                float* out) nogil

ISA_NAMES = {0: "none", 1: "avx2", 2: "avx512"}


def best() -> str:
    """The best ISA the kernel has for this CPU: 'avx512', 'avx2' or 'none'."""
    return ISA_NAMES[best_isa()]


def bytes_per_block(int qtype) -> int:
    """Bytes of one 32-value block of ggml type `qtype` (0 if the kernel lacks it)."""
    return block_bytes(qtype)


cdef int _isa(str isa) except -1:
    cdef int code = {"avx2": 1, "avx512": 2}.get(isa, 0)
    if code == 0 or code > best_isa():
        raise ValueError(f"ISA {isa!r} is not available on this CPU (best: {best()})")
    return code


cdef void _check_blocks(int qtype, cnp.ndarray blocks, int64_t rows, int64_t cols) except *:
    if block_bytes(qtype) == 0:
        raise ValueError(f"unsupported block type {qtype}")
    if cols <= 0 or rows <= 0 or cols % 32:
        raise ValueError(f"bad shape ({rows}, {cols}): columns must be a positive multiple of 32")
    if blocks.dtype != np.uint8 or blocks.ndim != 2 or not blocks.flags.c_contiguous:
        raise ValueError("blocks must be a C-contiguous uint8 array (rows, bytes per row)")
    if blocks.shape[0] != rows or blocks.shape[1] != cols // 32 * block_bytes(qtype):
        raise ValueError(f"blocks of shape ({blocks.shape[0]}, {blocks.shape[1]}) do not hold a ({rows}, {cols}) matrix of type {qtype}")


def matmul(int qtype, cnp.ndarray blocks, int64_t rows, int64_t cols, cnp.ndarray x, cnp.ndarray y,
           str isa, int threads=1) -> None:
    """y[t, o] = sum_k W[o, k] x[t, k], W the (rows, cols) matrix in `blocks`;
    x (T, cols) and y (T, rows) C-contiguous float32, y written in place."""
    _check_blocks(qtype, blocks, rows, cols)
    cdef int code = _isa(isa)
    if x.dtype != np.float32 or x.ndim != 2 or not x.flags.c_contiguous or x.shape[1] != cols:
        raise ValueError(f"x must be a C-contiguous float32 array (T, {cols})")
    if y.dtype != np.float32 or y.ndim != 2 or not y.flags.c_contiguous or not y.flags.writeable \
            or y.shape[0] != x.shape[0] or y.shape[1] != rows:
        raise ValueError(f"y must be a writable C-contiguous float32 array ({x.shape[0]}, {rows})")
    if threads < 1:
        raise ValueError("threads must be at least 1")
    cdef const uint8_t* w = <const uint8_t*> cnp.PyArray_DATA(blocks)
    cdef const float* xp = <const float*> cnp.PyArray_DATA(x)
    cdef float* yp = <float*> cnp.PyArray_DATA(y)
    cdef int64_t T = x.shape[0]
    if T == 0:
        return
    with nogil:
        c_matmul(code, qtype, w, rows, cols, xp, T, yp, threads)


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
