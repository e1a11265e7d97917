"""What one decoding step verified, for the step inspector.

Pure Python on purpose (like events.py): the Textual app reads these records
without importing torch or numpy. The decoder fills one per step from arrays
it already holds, so recording costs a few list conversions; the token texts
are looked up only when someone opens the inspector.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

from racer_core.common import registry

_SOURCES = {spec.id: spec for spec in registry.sources()}


def _tuple(values: Any) -> tuple:
    """tolist() turns numpy scalars into Python numbers in one C call."""
    return tuple(values.tolist() if hasattr(values, "tolist") else values)


@dataclass(frozen=True)
class DraftNode:
    """One verified node of a step's draft tree; node 0 is the root."""

    token_id: int
    parent: int  # index of the parent node, -1 for the root
    depth: int  # 0 for the root
    source_id: int  # the Source that proposed it (racer_core.common.events.Source; 0 for the root)
    context: int  # the automaton's retrieval context that added it (0 if none)
    rank: int  # the logits table's rank that reached it (0 = best; -1 if none)
    estimate: float | None  # the policy's P(path accepted), None without a policy

    @property
    def from_retrieval(self) -> bool:
        return self.source_id == registry.AUTOMATON.id

    @property
    def from_logits(self) -> bool:
        return self.rank >= 0

    @property
    def source(self) -> str:
        """A short label: where the draft came from, as its method declared (registry.py)."""
        if self.parent < 0:
            return "root"
        spec = _SOURCES.get(self.source_id, registry.BONUS)
        if spec == registry.LOGITS:
            return f"logits rank {self.rank}"
        if spec == registry.AUTOMATON:  # racer's nodes: also reached by the logits table, when ranked
            return f"automaton ctx {self.context}" + (f" + logits rank {self.rank}" if self.rank >= 0 else "")
        return spec.label


@dataclass(frozen=True)
class BudgetOption:
    """One tree size the policy weighed: its value is expected tokens per second."""

    nodes: int  # tree nodes verified, root included
    fed: int  # rows fed to the model (padded up to a cheaper size)
    expected_tokens: float  # expected accepted drafts + the bonus token
    seconds: float  # the cost curve's time to verify `fed` rows

    @property
    def tokens_per_s(self) -> float:
        return self.expected_tokens / self.seconds if self.seconds > 0 else 0.0


class BudgetOptions(Sequence[BudgetOption]):
    """The sizes a tree policy weighed, as four columns; each BudgetOption is
    built when first read (the step inspector, a test), not on every step: a
    step weighs some 30 sizes and nobody looks at most steps' (issue 44).
    Reads like the tuple of them it stands for, equal to it included. The
    columns may be lists or arrays (the native choice's): an array becomes
    its list (`tolist`, the same Python numbers) when first read, so a step
    nobody inspects allocates no number of its own."""

    __slots__ = ("_given", "_lists", "_options")

    def __init__(self, nodes: Sequence[int], fed: Sequence[int], expected_tokens: Sequence[float],
                 seconds: Sequence[float]) -> None:
        self._given = (nodes, fed, expected_tokens, seconds)
        self._lists: tuple[list, ...] | None = None
        self._options: tuple[BudgetOption, ...] | None = None

    @property
    def _columns(self) -> tuple[list, ...]:
        if self._lists is None:
            self._lists = tuple(c.tolist() if hasattr(c, "tolist") else c for c in self._given)
        return self._lists

    def _built(self) -> tuple[BudgetOption, ...]:
        if self._options is None:
            self._options = tuple(BudgetOption(*option) for option in zip(*self._columns, strict=True))
        return self._options

    def __len__(self) -> int:
        return len(self._given[0])

    @overload
    def __getitem__(self, index: int) -> BudgetOption: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[BudgetOption, ...]: ...
    def __getitem__(self, index: int | slice) -> BudgetOption | tuple[BudgetOption, ...]:
        return self._built()[index]

    def __iter__(self) -> Iterator[BudgetOption]:
        return iter(self._built())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BudgetOptions):
            return self._columns == other._columns
        return isinstance(other, tuple) and self._built() == other

    def __hash__(self) -> int:
        return hash(self._built())

    def __repr__(self) -> str:
        return repr(self._built())


@dataclass(frozen=True)
class StepRecord:
    """One step's verified tree, what the model accepted, and why this size."""

    tokens: tuple[int, ...]
    parents: tuple[int, ...]
    depths: tuple[int, ...]
    sources: tuple[int, ...]  # the Source id per node, 0 for the root
    context: tuple[int, ...]
    rank: tuple[int, ...]
    estimates: tuple[float, ...] | None  # the policy's P(path accepted) per node
    accepted: tuple[int, ...]  # node indices of the accepted path, root first
    bonus: int  # the token the model chose after the last accepted node
    fed: int  # rows fed to the model (the budget in force)
    drafted: int  # nodes in the whole drafted tree the budget was cut from
    budget_rule: str  # "auto" (the tree policy), "fixed", "plain", "head" (eagle3's tree) or "own" (a peer sized it)
    options: Sequence[BudgetOption] = ()  # the sizes "auto" weighed, smallest first (a tuple or BudgetOptions)
    chosen_option: int = -1  # index into options
    gate: str = ""  # the draft gate's decision (draft_gate.py), "" while drafting pays
    paused: bool = False  # the gate paused drafting: the root was verified alone

    @classmethod
    def build(
        cls,
        tokens: Any,
        parents: Any,
        depths: Any,
        sources: Any,
        context: Any,
        rank: Any,
        accepted: Sequence[int],
        bonus: int,
        fed: int,
        drafted: int,
        budget_rule: str,
        estimates: Any = None,
        options: Sequence[BudgetOption] = (),
        chosen_option: int = -1,
        gate: str = "",
        paused: bool = False,
    ) -> StepRecord:
        """From numpy arrays or sequences (one entry per verified node)."""
        return cls(
            _tuple(tokens), _tuple(parents), _tuple(depths), _tuple(sources), _tuple(context), _tuple(rank),
            None if estimates is None else _tuple(estimates), tuple(accepted), int(bonus), int(fed), int(drafted),
            budget_rule, options, chosen_option, gate, paused,
        )

    @classmethod
    def of_tree(cls, tree: Any, path: Sequence[int], bonus: int) -> StepRecord:
        """The step inspector's copy of a verified Tree (racer_core/drafting/tree.py): small lists, no arrays."""
        selection = tree.selection
        return cls.build(
            tree.tokens, tree.parents, tree.depths, tree.sources, tree.context, tree.rank,
            path, bonus, tree.rows, tree.drafted or tree.size, tree.rule,
            tree.path_estimates(),
            () if selection is None else selection.options,
            -1 if selection is None else selection.best,
            "" if selection is None else selection.gate,
            selection is not None and selection.intended is not None,
        )

    @property
    def size(self) -> int:
        return len(self.tokens)

    @property
    def nodes(self) -> tuple[DraftNode, ...]:
        return tuple(
            DraftNode(
                self.tokens[i], self.parents[i], self.depths[i], self.sources[i], self.context[i], self.rank[i],
                None if self.estimates is None else self.estimates[i],
            )
            for i in range(self.size)
        )

    @property
    def accepted_tokens(self) -> tuple[int, ...]:
        """The accepted drafts (root excluded) then the bonus token."""
        return (*(self.tokens[i] for i in self.accepted[1:]), self.bonus)

    def children(self, node: int) -> list[int]:
        return [i for i in range(1, self.size) if self.parents[i] == node]

    @property
    def why(self) -> str:
        """The budget decision in one sentence."""
        if self.budget_rule == "plain":
            return "plain decoding: the root alone, nothing drafted"
        if self.budget_rule == "head":
            return f"EAGLE-3's dynamic tree: the {self.size} likeliest nodes by the draft head (total_token)"
        if self.budget_rule == "own":
            return f"the method drafted and sized this tree itself: {self.size} nodes (no tree policy)"
        if self.budget_rule == "fixed":
            return f"a fixed budget of {self.fed} nodes (max_num_draft); {self.drafted} were drafted"
        if self.paused:
            return self.gate
        if self.drafted <= 1:
            return "nothing was drafted for this root: it was verified alone"
        if not 0 <= self.chosen_option < len(self.options):
            return f"the tree policy chose {self.size} of {self.drafted} drafted nodes"
        best = self.options[self.chosen_option]
        others = [o for i, o in enumerate(self.options) if i != self.chosen_option]
        text = (
            f"the tree policy verified the {best.nodes} most likely of {self.drafted} drafted nodes: "
            f"{best.expected_tokens:.2f} expected tokens in {best.seconds * 1e3:.2f} ms"
        )
        if others:
            runner = max(others, key=lambda o: o.tokens_per_s)
            what = "the root alone" if runner.nodes == 1 else f"{runner.nodes} nodes"
            text += f", better than {what} ({runner.expected_tokens:.2f} in {runner.seconds * 1e3:.2f} ms)"
        return f"{text}; {self.gate}" if self.gate else text
