"""The chat corpus file (racer_core/drafting/corpus.py): bounded, atomic, damage moved aside."""

from __future__ import annotations

import numpy as np
import pytest

from racer_core.drafting.automaton import Automaton
from racer_core.drafting.corpus import Corpus, clear_corpora, corpus_dir, corpus_path

VOCAB = 100


def rows_for(tokens: list[int], k: int = 4) -> list[np.ndarray]:
    """Row i names tokens[i + 1] first (what a model that saw this text would say)."""
    return [np.array([(tokens[i + 1] if i + 1 < len(tokens) else 0), 1, 2, 3][:k], dtype=np.int32) for i in range(len(tokens))]


def add(corpus: Corpus, owner: object, tokens: list[int]) -> None:
    corpus.record(owner, tokens, rows_for(tokens), corpus.epoch)


@pytest.fixture
def path(tmp_path):
    return tmp_path / "c.npz"


def test_saved_and_loaded_as_written(path) -> None:
    corpus = Corpus(path, VOCAB)
    add(corpus, "a", [5, 6, 7, 8])
    add(corpus, "b", [9, 10, 11])
    corpus.save()
    again = Corpus(path, VOCAB)
    assert again.notice is None
    assert [t.tolist() for _, t, _ in again._segments] == [[5, 6, 7, 8], [9, 10, 11]]
    assert again._arrays()[2].tolist() == [-1, 5, 6, 7, -1, 9, 10]  # no pair row across chats
    assert not list(path.parent.glob("*.tmp"))


def test_bounded_to_the_newest_positions(path) -> None:
    corpus = Corpus(path, VOCAB, limit=10)
    add(corpus, "a", list(range(1, 7)))
    add(corpus, "b", list(range(20, 26)))
    assert corpus.positions == 10
    assert [t.tolist() for _, t, _ in corpus._segments] == [[3, 4, 5, 6], list(range(20, 26))]
    add(corpus, "c", list(range(40, 55)))  # one chat longer than the bound: its tail
    assert [t.tolist() for _, t, _ in corpus._segments] == [list(range(45, 55))]


def test_a_chat_replaces_its_segment_and_a_reopened_chat_its_prefix(path) -> None:
    corpus = Corpus(path, VOCAB)
    add(corpus, "a", [1, 2, 3])
    add(corpus, "a", [1, 2, 3, 4, 5])
    add(corpus, "b", [7, 8])
    add(corpus, "c", [1, 2, 3, 4, 5, 6])  # chat "a" reopened after a restart
    assert [t.tolist() for _, t, _ in corpus._segments] == [[7, 8], [1, 2, 3, 4, 5, 6]]


def test_positions_without_rows_keep_the_longest_run(path) -> None:
    corpus = Corpus(path, VOCAB)
    rows = rows_for([1, 2, 3, 4, 5, 6])
    rows[2] = None  # an image placeholder, or a turn decoded without the table
    corpus.record("a", [1, 2, 3, 4, 5, 6], rows, corpus.epoch)
    assert corpus._segments[0][1].tolist() == [4, 5, 6]


def test_seeding_writes_rows_and_pair_rows_newest_last(path) -> None:
    corpus = Corpus(path, VOCAB)
    add(corpus, "a", [5, 6, 7])
    add(corpus, "b", [9, 6, 8])
    automaton = Automaton()
    automaton.init_logits(VOCAB, 2)
    corpus.seed(automaton)
    assert automaton.node_count == 1  # the trie is left to the conversation
    assert automaton.retrieve(6, 1 + 2).tokens.tolist()[:2] == [6, 8]  # the newer row of token 6
    assert automaton.retrieve(6, 1 + 2, prev_token=5).tokens.tolist()[:2] == [6, 7]  # the pair row
    wide = Automaton()
    wide.init_logits(VOCAB, 8)  # wider than the stored rows: the table is left empty
    corpus.seed(wide)
    assert wide.retrieve(6, 4).size == 1


def test_the_narrowest_top_k_is_kept(path) -> None:
    corpus = Corpus(path, VOCAB)
    add(corpus, "a", [5, 6, 7])
    corpus.record("b", [1, 2], rows_for([1, 2], k=2), corpus.epoch)
    assert corpus.top_k == 2 and {r.shape[1] for _, _, r in corpus._segments} == {2}


@pytest.mark.parametrize(
    "damage",
    [b"not a zip", b"PK\x03\x04cut", None],
    ids=["garbage", "cut", "foreign ids"],
)
def test_a_damaged_file_is_moved_aside_and_the_corpus_starts_empty(path, damage) -> None:
    if damage is None:
        other = Corpus(path, VOCAB * 10)
        add(other, "a", [500, 600])
        other.save()
    else:
        path.write_bytes(damage)
    corpus = Corpus(path, VOCAB)
    assert corpus.positions == 0
    assert corpus.notice is not None and "moved it to c.npz.damaged-" in corpus.notice
    assert not path.exists() and len(list(path.parent.glob("c.npz.damaged-*"))) == 1
    add(corpus, "b", [1, 2])
    corpus.save()  # and it works again
    assert Corpus(path, VOCAB).positions == 2


def test_clear_is_immediate_and_clear_corpora_removes_every_model(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RACER_TUI_CACHE_DIR", str(tmp_path / "cache"))
    first, second = Corpus(corpus_path(["m1"]), VOCAB), Corpus(corpus_path(["m2"]), VOCAB)
    for corpus in (first, second):
        add(corpus, "a", [1, 2, 3])
        corpus.save()
    epoch = first.epoch
    first.clear()
    assert first.positions == 0 and not first.path.exists()
    first.record("a", [1, 2, 3], rows_for([1, 2, 3]), epoch)  # a chat opened before the clear
    assert first.positions == 0
    assert clear_corpora() == 1
    assert not corpus_dir().exists() or not list(corpus_dir().glob("*.npz"))
