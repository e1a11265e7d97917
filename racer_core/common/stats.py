"""Speed statistics: one running tally for a reply, a method or a category.

The chat status sums one reply's step events; the benchmark (headless
progress, dashboard, tables, `racer-tui speed`) sums finished answers per
method and per category. Both are a Stats. Pure Python: no torch, no Textual.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from racer_core.common import registry
from racer_core.common.events import Source, source_spec

if TYPE_CHECKING:
    from racer_core.common.events import StepEvent

UNSTEPPED_METHODS = frozenset(s.name for s in registry.METHOD_SPECS if not s.stepped)
"""Methods whose engine events carry many steps at once (the anchors): MAT means nothing there."""


@dataclass
class Stats:
    """Running sums. A step is a tree verification pass of the target model
    that emitted tokens; MAT (mean accepted tokens) is accepted tokens per step.
    The prefill, which yields one token from the prompt alone, is timed but is
    not a step, as the original RACER counts it (and the bench's answer files)."""

    replies: int = 0  # finished replies (or answers) summed in
    tokens: int = 0
    seconds: float = 0.0
    steps: int = 0
    accepted: int = 0  # tokens emitted by the counted steps
    accept_lengths: list[int] = field(default_factory=list)  # per step, in order
    speeds: list[float] = field(default_factory=list)  # tokens/s of each finished reply
    stepped: bool = True  # False once an anchor's reply is summed in: no MAT then
    against_curve: CurveSpeed = field(default_factory=lambda: CurveSpeed())  # the steps the cost curve priced (defined below)
    grammar: int = 0  # of `accepted`, the tokens a reply's grammar forced (registry.GRAMMAR): counted apart in MAT

    def add_step(self, event: StepEvent) -> None:
        """One StepEvent of a reply in progress; its own timings are the time."""
        self.tokens += event.accept_length
        seconds = event.draft_s + event.verify_s + event.update_s
        self.seconds += seconds
        if is_verification_step(event):
            self._steps([event.accept_length])
            self.grammar += sum(1 for p in event.pieces if p.source == registry.GRAMMAR.id)
            if event.curve_s is not None:
                self.against_curve.add(event.accept_length, seconds, event.curve_s)

    def add_reply(
        self, tokens: int, seconds: float, accept_lengths: list[int] | tuple[int, ...], method: str, grammar: int = 0
    ) -> None:
        """One finished reply (an answer record's totals; `grammar` of its accepted tokens were forced)."""
        self.replies += 1
        self.grammar += grammar
        self.tokens += tokens
        self.seconds += seconds
        if seconds > 0:
            self.speeds.append(tokens / seconds)
        self.stepped = self.stepped and method not in UNSTEPPED_METHODS
        self._steps(accept_lengths)

    def _steps(self, lengths: list[int] | tuple[int, ...]) -> None:
        self.steps += len(lengths)
        self.accepted += sum(lengths)
        self.accept_lengths.extend(lengths)

    def plus(self, other: Stats) -> Stats:
        """Both tallies together (finished answers plus the one in flight)."""
        return Stats(
            self.replies + other.replies,
            self.tokens + other.tokens,
            self.seconds + other.seconds,
            self.steps + other.steps,
            self.accepted + other.accepted,
            self.accept_lengths + other.accept_lengths,
            self.speeds + other.speeds,
            self.stepped and other.stepped,
            self.against_curve.plus(other.against_curve),
            self.grammar + other.grammar,
        )

    @property
    def tokens_per_s(self) -> float | None:
        return self.tokens / self.seconds if self.seconds > 0 and self.tokens else None

    @property
    def ms_per_token(self) -> float | None:
        return 1000.0 * self.seconds / self.tokens if self.tokens else None

    @property
    def mat(self) -> float | None:
        return self.accepted / self.steps if self.stepped and self.steps else None

    @property
    def mat_grammar(self) -> float | None:
        """The part of MAT the grammar forced: its tokens per step."""
        return self.grammar / self.steps if self.mat is not None else None

    @property
    def mat_without_grammar(self) -> float | None:
        """MAT without the grammar's forced tokens: what the model and the other sources gave per step."""
        return (self.accepted - self.grammar) / self.steps if self.mat is not None else None

    def length_counts(self) -> Counter[int]:
        """Accepted length -> how many steps accepted that many tokens."""
        return Counter(self.accept_lengths)

    def speedup_over(self, base: Stats) -> float | None:
        mine, theirs = self.tokens_per_s, base.tokens_per_s
        return mine / theirs if mine is not None and theirs is not None else None


@dataclass
class CurveSpeed:
    """Steps' tokens/s as measured and as the cost curve expected them: far
    below it, the machine is busy with other work (`busy_notice`)."""

    steps: int = 0
    tokens: int = 0
    seconds: float = 0.0  # the steps' own timings
    curve_s: float = 0.0  # what the cost curve said they cost

    def add(self, tokens: int, seconds: float, curve_s: float) -> None:
        self.steps += 1
        self.tokens += tokens
        self.seconds += seconds
        self.curve_s += curve_s

    def plus(self, other: CurveSpeed) -> CurveSpeed:
        return CurveSpeed(self.steps + other.steps, self.tokens + other.tokens, self.seconds + other.seconds,
                          self.curve_s + other.curve_s)


BUSY_BELOW = 0.5
"""The share of the curve's speed under which the chat says the machine is busy
(drafting and the updates, which the curve leaves out, stay well above it on a quiet machine)."""
BUSY_AFTER_STEPS = 8
"""...once the reply has taken this many steps the curve priced (a first step may be slow for other reasons)."""


def busy_notice(stats: Stats | None) -> str | None:
    """One short line when the measured speed is far below the cost curve's, else None."""
    c = stats.against_curve if stats is not None else CurveSpeed()
    if c.steps < BUSY_AFTER_STEPS or c.seconds <= 0 or c.curve_s <= 0:
        return None
    measured, expected = c.tokens / c.seconds, c.tokens / c.curve_s
    if measured >= BUSY_BELOW * expected:
        return None
    return f"the machine is busy: {measured:.1f} tok/s against {expected:.0f} expected"


def is_verification_step(event: Any) -> bool:
    """Whether a reply's StepEvent counts as a step: not the prefill (step 1),
    and not a closing event that carries no tokens."""
    return bool(event.pieces) and event.step > 1


def count_sources(event: Any, counts: dict[str, int]) -> None:
    """Add a step's accepted drafts to `counts` by their source's API key (the model's own bonus is none)."""
    for piece in event.pieces:
        if piece.source != Source.MODEL:
            key = source_spec(piece.source).key
            counts[key] = counts.get(key, 0) + 1


@dataclass(frozen=True)
class Versus:
    """A method's answers against the baseline's, on the questions both answered."""

    speedup: float | None = None  # tokens/s over the baseline's
    identical: bool | None = None  # None: not compared (the baseline itself, sampling)
    identical_questions: int | None = None
    compared_questions: int | None = None
    near_tie_questions: int | None = None  # differing from the first differing token on, at a near-tie
    other_questions: int | None = None  # differing otherwise: a bug, not rounding
    low: float | None = None  # the smallest and largest speedup of one question (the spread)
    high: float | None = None

    @property
    def spread_text(self) -> str:
        """For tables: the per-question speedups' range, or a dash."""
        return "–" if self.low is None or self.high is None else f"{self.low:.2f}-{self.high:.2f}x"

    @property
    def same_text(self) -> str:
        """For tables: yes, or no (agreeing/compared, near-ties, OTHER divergences), or a dash."""
        if self.identical is None:
            return "–"
        if self.identical:
            return "yes"
        text = f"no ({self.identical_questions}/{self.compared_questions}"
        if self.near_tie_questions is None:
            return text + ")"
        return text + f"; near-tie {self.near_tie_questions}, other {self.other_questions})"


@dataclass(frozen=True)
class Row:
    """One results-table row: a method's tally and its comparison with the baseline."""

    stats: Stats
    versus: Versus

    def to_json(self) -> dict[str, Any]:
        s, v = self.stats, self.versus
        return {
            "questions": s.replies,
            "tokens": s.tokens,
            "seconds": round(s.seconds, 6),
            "tokens_per_s": _round(s.tokens_per_s),
            "mat": _round(s.mat),
            "mat_grammar": _round(s.mat_grammar),
            "mat_without_grammar": _round(s.mat_without_grammar),
            "speedup_vs_ar": _round(v.speedup),
            "identical_to_ar": v.identical,
            "identical_questions": v.identical_questions,
            "compared_questions": v.compared_questions,
            "near_tie_questions": v.near_tie_questions,
            "other_divergence_questions": v.other_questions,
            "speedup_min": _round(v.low),
            "speedup_max": _round(v.high),
        }


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)
