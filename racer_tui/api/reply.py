"""One choice as it streams: its speculative statistics and its stop sequences.

The statistics extend OpenAI's usage (docs/api.md): `steps` are verification
passes (the prefill, which yields the first token from the prompt alone, is
not one, as everywhere in racer-tui), `drafted_tokens` the draft-tree nodes
they verified (the root excluded), `accepted_tokens` the drafted tokens the
model agreed with, `mean_accepted_tokens` the tokens a step emitted, bonus
included (MAT). Each emitted token also names its source, as its method
declares it (racer_core/common/registry.py): racer's `automaton` and
`logits` (the logits table), eagle3's `head`, suffix's `suffix`, recycling's
`recycled`, ..., or `bonus` (the model's own token).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from racer_core.common import registry
from racer_core.common.events import Source, StepEvent, TokenLogprob, TokenPiece
from racer_core.common.stats import Stats, count_sources, is_verification_step

SOURCE_NAMES = {Source(spec.id): spec.key for spec in registry.sources()}


@dataclass
class Tally:
    """Running sums of one reply (or of several: `plus`)."""

    stats: Stats = field(default_factory=Stats)
    drafted: int = 0
    by_source: dict[str, int] = field(default_factory=dict)  # accepted drafts by source key

    def add(self, event: StepEvent) -> None:
        self.stats.add_step(event)
        if is_verification_step(event):
            self.drafted += max(event.tree_size - 1, 0)
            count_sources(event, self.by_source)

    @property
    def tokens(self) -> int:
        return self.stats.tokens

    @property
    def accepted(self) -> int:
        return sum(self.by_source.values())

    def plus(self, other: Tally) -> Tally:
        keys = {**self.by_source, **other.by_source}
        return Tally(self.stats.plus(other.stats), self.drafted + other.drafted,
                     {k: self.by_source.get(k, 0) + other.by_source.get(k, 0) for k in keys})

    def accepted_by_source(self, method: str) -> dict[str, int]:
        """Every source the method declares (0 where none was accepted), then any other seen."""
        spec = registry.method(method)
        declared = {s.key: 0 for s in spec.sources} if spec is not None else {}
        return {**declared, **self.by_source}

    def to_json(self, method: str) -> dict[str, Any]:
        mat = self.stats.mat
        speed = self.stats.tokens_per_s
        return {
            "method": method,
            "steps": self.stats.steps,
            "drafted_tokens": self.drafted,
            "accepted_tokens": self.accepted,
            "accepted_by_source": self.accepted_by_source(method),
            "mean_accepted_tokens": None if mat is None else round(mat, 4),
            "accept_lengths": list(self.stats.accept_lengths),
            "decode_seconds": round(self.stats.seconds, 6),
            "tokens_per_second": None if speed is None else round(speed, 3),
        }


def pieces_json(pieces: list[TokenPiece]) -> list[dict[str, Any]]:
    """The per-token extension: each token's text and source, in order."""
    return [{"id": p.token_id, "text": p.text, "source": SOURCE_NAMES[p.source]} for p in pieces]


class StopText:
    """Holds back text that may begin a stop sequence; cuts the reply at the first one.

    Tokens go in whole; what comes out is the same tokens up to the stop, the
    one it falls in cut short."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self.pending: list[TokenPiece] = []
        self.hit = False

    def push(self, pieces: tuple[TokenPiece, ...] | list[TokenPiece]) -> list[TokenPiece]:
        """The pieces that are safe to send now (none after a stop)."""
        if self.hit:
            return []
        if not self.stops:
            return list(pieces)
        self.pending.extend(pieces)
        text = "".join(p.text for p in self.pending)
        found = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if found:
            self.hit = True
            out, self.pending = _cut(self.pending, min(found)), []
            return out
        safe = len(text) - max((_overlap(text, s) for s in self.stops), default=0)
        out = []
        end = 0
        while self.pending and end + len(self.pending[0].text) <= safe:
            end += len(self.pending[0].text)
            out.append(self.pending.pop(0))
        return out

    def flush(self) -> list[TokenPiece]:
        """What was held back, once the reply ended without a stop."""
        out, self.pending = self.pending, []
        return out


def _overlap(text: str, stop: str) -> int:
    """The length of the longest end of `text` that begins `stop`."""
    for k in range(min(len(stop) - 1, len(text)), 0, -1):
        if text.endswith(stop[:k]):
            return k
    return 0


def _cut(pieces: list[TokenPiece], at: int) -> list[TokenPiece]:
    out, end = [], 0
    for p in pieces:
        if end >= at:
            break
        keep = p.text[: at - end]
        out.append(p if len(keep) == len(p.text) else replace(p, text=keep))
        end += len(p.text)
    return out


def chat_logprobs(pieces: list[TokenPiece]) -> dict[str, Any] | None:
    """OpenAI's chat `logprobs` object for these tokens (None: none were asked for)."""
    if not pieces or pieces[0].logprob is None:
        return None
    return {"content": [_chat_token(p.logprob) for p in pieces if p.logprob is not None], "refusal": None}


def _chat_token(lp: TokenLogprob) -> dict[str, Any]:
    return {**_token(lp.text, lp.logprob), "top_logprobs": [_token(a.text, a.logprob) for a in lp.top]}


def _token(text: str, logprob: float) -> dict[str, Any]:
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8", "surrogatepass"))}


def completion_logprobs(pieces: list[TokenPiece], offset: int) -> dict[str, Any] | None:
    """The completions API's `logprobs` object; `offset`: where these tokens' text begins in the reply."""
    if not pieces or pieces[0].logprob is None:
        return None
    out: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for p in pieces:
        assert p.logprob is not None
        out["tokens"].append(p.logprob.text)
        out["token_logprobs"].append(p.logprob.logprob)
        out["top_logprobs"].append({a.text: a.logprob for a in p.logprob.top})
        out["text_offset"].append(offset)
        offset += len(p.text)
    return out
