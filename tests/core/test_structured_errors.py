"""A grammar that cannot run is refused in one line when the reply starts
(the API answers 400 with it): a schema or grammar the engine cannot compile,
named; the [structured] extra missing, named; an anchor asked to follow one."""

from __future__ import annotations

import sys

import pytest
from structured_helpers import PROMPT_TEXT, structured_engine

from racer_core.common import grammar_engine as library
from racer_core.common.capabilities import CapabilityError, check_method
from racer_core.common.errors import InputError
from racer_core.common.events import GenerationConfig
from racer_core.common.grammar import Grammar
from racer_core.structured.compile import compile_grammar

pytest.importorskip("llguidance")


def _start(grammar: Grammar, method: str = "racer") -> None:
    engine = structured_engine("llama")
    config = GenerationConfig(method=method, max_new_tokens=4, grammar=grammar)
    next(iter(engine.decoder().generate(engine.text_ids(PROMPT_TEXT), config)))


@pytest.mark.parametrize(("grammar", "named"), [
    (Grammar("json_schema", '{"type": "object", "properties": {"a": {"type": "strin"}}}'), "Invalid type: strin"),
    (Grammar("json_schema", '{"type": "object", "properties": '), "not valid JSON"),
    (Grammar("json_schema", "[1, 2]"), "must be a JSON object"),
    (Grammar("regex", "a(b"), "unclosed group"),
    (Grammar("lark", "start: foo"), 'unknown name: "foo"'),
    (Grammar("gbnf", 'root ::= "a" | ('), "GBNF grammar cannot be read"),
])
def test_a_grammar_that_cannot_compile_is_refused_in_one_line_naming_the_problem(grammar: Grammar, named: str) -> None:
    with pytest.raises(InputError, match="cannot|not valid|must be") as raised:
        _start(grammar)
    message = str(raised.value)
    assert named in message and "\n" not in message, message


def test_gbnf_goes_through_the_engines_converter() -> None:
    engine = structured_engine("llama")
    compiled = compile_grammar(Grammar("gbnf", 'root ::= "yes" | "no"'), engine.tokenizer,
                               engine.runtime.vocab_size, engine.runtime.eos_ids)
    allowed = compiled.matcher().allowed()
    texts = {engine.tokenizer.decode([t]) for t in allowed.nonzero()[0]}
    assert texts and all("yes".startswith(t) or "no".startswith(t) for t in texts), texts


def test_without_the_extra_a_grammar_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llguidance", None)  # `import llguidance` now fails, as where it is missing
    with pytest.raises(InputError) as raised:
        _start(Grammar("json_object"))
    assert str(raised.value) == library.EXTRA_HINT
    assert "[structured]" in library.EXTRA_HINT and "pip install 'racer-tui[structured]'" in library.EXTRA_HINT
    monkeypatch.setattr(library, "available", lambda: False)
    with pytest.raises(CapabilityError, match=r"optional extra \[structured\]") as refused:
        check_method("racer", GenerationConfig(grammar=Grammar("json_object")))
    assert refused.value.param == "response_format"


@pytest.mark.parametrize("anchor", ["hf", "pld"])
def test_an_anchor_refuses_a_grammar_in_one_line(anchor: str) -> None:
    with pytest.raises(CapabilityError, match=f"not supported with method {anchor}") as refused:
        check_method(anchor, GenerationConfig(method=anchor, grammar=Grammar("json_object")))
    assert refused.value.param == "response_format"
    check_method(anchor, GenerationConfig(method=anchor))  # without a grammar it runs


def test_without_a_grammar_nothing_is_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llguidance", None)
    engine = structured_engine("llama")
    config = GenerationConfig(method="racer", max_new_tokens=4)
    assert list(engine.decoder().generate(engine.text_ids(PROMPT_TEXT), config))


def test_a_grammar_is_checked_for_the_loaded_model_before_a_reply() -> None:
    from racer_core.structured.compile import check_grammar

    engine = structured_engine("llama")
    check_grammar(engine, Grammar("json_object"))
    with pytest.raises(InputError, match="Invalid type: strin"):
        check_grammar(engine, Grammar("json_schema", '{"type": "strin"}'))


def test_a_reply_compiles_its_grammar_before_the_loop_runs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # The engine loop steps every sequence: a grammar compiled there (with the vocabulary, about a second
    # the first time) would stall the others. The chat or request thread that starts the reply compiles it.
    import threading

    from racer_core.structured import compile as compiling

    threads: list[str] = []
    real = compiling.compile_grammar

    def recording(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(compiling, "compile_grammar", recording)
    engine = structured_engine("llama")
    config = GenerationConfig(method="racer", max_new_tokens=4, grammar=Grammar("regex", "(fox|dog) [a-z]+"))
    chat = engine.new_conversation()
    assert list(chat.send("Name an animal.", config))
    assert threads and threads[0] == threading.current_thread().name
