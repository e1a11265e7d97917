"""Input validation shared by the reference and the compiled automaton.

Every public method validates all of its arguments before it changes anything,
so a method that raises leaves the automaton exactly as it was.
"""

from __future__ import annotations

import numbers
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

# The draft tree's bound (its attention mask is T x T booleans) is the engine's too.
from racer_core.common.config import MAX_DRAFT

# Tokens are stored as int32 in the compiled automaton; -1 marks the root and
# padding, so before the vocabulary is known a token must stay below this.
TOKEN_LIMIT = 2**31 - 1
# Largest accepted value for max_nodes, min_depth, ngram and freq (int32 ids).
PARAM_LIMIT = 2**31 - 1
# Frequencies saturate here instead of overflowing.
FREQ_MAX = 2**63 - 1
# Largest logits table (vocab_size * top_k entries of int32): 1 GiB.
MAX_TABLE = 2**28


def check_int(name: str, value: Any) -> int:
    """An integer argument: int or numpy integer, never bool or float."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    return operator.index(value)


def check_param(name: str, value: Any, smallest: int) -> int:
    """A constructor parameter: clamped up to `smallest`, at most PARAM_LIMIT."""
    v = check_int(name, value)
    if v > PARAM_LIMIT:
        raise ValueError(f"{name} must be at most {PARAM_LIMIT}, got {v}")
    return max(v, smallest)


def _bad_token(name: str, index: int, token: int, bound: int, lowest: int = 0) -> ValueError:
    return ValueError(f"{name}[{index}] = {token} is out of range: tokens must satisfy {lowest} <= token < {bound}")


def check_tokens(name: str, tokens: Any, bound: int, lowest: int = 0) -> list[int]:
    """A 1-D sequence of tokens in [lowest, bound): list/tuple of ints or 1-D integer array."""
    if isinstance(tokens, np.ndarray):
        if tokens.ndim != 1:
            raise TypeError(f"{name} must be one-dimensional, got an array of shape {tokens.shape}")
        if tokens.dtype.kind not in "iu":
            raise TypeError(f"{name} must hold integers, got dtype {tokens.dtype}")
        values = [int(v) for v in tokens.tolist()]
    elif isinstance(tokens, list | tuple):
        values = []
        for i, v in enumerate(tokens):
            if isinstance(v, bool | np.bool_) or not isinstance(v, numbers.Integral):
                raise TypeError(f"{name}[{i}] must be an integer, got {type(v).__name__}")
            values.append(operator.index(v))
    else:
        raise TypeError(f"{name} must be a list, tuple or 1-D numpy integer array, got {type(tokens).__name__}")
    for i, v in enumerate(values):
        if v < lowest or v >= bound:
            raise _bad_token(name, i, v, bound, lowest)
    return values


def check_prev(name: str, prev: Any, n: int, bound: int) -> list[int]:
    """update's prev_ids: n previous tokens, each in [0, bound) or -1 (none)."""
    values = check_tokens(name, prev, bound, lowest=-1)
    if len(values) != n:
        raise ValueError(f"{name} must have one entry per token ({n}), got {len(values)}")
    return values


def check_token(name: str, token: Any, bound: int, lowest: int = 0) -> int:
    """One token in [lowest, bound)."""
    v = check_int(name, token)
    if v < lowest or v >= bound:
        raise ValueError(f"{name} = {v} is out of range: tokens must satisfy {lowest} <= token < {bound}")
    return v


def check_rows(name: str, rows: Any, n_rows: int, width: int, bound: int) -> list[list[int]]:
    """A (n_rows, width) table of tokens: 2-D integer array or a sequence of sequences."""
    if isinstance(rows, np.ndarray):
        if rows.dtype.kind not in "iu":
            raise TypeError(f"{name} must hold integers, got dtype {rows.dtype}")
        if rows.shape != (n_rows, width):
            raise ValueError(f"{name} must have shape ({n_rows}, {width}), got an array of shape {rows.shape}")
        table = [[int(v) for v in row] for row in rows.tolist()]
    elif isinstance(rows, list | tuple):
        if len(rows) != n_rows:
            raise ValueError(f"{name} must have shape ({n_rows}, {width}), got {len(rows)} rows")
        table = []
        for r, row in enumerate(rows):
            if isinstance(row, np.ndarray):
                if row.ndim != 1 or row.dtype.kind not in "iu":
                    raise TypeError(f"{name}[{r}] must be a 1-D integer array, got shape {row.shape} dtype {row.dtype}")
                row = row.tolist()
            elif not isinstance(row, Sequence) or isinstance(row, str | bytes):
                raise TypeError(f"{name}[{r}] must be a list or tuple, got {type(row).__name__}")
            if len(row) != width:
                raise ValueError(f"{name} must have shape ({n_rows}, {width}), row {r} has length {len(row)}")
            out = []
            for c, v in enumerate(row):
                if isinstance(v, bool | np.bool_) or not isinstance(v, numbers.Integral):
                    raise TypeError(f"{name}[{r}][{c}] must be an integer, got {type(v).__name__}")
                out.append(operator.index(v))
            table.append(out)
    else:
        raise TypeError(f"{name} must be a 2-D numpy integer array or a list of rows, got {type(rows).__name__}")
    for r, row in enumerate(table):
        for c, v in enumerate(row):
            if v < 0 or v >= bound:
                raise ValueError(f"{name}[{r}][{c}] = {v} is out of range: tokens must satisfy 0 <= token < {bound}")
    return table


def check_budget(value: Any) -> int:
    """max_num_draft: 1 <= B <= MAX_DRAFT."""
    b = check_int("max_num_draft", value)
    if b < 1 or b > MAX_DRAFT:
        raise ValueError(f"max_num_draft must satisfy 1 <= max_num_draft <= {MAX_DRAFT}, got {b}")
    return b


def check_table(vocab_size: Any, top_k: Any) -> tuple[int, int]:
    """init_logits arguments."""
    v = check_int("vocab_size", vocab_size)
    k = check_int("top_k", top_k)
    if v < 1 or v > TOKEN_LIMIT:
        raise ValueError(f"vocab_size must satisfy 1 <= vocab_size <= {TOKEN_LIMIT}, got {v}")
    if k < 1 or k > v:
        raise ValueError(f"top_k must satisfy 1 <= top_k <= vocab_size = {v}, got {k}")
    if v * k > MAX_TABLE:
        raise ValueError(f"vocab_size * top_k = {v * k} exceeds the table limit {MAX_TABLE}")
    return v, k


def check_freq(value: Any) -> int:
    """insert's freq: 1 <= freq <= PARAM_LIMIT."""
    f = check_int("freq", value)
    if f < 1 or f > PARAM_LIMIT:
        raise ValueError(f"freq must satisfy 1 <= freq <= {PARAM_LIMIT}, got {f}")
    return f


def check_flag(name: str, value: Any) -> bool:
    """A boolean flag: bool or numpy bool only."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return bool(value)
