# distutils: language = c++
# cython: language_level=3, boundscheck=False, wraparound=False
"""Cython bindings of the block-quantized linear kernel (quant.hpp).

Every shape, dtype and contiguity is checked here, before the C++ touches a
byte; the multiply runs without the GIL.
"""

from libc.stdint cimport int8_t, int64_t, uint8_t
from libc.string cimport memcpy

cimport numpy as cnp
import numpy as np

cnp.import_array()

cdef extern from "quant.hpp" namespace "racer_quant":
    int64_t block_bytes(int type)
    int64_t block_values(int type)
    int best_isa()
    bint isa_available(int isa)
    bint is_repacked(int type)
    void c_matmul "racer_quant::matmul"(int isa, int type, const uint8_t* w, int64_t rows, int64_t cols,
                                        const float* x, int64_t T, float* y, int threads) noexcept nogil
    void c_matmul_q8 "racer_quant::matmul_q8"(int isa, int type, const uint8_t* w, int64_t rows, int64_t cols,
                                              const float* x, int64_t T, float* y, int threads) noexcept nogil
    void c_quantize_rows "racer_quant::quantize_rows"(const float* x, int64_t T, int64_t cols, int8_t* q,
                                                      float* d, float* s) nogil
    void c_dequantize "racer_quant::dequantize"(int isa, int type, const uint8_t* w, int64_t rows, int64_t cols,
                                                float* out) nogil
    double c_dot_peak "racer_quant::dot_peak"(int isa, int threads, int64_t iters, int floats) nogil

ISA_NAMES = {0: "none", 1: "avx2", 2: "avx512", 3: "avxvnni"}
"""avxvnni: AVX2 with AVX-VNNI's integer dots (no AVX-512), the same bits as avx2."""
ISA_CODES = {name: code for code, name in ISA_NAMES.items() if code}
REPACKED = 0x100
"""Added to a block type id (any of them): blocks of eight rows interleaved (repack.py)."""


def available(str isa) -> bool:
    """Whether the kernel runs `isa` ('avx2', 'avxvnni' or 'avx512') on this CPU."""
    return isa in ISA_CODES and isa_available(ISA_CODES[isa])


def best() -> str:
    """The best ISA the kernel has for this CPU: 'avx512', 'avxvnni', 'avx2' or 'none'."""
    return ISA_NAMES[best_isa()]


cdef int _isa(str isa) except -1:
    cdef int code = ISA_CODES.get(isa, 0)
    if code == 0 or not isa_available(code):
        raise ValueError(f"ISA {isa!r} is not available on this CPU (best: {best()})")
    return code


def dot_peak(str isa, int threads, int64_t iters, int floats=0) -> float:
    """The integer dot instruction the kernel runs on `isa` ('avx2', 'avxvnni' or 'avx512'), timed alone on
    `threads` threads for `iters` rounds of 32-value blocks: its multiply-adds per second. floats=2 adds each
    block's float work beside its dots (its scale and its multiply-add into the row's sum), 3 also Q4_1's
    offset term: the rate the kernel's instruction mix allows. For measuring (scripts/kernel_floor.py)."""
    cdef int code = _isa(isa)
    if threads < 1 or iters < 1:
        raise ValueError(f"dot_peak: threads {threads} and iters {iters} must be at least 1")
    if floats not in (0, 2, 3):
        raise ValueError(f"dot_peak: floats {floats}: expected 0, 2 or 3")
    cdef double rate
    with nogil:
        rate = c_dot_peak(code, threads, iters, floats)
    return rate


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
    if is_repacked(qtype) and rows % 8:
        raise ValueError(f"repacked blocks hold groups of 8 rows, not {rows}")


cdef void _check_plain(int qtype) except *:
    if is_repacked(qtype):
        raise ValueError(f"type {qtype}: repacked blocks are read by matmul_q8 only (unpack them first)")


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
    _check_plain(qtype)
    _multiply(c_matmul, qtype, blocks, rows, cols, x, y, isa, threads)


def matmul_q8(int qtype, cnp.ndarray blocks, int64_t rows, int64_t cols, cnp.ndarray x, cnp.ndarray y,
              str isa, int threads=1) -> None:
    """As matmul, with each row of x first quantized to 8 bits per 32-value
    block (quantize_rows) and integer products per block, as llama.cpp does.
    qtype + REPACKED: blocks repacked by repack.py (quant_repack.hpp)."""
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
    _check_plain(qtype)
    _check_blocks(qtype, blocks, rows, cols)
    cdef int code = _isa(isa)
    out = np.empty((rows, cols), dtype=np.float32)
    cdef float* op = <float*> cnp.PyArray_DATA(out)
    cdef const uint8_t* w = <const uint8_t*> cnp.PyArray_DATA(blocks)
    with nogil:
        c_dequantize(code, qtype, w, rows, cols, op)
    return out


def unpack_rows(cnp.ndarray packed, int64_t size, cnp.ndarray fields, cnp.ndarray ids) -> np.ndarray:
    """Rows `ids` of repacked blocks back in the file's layout: repack.unpack's
    answer for those rows (its reference), the bytes moved here without
    gathering each row's whole group first. `size`: bytes per block; `fields`:
    (start, length, unit) rows of repack.FIELDS[type], in repacked order."""
    if packed.dtype != np.uint8 or packed.ndim != 2 or not packed.flags.c_contiguous:
        raise ValueError("packed must be a C-contiguous uint8 array (rows, bytes per row)")
    if ids.dtype != np.int64 or ids.ndim != 1 or not ids.flags.c_contiguous:
        raise ValueError("ids must be a C-contiguous int64 array")
    cdef int64_t total = packed.shape[0], row_bytes = packed.shape[1]
    _check_repacked(total, row_bytes, size, fields)
    cdef const int64_t* f = <const int64_t*> cnp.PyArray_DATA(fields)
    cdef int64_t n_fields = fields.shape[0], i
    cdef const int64_t* idp = <const int64_t*> cnp.PyArray_DATA(ids)
    cdef int64_t n = ids.shape[0]
    for i in range(n):
        if not 0 <= idp[i] < total:
            raise ValueError(f"row {idp[i]} is outside the {total} rows")
    out = np.empty((n, row_bytes), dtype=np.uint8)
    cdef const uint8_t* src = <const uint8_t*> cnp.PyArray_DATA(packed)
    cdef uint8_t* dst = <uint8_t*> cnp.PyArray_DATA(out)
    with nogil:
        _unpack(src, row_bytes, size, f, n_fields, idp, n, dst)
    return out


cdef void _check_repacked(int64_t rows, int64_t row_bytes, int64_t size, cnp.ndarray fields) except *:
    """(rows, row_bytes) bytes of repacked blocks of `size` bytes, whose fields are (start, length, unit)
    rows covering a block (repack.FIELDS)."""
    if size <= 0 or row_bytes % size or rows % 8:
        raise ValueError(f"({rows}, {row_bytes}) bytes are not repacked blocks of {size} bytes")
    if fields.dtype != np.int64 or fields.ndim != 2 or fields.shape[1] != 3 or not fields.flags.c_contiguous:
        raise ValueError("fields must be a C-contiguous int64 array (n, 3)")
    cdef const int64_t* f = <const int64_t*> cnp.PyArray_DATA(fields)
    cdef int64_t covered = 0, i
    for i in range(fields.shape[0]):
        if f[3 * i + 2] <= 0 or f[3 * i + 1] % f[3 * i + 2] or f[3 * i] < 0 or f[3 * i] + f[3 * i + 1] > size:
            raise ValueError("bad field (start, length, unit)")
        covered += f[3 * i + 1]
    if covered != size:
        raise ValueError(f"the fields cover {covered} of a block's {size} bytes")


cdef void _unpack(const uint8_t* src, int64_t row_bytes, int64_t size, const int64_t* f, int64_t n_fields,
                  const int64_t* idp, int64_t n, uint8_t* dst) noexcept nogil:
    """unpack_rows' bytes moved, its arguments checked by the caller."""
    cdef int64_t nb = row_bytes // size, i, b, j, k, lane, first, start, length, unit
    cdef const uint8_t* block
    cdef uint8_t* into
    for i in range(n):
        lane = idp[i] % 8
        for b in range(nb):
            # group idp[i] // 8's block b: each field's pieces, piece k of the eight rows side by side
            block = src + ((idp[i] // 8) * nb + b) * 8 * size
            into = dst + i * row_bytes + b * size
            first = 0
            for j in range(n_fields):
                start, length, unit = f[3 * j], f[3 * j + 1], f[3 * j + 2]
                for k in range(length // unit):
                    memcpy(into + start + k * unit, block + 8 * first + (k * 8 + lane) * unit, unit)
                first += length


# ---------------------------------------------------------------- one decoder layer a call (layer.hpp)

from libcpp.vector cimport vector

cdef extern from "layer.hpp" namespace "racer_quant":
    cdef struct QuantLinear:
        int type
        const uint8_t* blocks
        int64_t rows, cols

    cdef struct LayerWeights:
        QuantLinear qkv, o, gate_up, down
        QuantLinear qkv_split[3]
        int qkv_parts
        const float* input_norm
        const float* post_norm
        const float* qkv_bias
        const float* q_norm
        const float* k_norm

    cdef struct LayerShape:
        int64_t hidden, heads, kv_heads, head_dim, inter
        float eps, scale
        int isa
        bint q8
        bint wide_attention
        int threads

    cdef struct PartCache:
        int64_t rows
        void* k
        void* v
        bint kv_float16
        int64_t head_stride
        int64_t length
        const float* mask
        int64_t mask_row
        float masked_below

    void c_decoder_layer "racer_quant::decoder_layer"(const LayerShape& shape, const LayerWeights& w, float* h,
                                                      int64_t T, const float* cos, const float* sin_signed,
                                                      const PartCache* parts, int64_t n_parts) except + nogil
    void c_rms_norm_rows "racer_quant::rms_norm_rows"(const float* x, const float* weight, int64_t T, int64_t n,
                                                      float eps, float* out, int threads) noexcept nogil


cdef QuantLinear _linear(tuple weight, int64_t rows, int64_t cols) except *:
    """(type, blocks) checked as a (rows, cols) matrix."""
    cdef int qtype = weight[0]
    cdef cnp.ndarray blocks = weight[1]
    _check_blocks(qtype, blocks, rows, cols)
    cdef QuantLinear out
    out.type = qtype
    out.blocks = <const uint8_t*> cnp.PyArray_DATA(blocks)
    out.rows = rows
    out.cols = cols
    return out


cdef const float* _vector(object array, int64_t size, str name) except? NULL:
    if array is None:
        return NULL
    cdef cnp.ndarray a = array
    if a.dtype != np.float32 or a.ndim != 1 or not a.flags.c_contiguous or a.shape[0] != size:
        raise ValueError(f"{name} must be a C-contiguous float32 vector of {size}")
    return <const float*> cnp.PyArray_DATA(a)


def rms_norm_rows(cnp.ndarray x, cnp.ndarray weight, float eps, cnp.ndarray out, int threads=1) -> None:
    """out = RMSNorm(x) * weight, row by row, as the decoder layers compute their norms
    (layer.hpp); x and out (T, n) C-contiguous float32, weight (n,). Needs AVX2, as the layers do."""
    if best_isa() == 0:
        raise ValueError("rms_norm_rows needs AVX2")
    if x.dtype != np.float32 or x.ndim != 2 or not x.flags.c_contiguous or x.shape[1] == 0:
        raise ValueError("x must be a C-contiguous float32 array (T, n)")
    if out.dtype != np.float32 or out.ndim != 2 or not out.flags.c_contiguous or out.shape[0] != x.shape[0] \
            or out.shape[1] != x.shape[1] or not out.flags.writeable:
        raise ValueError("out must be a writable C-contiguous float32 array shaped as x")
    cdef const float* w = _vector(weight, x.shape[1], "weight")
    if w == NULL:
        raise ValueError("weight must be a C-contiguous float32 vector as wide as x")
    cdef const float* xp = <const float*> cnp.PyArray_DATA(x)
    cdef float* op = <float*> cnp.PyArray_DATA(out)
    cdef int64_t T = x.shape[0], n = x.shape[1]
    with nogil:
        c_rms_norm_rows(xp, w, T, n, eps, op, max(1, threads))


cdef class DecoderLayers:
    """A model's decoder layers on block-quantized linears, run by layer.hpp.

    Each spec is (qkv, o, gate_up, down, input_norm, post_norm, qkv_bias,
    q_norm, k_norm): the linears as (type, blocks), qkv also as a list of up
    to three (type, blocks) parts stacked in order (of different types), the
    rest float32 numpy vectors or None. The arrays are kept alive here."""

    cdef vector[LayerWeights] layers
    cdef LayerShape shape
    cdef list keep
    cdef QuantLinear head  # set_head's: the model's head and final norm, run by `step` after the layers
    cdef int head_isa
    cdef bint head_q8
    cdef const float* final_norm
    cdef bint has_head
    cdef int embed_kind  # set_embedding's: 0 none, 1 float32 rows, 2 blocks, 3 repacked blocks
    cdef const uint8_t* embed_data
    cdef int embed_type, embed_isa
    cdef int64_t embed_rows, embed_row_bytes, embed_size, embed_n_fields
    cdef const int64_t* embed_fields

    def __init__(self, list specs, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t head_dim,
                 int64_t inter, float eps, float scale, str isa, bint q8, bint wide_attention=True):
        if hidden <= 0 or heads <= 0 or kv_heads <= 0 or heads % kv_heads or head_dim <= 0 or head_dim % 2 or inter <= 0:
            raise ValueError("bad layer shape")
        self.shape.hidden, self.shape.heads, self.shape.kv_heads = hidden, heads, kv_heads
        self.shape.head_dim, self.shape.inter, self.shape.eps, self.shape.scale = head_dim, inter, eps, scale
        self.shape.isa = _isa(isa)
        self.shape.q8 = q8
        self.shape.wide_attention = wide_attention
        self.shape.threads = 1
        self.keep = specs
        cdef int64_t nq = heads * head_dim, width = nq + 2 * kv_heads * head_dim
        cdef LayerWeights w
        cdef int64_t stacked
        for spec in specs:
            qkv, o, gate_up, down, input_norm, post_norm, qkv_bias, q_norm, k_norm = spec
            split = list(qkv) if isinstance(qkv, list) else []
            if not q8:
                for linear in (*split, o, gate_up, down) if split else (qkv, o, gate_up, down):
                    _check_plain(linear[0])
            if split:
                if not 1 <= len(split) <= 3:
                    raise ValueError("qkv in one to three parts")
                stacked = 0
                for i, part in enumerate(split):
                    w.qkv_split[i] = _linear(part, part[1].shape[0], hidden)
                    stacked += part[1].shape[0]
                if stacked != width:
                    raise ValueError(f"qkv parts of {stacked} rows in all: the layer needs {width}")
                w.qkv_parts = len(split)
                w.qkv.blocks = NULL
            else:
                w.qkv = _linear(qkv, width, hidden)
                w.qkv_parts = 0
            w.o = _linear(o, hidden, nq)
            w.gate_up = _linear(gate_up, 2 * inter, hidden)
            w.down = _linear(down, hidden, inter)
            w.input_norm = _vector(input_norm, hidden, "input_norm")
            w.post_norm = _vector(post_norm, hidden, "post_norm")
            w.qkv_bias = _vector(qkv_bias, width, "qkv_bias")
            w.q_norm = _vector(q_norm, head_dim, "q_norm")
            w.k_norm = _vector(k_norm, head_dim, "k_norm")
            if w.input_norm == NULL or w.post_norm == NULL or (w.q_norm == NULL) != (w.k_norm == NULL):
                raise ValueError("each layer needs both norms, and q_norm with k_norm")
            self.layers.push_back(w)

    def __len__(self) -> int:
        return self.layers.size()

    @property
    def wide_attention(self) -> bool:
        """Whether the attention may take its 512-bit path (the same bits as its AVX2 path)."""
        return self.shape.wide_attention

    @wide_attention.setter
    def wide_attention(self, bint wide) -> None:
        self.shape.wide_attention = wide

    @property
    def whole_step(self) -> bool:
        """Whether set_embedding and set_head gave the layers what `step` needs."""
        return self.has_head and self.embed_kind != 0

    def set_embedding(self, cnp.ndarray table, int qtype=-1, bint repacked=False, int64_t size=0,
                      object fields=None, str isa="avx2") -> None:
        """The model's embedding, whose rows `step` looks up: float32 rows (qtype -1: table is
        (vocab, hidden) float32), or (vocab, bytes) blocks of `qtype` in the file's layout, or repacked
        (`repacked`, `size` bytes a block, `fields` its repack.FIELDS table) as unpack_rows reads them;
        blocks are dequantized on `isa` as `dequantize` does. The arrays are kept alive here."""
        cdef int64_t H = self.shape.hidden
        if table.ndim != 2 or not table.flags.c_contiguous:
            raise ValueError("the embedding must be a C-contiguous 2-D array")
        if qtype == -1:
            if table.dtype != np.float32 or table.shape[1] != H:
                raise ValueError(f"float rows must be float32 (vocab, {H})")
            self.embed_kind = 1
            self.embed_row_bytes = H * 4
        else:
            _check_plain(qtype)
            _check_blocks(qtype, table, table.shape[0], H)
            self.embed_type, self.embed_isa = qtype, _isa(isa)
            self.embed_row_bytes = table.shape[1]
            self.embed_kind = 2
            if repacked:
                _check_repacked(table.shape[0], self.embed_row_bytes, size, fields)
                self.embed_size, self.embed_n_fields = size, fields.shape[0]
                self.embed_fields = <const int64_t*> cnp.PyArray_DATA(fields)
                self.embed_kind = 3
        self.embed_rows = table.shape[0]
        self.embed_data = <const uint8_t*> cnp.PyArray_DATA(table)
        self.keep.append((table, fields))

    def set_head(self, tuple head, int64_t vocab, str isa, bint q8, cnp.ndarray final_norm) -> None:
        """The model's head, (type, blocks) of a (vocab, hidden) matrix multiplied on `isa` with
        8-bit activations where q8 (matmul_q8) or float ones (matmul), and its final RMSNorm weight
        (the layers' eps): what `step` runs after the layers. The arrays are kept alive here."""
        if not q8:
            _check_plain(head[0])
        self.head = _linear(head, vocab, self.shape.hidden)
        self.head_isa = _isa(isa)
        self.head_q8 = q8
        self.final_norm = _vector(final_norm, self.shape.hidden, "final_norm")
        if self.final_norm == NULL:
            raise ValueError("final_norm must be a float32 vector as wide as the layers")
        self.keep.append((head, final_norm))
        self.has_head = True

    def step(self, cnp.ndarray ids, size_t h, cnp.ndarray positions, size_t cos_table, size_t sin_table,
             int64_t table_rows, list parts, cnp.ndarray caches, int threads, bint kv_float16,
             cnp.ndarray keep, size_t logits) -> None:
        """A whole pass in one call (no Python between its parts): the embedding's rows of `ids`
        (int64, T of them) into h (T x hidden float32), every layer on h, then the final norm and
        the head of the rows `keep` names into logits (rows kept x vocab float32). positions: the
        rows' int64 rope positions, read from cos_table and sin_table (table_rows x head_dim float32
        each, the forward's); keep: int64 (n, 2) row ranges [first, last) in order; parts and caches
        as for `run`. The same calls in the same order as unpack_rows and dequantize, `run`,
        rms_norm_rows and matmul(_q8), so the same bits. The caller vouches for the pointers
        (racer_core/models/formats/quant_layer.py)."""
        if not (self.has_head and self.embed_kind):
            raise ValueError("step needs set_embedding and set_head first")
        if ids.dtype != np.int64 or ids.ndim != 1 or not ids.flags.c_contiguous or ids.shape[0] == 0:
            raise ValueError("ids must be a non-empty C-contiguous int64 vector")
        cdef int64_t T = ids.shape[0], t, i, r, kept = 0, at = 0, n_keep, D = self.shape.head_dim
        cdef int64_t H = self.shape.hidden, before = 0
        cdef const int64_t* idp = <const int64_t*> cnp.PyArray_DATA(ids)
        for i in range(T):
            if not 0 <= idp[i] < self.embed_rows:
                raise ValueError(f"token {idp[i]} is outside the embedding's {self.embed_rows} rows")
        if positions.dtype != np.int64 or positions.ndim != 1 or not positions.flags.c_contiguous \
                or positions.shape[0] != T:
            raise ValueError(f"positions must be a C-contiguous int64 vector of {T}")
        if keep.dtype != np.int64 or keep.ndim != 2 or keep.shape[1] != 2 or not keep.flags.c_contiguous:
            raise ValueError("keep must be a C-contiguous int64 array (n, 2)")
        cdef const int64_t* pos = <const int64_t*> cnp.PyArray_DATA(positions)
        cdef const int64_t* ranges = <const int64_t*> cnp.PyArray_DATA(keep)
        n_keep = keep.shape[0]
        for t in range(T):
            if not 0 <= pos[t] < table_rows:
                raise ValueError(f"position {pos[t]} is outside the rope tables' {table_rows} rows")
        for i in range(n_keep):
            if not before <= ranges[2 * i] <= ranges[2 * i + 1] <= T:
                raise ValueError("keep's ranges must be in order within the rows")
            before = ranges[2 * i + 1]
            kept += ranges[2 * i + 1] - ranges[2 * i]
        cdef vector[float] cos = vector[float](T * D), sin_signed = vector[float](T * D)
        cdef vector[float] rows = vector[float](max(kept, 1) * H), normed = vector[float](max(kept, 1) * H)
        cdef const float* ct = <const float*> cos_table
        cdef const float* st = <const float*> sin_table
        cdef float* hp = <float*> h
        cdef float* out = <float*> logits
        cdef vector[uint8_t] picked = vector[uint8_t](T * self.embed_row_bytes if self.embed_kind > 1 else 0)
        with nogil:
            if self.embed_kind == 1:
                for t in range(T):
                    memcpy(hp + t * H, self.embed_data + idp[t] * self.embed_row_bytes, self.embed_row_bytes)
            else:  # the rows' blocks in the file's layout (repack.unpack's for repacked ones), dequantized
                if self.embed_kind == 3:
                    _unpack(self.embed_data, self.embed_row_bytes, self.embed_size, self.embed_fields,
                            self.embed_n_fields, idp, T, picked.data())
                else:
                    for t in range(T):
                        memcpy(&picked[t * self.embed_row_bytes], self.embed_data + idp[t] * self.embed_row_bytes,
                               self.embed_row_bytes)
                c_dequantize(self.embed_isa, self.embed_type, picked.data(), T, H, hp)
            for t in range(T):  # the rows' rope factors, as the forward's table[positions] picks them
                memcpy(&cos[t * D], ct + pos[t] * D, D * sizeof(float))
                memcpy(&sin_signed[t * D], st + pos[t] * D, D * sizeof(float))
        self.run(0, self.layers.size(), h, T, <size_t> cos.data(), <size_t> sin_signed.data(), parts, caches,
                 threads, kv_float16)
        if kept == 0:
            return
        with nogil:
            for i in range(n_keep):
                for r in range(ranges[2 * i], ranges[2 * i + 1]):
                    memcpy(&rows[at * H], hp + r * H, H * sizeof(float))
                    at += 1
            c_rms_norm_rows(rows.data(), self.final_norm, kept, H, self.shape.eps, normed.data(), max(1, threads))
            if self.head_q8:
                c_matmul_q8(self.head_isa, self.head.type, self.head.blocks, self.head.rows, H, normed.data(),
                            kept, out, threads)
            else:
                c_matmul(self.head_isa, self.head.type, self.head.blocks, self.head.rows, H, normed.data(),
                         kept, out, threads)

    def run(self, int first, int last, size_t h, int64_t T, size_t cos, size_t sin_signed, list parts,
            cnp.ndarray caches, int threads, bint kv_float16=False) -> None:
        """Layers [first, last) on h (T x hidden float32, in place). cos and
        sin_signed: T x head_dim float32. parts: per sequence (rows, length,
        mask pointer, mask row stride, masked_below); caches: int64 (parts,
        layers, 3), each layer's key and value buffer pointers and head stride
        (in elements: float16 ones where kv_float16, else float32).
        The caller vouches for the pointers (racer_core/models/formats/quant_layer.py)."""
        cdef int64_t n = len(parts), L = self.layers.size()
        if not (0 <= first <= last <= L) or threads < 1 or T <= 0:
            raise ValueError("bad layer range, thread count or row count")
        if caches.dtype != np.int64 or caches.ndim != 3 or not caches.flags.c_contiguous \
                or caches.shape[0] != n or caches.shape[1] != L or caches.shape[2] != 3:
            raise ValueError(f"caches must be C-contiguous int64 ({n}, {L}, 3)")
        cdef vector[PartCache] cs = vector[PartCache](n)
        cdef int64_t p, layer
        for p in range(n):
            rows, length, mask, mask_row, below = parts[p]
            cs[p].rows, cs[p].length = rows, length
            cs[p].mask = <const float*> <size_t> mask
            cs[p].mask_row = mask_row
            cs[p].masked_below = below
            cs[p].kv_float16 = kv_float16
        cdef const int64_t* ptrs = <const int64_t*> cnp.PyArray_DATA(caches)
        cdef LayerShape shape = self.shape
        shape.threads = threads
        with nogil:
            for layer in range(first, last):
                for p in range(n):
                    cs[p].k = <void*> <size_t> ptrs[(p * L + layer) * 3]
                    cs[p].v = <void*> <size_t> ptrs[(p * L + layer) * 3 + 1]
                    cs[p].head_stride = ptrs[(p * L + layer) * 3 + 2]
                c_decoder_layer(shape, self.layers[layer], <float*> h, T, <const float*> cos,
                                <const float*> sin_signed, cs.data(), n)
