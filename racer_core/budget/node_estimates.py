"""Finer, calibrated node estimates for the tree policy (docs/design.md 1.8, issue 44).

The policy's buckets (tree_policy.py) lump kinds of node that verification
tells apart: retrieval contexts 6-7 accept about 0.85 and 8-9 about 0.96,
logits-only nodes at depth 3 about 0.12 and at depth 9 and more 0.83 and up.
Two online tables refine the bucket's edge chance without giving it up:

- `KindCounts`: acceptance counts per exact kind -- the retrieval context
  (the automaton's matched length), the logits rank (with a context, the
  logits table and the automaton agree on the node) and the depth -- each
  kind's chance shrunk towards its bucket's by `weight` pseudo-trials, so a
  kind seen a few times reads as its bucket and a kind seen often as itself.
- `PathCalibration`: a node's path chance (the product of edge chances) read
  through what was accepted at that predicted chance. Edges along one path
  are not independent -- a text that repeats keeps repeating -- so the
  product underestimates likely paths (0.45 predicted, 0.71 accepted).

Both decay like the bucket counts, so a change of text is followed.
"""

from __future__ import annotations

import numpy as np

CTX_KINDS = 13  # retrieval context 0 (none), 1 .. 11, 12 and more
RANK_KINDS = 5  # logits rank none, 0, 1, 2, 3 and more
DEPTH_KINDS = 10  # depth 1 .. 9, 10 and more
PATH_BINS = 20  # path chance in steps of 0.05


def kinds(context: np.ndarray, rank: np.ndarray, depths: np.ndarray) -> np.ndarray:
    """Each node's exact kind as one flat index (the root's is meaningless)."""
    ctx = np.minimum(context, CTX_KINDS - 1)
    rnk = np.where(rank < 0, 0, np.minimum(rank + 1, RANK_KINDS - 1))
    dep = np.clip(depths - 1, 0, DEPTH_KINDS - 1)
    return (ctx * RANK_KINDS + rnk) * DEPTH_KINDS + dep


class KindCounts:
    """Acceptance counts per exact kind, read shrunk towards a coarser chance."""

    def __init__(self, weight: float) -> None:
        self.weight = weight
        self.hits = np.zeros(CTX_KINDS * RANK_KINDS * DEPTH_KINDS)
        self.trials = np.zeros_like(self.hits)

    def chances(self, kind: np.ndarray, coarse: np.ndarray) -> np.ndarray:
        """Edge chances of nodes of `kind` whose bucket's chance is `coarse`."""
        trials = self.trials[kind]
        return (self.hits[kind] + self.weight * coarse) / (trials + self.weight)

    def observe(self, kind: np.ndarray, passed: np.ndarray, decay: float) -> None:
        """Tested nodes of `kind` and whether each was accepted."""
        self.hits *= decay
        self.trials *= decay
        np.add.at(self.trials, kind, 1.0)
        np.add.at(self.hits, kind[passed], 1.0)


class PathCalibration:
    """Predicted path chance -> the acceptance seen at that prediction, in bins.

    Each bin starts as its own centre (`weight` pseudo-trials), and a reading
    interpolates between the centres (0 reads 0, 1 reads 1), so before any
    evidence the map is the identity; its readings are made non-decreasing,
    so a likelier prediction never reads as less likely."""

    CENTRES = np.concatenate([[0.0], (np.arange(PATH_BINS) + 0.5) / PATH_BINS, [1.0]])

    def __init__(self, weight: float) -> None:
        self.hits = self.CENTRES[1:-1] * weight
        self.trials = np.full(PATH_BINS, weight)

    @staticmethod
    def bins(predicted: np.ndarray) -> np.ndarray:
        return np.minimum((predicted * PATH_BINS).astype(np.int64), PATH_BINS - 1)

    def table(self) -> np.ndarray:
        """The calibrated chance at 0, at each bin's centre and at 1, non-decreasing."""
        return np.maximum.accumulate(np.concatenate([[0.0], self.hits / self.trials, [1.0]]))

    @classmethod
    def read(cls, predicted: np.ndarray, table: np.ndarray) -> np.ndarray:
        """The calibrated chances of `predicted` path chances, by `table()`."""
        return np.interp(predicted, cls.CENTRES, table)

    def observe(self, predicted: np.ndarray, accepted: np.ndarray, decay: float) -> None:
        """Nodes' predicted path chances and whether each was accepted."""
        self.hits *= decay
        self.trials *= decay
        at = self.bins(predicted)
        np.add.at(self.trials, at, 1.0)
        np.add.at(self.hits, at[accepted], 1.0)
