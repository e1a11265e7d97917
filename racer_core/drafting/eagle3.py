"""EAGLE-3's dynamic draft tree, from a draft head (models/eagle3_head.py).

Per conversation, `HeadDrafter` keeps the target's auxiliary hidden states
of every cached position (three layers concatenated, captured by the
verification forward) and the head's keys and values. Head row p reads the
target's states at position p and the token at p + 1, so the row of the last
cached position waits for the root (the token the target chose last).

Drafting follows the EAGLE authors' `topK_genrate`: the head's last row gives
the root's top-k children; then `depth` times the k best nodes so far by
cumulative log-probability are fed (with the head's own output as their
hidden state), each giving its top-k children; of all candidates the
`total_token - 1` best by cumulative log-probability form the tree under the
root. The tree's head rows are temporary: only rows of verified positions
join the head's cache, fed at the next draft.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from racer_core.common import registry
from racer_core.common.config import GenerationConfig
from racer_core.drafting.protocol import Drafter, DrafterSetup
from racer_core.drafting.tree import Tree
from racer_core.models.eagle3_head import Eagle3Head


class _Rows:
    """A (n, width) tensor that grows by doubling and truncates in place."""

    def __init__(self) -> None:
        self._data: torch.Tensor | None = None
        self.length = 0

    def append(self, rows: torch.Tensor) -> None:
        needed = self.length + rows.shape[0]
        if self._data is None or needed > self._data.shape[0]:
            grown = rows.new_empty((max(needed, 2 * (0 if self._data is None else self._data.shape[0]), 64),
                                    *rows.shape[1:]))
            if self._data is not None:
                grown[: self.length] = self._data[: self.length]
            self._data = grown
        self._data[self.length : needed] = rows
        self.length = needed

    def view(self, start: int = 0, end: int | None = None) -> torch.Tensor:
        assert self._data is not None
        return self._data[start : self.length if end is None else end]

    def truncate(self, length: int) -> None:
        self.length = min(self.length, length)


class HeadDrafter:
    """One conversation's head state: the target's aux rows and the head's cache."""

    def __init__(self, head: Eagle3Head) -> None:
        self.head = head
        self.aux = _Rows()  # per cached target position
        self.keys = _Rows()  # per head row: (rows, kv_heads * head_dim), keys then values
        self.values = _Rows()

    @property
    def rows(self) -> int:
        return self.keys.length

    def truncate(self, length: int) -> None:
        """The target's cache was cut to `length` positions: head row p read token p + 1, so rows from length - 1 go."""
        self.aux.truncate(length)
        self.keys.truncate(max(0, length - 1))
        self.values.truncate(max(0, length - 1))

    def _past(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        if self.rows == 0:
            return None
        head = self.head
        shape = (self.rows, head.kv_heads, head.head_dim)
        return (self.keys.view().view(shape).transpose(0, 1)[None], self.values.view().view(shape).transpose(0, 1)[None])

    def _catch_up(self, cached: list[int], root: int) -> torch.Tensor:
        """Feed the head the positions it has not read; return its last row's output."""
        head, start, n = self.head, self.rows, len(cached)
        assert self.aux.length == n and start < n
        device = head.fc.device
        following = [*cached[start + 1 :], root]
        ids = torch.tensor(following, dtype=torch.long, device=device)
        positions = torch.arange(start, n, device=device)
        mask = torch.ones((n - start, n), dtype=torch.bool, device=device).tril(start)
        out, k, v = head.forward(self.aux.view(start, n), ids, positions, self._past(), mask)
        self.keys.append(k[0].transpose(0, 1).reshape(n - start, -1))
        self.values.append(v[0].transpose(0, 1).reshape(n - start, -1))
        return out[-1:]

    def draft(self, cached: list[int], root: int, total: int, depth: int, top_k: int) -> Tree:
        """The tree under `root` (the token after `cached`), at most `total` nodes with the root."""
        head = self.head
        n = len(cached)
        last = self._catch_up(cached, root)
        if total <= 1:
            return _tree([root], [-1], [0])
        k = min(top_k, head.lm_head.shape[0])
        d2t = head.draft_to_target
        first = head.log_probs(last)[0].topk(k)
        # Every candidate: its target token, parent (candidate index, -1 the root), level, cumulative log-prob.
        tokens = d2t[first.indices].tolist()
        parents, levels = [-1] * k, [1] * k
        scores = first.values.tolist()
        frontier = list(range(k))
        frontier_scores = first.values
        frontier_hidden = last.expand(k, -1)
        fed_row: dict[int, int] = {}  # candidate -> its temporary head row
        seen: list[list[int]] = []  # per temporary row, the temporary rows it sees
        tree_k: list[torch.Tensor] = []
        tree_v: list[torch.Tensor] = []
        past = self._past()
        assert past is not None  # _catch_up fed at least one row
        for step in range(depth):
            for c in frontier:  # a node's head row sees its ancestors' rows and itself
                above = seen[fed_row[parents[c]]] if parents[c] >= 0 else []
                fed_row[c] = len(seen)
                seen.append([*above, len(seen)])
            mask = torch.zeros((k, n + len(seen)), dtype=torch.bool)
            mask[:, :n] = True
            for i, c in enumerate(frontier):
                mask[i, [n + r for r in seen[fed_row[c]]]] = True
            ids = torch.tensor([tokens[c] for c in frontier], dtype=torch.long, device=last.device)
            positions = torch.full((k,), n + step, dtype=torch.long, device=last.device)
            step_past = (torch.cat([past[0], *tree_k], 2), torch.cat([past[1], *tree_v], 2))
            out, kk, vv = head.forward(frontier_hidden, ids, positions, step_past, mask.to(last.device))
            tree_k.append(kk)
            tree_v.append(vv)
            children = head.log_probs(out).topk(k, dim=-1)
            cumulative = frontier_scores[:, None] + children.values  # (k, k)
            base = len(tokens)
            tokens += d2t[children.indices].flatten().tolist()
            parents += [c for c in frontier for _ in range(k)]
            levels += [step + 2] * (k * k)
            scores += cumulative.flatten().tolist()
            best = cumulative.flatten().topk(k)
            frontier = [base + int(i) for i in best.indices.tolist()]
            frontier_scores = best.values
            frontier_hidden = out[best.indices // k]
        # Highest cumulative log-prob first; a parent never scores below its
        # child and is shallower, so every chosen node's parent is chosen.
        order = sorted(range(len(tokens)), key=lambda c: (-scores[c], levels[c], c))[: total - 1]
        chosen = sorted(order, key=lambda c: (levels[c], c))
        index = {c: i + 1 for i, c in enumerate(chosen)}
        return _tree([root, *(tokens[c] for c in chosen)],
                     [-1, *(index[parents[c]] if parents[c] >= 0 else 0 for c in chosen)],
                     [0, *(levels[c] for c in chosen)])


def _tree(tokens: list[int], parents: list[int], depths: list[int]) -> Tree:
    size = len(tokens)
    ancestors = np.eye(size, dtype=bool)
    for i in range(1, size):
        ancestors[i] |= ancestors[parents[i]]
    return Tree.shaped(np.asarray(tokens, dtype=np.int64), np.asarray(parents, dtype=np.int64),
                       np.asarray(depths, dtype=np.int64), ancestors, registry.HEAD.id, "head")


class Eagle3Drafter(Drafter):
    """Method eagle3: a HeadDrafter over the conversation's cache. Positions
    cached while another method ran have no auxiliary states, so `truncate`
    sends the decoder back to verify them again (prefill)."""

    def __init__(self, head: Eagle3Head) -> None:
        self.state = HeadDrafter(head)
        self.capture_layers = head.aux_layers
        self.tokens: list[int] = []  # the cached tokens the aux rows belong to
        self.config = GenerationConfig(method="eagle3")

    @classmethod
    def create(cls, setup: DrafterSetup) -> Eagle3Drafter:
        assert setup.head is not None
        return cls(setup.head)

    def configure(self, config: GenerationConfig) -> None:
        self.config = config

    def truncate(self, length: int) -> int:
        self.state.truncate(length)
        del self.tokens[length:]
        return self.state.aux.length

    def prefilled(self, cached: list[int], base: int, logits: Any, captured: Any) -> None:
        self.state.aux.append(captured)
        self.tokens.extend(cached[base:])

    def draft(self, root: int, prev: int, limit: int | None, load: tuple[int, int] = (0, 0)) -> Tree:
        """EAGLE-3's dynamic tree (its own size, total_token: a budget does not apply)."""
        config = self.config
        return self.state.draft(self.tokens, root, config.total_token, config.depth, config.top_k)

    def verified(self, tree: Tree, logits: Any, path: list[int], emitted: list[int], captured: Any) -> None:
        self.state.aux.append(captured[path])
        self.tokens.extend(int(tree.tokens[i]) for i in path)
