"""The engine with and without the logits table's pair rows (docs/automaton.md):
greedy output equals plain decoding either way."""

from __future__ import annotations

import functools

import pytest
from engine_helpers import PROMPT, engine_for

from racer_core.common.events import GenerationConfig
from racer_core.drafting import racer
from racer_core.drafting.automaton import Automaton
from racer_core.drafting.automaton.variants import variant


@pytest.mark.parametrize("pair_rows", [True, False])
def test_greedy_racer_equals_plain_with_and_without_pair_rows(pair_rows: bool, monkeypatch) -> None:
    """The engine writes pair rows (parent's token, node's token) for every
    verified node; drafts change, greedy output does not."""
    monkeypatch.setattr(racer, "Automaton", functools.partial(variant, Automaton, pair_rows=pair_rows))
    engine = engine_for("llama")
    outputs = {}
    for method, budget in (("ar", 1), ("racer", 16), ("logits", 16), ("racer", "auto")):
        dec = engine.decoder()
        config = GenerationConfig(method=method, max_new_tokens=64, max_num_draft=budget)
        steps = list(dec.generate(list(PROMPT), config))
        outputs[method, budget] = [t for s in steps for t in s.tokens]
        if method != "ar":
            automaton = dec.drafters["racer"].automaton
            assert automaton is not None and automaton.pair_rows is pair_rows
            assert len(steps) < len(outputs[method, budget]), "no draft accepted: the equality would prove nothing"
            assert (automaton.pair_count > 0) is pair_rows
    plain = outputs["ar", 1]
    assert len(plain) == 64
    assert all(tokens == plain for tokens in outputs.values()), outputs
