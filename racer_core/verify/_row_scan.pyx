# distutils: language = c++
# cython: language_level=3, boundscheck=False, wraparound=False
"""Cython binding of a sampled row's scan (row_scan.hpp): its largest scores and its mass, or one draw."""

from libc.stdint cimport int32_t, int64_t
from libcpp cimport bool as cbool

cimport numpy as cnp
import numpy as np

cnp.import_array()

cdef extern from "row_scan.hpp" namespace "racer":
    cbool c_row_top "racer::row_top"(const float* row, int64_t n, float divisor, int32_t k, int64_t* ids,
                                     float* values, double* total) nogil
    int64_t c_row_sample "racer::row_sample"(const float* row, int64_t n, float divisor, double u) nogil
    cbool c_row_top_available "racer::row_top_available"() nogil
    int32_t kRowTopMax


def available() -> bool:
    """Whether the scan runs on this CPU (AVX2 and FMA)."""
    return c_row_top_available()


def top_scores(cnp.ndarray row, float divisor, int k, bint total=False) -> tuple | None:
    """(ids int64 (k,), values float32 (k,), mass) of s = row / divisor (float32 division): its k
    largest, largest first, the lower index first among equals, and with `total` the sum of
    exp(s - s.max()) over the row (float, else None). None where the row holds a NaN, fewer than k
    values above -inf, or no finite largest value, or the CPU lacks AVX2: the caller's reference
    (kept_tokens.reference_top) answers those."""
    if row.dtype != np.float32 or row.ndim != 1 or not row.flags.c_contiguous:
        raise ValueError("row must be a C-contiguous float32 vector")
    if not 1 <= k <= kRowTopMax or k >= row.shape[0]:
        raise ValueError(f"k must be 1 to {kRowTopMax} and below the row's {row.shape[0]} values, not {k}")
    if not divisor > 0:
        raise ValueError(f"divisor must be positive, not {divisor}")
    ids = np.empty(k, dtype=np.int64)
    values = np.empty(k, dtype=np.float32)
    cdef const float* r = <const float*> cnp.PyArray_DATA(row)
    cdef int64_t* ip = <int64_t*> cnp.PyArray_DATA(ids)
    cdef float* vp = <float*> cnp.PyArray_DATA(values)
    cdef int64_t n = row.shape[0]
    cdef double mass = 0.0
    cdef cbool ok
    with nogil:
        ok = c_row_top(r, n, divisor, k, ip, vp, &mass if total else NULL)
    if not ok:
        return None
    return ids, values, (mass if total else None)


def sample_index(cnp.ndarray row, float divisor, double u) -> int | None:
    """A draw from softmax(row / divisor) (float32 division) by the uniform number u in [0, 1): the
    first index whose running sum of the weights exp(s - max) exceeds u times their total. None where
    the row holds a NaN or no finite largest value, or the CPU lacks AVX2: the caller's reference
    (sampling.TokenSampler.kept) answers those."""
    if row.dtype != np.float32 or row.ndim != 1 or not row.flags.c_contiguous or row.shape[0] == 0:
        raise ValueError("row must be a non-empty C-contiguous float32 vector")
    if not divisor > 0:
        raise ValueError(f"divisor must be positive, not {divisor}")
    if not 0.0 <= u < 1.0:
        raise ValueError(f"u must be in [0, 1), not {u}")
    cdef const float* r = <const float*> cnp.PyArray_DATA(row)
    cdef int64_t n = row.shape[0], index
    with nogil:
        index = c_row_sample(r, n, divisor, u)
    return None if index < 0 else index
