"""Constrained suites: the `structured` suite's schemas, the grammar per question,
validity checked from the replies, MAT with the grammar's forced tokens apart,
and the CLI's one-line refusal without the [structured] extra."""

from __future__ import annotations

import importlib.util
import json

import jsonschema
import pytest
from fake_engine import FakeEngine

from racer_core.bench import constrained
from racer_core.bench.answers import AnswerRecord, Choice
from racer_core.bench.constrained import Validity, check_output, schema_text, validity
from racer_core.bench.report import bench_tables
from racer_core.bench.runner import WARMUP_PROMPT, load_results, run_benchmark
from racer_core.bench.suites import Question, load_suite, parse_questions
from racer_core.common import grammar_engine as library
from racer_core.common.errors import InputError
from racer_core.common.events import GenerationConfig, Source, StepEvent
from racer_core.common.grammar import Grammar
from racer_tui.cli import main

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
REPLIES = {  # prompt -> the scripted reply
    "Who is Ada?": '{"name": "Ada", "age": 36}',  # valid against PERSON
    "Where is Ada?": '{"name": "Ada", "age": 36}',  # JSON, but CITY wants a city: invalid
    "Say it in JSON.": "Ada is thirty-six.",  # not JSON: unparsable
    "Plain question.": "No schema here.",  # unconstrained: not counted
}
QUESTIONS = [
    Question(1, "extraction", ("Who is Ada?",), schema=schema_text(PERSON)),
    Question(2, "extraction", ("Where is Ada?",), schema=schema_text(CITY)),
    Question(3, "records", ("Say it in JSON.",), schema=schema_text(PERSON)),
    Question(4, "plain", ("Plain question.",)),
]
GREEDY = GenerationConfig(max_new_tokens=64)


class SchemaEngine(FakeEngine):
    """The scripted engine with a reply per prompt, forcing grammar tokens under a grammar."""

    def __init__(self) -> None:
        super().__init__(forced=True)

    def reply_for(self, user_text: str) -> str:
        return REPLIES.get(user_text, self.reply)


def test_structured_suite_has_twenty_questions_each_with_a_valid_schema():
    questions = load_suite("structured")
    assert len(questions) == 20
    assert {q.category for q in questions} == {"extraction", "records", "tool_call"}
    for q in questions:
        assert q.schema is not None, q.question_id
        schema = json.loads(q.schema)
        jsonschema.validators.validator_for(schema).check_schema(schema)
        assert len(q.turns) == 1
        # lists bounded as the passage is, free text by length: a small model that repeats a record
        # or a word must still close the JSON within max new tokens (unbounded, 8 of 20 replies ran
        # out at 256 on the embedded model; with lists bounded, 1 still did inside a string)
        assert all("maxItems" in a for a in _typed(schema, "array")), q.question_id
        assert all({"maxLength", "enum", "pattern"} & set(t) for t in _typed(schema, "string")), q.question_id
    for q in (q for q in questions if q.category == "tool_call"):
        # a tool call is {"name": ..., "arguments": {...}}, one tool or a choice of them
        for option in json.loads(q.schema).get("anyOf", [json.loads(q.schema)]):
            assert set(option["required"]) == {"name", "arguments"}
            assert "const" in option["properties"]["name"]


def _typed(node: object, kind: str) -> list[dict]:
    """Every schema of type `kind` inside `node`."""
    if isinstance(node, dict):
        own = [node] if node.get("type") == kind else []
        return own + [a for v in node.values() for a in _typed(v, kind)]
    if isinstance(node, list):
        return [a for v in node for a in _typed(v, kind)]
    return []


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ('"object"', "schema must be a JSON object"),
        ('{"type": 5}', "schema is not a valid JSON Schema"),
    ],
)
def test_a_bad_schema_is_refused_with_its_line(schema, message):
    lines = ['{"question_id": 1, "category": "x", "turns": ["a"]}',
             f'{{"question_id": 2, "category": "x", "turns": ["b"], "schema": {schema}}}']
    with pytest.raises(InputError, match=rf"q\.jsonl, line 2: {message}"):
        parse_questions(lines, "q.jsonl")


def test_the_runner_gives_each_constrained_question_its_schema_as_the_grammar():
    engine = SchemaEngine()
    result = run_benchmark(engine, QUESTIONS, ["ar", "racer"], GREEDY)
    sent = {(c.method, text): c.grammar for c, (text, _) in zip(engine.configs, engine.prompts, strict=True)}
    # a constrained run warms up under JSON mode: the grammar engine's first use is not timed
    assert sent[("ar", WARMUP_PROMPT)] == sent[("racer", WARMUP_PROMPT)] == Grammar("json_object")
    for method in ("ar", "racer"):
        assert sent[(method, "Who is Ada?")] == Grammar("json_schema", schema_text(PERSON))
        assert sent[(method, "Where is Ada?")] == Grammar("json_schema", schema_text(CITY))
        assert sent[(method, "Plain question.")] is None
    assert result.records["racer"]["1"].schema == schema_text(PERSON)
    assert result.records["racer"]["4"].schema is None


def test_validity_is_counted_from_the_replies():
    result = run_benchmark(SchemaEngine(), QUESTIONS, ["ar", "racer"], GREEDY)
    for method in ("ar", "racer"):
        assert result.validity(method) == Validity(valid=1, invalid=1, unparsable=1)
    assert result.validity("racer", "extraction") == Validity(valid=1, invalid=1)
    assert result.validity("racer", "plain") == Validity()  # unconstrained: nothing to check


def test_check_output_and_validity_over_choices_and_turns():
    schema = schema_text(PERSON)
    assert check_output('  {"name": "A", "age": 1}\n', schema) == "valid"
    assert check_output('{"name": "A", "age": "one"}', schema) == "invalid"
    assert check_output('{"name": "A", "age": 1', schema) == "unparsable"
    assert check_output("", schema) == "unparsable"
    texts = ('{"name": "A", "age": 1}', "[1, 2]", "nope")
    choices = tuple(Choice(i, (t,), (1,), (0.1,), ()) for i, t in enumerate(texts))
    constrained_record = AnswerRecord(1, "x", "m", "ar", choices, schema=schema)
    plain = AnswerRecord(2, "x", "m", "ar", choices)
    counted = validity([constrained_record, plain])
    assert counted == Validity(1, 1, 1)
    assert counted.text == "1/3" and counted.share == pytest.approx(1 / 3)


def test_mat_counts_the_grammars_forced_tokens_apart():
    engine = SchemaEngine()
    events: list[StepEvent] = []
    result = run_benchmark(engine, QUESTIONS, ["ar", "racer"], GREEDY,
                           on_progress=lambda p: p.event is not None and p.method == "racer" and events.append(p.event))
    steps = [e for e in events if e.step > 1 and e.pieces]
    forced = sum(e.from_source(Source.GRAMMAR) for e in steps)
    assert forced > 0  # the scripted engine forced some tokens under the grammar
    racer = result.method_totals()["racer"].stats
    assert racer.grammar == forced
    assert racer.mat_grammar == pytest.approx(forced / len(steps))
    assert racer.mat_grammar + racer.mat_without_grammar == pytest.approx(racer.mat)
    ar = result.method_totals()["ar"].stats
    assert ar.mat_grammar == 0.0 and ar.mat_without_grammar == ar.mat
    record = result.records["racer"]["1"]
    assert record.accepted_from("grammar") == sum(
        e.from_source(Source.GRAMMAR) for e in steps[: len(record.accept_lengths)]
    )


def test_answer_files_keep_the_schema_and_sources_for_the_report(tmp_path):
    live = run_benchmark(SchemaEngine(), QUESTIONS, ["ar", "racer"], GREEDY, answer_dir=tmp_path)
    loaded = load_results(tmp_path)
    for method in ("ar", "racer"):
        assert loaded.validity(method) == live.validity(method)
        assert loaded.method_totals()[method].stats.grammar == live.method_totals()[method].stats.grammar
    summary = loaded.to_summary()
    assert summary["methods"]["racer"]["validity"] == {"valid": 1, "invalid": 1, "unparsable": 1,
                                                       "valid_share": 0.3333}
    assert summary["methods"]["racer"]["mat_grammar"] == pytest.approx(live.method_totals()["racer"].stats.mat_grammar,
                                                                      abs=1e-4)
    table = bench_tables(loaded, categories=False)[-1]
    assert table.title.startswith("constrained replies")
    column = {c.header: [str(cell) for cell in c.cells] for c in table.columns}
    rows = column["method"]
    at = rows.index("racer")
    assert (column["replies"][at], column["valid"][at], column["invalid"][at], column["not JSON"][at]) == (
        "3", "1/3", "1", "1")
    racer = live.method_totals()["racer"].stats
    assert column["MAT grammar"][at] == f"{racer.mat_grammar:.2f}"
    assert column["MAT other"][at] == f"{racer.mat_without_grammar:.2f}"


def test_an_unconstrained_run_keeps_its_tables_and_summary():
    plain = [q for q in QUESTIONS if q.schema is None]
    engine = SchemaEngine()
    result = run_benchmark(engine, plain, ["ar", "racer"], GREEDY)
    assert not result.constrained
    assert all(c.grammar is None for c in engine.configs)  # the warm-up too
    assert "validity" not in result.to_summary()["methods"]["racer"]
    assert len(bench_tables(result, categories=False)) == 1  # all questions; no constrained table


def test_bench_refuses_a_constrained_suite_in_one_line_without_llguidance(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llguidance" else real(name, *a))
    loaded = []
    rc = main(["bench", "structured", "--methods", "ar,racer"], engine_loader=lambda **kw: loaded.append(kw))
    err = capsys.readouterr().err.strip()
    assert rc == 2 and not loaded  # refused before any model loads
    assert len(err.splitlines()) == 1
    assert "[structured]" in err and "llguidance" in err and "structured" in err


def test_the_refusal_needs_a_schema_and_a_missing_library(monkeypatch):
    assert constrained.structured_refusal(QUESTIONS[3:], "plain") is None
    monkeypatch.setattr(library, "available", lambda: True)
    assert constrained.structured_refusal(QUESTIONS, "mini") is None
    monkeypatch.setattr(library, "available", lambda: False)
    assert "[structured]" in constrained.structured_refusal(QUESTIONS, "mini")


def test_an_anchor_cannot_follow_a_schema_and_is_refused_before_the_run(capsys):
    engine = SchemaEngine()
    with pytest.raises(InputError, match="structured output is not supported with method hf"):
        run_benchmark(engine, QUESTIONS, ["ar", "hf"], GREEDY)
    assert engine.configs == []  # not even a warm-up
    run_benchmark(SchemaEngine(), QUESTIONS[3:], ["ar", "hf"], GREEDY)  # unconstrained: the anchor runs
    rc = main(["bench", "structured", "--methods", "ar,hf"], engine_loader=lambda **kw: pytest.fail("loaded"))
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "method hf" in err
