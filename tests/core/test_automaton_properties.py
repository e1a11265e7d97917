"""Property tests: the compiled Automaton and the Python reference, driven by the
same random operation sequences, must agree exactly, and both must keep the
invariants of docs/automaton.md after every operation.

Small vocabularies make matches frequent; small max_nodes makes eviction
frequent. RACER_HYPOTHESIS_EXAMPLES scales the number of examples (default 1).
"""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from racer_core.drafting.automaton import Automaton, ReferenceAutomaton
from racer_core.drafting.automaton.testing import (
    check_draft,
    check_trie,
    draft_paths,
    failure_chain,
    retrieval_paths,
)
from racer_core.drafting.automaton.variants import variant

SCALE = float(os.environ.get("RACER_HYPOTHESIS_EXAMPLES", "1"))


def examples(n: int) -> settings:
    return settings(
        max_examples=max(1, int(n * SCALE)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


VOCAB = 6  # tokens are drawn below this; init_logits may pick a smaller vocabulary


def token_lists(max_size: int = 10) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, VOCAB - 1), max_size=max_size)


# How token lists travel: list, tuple, int32 or int64 array.
FORMS = st.sampled_from(["list", "tuple", "int32", "int64"])

_FEED = st.tuples(st.sampled_from(["feed", "add_tokens"]), token_lists(), FORMS)
# A short phrase said a few times: repetition is what retrieval feeds on.
_REPEAT = st.tuples(
    st.just("feed"),
    st.builds(
        lambda phrase, times: phrase * times,
        st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=4),
        st.integers(2, 4),
    ),
    FORMS,
)
# next_token None: pick, when run, a token that continues the matcher state
# (a border exists), so retrieval has something to draft.
# A root at or past the vocabulary (VOCAB + 1) has no row of its own. The
# root's previous token: -1 (unknown), a token, one past the vocabulary (no
# pair row can name it), or -2 (an error).
_RETRIEVE = st.tuples(
    st.just("retrieve"),
    st.one_of(st.none(), st.integers(0, VOCAB - 1), st.just(VOCAB + 1)),
    st.integers(1, 40),
    st.booleans(),
    st.one_of(st.integers(-1, VOCAB - 1), st.integers(-1, VOCAB - 1), st.sampled_from([VOCAB + 1, -2])),
)
# How update gets previous tokens: none, random ones (-1 included), the text's
# own (prev[i] = ids[i - 1]), or a bad list (out of range or the wrong length).
PREV = st.sampled_from(["none", "random", "random", "text", "text", "bad"])
_UPDATE = st.tuples(st.just("update"), st.integers(0, 6), st.integers(0, 2**16), FORMS, PREV)
# one_of picks branches about evenly: repeat the ones that should dominate.
OPS = st.one_of(
    _FEED,
    _REPEAT,
    _REPEAT,
    _RETRIEVE,
    _RETRIEVE,
    _RETRIEVE,
    _UPDATE,
    _UPDATE,
    st.tuples(st.just("insert"), token_lists(), st.integers(1, 3), FORMS),
    st.tuples(st.just("trans_tokens"), token_lists(), FORMS),
    st.tuples(st.sampled_from(["reset", "build"])),
    st.tuples(
        st.just("init_logits"),
        st.sampled_from([VOCAB, VOCAB, VOCAB, VOCAB - 1, VOCAB + 1]),
        st.integers(1, 8),
    ),
)


def convert(tokens: list[int], form: str) -> Any:
    if form == "tuple":
        return tuple(tokens)
    if form == "int32":
        return np.array(tokens, dtype=np.int32)
    if form == "int64":
        return np.array(tokens, dtype=np.int64)
    return list(tokens)


def call(auto: Any, name: str, *args: Any) -> tuple[str, Any]:
    """('ok', result) or ('error', (type, message))."""
    try:
        return "ok", getattr(auto, name)(*args)
    except (TypeError, ValueError, RuntimeError) as error:
        return "error", (type(error), str(error))


def apply(
    ref: ReferenceAutomaton, comp: Automaton, op: tuple[Any, ...]
) -> tuple[tuple[str, Any], tuple[str, Any], tuple[Any, ...]]:
    name = op[0]
    if name in ("add_tokens", "feed", "trans_tokens"):
        args: tuple[Any, ...] = (convert(op[1], op[2]),)
    elif name == "insert":
        args = (convert(op[1], op[3]), op[2])
    elif name == "init_logits":
        args = (op[1], min(op[2], op[1]))
    elif name == "update":
        # Rows drawn now: their width depends on the current top_k. An entry
        # may name a token past the vocabulary (a draft token without a row).
        rnd = random.Random(op[2])
        k = ref.top_k or 1
        v = ref.vocab_size or VOCAB
        ids = [rnd.randrange(v) for _ in range(op[1])]
        rows = [[rnd.randrange(v + 2) for _ in range(k)] for _ in ids]
        if op[3] in ("int32", "int64"):
            args = (convert(ids, op[3]), np.array(rows, dtype=op[3]).reshape(len(ids), k))
        else:
            args = (convert(ids, op[3]), rows)
        prev_mode = op[4] if len(op) > 4 else "none"
        if prev_mode == "random":
            args += (convert([rnd.randrange(-1, v) for _ in ids], op[3]),)
        elif prev_mode == "text":
            args += (convert([rnd.randrange(-1, v), *ids[:-1]][: len(ids)], op[3]),)
        elif prev_mode == "bad":
            bad = [rnd.randrange(v) for _ in ids] + [rnd.choice([v, -2])]
            args += (convert(bad if rnd.random() < 0.5 else bad[:-1] + bad[:-1], op[3]),)
    elif name == "retrieve":
        token = op[1]
        if token is None:
            snap = ref.snapshot()
            chain = failure_chain(ref.state_path(), snap)
            parents = {p[:-1] for p in snap}
            follow = sorted(
                {
                    p[-1]
                    for u in chain
                    for p in parents
                    if len(p) == len(u) + 1 and p[:-1] == u and len(p) >= ref.min_depth
                }
            )
            token = follow[op[2] % len(follow)] if follow else 0
        args = (token, op[2], op[3], op[4] if len(op) > 4 else -1)
    else:
        args = ()
    return call(ref, name, *args), call(comp, name, *args), args


def check_same(ref: ReferenceAutomaton, comp: Automaton) -> None:
    snap_ref = check_trie(ref)
    snap_comp = check_trie(comp)
    assert snap_ref == snap_comp
    assert ref.node_count == comp.node_count
    assert ref.state_path() == comp.state_path()
    assert (ref.vocab_size, ref.top_k) == (comp.vocab_size, comp.top_k)
    assert ref.pair_snapshot() == comp.pair_snapshot()
    assert ref.pair_count == comp.pair_count == len(ref.pair_snapshot()) <= (ref.vocab_size or 0)


def run(config: tuple[int, ...], ops: list[tuple[Any, ...]]) -> None:
    max_nodes, min_depth, ngram, mode, top_k, late, *rest = config
    pairs = bool(rest[0]) if rest else True
    ref = variant(ReferenceAutomaton, max_nodes, min_depth, ngram, late_halving=bool(late), pair_rows=pairs)
    comp = variant(Automaton, max_nodes, min_depth, ngram, late_halving=bool(late), pair_rows=pairs)
    comp._set_redirect_mode(mode)
    if top_k:
        ref.init_logits(VOCAB, top_k)
        comp.init_logits(VOCAB, top_k)
    for op in ops:
        before = ref.snapshot(), ref.state_path(), ref.node_count, ref.pair_snapshot()
        (kind_r, out_r), (kind_c, out_c), args = apply(ref, comp, op)
        assert kind_r == kind_c, (op, out_r, out_c)
        if kind_r == "error":
            assert out_r == out_c, (op, out_r, out_c)
            # A method that raises changes nothing.
            assert (ref.snapshot(), ref.state_path(), ref.node_count, ref.pair_snapshot()) == before
        elif op[0] == "retrieve":
            next_token, budget, chain, _ = args
            assert out_r.same_as(out_c), (op, out_r, out_c)
            check_draft(out_c, next_token, budget, chain)
            snap = ref.snapshot()
            offered = retrieval_paths(snap, ref.state_path(), next_token, ref.min_depth)
            drafted = draft_paths(out_c)
            retrieved = [p for p, s in zip(drafted, out_c.sources.tolist(), strict=True) if s & 1]
            assert set(retrieved) <= offered, "retrieval drafted a path the trie does not offer"
            if ref.top_k is None:
                # Retrieval only: every offered path fits up to the budget
                # (a chain keeps one branch, so it can hold fewer).
                if chain:
                    assert out_c.size <= min(budget, 1 + len(offered))
                else:
                    assert out_c.size == min(budget, 1 + len(offered))
        check_same(ref, comp)


CONFIGS = st.tuples(
    st.sampled_from([0, 1, 2, 3, 4, 6, 9, 14, 20, 30, 60]),  # max_nodes (0, 1 clamp to 2)
    st.integers(0, 3),  # min_depth (0 clamps to 1)
    st.integers(0, 5),  # ngram (0 clamps to 1)
    st.integers(0, 3),  # redirect walk: hybrid, failure subtree, failure chain, cut subtree
    st.integers(0, 4),  # top_k of a logits table set up front (0: none)
    st.booleans(),  # late_halving: the logits tree's older breadth rule
    st.booleans(),  # pair_rows: rows keyed by (previous token, token) too
)


@examples(1000)
@given(config=CONFIGS, ops=st.lists(OPS, min_size=10, max_size=60))
def test_compiled_matches_reference(config: tuple[int, ...], ops: list[Any]) -> None:
    run(config, ops)


@examples(150)
@given(
    config=st.tuples(
        st.integers(30, 120),
        st.integers(1, 3),
        st.integers(3, 8),
        st.integers(0, 3),
        st.integers(0, 4),
        st.booleans(),
    ),
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("feed"), st.lists(st.integers(0, 3), min_size=5, max_size=30), FORMS),
            st.tuples(
                st.just("retrieve"),
                st.one_of(st.none(), st.integers(0, 3)),
                st.integers(1, 64),
                st.booleans(),
                st.integers(-1, 3),
            ),
            st.tuples(st.just("init_logits"), st.just(VOCAB), st.integers(1, 6)),
            st.tuples(st.just("update"), st.integers(0, 6), st.integers(0, 2**16), FORMS, PREV),
        ),
        min_size=5,
        max_size=25,
    ),
)
def test_longer_texts_match_reference(config: tuple[int, ...], ops: list[Any]) -> None:
    """Longer feeds over 4 tokens: deep tries, long failure chains, many evictions."""
    run(config, ops)


@examples(150)
@given(
    vocab=st.integers(2, 12),
    top_k=st.integers(1, 8),
    budget=st.integers(1, 80),
    chain=st.booleans(),
    late=st.booleans(),
    seed=st.integers(0, 2**16),
    text=st.lists(st.integers(0, 11), max_size=40),
)
def test_full_table_fills_budget_exactly(
    vocab: int, top_k: int, budget: int, chain: bool, late: bool, seed: int, text: list[int]
) -> None:
    """With every logits row written the logits tree never runs dry, so after
    merging with retrieval the tree has exactly `budget` nodes (not a chain)."""
    top_k = min(top_k, vocab)
    text = [t % vocab for t in text]
    rnd = random.Random(seed)
    rows = [rnd.sample(range(vocab), top_k) for _ in range(vocab)]
    ref = variant(ReferenceAutomaton, 200, 1, 4, late_halving=late)
    comp = variant(Automaton, 200, 1, 4, late_halving=late)
    for auto in (ref, comp):
        auto.init_logits(vocab, top_k)
        auto.update(list(range(vocab)), rows)
        auto.feed(text)
    root = rnd.randrange(vocab)
    d_ref = ref.retrieve(root, budget, chain)
    d_comp = comp.retrieve(root, budget, chain)
    assert d_ref.same_as(d_comp)
    check_draft(d_comp, root, budget, chain)
    if not chain:
        assert d_comp.size == budget
