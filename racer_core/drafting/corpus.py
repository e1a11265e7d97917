"""What earlier chats taught the drafts, kept per model (docs/design.md 1.9).

A corpus is the committed token sequences of past conversations (prompts and
replies) with, per position, the model's top-k next-token ids: the rows the
logits table learns (1.2). A new conversation seeds its logits table from it
without running the model, so a chat drafts from what earlier chats said.

It lives in the user cache (`cache_dir()/corpus/KEY.npz`, one file per model),
bounded to the most recent `LIMIT` positions, written atomically; a file that
cannot be read is moved aside (never deleted) and the corpus starts empty.
Numpy only: the app may clear it without importing torch.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from racer_core.common.paths import cache_dir, cache_key, move_aside

LIMIT = 32_768
"""Positions kept (about 1 MiB on disk at top-8). Seeding rewrites at most this
many table rows (a few ms); the table has a row per vocabulary entry, so a
larger corpus mostly overwrites its own older rows with newer ones."""
FORMAT = 1

log = logging.getLogger(__name__)


def corpus_dir() -> Path:
    return cache_dir() / "corpus"


def corpus_path(key_parts: Sequence[str]) -> Path:
    return corpus_dir() / f"{cache_key(key_parts)}.npz"


def clear_corpora() -> int:
    """Delete every model's corpus file; returns how many there were."""
    folder = corpus_dir()
    count = sum(1 for p in folder.glob("*.npz"))
    shutil.rmtree(folder, ignore_errors=True)
    return count


class Corpus:
    """Segments of (tokens, top-k rows), oldest first, at most `limit` positions.

    Each conversation owns one segment and replaces it after every reply; a
    segment that is a prefix of a newer one (the same chat reopened later) is
    dropped for it. Thread-safe: the app clears it from its own thread."""

    def __init__(self, path: Path, vocab_size: int, limit: int = LIMIT) -> None:
        self.path = path
        self.vocab_size = vocab_size
        self.limit = limit
        self.notice: str | None = None  # why a damaged file was moved aside
        self.epoch = 0  # bumped by clear(): conversations opened before stop recording
        self._segments: list[tuple[Any, np.ndarray, np.ndarray]] = []  # (owner, tokens, rows)
        self._flat: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._lock = threading.Lock()
        self._load()

    def take_notice(self) -> str | None:
        """The damage notice, once (the first chat that opens the corpus shows it)."""
        with self._lock:
            notice, self.notice = self.notice, None
        return notice

    @property
    def positions(self) -> int:
        return sum(len(t) for _, t, _ in self._segments)

    @property
    def top_k(self) -> int:
        return self._segments[0][2].shape[1] if self._segments else 0

    # -- the file ------------------------------------------------------------

    def _load(self) -> None:
        try:
            with np.load(self.path, allow_pickle=False) as data:
                tokens, rows, starts = data["tokens"], data["rows"], data["starts"]
                vocab, version = int(data["vocab"]), int(data["format"])
        except FileNotFoundError:
            return
        except Exception as exc:  # a cut or foreign file: any reader error means damage
            self._damaged(f"cannot be read ({type(exc).__name__})")
            return
        problem = _check(tokens, rows, starts, vocab, version, self.vocab_size)
        if problem:
            self._damaged(problem)
            return
        bounds = [*starts.tolist(), len(tokens)]
        self._segments = [(None, tokens[a:b], rows[a:b]) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]

    def _damaged(self, why: str) -> None:
        try:
            moved = move_aside(self.path)
        except OSError as exc:
            self.notice = f"The chat corpus {self.path} {why} and cannot be moved aside ({exc}); starting empty."
        else:
            self.notice = f"The chat corpus {self.path} {why}; moved it to {moved.name} and started empty."
        log.warning(self.notice)

    def save(self) -> None:
        """Write the corpus (atomically: a reader never sees half a file)."""
        with self._lock:
            tokens, rows, prev = self._arrays()
            starts = np.flatnonzero(prev < 0) if len(tokens) else np.zeros(0, dtype=np.int64)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + ".tmp")
            with open(tmp, "wb") as f:
                np.savez(f, tokens=tokens, rows=rows, starts=starts, vocab=self.vocab_size, format=FORMAT)
            tmp.replace(self.path)

    def clear(self) -> None:
        """Forget everything, in memory and on disk, at once."""
        with self._lock:
            self._segments = []
            self._flat = None
            self.epoch += 1
            self.path.unlink(missing_ok=True)

    # -- learning and seeding --------------------------------------------------

    def record(self, owner: Any, tokens: Sequence[int], rows: Sequence[np.ndarray | None], epoch: int) -> None:
        """Make `owner`'s segment the committed `tokens` with their top-k `rows`
        (None where a position has none, e.g. an image placeholder: the longest
        run of positions with rows is kept). Ignored if the corpus was cleared
        since `epoch`."""
        seq, top = _longest_run(tokens, rows)
        with self._lock:
            if epoch != self.epoch or not len(seq):
                return
            k = min(top.shape[1], self.top_k or top.shape[1])
            kept = [
                (o, t, r[:, :k]) for o, t, r in self._segments
                if o is not owner and not (len(t) <= len(seq) and np.array_equal(seq[: len(t)], t))
            ]
            kept.append((owner, seq, top[:, :k]))
            total = 0
            for i in range(len(kept) - 1, -1, -1):  # newest first, up to the limit
                total += len(kept[i][1])
                if total >= self.limit:
                    o, t, r = kept[i]
                    cut = total - self.limit
                    kept = [(o, t[cut:], r[cut:]), *kept[i + 1 :]]
                    break
            self._segments = kept
            self._flat = None

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(tokens, rows, prev) over all segments; prev is -1 at a segment's start."""
        if self._flat is None:
            if not self._segments:
                empty = np.zeros(0, dtype=np.int32)
                self._flat = (empty, np.zeros((0, 1), dtype=np.int32), empty.astype(np.int64))
            else:
                tokens = np.concatenate([t for _, t, _ in self._segments])
                rows = np.concatenate([r for _, _, r in self._segments])
                prev = np.concatenate([np.concatenate([[-1], t[:-1]]) for _, t, _ in self._segments]).astype(np.int64)
                self._flat = (tokens, rows, prev)
        return self._flat

    def seed(self, automaton: Any, trie: bool = False) -> None:
        """Write the corpus into a fresh automaton's logits table (rows and
        pair rows, oldest first so newer rows win); with `trie`, feed its
        segments to the n-gram trie too (then reset the matcher)."""
        with self._lock:
            tokens, rows, prev = self._arrays()
            segments = [t for _, t, _ in self._segments] if trie else []
        top_k = automaton.top_k
        if len(tokens) and rows.shape[1] >= top_k:
            automaton.update(tokens, rows[:, :top_k], prev)
        for seq in segments:
            automaton.feed(seq)
        if segments:
            automaton.reset()


def _longest_run(tokens: Sequence[int], rows: Sequence[np.ndarray | None]) -> tuple[np.ndarray, np.ndarray]:
    best = (0, 0)
    start = 0
    for i in range(len(rows) + 1):
        if i == len(rows) or rows[i] is None:
            if i - start > best[1] - best[0]:
                best = (start, i)
            start = i + 1
    a, b = best
    if b == a:
        return np.zeros(0, dtype=np.int32), np.zeros((0, 1), dtype=np.int32)
    return np.asarray(tokens[a:b], dtype=np.int32), np.stack(rows[a:b]).astype(np.int32)  # type: ignore[arg-type]


def _check(tokens: np.ndarray, rows: np.ndarray, starts: np.ndarray, vocab: int, version: int, expected: int) -> str:
    """What is wrong with a loaded corpus, or ''."""
    if version != FORMAT:
        return f"has format {version}, not {FORMAT}"
    if vocab != expected:
        return f"is for a vocabulary of {vocab}, not {expected}"
    if tokens.ndim != 1 or rows.ndim != 2 or starts.ndim != 1 or len(rows) != len(tokens) or not rows.shape[1]:
        return "has arrays of the wrong shapes"
    if not all(np.issubdtype(a.dtype, np.integer) for a in (tokens, rows, starts)):
        return "has arrays of the wrong types"
    if len(tokens) and (tokens.min() < 0 or tokens.max() >= vocab or rows.min() < 0 or rows.max() >= vocab):
        return "holds token ids outside the vocabulary"
    if len(tokens) and (not len(starts) or starts[0] != 0 or np.any(np.diff(starts) <= 0) or starts[-1] >= len(tokens)):
        return "has bad segment bounds"
    return ""
