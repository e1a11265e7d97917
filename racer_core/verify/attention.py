"""The one attention entry point of the lean forward, batch-invariant.

Every verification pass, one request's tree or several requests' trees in one
batched pass (racer_core/models/lean_forward.py, `LeanForward.batch`), calls
`attend` once per request with that request's queries, its whole cache (the
cached prefix, then the tree's rows just written) and its mask.

On a CPU in float32 or bfloat16 the work goes to a small C++ kernel
(attention_kernel.cpp): each query row is reduced over the keys its mask lets
it see, in cache order, every sum in one fixed order, by one thread. A tree
row's visible keys in cache order are its prefix and then its ancestors from
the root down, exactly the keys a single-token step for that token sees, so
the row gets the same bits as plain decoding, whatever the tree's shape, the
number of rows or threads. SDPA (the fallback for other devices and dtypes, or
with RACER_EXACT_ATTENTION=0) blocks its sums by where keys sit and how many
rows there are, so its last bits move with the tree.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

try:
    from racer_core.verify import _attention
except ImportError:  # extension not built: SDPA, not bit-exact
    _attention = None

DISABLE_ENV = "RACER_EXACT_ATTENTION"
"""Set to 0 to use SDPA (for comparisons)."""
ISA_ENV = "RACER_QUANT_ISA"
"""'avx2' or 'avxvnni' keeps this kernel, like the 4-bit one, to its AVX2 path on an AVX-512 CPU (cpu_class.py sets it)."""
_DTYPES = (torch.float32, torch.bfloat16)


def masked_below(mask: torch.Tensor) -> float:
    """The threshold under which a mask entry hides its key: a mask's "not
    visible" is its dtype's minimum (tree_attention.TreeMaskBuilder), "visible" 0."""
    return torch.finfo(mask.dtype).min / 2


def _kernel_dtypes(q: torch.dtype, keys: torch.dtype, values: torch.dtype) -> bool:
    """The kernel's dtypes: q, keys and values alike, or a float16 cache under float32 queries."""
    if keys != values:
        return False
    return (q in _DTYPES and keys == q) or (q == torch.float32 and keys == torch.float16)


def exact_available(dtype: torch.dtype, device: torch.device | str = "cpu") -> bool:
    """Whether `attend` takes the batch-invariant kernel for tensors of this dtype and device."""
    return (_attention is not None and os.environ.get(DISABLE_ENV, "1") != "0" and dtype in _DTYPES
            and torch.device(device).type == "cpu")


def attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, scale: float,
           threads: int | None = None) -> torch.Tensor:
    """Attention of T query rows over L cached keys.

    q: (1, heads, T, D); keys, values: (1, kv_heads, L, D) with the tree's own
    rows last; mask: (1, 1, T, L) additive, 0 where a row sees a key and the
    dtype's minimum where it does not (tree_attention.TreeMaskBuilder).
    Returns (1, heads, T, D). `threads` (default torch's) changes nothing
    in the result of the exact kernel, only its speed."""
    if not (exact_available(q.dtype, q.device) and _kernel_dtypes(q.dtype, keys.dtype, values.dtype)):
        gqa = q.shape[1] != keys.shape[1]
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=scale, enable_gqa=gqa)
    return exact_attend(q, keys, values, mask, scale, threads=threads)


def wide_allowed() -> bool:
    """Whether the kernel may take its 512-bit path (where the CPU has AVX-512F): unless RACER_QUANT_ISA names
    an AVX2 class."""
    return os.environ.get(ISA_ENV) not in ("avx2", "avxvnni")


_WIDE = wide_allowed()  # read once: the CPU class is set before the process loads torch (cpu_class.py)


def exact_attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, scale: float,
                 threads: int | None = None, portable: bool = False, wide: bool | None = None) -> torch.Tensor:
    """The kernel itself (CPU, float32 or bfloat16, or float16 keys and values
    beside float32 queries: a float16 cache); `portable` forces its plain C++
    path where AVX2 would run, `wide=False` its AVX2 path where the 512-bit one
    would (default: `wide_allowed()` as the process started); all three agree bit for bit."""
    if _attention is None:
        raise RuntimeError("the attention extension is not built (python setup.py build_ext --inplace)")
    _, heads, rows, dim = q.shape
    _, kv_heads, length, _ = keys.shape
    if q.shape[0] != 1 or keys.shape[0] != 1 or values.shape != keys.shape or keys.shape[-1] != dim:
        raise ValueError(f"attend: shapes q {tuple(q.shape)}, keys {tuple(keys.shape)}, values {tuple(values.shape)}")
    if heads % kv_heads:
        raise ValueError(f"attend: {heads} query heads are not a multiple of {kv_heads} key/value heads")
    if mask.shape[-2:] != (rows, length):
        raise ValueError(f"attend: mask {tuple(mask.shape)} for {rows} rows over {length} keys")
    if not _kernel_dtypes(q.dtype, keys.dtype, values.dtype):
        raise ValueError(f"attend: dtypes {q.dtype}, {keys.dtype}, {values.dtype}")
    neg = masked_below(mask)
    if mask.dtype not in _DTYPES:
        mask = mask.float()
    mask = mask.reshape(rows, length)
    q, keys, values, mask = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, keys, values, mask))
    # Written as (T, heads, D) and handed back transposed: the caller's
    # transpose(1, 2).reshape is then free.
    out = torch.empty((1, rows, heads, dim), dtype=q.dtype)
    half = keys.dtype == torch.float16
    _attention.attend_raw(
        q.data_ptr(), q.stride(1), q.stride(2), keys.data_ptr(), keys.stride(1), keys.stride(2),
        values.data_ptr(), values.stride(1), values.stride(2), mask.data_ptr(), mask.stride(0),
        out.data_ptr(), dim, heads * dim, heads, kv_heads, rows, length, dim, float(scale), float(neg),
        q.dtype == torch.bfloat16, mask.dtype == torch.bfloat16,
        torch.get_num_threads() if threads is None else int(threads), portable, half,
        _WIDE if wide is None else wide)
    return out.transpose(1, 2)
