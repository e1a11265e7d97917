"""Which draft nodes to verify this step, and so how many (docs/design.md 1.8).

A node is accepted only if its whole path is, so the expected number of
accepted drafts of a tree is the sum over its nodes of P(path accepted). Each
node's chance given its parent is estimated online from what verification
showed for nodes of the same kind: retrieval context, logits rank, depth --
in coarse buckets, refined per exact kind, and the product along the path
read through its own calibration (node_estimates.py). The step then
verifies the most likely nodes, as many as maximise the tree's value
(tree_value.py: tokens per second of the cost curve t, at the step's load). A step
whose drafts look hopeless verifies the root alone and costs what plain
decoding costs; a long retrieval match buys a big tree. Where the trees
chosen lately made fewer tokens per second of curve than plain decoding, the
draft gate (draft_gate.py) pauses drafting: steps verify the root alone until
the choices would pay again or the automaton matches a long context.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from racer_core.budget import _tree_choice
from racer_core.budget.cost_curve import CostCurve
from racer_core.budget.draft_gate import DraftGate
from racer_core.budget.node_estimates import CTX_KINDS, DEPTH_KINDS, KindCounts, PathCalibration, kinds
from racer_core.budget.tree_value import tree_value
from racer_core.common.frozen import built
from racer_core.common.step_record import BudgetOption, BudgetOptions

_CTX_EDGES = np.array([2, 3, 4, 6, 9])  # retrieval context -> 0 (none) .. 5
_RANK_EDGES = np.array([0, 1, 2, 4])  # logits rank -1 (none), 0, 1, 2-3, 4+ -> 0 .. 4
_DEPTH_EDGES = np.array([2, 3])  # depth 1, 2, 3+ -> 0 .. 2
_SHAPE = (6, 5, 3)
_RANK_CAP = 5  # rank + 1 capped: none, 0, 1, 2, 3, 4 and more -- what both the buckets and the kinds tell apart


def _feature_tables() -> tuple[np.ndarray, np.ndarray]:
    """Bucket (flat) and exact kind for every capped (context, rank + 1, depth):
    a context past CTX_KINDS - 1, a rank past 3 and a depth past DEPTH_KINDS
    fall in the same bucket and kind as the cap, so tables over the capped
    values give each node's by one lookup (TreePolicy._features)."""
    context, rank, depth = np.meshgrid(np.arange(CTX_KINDS), np.arange(_RANK_CAP + 1) - 1,
                                       np.arange(DEPTH_KINDS + 1), indexing="ij")
    ctx = np.searchsorted(_CTX_EDGES, context, side="right")
    rnk = np.where(rank < 0, 0, np.searchsorted(_RANK_EDGES, rank, side="right"))
    dep = np.searchsorted(_DEPTH_EDGES, depth, side="right")
    return np.ravel_multi_index((ctx, rnk, dep), _SHAPE), kinds(context, rank, depth)


_BUCKET, _KIND = _feature_tables()


class DraftTree(Protocol):
    """What the policy reads of a draft tree (racer_core/drafting/automaton/draft.py's
    DraftTree is one): declared here so that budget/ sits below drafting/."""

    position_ids: np.ndarray  # each node's depth
    parents: np.ndarray  # -1 for the root
    context: np.ndarray  # the retrieval context that added the node, 0 for none
    rank: np.ndarray  # the logits-row rank that reached the node, -1 for none


class WholeTree(DraftTree, Protocol):
    """A drafted tree with the columns a cut takes (drafting/tree.py's Tree; choose_cut)."""

    tokens: np.ndarray
    depths: np.ndarray  # position_ids, as a field
    ancestors: np.ndarray  # bool n x n
    sources: np.ndarray  # uint8
    share: np.ndarray | None


CALIBRATION_WEIGHT = 5.0
"""Pseudo-trials per path-chance bin, in units of `prior_weight`: a bin is
shared by many kinds of node, so it waits for more evidence than a bucket."""


def _prior() -> np.ndarray:
    """Mild starting beliefs: deeper retrieval context and better logits rank
    accept more; what verification shows soon outweighs them."""
    ctx_p = np.array([0.0, 0.25, 0.35, 0.45, 0.55, 0.6])
    rank_p = np.array([0.0, 0.3, 0.12, 0.06, 0.03])
    p = np.maximum(ctx_p[:, None, None], rank_p[None, :, None]) * np.ones(_SHAPE)
    return np.clip(p, 0.01, 0.9)


@dataclass
class EfficientSizes:
    """Tree sizes worth verifying: those no larger size beats on cost.

    On a CPU, verifying 2 or 3 tokens can cost more than 4 (the matrix
    kernels change); such sizes are padded up to the cheaper one."""

    sizes: np.ndarray
    seconds: np.ndarray

    def __post_init__(self) -> None:
        # the choice reads them every step, as Python numbers (TreePolicy.choose)
        self.size_list: list[int] = self.sizes.tolist()
        self.seconds_list: list[float] = self.seconds.tolist()
        # the sizes past the root's, as `worth_drafting` reads them on every step under load
        self.drafts: np.ndarray = (self.sizes[1:] - 1).astype(np.float64)
        self.tree_seconds: np.ndarray = np.asarray(self.seconds[1:], dtype=np.float64)

    @classmethod
    def from_curve(cls, curve: CostCurve, largest: int, base: int = 0) -> EfficientSizes:
        """The sizes 1..`largest` of a tree beside `base` rows of other
        sequences, priced t(base + size)."""
        grid = np.arange(1, largest + 1)
        cost = curve.at(grid + base)
        envelope = np.minimum.accumulate(cost[::-1])[::-1]  # cheapest size >= s
        keep = np.concatenate([envelope[:-1] < envelope[1:], [True]])
        return cls(grid[keep], envelope[keep])

    def padded(self, size: int) -> int:
        """The size to feed for a tree of `size` nodes."""
        return self.size_list[bisect_left(self.size_list, size)] if size <= self.size_list[-1] else size


@dataclass(frozen=True)
class Selection:
    chosen: np.ndarray  # node indices to verify, root first
    fed: int  # padded input size
    expected: float  # expected accepted drafts
    probabilities: np.ndarray  # P(path accepted) for every node of the drafted tree
    options: BudgetOptions | tuple[BudgetOption, ...]  # the sizes weighed, smallest first
    best: int  # index of the chosen option
    gate: str = ""  # the draft gate's decision in words ("" while drafting pays)
    intended: tuple[np.ndarray, int] | None = None  # the policy's (chosen, fed) when the gate paused it
    load: tuple[int, int] = (0, 0)  # (other sequences, their rows) in the pass it was chosen for


@dataclass
class TreePolicy:
    curve: CostCurve
    largest: int = 64
    decay: float = 0.998
    prior_weight: float = 3.0
    _hits: np.ndarray = field(init=False)
    _trials: np.ndarray = field(init=False)
    sizes: EfficientSizes = field(init=False)
    gate: DraftGate = field(init=False)
    drafting_s: float = 0.0
    """Seconds a drafted step spends in Python beyond a plain one (the
    retrieval, the choice, their learning), as the drafter measures it
    (`note_drafting`). Under load the whole pass waits for it, so
    `worth_drafting`, `choose` and the gate's score count it in a tree's value
    (tree_value.py); alone it is not used."""
    native: bool = True
    """Estimates and choice by the C++ (tree_choice.cpp); False: by the Python
    reference (_reference_estimates, _reference_weigh), which the native one
    equals bit for bit and which answers where the native one cannot read a tree."""

    def __post_init__(self) -> None:
        prior = self._prior()
        self._hits = prior * self.prior_weight
        self._trials = np.full(prior.shape, self.prior_weight)
        self.sizes = EfficientSizes.from_curve(self.curve, self.largest)
        self.gate = DraftGate(self.curve)
        self._kinds = KindCounts(self.prior_weight)
        self._calibration = PathCalibration(CALIBRATION_WEIGHT * self.prior_weight)
        # The engine loop's replies share one policy; a background measurement
        # swaps its curve from another thread (use_curve): the statistics under a lock.
        self._lock = threading.RLock()
        self._recorded: list = []  # record's and learn's list when the caller keeps none
        self._last: tuple | None = None  # the last tree path_probabilities estimated, with its estimates
        self._based: dict[int, EfficientSizes] = {}
        self._tables: _tree_choice.ChoiceTables | None = None  # the native choice's (_choice_tables)
        self._best: float | None = None  # _best_chance's, until the counts change

    def use_curve(self, curve: CostCurve) -> None:
        """Weigh `curve` from now on (a background measurement's); the acceptance learned so far stays."""
        with self._lock:
            self.curve = curve
            self.sizes = EfficientSizes.from_curve(curve, self.largest)
            self.gate = DraftGate(curve)
            self._based.clear()

    def sizes_on(self, base: int) -> EfficientSizes:
        """The efficient sizes of a tree added to `base` rows of other sequences in the same pass."""
        if base == 0:
            return self.sizes
        sizes = self._based.get(base)
        if sizes is None:
            if len(self._based) > 4096:
                self._based = {}
            sizes = self._based[base] = EfficientSizes.from_curve(self.curve, self.largest, base)
        return sizes

    def worth_drafting(self, load: tuple[int, int] = (0, 0)) -> bool:
        """Whether any tree could pay at `load` (the other sequences in the
        step's pass and their rows, racer_core/engine/loop.py), judged before
        drafting one: under continuous batching a row added to a full pass
        costs a good share of what the pass makes per sequence, and drafting a
        tree only for `choose` to keep the root (the retrieval, the choice and
        its learning, in Python, while the others' pass waits) is what made a
        loaded server slower with racer than with ar. Every node's chance is
        at most the best bucket's edge chance `p`, so n - 1 drafts expect at
        most (n - 1) p, and the pass waits `drafting_s` longer for the
        drafting itself: if no size's value (tree_value) pays even so, none
        can. And once the last ROOT_STREAK choices (draft_gate.py) under load all kept the
        root alone, only the gate's probes draft (DraftGate.probes).
        Alone (no others) always True: the tree is drafted and weighed as before."""
        others, base = load
        if others == 0:
            return True
        with self._lock:
            if not self.gate.probes():  # first: most steps of a full batch stop here, reading no counts
                return False
            best = self._best_chance()
        sizes = self.sizes_on(base)
        plain = tree_value(sizes.seconds_list[0], 1.0, load)
        drafted = tree_value(sizes.tree_seconds, 1.0 + sizes.drafts * best, load, self.drafting_s)
        return bool((drafted > plain * 1.0001).any())

    def _best_chance(self) -> float:
        """The likeliest a node can be (under the lock), read again only after
        `learn` changed the counts: an exact kind's chance lies between its
        bucket's and its own rate, and a path's calibrated chance is read at
        its edges' product."""
        if self._best is None:
            seen = self._kinds.trials > 0
            edge = max(float(np.max(self._hits / self._trials)),
                       float(np.max(self._kinds.hits[seen] / self._kinds.trials[seen])) if seen.any() else 0.0)
            self._best = float(PathCalibration.read(np.array([edge]), self._calibration.table())[0])
        return self._best

    def note_drafting(self, seconds: float) -> None:
        """One drafted step's Python seconds beyond a plain step's (a moving
        mean over about the last 20 steps of every reply sharing the policy)."""
        with self._lock:
            self.drafting_s = seconds if self.drafting_s == 0.0 else 0.95 * self.drafting_s + 0.05 * seconds

    def _prior(self) -> np.ndarray:
        """Starting acceptance per bucket, shaped like the buckets' index space."""
        return _prior()

    def _features(self, tree: DraftTree) -> tuple[np.ndarray, np.ndarray]:
        """(each node's bucket, a flat index into the bucket counts; its exact
        kind, node_estimates.kinds), both read from tables over the features' capped values."""
        c = np.minimum(tree.context, CTX_KINDS - 1)
        r = np.minimum(np.maximum(tree.rank + 1, 0), _RANK_CAP)
        d = np.minimum(tree.position_ids, DEPTH_KINDS)
        return _BUCKET[c, r, d], _KIND[c, r, d]

    def path_probabilities(self, tree: DraftTree) -> np.ndarray:
        """Estimated P(node accepted) for every node; 1 for the root."""
        buckets, kind, raw, calibrated = self._estimates(tree)
        # record() learns from the same estimates when it is handed this tree next
        # (replies sharing the policy may choose in between: then it works them out again)
        self._last = (tree, buckets, kind, raw, None)
        return calibrated

    def _estimates(self, tree: DraftTree) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(each node's bucket, its exact kind, the product of its path's edge
        chances, that product read through the path calibration)."""
        if self.native:
            with self._lock:
                found = _tree_choice.estimates(self._choice_tables(), tree.parents, tree.context, tree.rank,
                                               tree.position_ids)
            if found is not None:
                return found
        return self._reference_estimates(tree)

    def _choice_tables(self) -> _tree_choice.ChoiceTables:
        """The native choice's view of the feature tables and the learned
        counts (under the lock): rebuilt only where a count array was replaced."""
        tables, kinds, calibration = self._tables, self._kinds, self._calibration
        if tables is None or not tables.holds(self._hits, self._trials, kinds.hits, kinds.trials, calibration.hits,
                                              calibration.trials):
            tables = self._tables = _tree_choice.ChoiceTables(
                _BUCKET, _KIND, self._hits, self._trials, kinds.hits, kinds.trials, kinds.weight, calibration.hits,
                calibration.trials, PathCalibration.CENTRES)
        return tables

    def _reference_estimates(self, tree: DraftTree) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """_estimates in Python and numpy: what the native one (tree_choice.cpp) computes, bit for bit."""
        buckets, kind = self._features(tree)
        if len(kind) == 1:  # the root alone (nothing drafted: 4 steps in 10): its chance is 1, whatever was learned
            return buckets, kind, np.ones(1), np.ones(1)
        with self._lock:
            edge = self._kinds.chances(kind, np.take(self._hits / self._trials, buckets))
            table = self._calibration.table()
        edge[0] = 1.0
        parents = tree.parents
        # Siblings exclude each other: their chances cannot add up past 1.
        if len(edge) > 1:
            totals = np.bincount(parents[1:], weights=edge[1:], minlength=len(edge))
            scale = np.where(totals > 0.95, 0.95 / np.maximum(totals, 1e-9), 1.0)
            edge[1:] *= scale[parents[1:]]
        # A path's chance is its parent's times its edge; a parent comes before
        # its children, so one pass in node order (Python floats: a few
        # dozen nodes cost less so than a numpy call per depth, and the
        # products are the same IEEE ones).
        up = parents.tolist()
        product = edge.tolist()
        for i in range(1, len(product)):
            product[i] *= product[up[i]]
        raw = np.array(product)
        read = PathCalibration.read(raw, table).tolist()
        if read:
            read[0] = 1.0
        for i in range(1, len(read)):  # a child is never likelier than its parent: the choice takes parents first
            if read[up[i]] < read[i]:
                read[i] = read[up[i]]
        return buckets, kind, raw, np.array(read)

    def select(self, tree: DraftTree, load: tuple[int, int] = (0, 0)) -> tuple[np.ndarray, int, float]:
        """(node indices to verify, breadth-first, root first; padded input
        size; expected accepted drafts)."""
        choice = self.choose(tree, load)
        return choice.chosen, choice.fed, choice.expected

    def choose(self, tree: DraftTree, load: tuple[int, int] = (0, 0)) -> Selection:
        """The selection with what led to it (the step inspector shows it), at
        `load`: the other sequences in the step's pass and their rows."""
        return self.choose_cut(tree, load, cut=False)[0]

    def choose_cut(self, tree: DraftTree, load: tuple[int, int] = (0, 0), cut: bool = True
                   ) -> tuple[Selection, tuple | None]:
        """`choose`, and with `cut` the chosen nodes of `tree` (then a
        WholeTree) as `_tree_choice.cut_nodes` takes them, found in the
        native choice's own call (a step's choice and cut, drafting/tree.py's
        `cut`; issue 44); None where the native choice did not answer or the
        draft gate kept the root alone."""
        others, base = load
        sizes = self.sizes if base == 0 else self.sizes_on(base)
        weighed = taken = None
        # one hold of the lock a step (re-entrant: the reference's estimates take it too)
        with self._lock:
            if self.native and cut:
                whole: WholeTree = tree  # type: ignore[assignment]
                weighed, taken = _tree_choice.choose_cut(
                    self._choice_tables(), whole.parents, whole.context, whole.rank, whole.depths, sizes.sizes,
                    sizes.seconds, others, self.drafting_s, whole.ancestors, whole.tokens, whole.sources, whole.share)
            elif self.native:
                weighed = _tree_choice.choose(self._choice_tables(), tree.parents, tree.context, tree.rank,
                                              tree.position_ids, sizes.sizes, sizes.seconds, others, self.drafting_s)
            if weighed is None:
                probs, chosen, best_n, best, expected, *columns, widest = self._reference_weigh(tree, sizes, load)
                fed = sizes.padded(len(chosen))
            else:
                buckets, kind, raw, probs, chosen, best_n, best, expected, *columns, widest, deepest, fed = weighed
                # record() learns from the same estimates, and the depth, when it is handed this tree next
                # (path_probabilities)
                self._last = (tree, buckets, kind, raw, deepest)
            if others:
                self.gate.chose(best_n > 0)
            draft, why = self.gate.allows(widest)
        options = BudgetOptions(*columns)
        if draft:
            return built(Selection, chosen=chosen, fed=fed, expected=expected, probabilities=probs, options=options,
                         best=best, gate=why, intended=None, load=(others, base)), taken
        # Plain decoding: the root alone, one row; the policy's own choice is
        # kept so the gate can score it once the text is known.
        return Selection(np.zeros(1, dtype=chosen.dtype), 1, 0.0, probs, options, 0, why,
                         (chosen, fed), (others, base)), None

    def _reference_weigh(self, tree: DraftTree, sizes: EfficientSizes, load: tuple[int, int]) -> tuple:
        """choose's estimates (path_probabilities) and weighing in Python and
        numpy, the reference of the native one (tree_choice.cpp): (chances,
        chosen nodes, drafts chosen, the best option's index, expected drafts,
        the options' nodes, fed, expected tokens and seconds, the drafts'
        largest retrieval context)."""
        probs = self.path_probabilities(tree)
        order = np.argsort(-probs[1:], kind="stable") + 1  # parents outrank children
        gains = [0.0, *np.cumsum(probs[order]).tolist()]  # expected drafts with n nodes
        # Each size's value at the load (tree_value): a tree pays only if its
        # drafts outweigh what its rows, and under load its drafting, add to
        # everyone's pass. Alone this is the plain (1 + drafts) / t(size).
        # Python floats: the same IEEE arithmetic as numpy's scalars, a fraction of the time.
        count = len(gains) - 1
        best_n, best_value, best = 0, tree_value(sizes.seconds_list[0], 1.0, load), 0
        # the options (BudgetOptions' columns): the root alone, then each size with drafts
        nodes, fed, expected, seconds = [1], [sizes.size_list[0]], [1.0], [sizes.seconds_list[0]]
        for size, t in zip(sizes.size_list, sizes.seconds_list, strict=True):
            n = min(size - 1, count)
            value = tree_value(t, 1.0 + gains[n], load, self.drafting_s if n else 0.0)
            if n > 0:
                nodes.append(n + 1)
                fed.append(size)
                expected.append(1.0 + gains[n])
                seconds.append(t)
            if value > best_value * 1.0001:
                best_n, best_value, best = n, value, len(nodes) - 1
            if n == count:
                break
        chosen = np.sort(np.concatenate([[0], order[:best_n]]))
        contexts = tree.context[1:]
        widest = int(contexts.max()) if len(contexts) else 0
        return probs, chosen, best_n, best, gains[best_n], nodes, fed, expected, seconds, widest

    def record(self, tree: DraftTree, position: int, selection: Selection | None = None,
               pending: list | None = None) -> None:
        """Keep this step's full tree (before selection) to learn from later,
        and with `selection` the policy's choice, for the draft gate's score;
        in `pending`, the reply's own list (replies sharing the policy label
        their trees apart), or the policy's.

        Greedy output does not depend on the drafts, so once the text after
        `position` (the root's index in the sequence) is known, every node
        can be labelled, verified or not: learning from verified nodes alone
        would never revisit the kinds of node it once judged poor.
        """
        choice = None if selection is None else (*(selection.intended or (selection.chosen, selection.fed)),
                                                 *selection.load, self.drafting_s)
        last = self._last  # one read: another reply's choice may replace it
        if last is not None and last[0] is tree:
            buckets, kind, raw, deepest = last[1:]
        else:
            (buckets, kind, raw), deepest = self._estimates(tree)[:3], None
        recorded = self._recorded if pending is None else pending
        depths = tree.position_ids
        if deepest is None:  # the native choice found it (choose); else numpy
            deepest = int(depths.max())
        # its deepest node: learn() waits for that many tokens after the root, checking each step
        recorded.append((position, tree.tokens, tree.parents, depths, deepest, buckets, kind, raw, choice))

    def learn(self, sequence: list[int], final: bool = False, pending: list | None = None) -> None:
        """Label the trees recorded in `pending` (record's) whose continuation `sequence` now holds."""
        recorded = self._recorded if pending is None else pending
        keep = []
        for item in recorded:
            position, tokens, parents, depths, deepest, buckets, kind, raw, choice = item
            known = len(sequence) - 1 - position  # tokens known after the root
            if known < deepest and not final:
                keep.append(item)
                continue
            if deepest == 0:  # the root alone: no node to label, no tree for the gate to score
                continue
            with self._lock:
                self._best = None  # the counts change below
                gained = -1
                if self.native:
                    kinds, calibration = self._kinds, self._calibration
                    gained = _tree_choice.label(
                        tokens, parents, depths, buckets, kind, raw, sequence, position + 1, min(deepest, known),
                        known, self.decay, self._hits, self._trials, kinds.hits, kinds.trials, calibration.hits,
                        calibration.trials, None if choice is None else choice[0])
                if gained < 0:
                    on_path = self._reference_label(tokens, parents, depths, buckets, kind, raw,
                                                    sequence[position + 1 : position + 1 + min(deepest, known)], known)
                    gained = 0 if choice is None else int(on_path[choice[0]].sum())
                if choice is not None and len(choice[0]) > 1:  # the root alone is plain decoding: nothing to score
                    chosen, fed, others, base, drafting_s = choice
                    # the root (1) + the drafts it would accept, beside the pass's others
                    self.gate.observe(fed, gained, others, base, drafting_s)
        recorded[:] = keep

    def _reference_label(self, tokens: np.ndarray, parents: np.ndarray, depths: np.ndarray, buckets: np.ndarray,
                         kind: np.ndarray, raw: np.ndarray, text: list[int], known: int) -> np.ndarray:
        """One recorded tree labelled by `text`, the tokens after its root
        (`known` of them are decided), in Python and numpy (under the lock):
        the counts learn; what the native `_tree_choice.label` does, bit for
        bit. Returns which nodes the text follows."""
        on_path = np.zeros(len(tokens), dtype=bool)
        on_path[text_path(tokens.tolist(), parents.tolist(), text)] = True
        tested = on_path[np.maximum(parents, 0)] & (depths <= known)
        tested[0] = False
        if tested.any():
            self._hits *= self.decay
            self._trials *= self.decay
            # flat views of the counts (C-contiguous, scaled in place)
            np.add.at(self._trials.reshape(-1), buckets[tested], 1.0)
            passed = tested & on_path
            np.add.at(self._hits.reshape(-1), buckets[passed], 1.0)
            self._kinds.observe(kind[tested], on_path[tested], self.decay)
        labelled = depths <= known  # every node whose path the text decides
        labelled[0] = False
        if labelled.any():
            self._calibration.observe(raw[labelled], on_path[labelled], self.decay)
        return on_path


def text_path(tokens: list[int], parents: list[int], text: list[int]) -> list[int]:
    """The nodes `text` (the tokens after the root) follows from the root, root
    first: at each depth the first child holding the text's token. A parent
    comes before its children, so one forward pass finds them."""
    path, node, i = [0], 0, 1
    for token in text:
        while i < len(tokens) and (parents[i] != node or tokens[i] != token):
            i += 1
        if i == len(tokens):
            break
        node = i
        path.append(node)
        i += 1
    return path
