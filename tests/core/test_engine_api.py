"""The event stream and conversations, on a tiny engine with a real tokenizer."""

from __future__ import annotations

import pytest

from racer_core.common.errors import InputError
from racer_core.common.events import GenerationConfig, Source
from racer_core.testing import tiny_engine

TEXT = "The cat sat on the mat, and the dog sat on the log. The cat sat on the mat, and the dog sat"


@pytest.fixture(scope="module")
def engine():
    return tiny_engine("qwen3")


def test_events_carry_text_sources_and_finish(engine) -> None:
    chat = engine.new_conversation("Be brief.")
    events = list(chat.send(TEXT, GenerationConfig(method="racer", max_new_tokens=40, max_num_draft=8)))
    assert events[-1].finished and events[-1].finish_reason in ("eos", "length")
    assert all(not e.finished for e in events[:-1])
    assert [e.step for e in events] == list(range(1, len(events) + 1))
    tokens = sum(e.accept_length for e in events)
    assert tokens <= 40
    assert all(e.pieces[-1].source == Source.MODEL for e in events if e.pieces)
    assert "".join(e.text for e in events) == chat.messages[-1]["content"]
    assert [m["role"] for m in chat.messages] == ["system", "user", "assistant"]


def test_should_stop_cancels_between_steps_and_keeps_the_turn(engine) -> None:
    chat = engine.new_conversation()
    seen = []

    def stop() -> bool:
        return len(seen) >= 3

    for event in chat.send(TEXT, GenerationConfig(method="racer", max_new_tokens=200), should_stop=stop):
        seen.append(event)
    assert seen[-1].finish_reason == "cancelled"
    assert len(seen) == 4
    assert chat.messages[-1]["role"] == "assistant"
    # The conversation goes on consistently after a cancel.
    more = list(chat.send("Again.", GenerationConfig(method="racer", max_new_tokens=10)))
    assert more[-1].finished


def test_multi_turn_keeps_automaton_and_new_chat_starts_clean(engine) -> None:
    chat = engine.new_conversation()
    config = GenerationConfig(method="racer", max_new_tokens=20)
    list(chat.send(TEXT, config))
    first = chat.decoder.drafters["racer"].automaton.node_count
    list(chat.send("Tell me more about the cat.", config))
    assert chat.decoder.drafters["racer"].automaton.node_count > first
    fresh = engine.new_conversation()
    list(fresh.send("Hi.", config))
    assert fresh.decoder.drafters["racer"].automaton.node_count < first
    warm = engine.new_conversation(warm_from=chat)
    assert warm.decoder.drafters["racer"].automaton is chat.decoder.drafters["racer"].automaton


@pytest.mark.parametrize("method", ["hf", "pld"])
def test_transformers_anchors_match_ar(engine, method: str) -> None:
    config = dict(max_new_tokens=24)
    ar = engine.new_conversation()
    list(ar.send(TEXT, GenerationConfig(method="ar", **config)))
    anchor = engine.new_conversation()
    events = list(anchor.send(TEXT, GenerationConfig(method=method, **config)))
    assert events[-1].finished
    assert anchor.messages[-1]["content"] == ar.messages[-1]["content"]


def test_bad_requests_raise_input_errors(engine) -> None:
    chat = engine.new_conversation()
    with pytest.raises(InputError, match="unknown method"):
        list(chat.send("hi", GenerationConfig(method="nope")))
    with pytest.raises(InputError, match="empty"):
        list(chat.send("   ", GenerationConfig()))
    for bad in (0, 5000, "many", 2.5j):
        with pytest.raises(InputError, match="max_num_draft"):
            list(chat.send("hi", GenerationConfig(max_num_draft=bad)))
    with pytest.raises(InputError, match="at most"):
        list(chat.send("word " * 3000, GenerationConfig()))
    assert chat.messages == []  # failed turns leave nothing behind


def test_pieces_add_up_to_the_reply_when_it_ends_mid_character() -> None:
    from racer_core.engine.detokenize import IncrementalDecoder
    from racer_core.testing import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    ids = tokenizer("héllo wörld", add_special_tokens=False)["input_ids"]
    detok = IncrementalDecoder(tokenizer)
    # Byte-level BPE splits the accented characters: find a cut inside one.
    cut = next(i for i in range(1, len(ids)) if tokenizer.decode(ids[:i]).endswith("\ufffd"))
    pieces = [detok.push(t) for t in ids[:cut]]
    pieces.append(detok.flush())
    # the cut character's bytes are held back for good, not handed out as U+FFFD
    assert "".join(pieces) == detok.text() == "h"


def test_a_reply_cut_inside_its_last_character_ends_before_it() -> None:
    # max_tokens cuts the 🚀 of "日本語 🙂 🚀": the stored reply, the streamed pieces and a completion
    # end before it (issue 41), and the characters split across steps before it come whole.
    from engine_helpers import CUT_REPLY, cut_reply_engine

    engine = cut_reply_engine()
    chat = engine.new_conversation()
    events = list(chat.send("Repeat exactly: 日本語 🙂 🚀", GenerationConfig(method="racer", max_new_tokens=40)))
    assert events[-1].finish_reason == "length"
    assert "".join(e.text for e in events) == chat.messages[-1]["content"] == CUT_REPLY
    assert all("\ufffd" not in p.text for e in events for p in e.pieces)
    completed = engine.complete("Repeat exactly:", GenerationConfig(method="racer", max_new_tokens=40))
    assert "".join(e.text for e in completed) == CUT_REPLY
