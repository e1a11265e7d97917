"""The automaton against the paper (RACER, arXiv 2604.14885) and DESIGN.md 1.7.

Runs under pytest and as `python -m unittest tests.test_automaton_paper_alignment -v`.
Every case runs against the compiled class; the cheap ones also against the
reference (the *Reference classes at the bottom).
"""

from __future__ import annotations

import random
import unittest
from typing import Any

import numpy as np

from racer_core.automaton import Automaton, ReferenceAutomaton
from racer_core.automaton.testing import check_draft, check_trie


def full_table(auto: Any, vocab: int, top_k: int) -> None:
    """init_logits and write every row with top_k distinct tokens."""
    auto.init_logits(vocab, top_k)
    rows = np.array([[(t * 37 + 11 * i + 1) % vocab for i in range(top_k)] for t in range(vocab)])
    auto.update(np.arange(vocab), rows)


def breadth_profile(draft: Any) -> list[int]:
    """Number of draft nodes at each depth."""
    return np.bincount(draft.position_ids).tolist()


class _Base(unittest.TestCase):
    impl: Any = Automaton

    def make(self, *args: Any, **kwargs: Any) -> Any:
        return self.impl(*args, **kwargs)


class LogitsTreeShape(_Base):
    """Eq. 3 / Algorithm 1: the root has breadth k; the child of rank i of a node
    with breadth b at depth d has breadth max(1, b' >> i), b' = b at depth 1 and
    b >> 1 elsewhere (the root included). A node expands min(b, k) children."""

    def shape(self, top_k: int, budget: int, is_chain: bool = False) -> list[int]:
        auto = self.make()
        full_table(auto, 1000, top_k)
        draft = auto.retrieve(5, budget, is_chain)
        check_draft(draft, 5, budget, is_chain)
        self.assertTrue(all(s == 2 for s in draft.sources.tolist()[1:]))
        return breadth_profile(draft)

    def test_k8_budget64_is_1_8_12_17_18_8(self) -> None:
        # Depth 1: the root (b=8, b'=4) has 8 children of breadths 4,2,1,1,1,1,1,1.
        # Depth 2 (b'=b): 4+2+6*1 = 12 nodes, breadths 4,2,1,1 | 2,1 | 1 x 6.
        # Depth 3 (b'=b>>1): 4+2+1+1 + 2+1 + 6 = 17 nodes, one of breadth 2.
        # Depth 4: 2 + 16 = 18 nodes; 1+8+12+17+18 = 56, so 8 fit at depth 5.
        self.assertEqual(self.shape(8, 64), [1, 8, 12, 17, 18, 8])

    def test_k8_rows_are_followed_in_rank_order(self) -> None:
        auto = self.make()
        full_table(auto, 1000, 8)
        draft = auto.retrieve(5, 64)
        row5 = [(5 * 37 + 11 * i + 1) % 1000 for i in range(8)]
        self.assertEqual(draft.tokens[1:9].tolist(), row5)
        # Children per depth-1 node: min(breadth, k) = 4, 2, 1, 1, 1, 1, 1, 1.
        counts = [int((draft.parents == i).sum()) for i in range(1, 9)]
        self.assertEqual(counts, [4, 2, 1, 1, 1, 1, 1, 1])

    def test_other_k_and_budget_pairs(self) -> None:
        # k=4, B=16: root b'=2 -> breadths 2,1,1,1 (4 nodes); depth 2 (b'=b):
        # 2+1+1+1 = 5 nodes of breadths 2,1,1,1,1; depth 3 (b'=b>>1): 2+1+1+1+1 = 6.
        self.assertEqual(self.shape(4, 16), [1, 4, 5, 6])
        # k=8, B=16: 1+8 = 9; depth 2 in FIFO order: 4 (13), 2 (15), 1 (16), full.
        self.assertEqual(self.shape(8, 16), [1, 8, 7])
        # k=2, B=10: root b'=1 -> breadths 1,1; then one child per node: 2 a level.
        self.assertEqual(self.shape(2, 10), [1, 2, 2, 2, 2, 1])
        # k=1: a chain.
        self.assertEqual(self.shape(1, 5), [1, 1, 1, 1, 1])
        # k=16, B=64: root b'=8 -> breadths 8,4,2,1 x 13 (16 nodes); depth 2:
        # 8+4+2+13 = 27 (44 in all); depth 3 in FIFO order: 8+4+2+1*5 = 19, then
        # one child of the next node: 20.
        self.assertEqual(self.shape(16, 64), [1, 16, 27, 20])
        # k=3, B=30: root b'=1 -> breadths 1,1,1, then 3 a level: 1+3*9 = 28, +2.
        self.assertEqual(self.shape(3, 30), [1] + [3] * 9 + [2])
        # Budget 1 is the root alone; 9 is the root and its k children.
        self.assertEqual(self.shape(8, 1), [1])
        self.assertEqual(self.shape(8, 9), [1, 8])

    def test_repeated_tokens_in_a_row_count_once(self) -> None:
        auto = self.make()
        auto.init_logits(100, 4)
        auto.update([5, 7], [[5, 5, 7, 9], [7, 7, 7, 7]])
        draft = auto.retrieve(5, 8)
        # Root (b=4, b'=2): 5 (breadth 2), rank 1 repeats rank 0 and is skipped,
        # 7 keeps rank 2 (breadth 1), 9 (breadth 1). Then 5 -> 5 (rank 1 skipped
        # again), 7 -> 7, 9 has no row, 5 -> 5, 7 -> 7: the budget of 8 is spent.
        self.assertEqual(draft.tokens.tolist(), [5, 5, 7, 9, 5, 7, 5, 7])
        self.assertEqual(draft.parents.tolist(), [-1, 0, 0, 0, 1, 2, 4, 5])
        # A row of one token repeated is a chain, however wide the table.
        auto = self.make()
        auto.init_logits(100, 64)
        auto.update([3], [[3] * 64])
        self.assertEqual(breadth_profile(auto.retrieve(3, 512)), [1] * 512)

    def test_chain_has_breadth_one(self) -> None:
        self.assertEqual(self.shape(8, 64, is_chain=True), [1] * 64)


class TreeAttentionMask(_Base):
    """Eq. 2: M[i][j] = 1 iff j is i or an ancestor of i, breadth-first order."""

    def test_mask_and_leaf_paths_of_a_known_tree(self) -> None:
        auto = self.make(min_depth=1)
        auto.insert([5, 1, 2])
        auto.insert([5, 1, 3])
        auto.insert([5, 4])
        draft = auto.retrieve(5)
        # Border [5]; children 1 (freq 2) before 4 (freq 1); then 4 (depth 1)
        # before 2 and 3 (depth 2); breadth-first: 5 | 1 4 | 2 3.
        self.assertEqual(draft.tokens.tolist(), [5, 1, 4, 2, 3])
        self.assertEqual(draft.parents.tolist(), [-1, 0, 0, 1, 1])
        self.assertEqual(draft.position_ids.tolist(), [0, 1, 1, 2, 2])
        self.assertEqual(draft.sources.tolist(), [0, 1, 1, 1, 1])
        want = np.array(
            [
                [1, 0, 0, 0, 0],
                [1, 1, 0, 0, 0],
                [1, 0, 1, 0, 0],
                [1, 1, 0, 1, 0],
                [1, 1, 0, 0, 1],
            ],
            dtype=bool,
        )
        np.testing.assert_array_equal(draft.attn_mask, want)
        self.assertEqual(draft.retrieve_indices.tolist(), [[0, 2, -1], [0, 1, 3], [0, 1, 4]])
        self.assertEqual(draft.candidates.tolist(), [[5, 4, -1], [5, 1, 2], [5, 1, 3]])
        self.assertIs(draft.tree_candidates, draft.tokens)

    def test_mask_is_ancestor_closure_on_a_bushy_tree(self) -> None:
        auto = self.make(ngram=4)
        full_table(auto, 50, 8)
        auto.feed([1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3, 6, 1, 2])
        draft = auto.retrieve(3, 64)
        check_draft(draft, 3, 64, False)
        self.assertEqual(draft.size, 64)


class BorderDepth(_Base):
    """A retrieval border is a child of a failure-chain state of depth >= min_depth (2)."""

    def test_default_min_depth_is_two(self) -> None:
        self.assertEqual(self.make().min_depth, 2)

    def test_depth_one_match_is_no_border_by_default(self) -> None:
        auto = self.make()
        auto.insert([5, 9])
        self.assertEqual(auto.retrieve(5).tokens.tolist(), [5])  # [5] has depth 1
        auto.insert([7, 5, 1])
        auto.trans_tokens([7])
        self.assertEqual(auto.retrieve(5).tokens.tolist(), [5, 1])  # [7, 5] has depth 2

    def test_min_depth_one_uses_the_root_child(self) -> None:
        auto = self.make(min_depth=1)
        auto.insert([5, 9])
        self.assertEqual(auto.retrieve(5).tokens.tolist(), [5, 9])

    def test_deeper_context_ranks_first(self) -> None:
        auto = self.make(min_depth=1)
        for _ in range(5):
            auto.insert([5, 1])  # frequent, but only context 1
        auto.insert([7, 5, 2])  # rare, context 2
        auto.trans_tokens([7])
        draft = auto.retrieve(5, 2)
        self.assertEqual(draft.tokens.tolist(), [5, 2])


class ConstructorClamping(_Base):
    """The original clamped a shadowed parameter, so its clamping did nothing."""

    def test_values_are_clamped(self) -> None:
        for value in (0, -1, -(10**9)):
            auto = self.make(max_nodes=value, min_depth=value, ngram=value)
            self.assertEqual((auto.max_nodes, auto.min_depth, auto.ngram), (2, 1, 1))

    def test_clamped_values_take_effect(self) -> None:
        auto = self.make(max_nodes=0, min_depth=0, ngram=0)
        auto.insert([1, 2, 3])
        self.assertEqual(auto.node_count, 2)  # root + one node
        self.assertEqual(set(auto.snapshot()), {(1,)})
        auto = self.make(ngram=0)
        auto.feed([1, 2, 3, 1])
        self.assertEqual(set(auto.snapshot()), {(1,), (2,), (3,)})  # unigrams only
        auto = self.make(min_depth=0)
        auto.insert([4, 6])
        self.assertEqual(auto.retrieve(4).tokens.tolist(), [4, 6])

    def test_defaults(self) -> None:
        auto = self.make()
        self.assertEqual((auto.max_nodes, auto.min_depth, auto.ngram), (10000, 2, 10))
        self.assertIsNone(auto.vocab_size)
        self.assertIsNone(auto.top_k)
        auto.init_logits(100, 8)
        self.assertEqual((auto.vocab_size, auto.top_k), (100, 8))


class DraftCapacity(_Base):
    def test_budget_bounds_the_tree(self) -> None:
        auto = self.make(ngram=4)
        full_table(auto, 30, 8)
        auto.feed([i % 7 for i in range(200)])
        for budget in (1, 2, 3, 7, 8, 9, 33, 64, 100, 512):
            draft = auto.retrieve(3, budget)
            check_draft(draft, 3, budget, False)
            self.assertEqual(draft.size, budget)

    def test_largest_budget(self) -> None:
        auto = self.make()
        full_table(auto, 30, 2)
        self.assertEqual(auto.retrieve(3, 4096).size, 4096)
        with self.assertRaises(ValueError):
            auto.retrieve(3, 4097)

    def test_trie_never_exceeds_max_nodes(self) -> None:
        auto = self.make(max_nodes=50, ngram=5)
        rnd = random.Random(0)
        for _ in range(40):
            auto.feed([rnd.randrange(9) for _ in range(10)])
            self.assertLessEqual(auto.node_count, 50)
            check_trie(auto)
        self.assertEqual(auto.node_count, 50)


class OriginalDefects(_Base):
    """DESIGN.md 1.7: each defect of the original implementation, pinned."""

    def test_lru_evicts_leaves_only(self) -> None:
        auto = self.make(max_nodes=4)
        auto.insert([1, 2])  # [1] stamp 1, [1, 2] stamp 2
        auto.insert([3])  # stamp 3; the trie is full
        auto.insert([4])
        # The least recently used node is [1], but it has a child: the oldest
        # leaf [1, 2] goes (the original could evict [1] and orphan [1, 2]).
        self.assertEqual(set(auto.snapshot()), {(1,), (3,), (4,)})
        auto.insert([5])  # [1] is a leaf now, and the least recent one
        self.assertEqual(set(auto.snapshot()), {(3,), (4,), (5,)})
        auto.insert([3, 6])  # touches [3]; evicts [4]
        self.assertEqual(set(auto.snapshot()), {(3,), (3, 6), (5,)})

    def test_eviction_spares_the_matcher_state_and_the_insertion_path(self) -> None:
        auto = self.make(max_nodes=3)
        auto.insert([1])
        auto.insert([2])
        auto.trans_tokens([1])  # the state is [1], the oldest leaf
        auto.insert([3])
        self.assertEqual(set(auto.snapshot()), {(1,), (3,)})
        self.assertEqual(auto.state_path(), (1,))
        auto.insert([3, 4, 5])  # [3] is on the path, [1] is the state: no room
        self.assertEqual(set(auto.snapshot()), {(1,), (3,)})

    def test_internal_nodes_survive_long_generations(self) -> None:
        auto = self.make(max_nodes=40, ngram=6)
        rnd = random.Random(1)
        for _ in range(60):
            auto.feed([rnd.randrange(5) for _ in range(7)])
            check_trie(auto)  # every node's parent is present: nothing orphaned

    def test_failure_links_for_nodes_inserted_after_build(self) -> None:
        auto = self.make(ngram=4)
        auto.feed([1, 2, 3, 4])  # the prompt
        auto.build()
        auto.feed([7, 1, 2])  # generated: inserts [2,3,4,7], [3,4,7,1], [4,7,1,2]
        check_trie(auto)  # every link equals the from-scratch one
        # Matching walks links created during generation: [1,2,3,4] -7-> via
        # [2,3,4] to [2,3,4,7] -1-> via [3,4,7] ... ends at [4,7,1,2].
        self.assertEqual(auto.state_path(), (4, 7, 1, 2))
        # fail([4,7,1,2]) = [1,2] finds border [1,2,3] (context 3) and [2,3]
        # (context 2); merged they draft 4 then 7. With links frozen at build()
        # the new state would fail to the root and draft nothing.
        draft = auto.retrieve(3)
        self.assertEqual(draft.tokens.tolist(), [3, 4, 7])
        self.assertEqual(draft.sources.tolist(), [0, 1, 1])

    def test_state_resets_after_a_miss(self) -> None:
        auto = self.make(ngram=3)
        auto.feed([1, 2, 3, 1, 2])
        self.assertEqual(auto.state_path(), (3, 1, 2))
        # Borders [1,2,3] (a leaf: ngram 3) and [2,3], which continues with 1.
        self.assertEqual(auto.retrieve(3).tokens.tolist(), [3, 1])
        auto.trans_tokens([9])  # 9 is nowhere in the trie
        self.assertEqual(auto.state_path(), ())
        # A stale state would still draft [3, 1] after text that never had it.
        self.assertEqual(auto.retrieve(3).tokens.tolist(), [3])

    def test_budget_is_counted_after_merging(self) -> None:
        text = [1, 2, 3, 4, 5, 6, 7, 8] * 3
        for budget in (4, 10, 30, 64):
            auto = self.make(ngram=6)
            auto.init_logits(20, 4)
            # Rows that repeat what retrieval drafts: every retrieval node is
            # also a logits node, so counting before merging would under-fill.
            auto.update(list(range(20)), [[(t + 1) % 20, (t + 2) % 20, 0, 19] for t in range(20)])
            auto.feed(text)
            draft = auto.retrieve(1, budget)
            check_draft(draft, 1, budget, False)
            self.assertEqual(draft.size, budget)
            retrieved = int((draft.sources & 1).sum())
            if budget > retrieved + 1:  # the logits tree had room: it met retrieval
                self.assertIn(3, draft.sources.tolist())  # merged nodes carry both bits

    def test_retrieval_only_fills_what_is_available(self) -> None:
        auto = self.make(ngram=4)
        auto.feed([1, 2, 3, 4, 1, 2, 3, 5, 1, 2])
        # From state [3,5,1,2]: borders [1,2,3] and [2,3] offer 4, 5, 4->1, 5->1.
        for budget, size in ((1, 1), (2, 2), (3, 3), (5, 5), (6, 5), (64, 5)):
            self.assertEqual(auto.retrieve(3, budget).size, size)

    def test_empty_logits_rows_draft_nothing(self) -> None:
        auto = self.make()
        auto.init_logits(100, 8)
        self.assertEqual(auto.retrieve(6).tokens.tolist(), [6])  # not [6, 0, 0, ...]
        auto.update([5], [[11, 12, 13, 14, 15, 16, 17, 18]])
        draft = auto.retrieve(5)
        # Row 5 drafts its 8 tokens; their rows are empty, so nothing deeper.
        self.assertEqual(draft.tokens.tolist(), [5, 11, 12, 13, 14, 15, 16, 17, 18])
        self.assertNotIn(0, draft.tokens.tolist())

    def test_init_logits_empties_the_table(self) -> None:
        auto = self.make()
        full_table(auto, 100, 8)
        self.assertEqual(auto.retrieve(6).size, 64)
        auto.init_logits(100, 8)
        self.assertEqual(auto.retrieve(6).size, 1)


class LogitsTreeShapeReference(LogitsTreeShape):
    impl = ReferenceAutomaton


class TreeAttentionMaskReference(TreeAttentionMask):
    impl = ReferenceAutomaton


class BorderDepthReference(BorderDepth):
    impl = ReferenceAutomaton


class ConstructorClampingReference(ConstructorClamping):
    impl = ReferenceAutomaton


class OriginalDefectsReference(OriginalDefects):
    impl = ReferenceAutomaton


if __name__ == "__main__":
    unittest.main()
