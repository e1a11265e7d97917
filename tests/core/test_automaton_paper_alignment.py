"""The automaton against the paper (RACER, arXiv 2604.14885) and docs/design.md 1.7.

Runs under pytest and as `python -m unittest tests.test_automaton_paper_alignment -v`
from the repository root (tests/test_automaton_paper_alignment.py loads this file).
Every case runs against the compiled class; the cheap ones also against the
reference (the *Reference classes at the bottom).
"""

from __future__ import annotations

import random
import unittest
from typing import Any

import numpy as np

from racer_core.drafting.automaton import Automaton, ReferenceAutomaton
from racer_core.drafting.automaton.testing import check_draft, check_trie
from racer_core.drafting.automaton.variants import variant


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
        return variant(self.impl, *args, **kwargs)


def four_ary(auto: Any, vocab: int) -> Any:
    """The table of the paper's Figure 9: token t's top-4 row is 4t+1 .. 4t+4.
    Rows of tokens >= vocab / 4 name tokens past the vocabulary (row-less)."""
    auto.init_logits(vocab, 4)
    auto.update(np.arange(vocab), 4 * np.arange(vocab)[:, None] + np.arange(1, 5))
    return auto


def leaf_paths(draft: Any) -> set[tuple[int, ...]]:
    """Root-to-leaf token paths, the -1 padding of `candidates` dropped."""
    return {tuple(t for t in row if t >= 0) for row in draft.candidates.tolist()}


def node_paths(draft: Any) -> set[tuple[int, ...]]:
    """Every node's root-to-node token path (root included)."""
    return {tuple(row[: i + 1]) for row in leaf_paths(draft) for i in range(len(row))}


class LogitsTreeShape(_Base):
    """Eq. 3 / Algorithm 1 as Figure 9 draws it: the root has breadth k and its
    child of rank i gets max(1, k >> i); below the root, the child of rank i of a
    node with breadth b gets max(1, (b >> 1) >> i). A node expands min(b, k)
    children, breadth-first, until the budget is spent."""

    def shape(self, top_k: int, budget: int, is_chain: bool = False) -> list[int]:
        auto = self.make()
        full_table(auto, 1000, top_k)
        draft = auto.retrieve(5, budget, is_chain)
        check_draft(draft, 5, budget, is_chain)
        self.assertTrue(all(s == 2 for s in draft.sources.tolist()[1:]))
        return breadth_profile(draft)

    def test_k8_budget64_is_1_8_19_24_12(self) -> None:
        # Depth 1: the root (b=8) has 8 children of breadths 8,4,2,1,1,1,1,1.
        # Depth 2 (b >> 1 >> i): 8 children of 8 (breadths 4,2,1,...), 4 of 4
        # (2,1,1,1), 2 of 2 (1,1), one under each of the five 1s: 19 nodes.
        # Depth 3: 4+2+6 | 2+3 | 2 | 5 = 24 (52 in all); 12 fit at depth 4.
        self.assertEqual(self.shape(8, 64), [1, 8, 19, 24, 12])

    def test_k8_rows_are_followed_in_rank_order(self) -> None:
        auto = self.make()
        full_table(auto, 1000, 8)
        draft = auto.retrieve(5, 64)
        row5 = [(5 * 37 + 11 * i + 1) % 1000 for i in range(8)]
        self.assertEqual(draft.tokens[1:9].tolist(), row5)
        # Children per depth-1 node: min(breadth, k) = 8, 4, 2, 1, 1, 1, 1, 1.
        counts = [int((draft.parents == i).sum()) for i in range(1, 9)]
        self.assertEqual(counts, [8, 4, 2, 1, 1, 1, 1, 1])

    def test_other_k_and_budget_pairs(self) -> None:
        # k=4, B=16: breadths 4,2,1,1; depth 2: 4+2+1+1 = 8 (13 in all); depth 3
        # in FIFO order: the first depth-2 node (b=2) gives 2, the next 1: 16.
        self.assertEqual(self.shape(4, 16), [1, 4, 8, 3])
        # k=8, B=16: 1+8 = 9, then 7 children of the first depth-1 node.
        self.assertEqual(self.shape(8, 16), [1, 8, 7])
        # k=2, B=10: breadths 2,1; depth 2: 2+1; then one child per node.
        self.assertEqual(self.shape(2, 10), [1, 2, 3, 3, 1])
        # k=1: a chain.
        self.assertEqual(self.shape(1, 5), [1, 1, 1, 1, 1])
        # k=16, B=64: breadths 16,8,4,2,1 x 12; depth 2: 16+8+4+2+12 = 42 (59); 5 more.
        self.assertEqual(self.shape(16, 64), [1, 16, 42, 5])
        # k=3, B=30: breadths 3,1,1; depth 2: 3+1+1; then 5 a level: 1+3+5*5 = 29, +1.
        self.assertEqual(self.shape(3, 30), [1, 3, 5, 5, 5, 5, 5, 1])
        # Budget 1 is the root alone; 9 is the root and its k children.
        self.assertEqual(self.shape(8, 1), [1])
        self.assertEqual(self.shape(8, 9), [1, 8])

    def test_repeated_tokens_in_a_row_count_once(self) -> None:
        auto = self.make()
        auto.init_logits(100, 4)
        auto.update([5, 7], [[5, 5, 7, 9], [7, 7, 7, 7]])
        draft = auto.retrieve(5, 8)
        # Root (b=4): 5 (breadth 4), rank 1 repeats rank 0 and is skipped, 7
        # (rank 2, breadth 1), 9 (breadth 1). The depth-1 5 (b=4, halved to 2)
        # gives 5, 7, 9 (rank 1 skipped again); 7 gives 7: the budget is spent.
        self.assertEqual(draft.tokens.tolist(), [5, 5, 7, 9, 5, 7, 9, 7])
        self.assertEqual(draft.parents.tolist(), [-1, 0, 0, 0, 1, 1, 1, 2])
        # A row of one token repeated is a chain, however wide the table.
        auto = self.make()
        auto.init_logits(100, 64)
        auto.update([3], [[3] * 64])
        self.assertEqual(breadth_profile(auto.retrieve(3, 512)), [1] * 512)

    def test_chain_has_breadth_one(self) -> None:
        self.assertEqual(self.shape(8, 64, is_chain=True), [1] * 64)


class LateHalving(_Base):
    """The older rule, kept as the option late_halving=True for comparisons: the
    root's breadth is halved for its children (b' = k >> 1) and the depth-1
    nodes pass theirs on unhalved (b' = b), one level later than the paper."""

    def shape(self, top_k: int, budget: int) -> list[int]:
        auto = self.make(late_halving=True)
        self.assertTrue(auto.late_halving)
        full_table(auto, 1000, top_k)
        draft = auto.retrieve(5, budget)
        check_draft(draft, 5, budget, False)
        return breadth_profile(draft)

    def test_default_is_the_paper_rule(self) -> None:
        self.assertFalse(self.make().late_halving)
        with self.assertRaises(TypeError):
            self.make(late_halving=1)
        with self.assertRaises(TypeError):  # a comparison variant, not a constructor option
            self.impl(late_halving=True)

    def test_older_shapes(self) -> None:
        # k=8: depth 1 breadths 4,2,1,...; depth 2 4+2+6 = 12; then 17, 18, 8.
        self.assertEqual(self.shape(8, 64), [1, 8, 12, 17, 18, 8])
        self.assertEqual(self.shape(4, 16), [1, 4, 5, 6])
        self.assertEqual(self.shape(16, 64), [1, 16, 27, 20])
        self.assertEqual(self.shape(3, 30), [1] + [3] * 9 + [2])

    def test_figure9_table_under_the_older_rule(self) -> None:
        # Node 1 gets breadth 2, not 4: it expands 5, 6 only.
        auto = four_ary(self.make(late_halving=True), 1024)
        draft = auto.retrieve(0, 21)
        self.assertEqual(draft.size, 21)
        self.assertNotIn((0, 1, 7), node_paths(draft))


FIGURE9_TREE = {
    # depth 1
    (0, 1), (0, 2), (0, 3), (0, 4),
    # depth 2: breadths 4, 2, 1, 1 above give 4, 2, 1, 1 children
    (0, 1, 5), (0, 1, 6), (0, 1, 7), (0, 1, 8), (0, 2, 9), (0, 2, 10), (0, 3, 13), (0, 4, 17),
    # depth 3: 5 (breadth 2) gives two, the others one each, until 21 nodes
    (0, 1, 5, 21), (0, 1, 5, 22), (0, 1, 6, 25), (0, 1, 7, 29), (0, 1, 8, 33),
    (0, 2, 9, 37), (0, 2, 10, 41), (0, 3, 13, 53),
}  # fmt: skip
FIGURE9_LEAVES = {
    (0, 4, 17), (0, 1, 5, 21), (0, 1, 5, 22), (0, 1, 6, 25), (0, 1, 7, 29),
    (0, 1, 8, 33), (0, 2, 9, 37), (0, 2, 10, 41), (0, 3, 13, 53),
}  # fmt: skip


class Figure9(_Base):
    """The paper's Figure 9: k = 4, the 4-ary table, root token 0, budget 21."""

    def test_the_tree_of_the_figure(self) -> None:
        draft = four_ary(self.make(max_nodes=2), 1024).retrieve(0, 21)
        check_draft(draft, 0, 21, False)
        self.assertEqual(draft.size, 21)
        self.assertEqual(node_paths(draft), FIGURE9_TREE | {(0,)})
        self.assertEqual(leaf_paths(draft), FIGURE9_LEAVES)
        self.assertEqual(breadth_profile(draft), [1, 4, 8, 8])
        # Breadth-first, children in rank order.
        self.assertEqual(draft.tokens[:13].tolist(), list(range(0, 11)) + [13, 17])

    def test_budgets_are_filled_exactly(self) -> None:
        auto = four_ary(self.make(max_nodes=2), 65536)
        for budget in (1, 2, 8, 21, 64):
            draft = auto.retrieve(0, budget)
            check_draft(draft, 0, budget, False)
            self.assertEqual(draft.size, budget)
            self.assertEqual(len(node_paths(draft)), budget)

    def test_chain_mode_fills_the_budget_with_one_path(self) -> None:
        draft = four_ary(self.make(max_nodes=2), 65536).retrieve(0, 8, True)
        check_draft(draft, 0, 8, True)
        self.assertEqual(leaf_paths(draft), {(0, 1, 5, 21, 85, 341, 1365, 5461)})

    def test_a_row_past_the_vocabulary_ends_expansion(self) -> None:
        # With vocabulary 16 the depth-2 tokens 5..13 have rows, 17 has none, and
        # no depth-3 token (21 and up) has one: the tree stops at 21 nodes.
        draft = four_ary(self.make(max_nodes=2), 16).retrieve(0, 64)
        self.assertEqual(breadth_profile(draft), [1, 4, 8, 8])
        self.assertEqual(leaf_paths(draft), FIGURE9_LEAVES)
        # A root past the vocabulary has no row: the draft is the root alone.
        self.assertEqual(four_ary(self.make(), 16).retrieve(99, 8).tokens.tolist(), [99])


class MergeAwareRefill(_Base):
    """The logits tree fills what retrieval left, counting merged nodes once."""

    def rows(self, auto: Any, mapping: dict[int, list[int]]) -> Any:
        auto.init_logits(64, 4)
        auto.update(list(mapping), list(mapping.values()))
        return auto

    def test_a_repeated_row_token_gets_the_full_breadth(self) -> None:
        x, a = 10, 20
        auto = self.rows(self.make(max_nodes=2), {x: [a, a, a, a], a: [30, 31, 32, 33]})
        draft = auto.retrieve(x, 6)
        # a keeps rank 0 and breadth 4, so it expands all of its row.
        self.assertEqual(draft.tokens.tolist(), [x, a, 30, 31, 32, 33])
        self.assertEqual(draft.parents.tolist(), [-1, 0, 1, 1, 1, 1])

    def test_retrieved_root_and_prefix_use_the_budget_once(self) -> None:
        x, a, b = 10, 20, 30
        table = {x: [a, 21, 22, 23], a: [b, 31, 32, 33], b: [40, 41, 42, 43]}
        # x: a (breadth 4), 21, 22, 23; a: b (breadth 2), 31, 32, 33; b: 40, 41.
        for budget in (2, 4, 8, 11):
            auto = self.rows(self.make(max_nodes=32), table)
            auto.insert([1, x, a], 5)
            auto.trans_tokens([1])
            draft = auto.retrieve(x, budget)
            check_draft(draft, x, budget, False)
            self.assertEqual(draft.size, budget)
            # Retrieval drafts x, a; with room left x's row meets a again.
            self.assertEqual(draft.sources[1], 3 if budget > 2 else 1)
            if budget >= 8:
                self.assertIn((x, a, b), node_paths(draft))

    def test_two_borders_on_one_root_leave_no_hole(self) -> None:
        x = 10
        table = {x: [20, 21, 22, 23], 20: [30, 31, 32, 33], 21: [34, 35, 36, 37]}
        auto = self.rows(self.make(max_nodes=64), table)
        auto.insert([1, 2, x], 5)
        auto.insert([2, x], 5)
        auto.trans_tokens([1, 2])
        draft = auto.retrieve(x, 4)
        self.assertEqual(draft.tokens.tolist(), [x, 20, 21, 22])

    def test_chain_keeps_the_retrieved_prefix(self) -> None:
        x, a, b = 10, 20, 30
        auto = self.rows(self.make(max_nodes=32), {x: [a, 21, 22, 23], a: [b, 31, 32, 33], b: [40, 41, 42, 43]})
        auto.insert([1, x, a], 5)
        auto.trans_tokens([1])
        draft = auto.retrieve(x, 8, True)
        check_draft(draft, x, 8, True)
        self.assertEqual(draft.tokens.tolist(), [x, a, b, 40])


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
    """docs/design.md 1.7: each defect of the original implementation, pinned."""

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


class LateHalvingReference(LateHalving):
    impl = ReferenceAutomaton


class Figure9Reference(Figure9):
    impl = ReferenceAutomaton


class MergeAwareRefillReference(MergeAwareRefill):
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
