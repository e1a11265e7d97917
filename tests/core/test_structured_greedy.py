"""Greedy decoding under a grammar: racer equals constrained plain decoding
(ar) token for token on every lean family's tiny model, for a JSON schema, a
regex and a Lark tool call, with drafts accepted, the grammar's forced
tokens among them; every reply ends and matches its grammar."""

from __future__ import annotations

import json
import math
import re

import jsonschema
import pytest
from structured_helpers import GRAMMARS, PROMPT_TEXT, REGEX, SCHEMA, TOOL_ARGUMENTS, reply_text, structured_engine

from racer_core.common import registry
from racer_core.common.events import GenerationConfig, Source
from racer_core.models.families import FAMILIES

pytest.importorskip("llguidance")

NEW_TOKENS = 120


def _validate(kind: str, text: str) -> None:
    if kind == "schema":
        jsonschema.validate(json.loads(text), SCHEMA)
    elif kind == "regex":
        assert re.fullmatch(REGEX, text), text
    else:
        match = re.fullmatch(r'<tool_call>\{"name": "get_weather", "arguments": (.*)\}</tool_call>', text)
        assert match, text
        jsonschema.validate(json.loads(match.group(1)), TOOL_ARGUMENTS)


@pytest.mark.parametrize("kind", sorted(GRAMMARS))
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_constrained_racer_equals_constrained_ar_with_drafts_accepted(family: str, kind: str) -> None:
    engine = structured_engine(family)
    prompt = engine.text_ids(PROMPT_TEXT)
    grammar = GRAMMARS[kind]
    plain = list(engine.decoder().generate(prompt, GenerationConfig(method="ar", max_new_tokens=NEW_TOKENS,
                                                                     grammar=grammar)))
    expected = [t for s in plain for t in s.tokens]
    assert plain[-1].finish_reason == "eos", (family, kind, reply_text(engine, expected))
    _validate(kind, reply_text(engine, expected))
    assert all(src == Source.MODEL for s in plain for src in s.sources)  # ar drafts nothing, the grammar neither
    for budget in ("auto", 8):
        config = GenerationConfig(method="racer", max_new_tokens=NEW_TOKENS, grammar=grammar, max_num_draft=budget)
        steps = list(engine.decoder().generate(prompt, config))
        assert [t for s in steps for t in s.tokens] == expected, (family, kind, budget)
        accepted = [src for s in steps[1:] for src in s.sources if src != Source.MODEL]
        assert accepted and len(steps) < len(plain), (family, kind, budget, "no draft was accepted")
        assert Source.GRAMMAR in accepted, (family, kind, budget, "no forced token was accepted")


DRAFTING = [spec.name for spec in registry.METHOD_SPECS if spec.drafts and not spec.needs_head
            and registry.missing_extra(spec.name) is None]


@pytest.mark.parametrize("method", DRAFTING)
def test_every_drafting_method_follows_the_grammar_as_ar_does(method: str) -> None:
    engine = structured_engine("llama")
    prompt = engine.text_ids(PROMPT_TEXT)
    grammar = GRAMMARS["schema"]
    expected = [t for s in engine.decoder().generate(prompt, GenerationConfig(
        method="ar", max_new_tokens=NEW_TOKENS, grammar=grammar)) for t in s.tokens]
    steps = list(engine.decoder().generate(prompt, GenerationConfig(method=method, max_new_tokens=NEW_TOKENS,
                                                                     grammar=grammar)))
    assert [t for s in steps for t in s.tokens] == expected, method
    assert len(steps) < len(expected), method  # the forced tokens at least were drafted and accepted


def test_log_probabilities_under_a_grammar_are_the_models_own_and_finite() -> None:
    """The mask is a processor: logprobs report the model's distribution before it (none is -inf)."""
    engine = structured_engine("qwen2")
    prompt = engine.text_ids(PROMPT_TEXT)
    config = GenerationConfig(method="racer", max_new_tokens=NEW_TOKENS, grammar=GRAMMARS["regex"], logprobs=3)
    steps = list(engine.decoder().generate(prompt, config))
    values = [v for s in steps for lp, top in s.logprobs for v in (lp, *(x for _, x in top))]
    assert values and all(math.isfinite(v) for v in values)
    plain = list(engine.decoder().generate(prompt, GenerationConfig(method="ar", max_new_tokens=NEW_TOKENS,
                                                                     grammar=GRAMMARS["regex"], logprobs=3)))
    assert [lp for s in plain for lp in s.logprobs] == [lp for s in steps for lp in s.logprobs]


def test_step_records_show_the_verified_tree_with_its_forced_nodes() -> None:
    """The inspector's record is the tree the pass verified (pruned and grown),
    the policy's path estimates aligned with its nodes (an added node takes its parent's)."""
    engine = structured_engine("llama")
    config = GenerationConfig(method="racer", max_new_tokens=NEW_TOKENS, grammar=GRAMMARS["tool_call"])
    steps = list(engine.decoder().generate(engine.text_ids(PROMPT_TEXT), config))
    records = [s.record for s in steps[1:]]
    assert any(node.source_id == int(Source.GRAMMAR) for r in records for node in r.nodes)
    for record in records:
        assert record.estimates is None or len(record.estimates) == record.size
        for node in record.nodes[1:]:
            if node.source_id == int(Source.GRAMMAR) and record.estimates is not None:
                assert node.estimate == record.nodes[node.parent].estimate
