"""Chats seeded from earlier chats (racer_core/corpus.py) on a tiny engine:
the drafts change, greedy output does not."""

from __future__ import annotations

import pytest

from racer_core.corpus import Corpus
from racer_core.events import GenerationConfig, Source
from racer_core.testing import tiny_engine

QUESTION = "Once upon a time there was a small robot"
OTHER = "The quick brown fox jumps over the lazy dog."


@pytest.fixture
def engine(tmp_path, monkeypatch):
    monkeypatch.setenv("RACER_TUI_CACHE_DIR", str(tmp_path / "cache"))
    return tiny_engine("llama", seed=3)


def reply(chat, method: str, text: str = QUESTION, budget: int = 16):
    events = list(chat.send(text, GenerationConfig(method=method, max_new_tokens=48, max_num_draft=budget)))
    tokens = [t for e in events for t in e.token_ids]
    from_table = sum(p.source == Source.LOGITS for e in events for p in e.pieces)
    return tokens, len(events), from_table


@pytest.mark.parametrize("method", ["racer", "logits"])
def test_a_seeded_chat_equals_plain_greedy_and_accepts_the_corpus_drafts(engine, method) -> None:
    plain, _, _ = reply(engine.new_conversation(), "ar")
    assert len(plain) > 8, "too short a reply to tell drafts apart"
    reply(engine.new_conversation(learn=True), method, OTHER)  # an unrelated earlier chat
    first, _, _ = reply(engine.new_conversation(learn=True), method)  # the corpus learns this reply
    cold, cold_steps, cold_table = reply(engine.new_conversation(), method)
    seeded, seeded_steps, seeded_table = reply(engine.new_conversation(learn=True), method)
    assert first == cold == seeded == plain
    # Every position of the reply has its row from the earlier chat: the seeded
    # chat takes more tokens from the logits table, in fewer steps.
    assert seeded_table > cold_table
    assert seeded_steps < cold_steps


def test_the_corpus_is_kept_on_disk_per_model_and_read_by_a_new_engine(engine, tmp_path) -> None:
    reply(engine.new_conversation(learn=True), "racer")
    files = list((tmp_path / "cache" / "corpus").glob("*.npz"))
    assert len(files) == 1 and files[0] == engine.corpus.path
    again = tiny_engine("llama", seed=3)  # the same model: the same file, loaded
    assert again.corpus.path == engine.corpus.path
    assert again.corpus.positions == engine.corpus.positions > 0


def test_a_chat_replaces_its_own_segment_and_a_cleared_corpus_stays_empty(engine) -> None:
    chat = engine.new_conversation(learn=True)
    reply(chat, "racer")
    once = engine.corpus.positions
    reply(chat, "racer", OTHER)
    assert engine.corpus.positions > once  # one segment, the whole chat: not the first turn twice
    assert len(engine.corpus._segments) == 1
    engine.forget_chats()
    assert engine.corpus.positions == 0 and not engine.corpus.path.exists()
    reply(chat, "racer", "And then?")  # opened before the clear: no longer recorded
    assert engine.corpus.positions == 0


def test_learning_off_neither_seeds_nor_records(engine) -> None:
    reply(engine.new_conversation(learn=True), "racer")
    count = engine.corpus.positions
    chat = engine.new_conversation(learn=True)
    chat.learn = False
    _, steps, _ = reply(chat, "racer")
    _, cold_steps, _ = reply(engine.new_conversation(), "racer")
    assert steps == cold_steps
    assert engine.corpus.positions == count


def test_the_bench_path_never_reads_the_corpus(engine) -> None:
    reply(engine.new_conversation(learn=True), "racer")
    chat = engine.new_conversation()
    assert chat.corpus is None and chat.decoder.seed is None and chat.decoder.rows is None
    assert isinstance(engine.corpus, Corpus)
