"""Whether drafting pays at all, judged on what it actually brought
(docs/design.md 1.8, "Never drafting at a loss").

The tree policy picks each step's tree from estimated acceptance; those
estimates can stay optimistic for a while (a prior, paths whose nodes are not
independent, text unlike what was learned), and on a CPU where a second
token costs most of a first, a tree that accepts a little less than expected
loses to plain decoding. The gate keeps score in the currency of the cost
curve: every tree the policy chose (the root alone is plain decoding and is
not scored), once the text after it is known, gained
1 + the drafts verification would accept (for greedy decoding exactly what it
did accept), at t(fed) seconds. While the last `window` choices make fewer
tokens per second of curve than plain decoding's 1 / t(1), drafting is
paused: a step verifies the root alone (plain decoding through the same code).
The policy still drafts and chooses during a pause, unverified, so the score
keeps moving: drafting resumes when those choices would pay again, and at
once for a step whose root the automaton matched with a long context (the text
turned repetitive, where trees win most). No clock is read: the score is the
curve's, so tests script both the curve and the acceptance.

Under continuous batching (racer_core/engine/loop.py) a tree shares its
pass with `others` sequences' `base` rows: it gained others + its own tokens
in t(base + fed), where plain decoding of the same pass makes others + 1 in
t(base + 1). Each tree is scored against plain decoding at its own load, so
a tree that pays alone but not on the steeper part of the curve a full batch
sits on pauses drafting there. The score of a tree is its value
(tree_value.py, the same the policy chooses by): under load the pass also
waits for the tree's drafting time.

The gate is also where drafting stops altogether under load: once the last
ROOT_STREAK choices under load all kept the root alone (no tree paid at the
loads met), or while the score pauses drafting, only every PROBE_EVERY-th
step drafts, as a probe (`probes`); a probe whose choice keeps a tree ends the
run, and probes' scores end a paused score.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from racer_core.budget.cost_curve import CostCurve
from racer_core.budget.tree_value import tree_value

WINDOW = 16
"""Chosen trees weighed (the latest ones)."""
MIN_EVIDENCE = 8
"""Labelled trees needed before the gate may pause drafting."""
RESUME_CONTEXT = 6
"""Automaton context (tokens matched) that makes a paused step draft anyway."""
ROOT_STREAK = 8
"""Choices under load in a row that kept the root alone, after which drafting is skipped..."""
PROBE_EVERY = 8
"""...but for every PROBE_EVERY-th step (`DraftGate.probes`)."""


@dataclass
class DraftGate:
    curve: CostCurve
    window: int = WINDOW
    min_evidence: int = MIN_EVIDENCE
    resume_context: int = RESUME_CONTEXT
    paused: bool = False
    _seen: deque = field(init=False)

    def __post_init__(self) -> None:
        self._seen = deque(maxlen=self.window)
        self._kept_root = 0  # choices under load in a row that kept the root alone
        self._t: dict[int, float] = {}  # the curve read per size: observe() reads two a step
        self._skipped = 0  # probes' answers during such runs (every PROBE_EVERY-th drafts)

    @property
    def plain_rate(self) -> float:
        """Tokens per second of plain decoding by the curve, at the loads the
        latest trees met (alone: 1 / t(1))."""
        if not self._seen:
            return 1.0 / self.curve(1)
        return sum(p for _, _, p in self._seen) / sum(s for _, s, _ in self._seen)

    def rate(self) -> float | None:
        """Tokens per second of curve the latest chosen trees made (None before any)."""
        if not self._seen:
            return None
        return sum(g for g, _, _ in self._seen) / sum(s for _, s, _ in self._seen)

    def observe(self, fed: int, gained: int, others: int = 0, base: int = 0, drafting_s: float = 0.0) -> None:
        """One chosen tree, labelled: `fed` rows beside `others` sequences'
        `base` rows would cost t(base + fed), plus under load its drafting
        time `drafting_s`, and gained `gained` tokens (1 + the drafts its
        verification accepts) besides the others' one each: its value
        (tree_value). Plain decoding would have made (others + 1) / t(base + 1) a second."""
        load = (others, base)
        tokens = others + gained
        seconds = tokens / tree_value(self._seconds(base + fed), gained, load, drafting_s)  # the pass's, drafting included
        plain = seconds * tree_value(self._seconds(base + 1), 1.0, load)  # plain decoding's tokens in those seconds
        self._seen.append((tokens, seconds, plain))
        if len(self._seen) >= self.min_evidence:
            self.paused = sum(g for g, _, _ in self._seen) < sum(p for _, _, p in self._seen)

    def _seconds(self, rows: int) -> float:
        """t(rows) by the gate's curve (which a new curve replaces with a new gate, TreePolicy.use_curve)."""
        seconds = self._t.get(rows)
        if seconds is None:
            if len(self._t) > 4096:
                self._t.clear()
            seconds = self._t[rows] = self.curve(rows)
        return seconds

    def chose(self, drafted: bool) -> None:
        """One choice under load: `drafted` if it kept a tree (which ends a run of kept roots)."""
        self._kept_root = 0 if drafted else self._kept_root + 1

    def probes(self) -> bool:
        """Under load, whether this step may draft: always, but while trees do
        not pay -- ROOT_STREAK kept roots in a row, or the score paused --
        only every PROBE_EVERY-th step (a probe: its choice and its score are
        what can resume drafting). Under load a pause's drafting would keep
        the whole pass waiting for trees that are not verified; alone every
        paused step still drafts, unverified, to keep the score moving."""
        if self._kept_root < ROOT_STREAK and not self.paused:
            return True
        self._skipped += 1
        return self._skipped % PROBE_EVERY == 0

    def allows(self, context: int) -> tuple[bool, str]:
        """(draft this step, the decision in words for the step inspector);
        `context` is the longest automaton context among the root's drafts."""
        if not self.paused:
            return True, ""
        rate = self.rate() or 0.0
        score = (f"the last {len(self._seen)} trees chosen made {rate:.1f} tokens/s by the cost curve, "
                 f"plain decoding {self.plain_rate:.1f}")
        if context >= self.resume_context:
            return True, f"drafting resumed for this step: the automaton matched {context} tokens ({score})"
        return False, f"drafting paused, the root verified alone: {score}"
