"""Bad input never crashes: it raises TypeError/ValueError/RuntimeError with a
message naming the problem, and leaves the automaton unchanged and usable.

Every case runs against the compiled class and the reference; both must raise
the same exception with the same message.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from racer_core.drafting.automaton import Automaton, ReferenceAutomaton

IMPLS = [Automaton, ReferenceAutomaton]
VOCAB = 50
TOP_K = 4


def prepared(impl: Any, with_logits: bool = True) -> Any:
    auto = impl(max_nodes=60, min_depth=2, ngram=4)
    if with_logits:
        auto.init_logits(VOCAB, TOP_K)
        auto.update(list(range(0, VOCAB, 3)), [[(t + i + 1) % VOCAB for i in range(TOP_K)] for t in range(0, VOCAB, 3)])
    auto.feed([1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 7, 8, 9, 1, 2])
    return auto


def fingerprint(auto: Any) -> tuple[Any, ...]:
    """Everything observable, retrieval and the logits table included."""
    drafts = []
    bound = auto.vocab_size or VOCAB
    for token in range(0, bound, 5):
        d = auto.retrieve(token, 64)
        drafts.append((d.tokens.tolist(), d.parents.tolist(), d.sources.tolist()))
    return (
        auto.snapshot(),
        auto.state_path(),
        auto.node_count,
        auto.vocab_size,
        auto.top_k,
        drafts,
    )


def follow_up(auto: Any) -> None:
    """A few valid calls: the automaton must still work after an error."""
    auto.feed([3, 4, 1, 2, 3])
    if auto.top_k is not None:
        auto.update([3, 4], [[1] * auto.top_k, [2] * auto.top_k])
    auto.insert([9, 9, 9], 2)
    auto.trans_tokens([9, 9])


def assert_rejected(call: Callable[[Any], Any], error: type[Exception], match: str, with_logits: bool = True) -> None:
    """Both implementations raise `error` (same message) and stay unchanged."""
    messages = []
    for impl in IMPLS:
        auto = prepared(impl, with_logits)
        twin = prepared(impl, with_logits)
        before = fingerprint(auto)
        with pytest.raises(error, match=match) as caught:
            call(auto)
        messages.append(str(caught.value))
        assert fingerprint(auto) == before, f"{impl.__name__} changed after a rejected call"
        follow_up(auto)
        follow_up(twin)
        assert fingerprint(auto) == fingerprint(twin), f"{impl.__name__} unusable after an error"
    assert messages[0] == messages[1], messages


# ----------------------------------------------------------------- tokens


TOKEN_METHODS = ["insert", "add_tokens", "feed", "trans_tokens"]


@pytest.mark.parametrize("method", TOKEN_METHODS)
@pytest.mark.parametrize(
    "tokens, match",
    [
        ([1, -1], r"tokens?\[1\] = -1 is out of range.*0 <= token < 50|pattern\[1\] = -1"),
        ([1, VOCAB], r"\[1\] = 50 is out of range: tokens must satisfy 0 <= token < 50"),
        ([10**30], r"out of range"),
        (np.array([2, 3, VOCAB], dtype=np.int64), r"\[2\] = 50 is out of range"),
        (np.array([-5], dtype=np.int32), r"\[0\] = -5 is out of range"),
        (np.array([2**63], dtype=np.uint64), r"\[0\] = 9223372036854775808 is out of range"),
        (np.array([7, VOCAB], dtype=">i8"), r"\[1\] = 50 is out of range"),
    ],
)
def test_out_of_range_tokens(method: str, tokens: Any, match: str) -> None:
    assert_rejected(lambda a: getattr(a, method)(tokens), ValueError, match)


@pytest.mark.parametrize("method", TOKEN_METHODS)
def test_token_limit_before_init_logits(method: str) -> None:
    assert_rejected(
        lambda a: getattr(a, method)([1, 2**31 - 1]),
        ValueError,
        r"0 <= token < 2147483647",
        with_logits=False,
    )


@pytest.mark.parametrize("method", TOKEN_METHODS)
@pytest.mark.parametrize(
    "tokens, match",
    [
        ([1, 2.0], r"\[1\] must be an integer, got float"),
        ([1, "2"], r"\[1\] must be an integer, got str"),
        ([None], r"\[0\] must be an integer, got NoneType"),
        ([True, 1], r"\[0\] must be an integer, got bool"),
        ([[1, 2], [3, 4]], r"\[0\] must be an integer, got list"),
        (None, r"must be a list, tuple or 1-D numpy integer array, got NoneType"),
        ("abc", r"must be a list, tuple or 1-D numpy integer array, got str"),
        (7, r"must be a list, tuple or 1-D numpy integer array, got int"),
        ({1, 2}, r"got set"),
        (np.array([[1, 2], [3, 4]]), r"must be one-dimensional, got an array of shape \(2, 2\)"),
        (np.array(3), r"must be one-dimensional"),
        (np.array([1.0, 2.0]), r"must hold integers, got dtype float64"),
        (np.array([True]), r"must hold integers, got dtype bool"),
        (np.array(["1"]), r"must hold integers"),
    ],
)
def test_malformed_tokens(method: str, tokens: Any, match: str) -> None:
    assert_rejected(lambda a: getattr(a, method)(tokens), TypeError, match)


@pytest.mark.parametrize(
    "freq, error, match",
    [
        (0, ValueError, r"freq must satisfy 1 <= freq"),
        (-3, ValueError, r"freq must satisfy 1 <= freq"),
        (2**31, ValueError, r"freq must satisfy 1 <= freq <= 2147483647"),
        (1.5, TypeError, r"freq must be an integer, got float"),
        (True, TypeError, r"freq must be an integer, got bool"),
        (None, TypeError, r"freq must be an integer, got NoneType"),
    ],
)
def test_bad_freq(freq: Any, error: type[Exception], match: str) -> None:
    assert_rejected(lambda a: a.insert([5, 6, 7], freq), error, match)


# --------------------------------------------------------------- retrieve


@pytest.mark.parametrize(
    "args, error, match",
    [
        ((3, 0), ValueError, r"max_num_draft must satisfy 1 <= max_num_draft <= 4096, got 0"),
        ((3, -5), ValueError, r"max_num_draft must satisfy .* got -5"),
        ((3, 4097), ValueError, r"got 4097"),
        ((3, 10**20), ValueError, r"max_num_draft must satisfy"),
        ((3, 2.0), TypeError, r"max_num_draft must be an integer, got float"),
        ((3, None), TypeError, r"max_num_draft must be an integer"),
        ((-1, 8), ValueError, r"next_token = -1 is out of range"),
        ((2**31 - 1, 8), ValueError, r"next_token = 2147483647 is out of range: .* < 2147483647"),
        ((2**70, 8), ValueError, r"next_token = \d+ is out of range"),
        (("3", 8), TypeError, r"next_token must be an integer, got str"),
        ((None, 8), TypeError, r"next_token must be an integer, got NoneType"),
        ((3.0, 8), TypeError, r"next_token must be an integer, got float"),
        ((True, 8), TypeError, r"next_token must be an integer, got bool"),
        (([3], 8), TypeError, r"next_token must be an integer, got list"),
        ((3, 8, "yes"), TypeError, r"is_chain must be a bool, got str"),
        ((3, 8, None), TypeError, r"is_chain must be a bool, got NoneType"),
    ],
)
def test_bad_retrieve(args: tuple[Any, ...], error: type[Exception], match: str) -> None:
    assert_rejected(lambda a: a.retrieve(*args), error, match)


def test_numpy_scalars_are_accepted() -> None:
    for impl in IMPLS:
        auto = prepared(impl)
        a = auto.retrieve(np.int64(3), np.int32(16), np.bool_(False))
        b = auto.retrieve(3, 16, False)
        assert a.same_as(b)


# ---------------------------------------------------------- logits table


def test_update_before_init_logits() -> None:
    assert_rejected(
        lambda a: a.update([1], [[1, 2, 3, 4]]),
        RuntimeError,
        r"update called before init_logits",
        with_logits=False,
    )


@pytest.mark.parametrize(
    "ids, rows, error, match",
    [
        ([1, 2], [[1, 2, 3, 4], [1, 2, 3]], ValueError, r"topk_ids must have shape \(2, 4\), row 1 has length 3"),
        ([1, 2], [[1, 2, 3, 4]], ValueError, r"topk_ids must have shape \(2, 4\), got 1 rows"),
        ([1], np.zeros((1, 5), dtype=np.int64), ValueError, r"shape \(1, 4\), got an array of shape \(1, 5\)"),
        ([1, 2], np.zeros((3, 4), dtype=np.int64), ValueError, r"got an array of shape \(3, 4\)"),
        ([1], np.zeros(4, dtype=np.int64), ValueError, r"got an array of shape \(4,\)"),
        ([1], np.zeros((1, 1, 4), dtype=np.int64), ValueError, r"got an array of shape \(1, 1, 4\)"),
        ([1], np.zeros((1, 4)), TypeError, r"topk_ids must hold integers, got dtype float64"),
        ([1], [[1, 2, "3", 4]], TypeError, r"topk_ids\[0\]\[2\] must be an integer, got str"),
        ([1], [[1, 2, 3, None]], TypeError, r"topk_ids\[0\]\[3\] must be an integer"),
        ([1], [None], TypeError, r"topk_ids\[0\] must be a list or tuple, got NoneType"),
        ([1], ["abcd"], TypeError, r"topk_ids\[0\] must be a list or tuple, got str"),
        ([1], None, TypeError, r"topk_ids must be a 2-D numpy integer array or a list of rows"),
        ([1], [[1, 2, 3, 2**31 - 1]], ValueError, r"topk_ids\[0\]\[3\] = 2147483647 is out of range"),
        ([1], np.array([[1, 2, 2**40, 4]]), ValueError, r"topk_ids\[0\]\[2\] = 1099511627776 is out of range"),
        ([1], np.array([[1, 2, -1, 4]]), ValueError, r"topk_ids\[0\]\[2\] = -1 is out of range"),
        ([VOCAB], [[1, 2, 3, 4]], ValueError, r"token_ids\[0\] = 50 is out of range"),
        ([[1]], [[1, 2, 3, 4]], TypeError, r"token_ids\[0\] must be an integer, got list"),
        (np.array([[1]]), [[1, 2, 3, 4]], TypeError, r"token_ids must be one-dimensional"),
        (None, [[1, 2, 3, 4]], TypeError, r"token_ids must be a list"),
    ],
)
def test_bad_update(ids: Any, rows: Any, error: type[Exception], match: str) -> None:
    assert_rejected(lambda a: a.update(ids, rows), error, match)


@pytest.mark.parametrize("impl", IMPLS)
def test_rows_may_name_tokens_past_the_vocabulary(impl: Any) -> None:
    """A row entry at or above vocab_size is a draft token without a row of its
    own: taken by update, drafted, never expanded; retrieve accepts it as root."""
    auto = impl(max_nodes=60)
    auto.init_logits(VOCAB, TOP_K)
    auto.update([1], np.array([[VOCAB, 2, VOCAB + 7, 2**31 - 2]]))
    auto.update([2], [[3, 4, 5, 6]])
    draft = auto.retrieve(1, 64)
    assert draft.tokens.tolist() == [1, VOCAB, 2, VOCAB + 7, 2**31 - 2, 3, 4]
    assert draft.parents.tolist() == [-1, 0, 0, 0, 0, 2, 2]
    for root in (VOCAB, 2**31 - 2):
        assert auto.retrieve(root, 64).tokens.tolist() == [root]
    # Rows are still written only for tokens inside the vocabulary.
    with pytest.raises(ValueError, match=r"token_ids\[0\] = 50 is out of range"):
        auto.update([VOCAB], [[1, 2, 3, 4]])


@pytest.mark.parametrize(
    "vocab, top_k, error, match",
    [
        (0, 1, ValueError, r"vocab_size must satisfy 1 <= vocab_size"),
        (-4, 1, ValueError, r"vocab_size must satisfy"),
        (2**31, 1, ValueError, r"vocab_size must satisfy 1 <= vocab_size <= 2147483647"),
        (10, 0, ValueError, r"top_k must satisfy 1 <= top_k <= vocab_size = 10, got 0"),
        (10, 11, ValueError, r"top_k must satisfy 1 <= top_k <= vocab_size = 10, got 11"),
        (2**26, 8, ValueError, r"exceeds the table limit"),
        (10.0, 2, TypeError, r"vocab_size must be an integer, got float"),
        (10, "2", TypeError, r"top_k must be an integer, got str"),
        (None, 2, TypeError, r"vocab_size must be an integer"),
    ],
)
def test_bad_init_logits(vocab: Any, top_k: Any, error: type[Exception], match: str) -> None:
    assert_rejected(lambda a: a.init_logits(vocab, top_k), error, match)


def test_table_with_fewer_tokens_than_the_trie() -> None:
    """A trie token beyond a later, smaller vocabulary has an empty row: no crash."""
    for impl in IMPLS:
        auto = impl(min_depth=1)
        auto.insert([40, 45, 49])
        auto.init_logits(42, 2)
        auto.update([40, 41], [[41, 0], [1, 2]])
        draft = auto.retrieve(40, 16)
        assert draft.tokens.tolist()[:3] == [40, 45, 41]


# ------------------------------------------------------------ constructor


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"max_nodes": 10.5}, TypeError, r"max_nodes must be an integer, got float"),
        ({"max_nodes": "100"}, TypeError, r"max_nodes must be an integer, got str"),
        ({"max_nodes": None}, TypeError, r"max_nodes must be an integer, got NoneType"),
        ({"min_depth": True}, TypeError, r"min_depth must be an integer, got bool"),
        ({"ngram": [3]}, TypeError, r"ngram must be an integer, got list"),
        ({"max_nodes": 2**31}, ValueError, r"max_nodes must be at most 2147483647"),
        ({"ngram": 10**40}, ValueError, r"ngram must be at most"),
    ],
)
def test_bad_constructor(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    messages = set()
    for impl in IMPLS:
        with pytest.raises(error, match=match) as caught:
            impl(**kwargs)
        messages.add(str(caught.value))
    assert len(messages) == 1


def test_numpy_integer_parameters() -> None:
    for impl in IMPLS:
        auto = impl(np.int64(30), np.int32(1), np.uint8(3))
        assert (auto.max_nodes, auto.min_depth, auto.ngram) == (30, 1, 3)


# ------------------------------------------------------------------ fuzz

JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.text(max_size=3),
    st.lists(st.integers(-3, 60), max_size=5),
    st.lists(st.lists(st.integers(-3, 60), max_size=5), max_size=3),
    st.lists(st.one_of(st.none(), st.floats(), st.text(max_size=2)), max_size=3),
    st.builds(lambda xs: np.array(xs, dtype=np.int64), st.lists(st.integers(-3, 60), max_size=5)),
    st.builds(
        lambda xs: np.array(xs, dtype=np.int32).reshape(-1, 1),
        st.lists(st.integers(-3, 60), max_size=5),
    ),
    st.builds(lambda xs: np.array(xs, dtype=np.float32), st.lists(st.floats(-5, 60), max_size=4)),
)

CALLS = st.one_of(
    st.tuples(st.sampled_from(["insert", "add_tokens", "feed", "trans_tokens"]), JUNK),
    st.tuples(st.just("insert"), JUNK, JUNK),
    st.tuples(st.just("update"), JUNK, JUNK),
    st.tuples(st.just("init_logits"), JUNK, JUNK),
    st.tuples(st.just("retrieve"), JUNK),
    st.tuples(st.just("retrieve"), JUNK, JUNK),
    st.tuples(st.just("retrieve"), JUNK, JUNK, JUNK),
)


@settings(max_examples=300, deadline=None)
@given(calls=st.lists(CALLS, min_size=1, max_size=6), with_logits=st.booleans())
def test_junk_never_crashes_and_both_agree(calls: list[tuple[Any, ...]], with_logits: bool) -> None:
    autos = [prepared(impl, with_logits) for impl in IMPLS]
    for name, *args in calls:
        outcomes = []
        for auto in autos:
            before = fingerprint(auto)
            try:
                result = getattr(auto, name)(*args)
                outcomes.append(("ok", None if result is None else result.tokens.tolist()))
            except (TypeError, ValueError, RuntimeError) as error:
                outcomes.append((type(error).__name__, str(error)))
                assert fingerprint(auto) == before
        assert outcomes[0] == outcomes[1], (name, args, outcomes)
    assert fingerprint(autos[0]) == fingerprint(autos[1])


# ------------------------------------------------------------- re-entry


class CustomInt:
    """An integer type outside int/numpy whose conversion can run any code."""

    def __init__(self, value: int, hook: Callable[[], Any] | None = None) -> None:
        self.value = value
        self.hook = hook

    def __index__(self) -> int:
        if self.hook is not None:
            self.hook()
        return self.value


numbers.Integral.register(CustomInt)


def test_custom_integers_are_accepted() -> None:
    drafts = []
    for impl in IMPLS:
        auto = prepared(impl)
        auto.feed([CustomInt(1), CustomInt(2)])
        auto.insert([CustomInt(3)], CustomInt(2))
        auto.update([CustomInt(4)], [[CustomInt(5)] * TOP_K])
        drafts.append(auto.retrieve(CustomInt(2), CustomInt(16)))
    assert drafts[0].same_as(drafts[1])


@pytest.mark.parametrize(
    "call",
    [
        lambda a, x: a.feed([1, x]),
        lambda a, x: a.insert([1, 2], x),
        lambda a, x: a.update([1], [[1, 2, 3, x]]),
        lambda a, x: a.retrieve(x, 8),
        lambda a, x: a.retrieve(3, x),
        lambda a, x: a.init_logits(x, 2),
    ],
)
def test_calling_back_in_during_conversion_is_refused(call: Callable[[Any, Any], Any]) -> None:
    """A conversion that calls the compiled automaton again (here: shrinking the
    table and overwriting the token buffer) must not corrupt the outer call."""
    auto = prepared(Automaton)
    twin = prepared(Automaton)
    before = fingerprint(auto)

    def hook() -> None:
        auto.init_logits(5, 1)
        auto.feed(list(range(5)) * 20)

    with pytest.raises(RuntimeError, match="called again from inside one of its own calls"):
        call(auto, CustomInt(4, hook))
    assert fingerprint(auto) == before
    follow_up(auto)
    follow_up(twin)
    assert fingerprint(auto) == fingerprint(twin)
