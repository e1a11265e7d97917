"""A Grammar compiled for one model's vocabulary: llguidance's grammar text,
checked, and a matcher at its start that each reply copies.

Compiling a schema takes milliseconds to tens of them (docs/performance.md);
the compiled matchers are kept per grammar and vocabulary, so a program that
sends the same schema with every request compiles it once.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

from racer_core.common.errors import InputError, first_line
from racer_core.common.grammar import GBNF, JSON_OBJECT, JSON_SCHEMA, LARK, REGEX, Grammar
from racer_core.common.grammar_engine import llguidance
from racer_core.structured.json_style import JSON_STYLE
from racer_core.structured.matcher import GrammarMatcher
from racer_core.structured.vocabulary import vocabulary

KEEP = 64  # compiled grammars kept per vocabulary


@dataclass(frozen=True)
class CompiledGrammar:
    """A grammar ready for one vocabulary; `matcher()` starts a reply's state."""

    grammar: Grammar
    start: Any  # llguidance's LLMatcher before any token: copied, never advanced
    vocab_size: int
    eos_ids: frozenset[int]

    def matcher(self) -> GrammarMatcher:
        return GrammarMatcher(self.start.deep_copy(), self.vocab_size, self.eos_ids)


def grammar_text(grammar: Grammar) -> str:
    """`grammar` in llguidance's grammar format; an InputError in one line where its text is malformed."""
    matcher = llguidance().LLMatcher
    if grammar.kind == JSON_OBJECT:
        return matcher.grammar_from_json_schema({"type": "object"}, defaults=JSON_STYLE)
    if grammar.kind == JSON_SCHEMA:
        try:
            schema = json.loads(grammar.text)
        except json.JSONDecodeError as error:
            raise InputError(f"the JSON schema is not valid JSON: {error}") from error
        if not isinstance(schema, dict):
            raise InputError("the JSON schema must be a JSON object")
        try:
            return matcher.grammar_from_json_schema(schema, defaults=JSON_STYLE)
        except ValueError as error:
            raise InputError(f"the JSON schema cannot be compiled: {first_line(error)}") from error
    if grammar.kind == REGEX:
        return matcher.grammar_from_regex(grammar.text)
    if grammar.kind == LARK:
        return matcher.grammar_from_lark(grammar.text)
    assert grammar.kind == GBNF
    from llguidance.gbnf_to_lark import any_to_lark

    try:
        return matcher.grammar_from_lark(any_to_lark(grammar.text))
    except Exception as error:  # the converter's own parser errors, of several types
        raise InputError(f"the GBNF grammar cannot be read: {first_line(error)}") from error


_lock = threading.Lock()


def compile_grammar(grammar: Grammar, tokenizer: Any, vocab_size: int, eos_ids: frozenset[int]) -> CompiledGrammar:
    """`grammar` compiled for a model's `tokenizer` (over `vocab_size` ids,
    ending at `eos_ids`), from the cache when compiled before; an InputError in
    one line naming the problem when it cannot be (a schema feature the
    engine lacks, a bad regex, a Lark syntax error)."""
    lib = llguidance()
    vocab = vocabulary(tokenizer, vocab_size, eos_ids)
    kept = vocab.compiled
    with _lock:
        if grammar in kept:
            kept.move_to_end(grammar)
            return kept[grammar]
    text = grammar_text(grammar)
    is_error, messages = lib.LLMatcher.validate_grammar_with_warnings(text, vocab.engine)
    if is_error:
        raise InputError(f"the {grammar.kind} grammar cannot be compiled: {_one_line(messages[0])}")
    start = lib.LLMatcher(vocab.engine, text, log_level=0)
    if start.is_error():
        raise InputError(f"the {grammar.kind} grammar cannot be compiled: {_one_line(start.get_error())}")
    compiled = CompiledGrammar(grammar, start, vocab_size, eos_ids)
    with _lock:
        kept[grammar] = compiled
        while len(kept) > KEEP:
            kept.popitem(last=False)
    return compiled


def check_grammar(engine: Any, grammar: Grammar) -> None:
    """Compile `grammar` for a loaded RacerEngine's model now (kept for its
    replies): an InputError in one line where it cannot run there, before a
    reply starts (a front end that answers before streaming)."""
    compile_grammar(grammar, engine.tokenizer, engine.runtime.vocab_size, engine.runtime.eos_ids)


def _one_line(message: str) -> str:
    return " ".join(message.split())
