"""Chats seeded from earlier chats (racer_core/drafting/corpus.py) on a tiny engine:
the drafts change, greedy output does not."""

from __future__ import annotations

import pytest

from racer_core.common.events import GenerationConfig, Source
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


def test_the_bench_neither_reads_nor_writes_the_corpus(engine) -> None:
    from racer_core.bench.runner import run_benchmark
    from racer_core.bench.suites import Question

    questions = [Question(1, "a", (QUESTION,))]
    config = GenerationConfig(max_new_tokens=48, max_num_draft=16)

    def bench_steps() -> tuple[int, ...]:
        result = run_benchmark(engine, questions, ["racer"], config, warmup=False)
        return result.records["racer"]["1"].accept_lengths

    cold = bench_steps()
    reply(engine.new_conversation(learn=True), "racer")  # a corpus that would change the drafts
    count = engine.corpus.positions
    assert bench_steps() == cold and len(cold) > 1
    assert engine.corpus.positions == count


def test_a_damaged_corpus_file_is_moved_aside_and_told_to_the_first_chat(engine) -> None:
    path = engine.corpus.path
    del engine.corpus  # read again, from a damaged file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"half a file")
    first, second = engine.new_conversation(learn=True), engine.new_conversation(learn=True)
    assert first.notice is not None and "moved it to" in first.notice
    assert second.notice is None
    tokens, _, _ = reply(first, "racer")  # and the chat goes on, learning afresh
    assert len(tokens) > 8 and engine.corpus.positions > 0


def test_max_breadth_zero_keeps_the_seeded_table_out_of_the_drafts(engine) -> None:
    """The table turned off (the original's `--max-breadth 0`) drafts nothing, even where earlier chats would seed it."""
    reply(engine.new_conversation(learn=True), "racer")  # the corpus learns this reply
    chat = engine.new_conversation(learn=True)
    events = list(chat.send(QUESTION, GenerationConfig(method="racer", max_new_tokens=48, max_num_draft=16,
                                                       max_breadth=0)))
    assert not any(p.source == Source.LOGITS for e in events for p in e.pieces)
