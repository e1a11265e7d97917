"""A method's accepted drafts are shown as its own source, as the registry
declares it (racer_core/common/registry.py), in the chat's colours and
legend, the step inspector and the API: suffix's are a suffix tree's and
recycling's recycled top-k, never racer's automaton or logits table (which
is what they were shown as before)."""

from __future__ import annotations

import pytest

from racer_core.common import registry
from racer_core.common.events import Source, StepEvent, TokenPiece
from racer_core.common.step_record import StepRecord
from racer_tui.api.reply import Tally, pieces_json
from racer_tui.colors import LOGITS_GREEN, RETRIEVAL_GREEN, SOURCE_STYLE
from racer_tui.screens.chat import legend


@pytest.mark.parametrize(("method", "source", "key", "label"), [
    ("suffix", Source.SUFFIX, "suffix", "suffix tree"),
    ("recycling", Source.RECYCLED, "recycled", "recycled top-k"),
    ("ngram", Source.NGRAM, "ngram", "prompt lookup"),
    ("eagle3", Source.HEAD, "head", "draft head"),
])
def test_a_method_is_shown_with_its_own_source(method: str, source: Source, key: str, label: str) -> None:
    assert {Source(s.id) for s in registry.REGISTRY[method].sources} == {source}
    # the chat: its own colour, and the legend names it
    assert SOURCE_STYLE[source] not in ("", RETRIEVAL_GREEN, LOGITS_GREEN)
    assert f"draft from the {label}" in legend().plain
    # the step inspector
    record = StepRecord.build([7, 8, 9], [-1, 0, 1], [0, 1, 2], [0, source, source], [0, 0, 0], [-1, -1, -1],
                              [0, 1], 10, 3, 3, "own")
    assert [node.source for node in record.nodes[1:]] == [label, label]
    assert "automaton" not in label and "logits" not in label
    # the API: per token and in the statistics
    pieces = (TokenPiece(8, "a", source), TokenPiece(10, "b", Source.MODEL))
    assert [p["source"] for p in pieces_json(list(pieces))] == [key, "bonus"]
    tally = Tally()
    tally.add(StepEvent(2, pieces, 3, 3, 0.1, 0.2, 0.1))
    stats = tally.to_json(method)
    assert stats["accepted_by_source"] == {key: 1} and stats["accepted_tokens"] == 1


def test_racer_keeps_its_two_sources() -> None:
    record = StepRecord.build([7, 8, 9, 10], [-1, 0, 0, 1], [0, 1, 1, 2],
                              [0, Source.RETRIEVAL, Source.LOGITS, Source.RETRIEVAL], [0, 4, 0, 5], [-1, -1, 0, 1],
                              [0, 1], 11, 4, 4, "fixed")
    assert [n.source for n in record.nodes[1:]] == ["automaton ctx 4", "logits rank 0", "automaton ctx 5 + logits rank 1"]
    assert Tally().to_json("racer")["accepted_by_source"] == {"automaton": 0, "logits": 0}
    assert SOURCE_STYLE[Source.RETRIEVAL] == RETRIEVAL_GREEN and SOURCE_STYLE[Source.LOGITS] == LOGITS_GREEN
