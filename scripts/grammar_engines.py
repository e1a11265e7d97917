"""llguidance against xgrammar on a model's vocabulary: the measurement
behind the [structured] extra's choice (docs/design.md "Structured output").

For each engine and three grammars (JSON mode, a nested schema, a tool
call's arguments) it prints the time to compile, the time of one token mask
(walking a valid answer token by token: mask, then accept), and whether the
forks and rollbacks a draft tree needs work (accept k tokens, roll back, take
another branch, and get the masks a fresh walk gets).

    python scripts/grammar_engines.py                    # the embedded model's tokenizer
    python scripts/grammar_engines.py --model PATH --rounds 1
    python scripts/grammar_engines.py --replies 200     # and constrained replies, ar against racer

An engine that is not installed is said so and skipped. With --replies N the
model itself answers one prompt per grammar under it, greedy, with `ar` and
`racer` (N new tokens at most): their tokens per second, racer's mean
accepted tokens per step (MAT) with the grammar's forced tokens counted
apart, and the time racer's steps spent in the grammar (the tree walk:
masks, pruning, forced drafts) as a share of their whole time.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

NESTED = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"},
                                                     "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                    "required": ["street", "city", "zip"]},
        "phones": {"type": "array", "items": {"type": "object", "properties": {
            "kind": {"enum": ["home", "work", "mobile"]}, "number": {"type": "string"}},
            "required": ["kind", "number"]}},
    },
    "required": ["name", "age", "address", "phones"],
}
TOOL = {
    "type": "object",
    "properties": {"name": {"const": "get_weather"}, "arguments": {
        "type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]},
                                         "days": {"type": "integer", "minimum": 1, "maximum": 14}},
        "required": ["city", "unit"], "additionalProperties": False}},
    "required": ["name", "arguments"], "additionalProperties": False,
}
# name -> (schema or None for JSON mode, a valid answer, written as the compact JSON style writes it)
CASES: dict[str, tuple[dict[str, Any] | None, str]] = {
    "json_object": (None, '{"answer": "Paris is the capital of France", "confidence": 0.9, "sources": ["atlas"]}'),
    "nested": (NESTED, json.dumps({"name": "Ada Lovelace", "age": 36, "address": {
        "street": "12 St James's Square", "city": "London", "zip": "10001"},
        "phones": [{"kind": "home", "number": "555-0100"}, {"kind": "work", "number": "555-0199"}]})),
    "tool_call": (TOOL, json.dumps({"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius",
                                                                       "days": 3}})),
}


def _tokenizer(model: str | None) -> Any:
    if model is None:
        from racer_core.models.checkpoint.embedded import open_embedded

        return open_embedded(True, "its tokenizer").tokenizer()
    from pathlib import Path

    from racer_core.models.checkpoint.base import load_tokenizer

    return load_tokenizer(Path(model), model, False)


def _eos(tokenizer: Any) -> list[int]:
    return [int(tokenizer.eos_token_id)]


class Llguidance:
    name = "llguidance"

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        from racer_core.structured.vocabulary import vocabulary

        self.vocab_size = vocab_size
        start = time.perf_counter()
        self.tokenizer = vocabulary(tokenizer, vocab_size, frozenset(_eos(tokenizer))).engine
        self.setup_s = time.perf_counter() - start
        self.bits = np.zeros((vocab_size + 31) // 32, dtype=np.int32)

    def compile(self, schema: dict[str, Any] | None) -> Any:
        import llguidance

        from racer_core.structured.json_style import JSON_STYLE

        text = llguidance.LLMatcher.grammar_from_json_schema(schema or {"type": "object"}, defaults=JSON_STYLE)
        matcher = llguidance.LLMatcher(self.tokenizer, text, log_level=0)
        assert not matcher.is_error(), matcher.get_error()
        return matcher

    def matcher(self, compiled: Any) -> Any:
        return compiled.deep_copy()

    def mask(self, matcher: Any) -> np.ndarray:
        matcher.unsafe_compute_mask_ptr(self.bits.ctypes.data, self.bits.nbytes)
        return self.bits.copy()

    def accept(self, matcher: Any, token: int) -> bool:
        return bool(matcher.consume_token(token)) and not matcher.is_error()

    def rollback(self, matcher: Any, count: int) -> None:
        matcher.rollback(count)


class Xgrammar:
    name = "xgrammar"

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        import xgrammar

        from racer_core.structured.vocabulary import token_bytes

        self.xgr = xgrammar
        start = time.perf_counter()
        info = xgrammar.TokenizerInfo(token_bytes(tokenizer, vocab_size), xgrammar.VocabType.RAW,
                                      vocab_size=vocab_size, stop_token_ids=_eos(tokenizer))
        self.info = info
        self.setup_s = time.perf_counter() - start
        self.bits = xgrammar.allocate_token_bitmask(1, vocab_size)

    def compile(self, schema: dict[str, Any] | None) -> Any:
        compiler = self.xgr.GrammarCompiler(self.info, cache_enabled=False)
        if schema is None:
            return compiler.compile_builtin_json_grammar()
        return compiler.compile_json_schema(json.dumps(schema), any_whitespace=False, separators=(", ", ": "))

    def matcher(self, compiled: Any) -> Any:
        return self.xgr.GrammarMatcher(compiled)  # rollback is unlimited in xgrammar 0.2

    def mask(self, matcher: Any) -> np.ndarray:
        matcher.fill_next_token_bitmask(self.bits)
        return self.bits[0].numpy().copy()

    def accept(self, matcher: Any, token: int) -> bool:
        return bool(matcher.accept_token(token))

    def rollback(self, matcher: Any, count: int) -> None:
        matcher.rollback(count)


def _engines(tokenizer: Any, vocab_size: int) -> list[Any]:
    engines = []
    for make in (Llguidance, Xgrammar):
        try:
            engines.append(make(tokenizer, vocab_size))
        except ImportError as error:
            print(f"{make.name}: not installed ({error.name}); skipped")
    return engines


def _best(times: list[float]) -> float:
    return min(times)


def _timed(run: Callable[[], Any], rounds: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return _best(times), result


def walk(engine: Any, compiled: Any, ids: list[int]) -> tuple[list[float], list[np.ndarray]]:
    """Mask then accept each token of `ids`; the mask times and the masks (the answer must be valid)."""
    matcher = engine.matcher(compiled)
    times, masks = [], []
    for token in ids:
        start = time.perf_counter()
        mask = engine.mask(matcher)
        times.append(time.perf_counter() - start)
        masks.append(mask)
        assert (int(mask[token // 32]) >> (token % 32)) & 1, f"{engine.name}: the answer's token {token} is masked"
        assert engine.accept(matcher, token)
    return times, masks


def forks(engine: Any, compiled: Any, ids: list[int], other: list[int], k: int) -> bool:
    """Accept k tokens of `other`, roll them back, walk `ids`: the masks equal a fresh walk's."""
    _, fresh = walk(engine, compiled, ids)
    matcher = engine.matcher(compiled)
    taken = 0
    for token in other[:k]:
        if not engine.accept(matcher, token):
            break
        taken += 1
    engine.rollback(matcher, taken)
    for token, expected in zip(ids, fresh, strict=True):
        if not np.array_equal(engine.mask(matcher), expected) or not engine.accept(matcher, token):
            return False
    return taken == k


PROMPTS = {
    "json_object": "Describe Paris as a JSON object.",
    "nested": "Give Ada Lovelace's contact card as JSON: name, age, address (street, city, zip), phones.",
    "tool_call": "What is the weather in Oslo in celsius for the next 3 days? Call the tool.",
}


def replies(model: str | None, new_tokens: int) -> None:
    """Constrained ar against constrained racer on the model, one prompt per grammar."""
    from racer_core.common.events import GenerationConfig, Source
    from racer_core.common.grammar import Grammar
    from racer_core.engine.engine import load_engine
    from racer_core.structured import reply

    engine = load_engine(model)
    spent = [0.0]
    constrain = reply.ReplyGrammar.constrain

    def timed(self: Any, tree: Any) -> Any:
        start = time.perf_counter()
        try:
            return constrain(self, tree)
        finally:
            spent[0] += time.perf_counter() - start

    reply.ReplyGrammar.constrain = timed  # type: ignore[method-assign]
    try:
        for case, (schema, _) in CASES.items():
            grammar = Grammar("json_object") if schema is None else Grammar("json_schema", json.dumps(schema))
            seen: dict[str, tuple[list[int], float, int]] = {}
            for method in ("ar", "racer"):
                chat = engine.new_conversation()
                spent[0] = 0.0
                start = time.perf_counter()
                events = list(chat.send(PROMPTS[case], GenerationConfig(method=method, max_new_tokens=new_tokens,
                                                                        grammar=grammar)))
                seconds = time.perf_counter() - start
                tokens = [p.token_id for e in events for p in e.pieces]
                seen[method] = (tokens, seconds, len(events))
                sources = [p.source for e in events[1:] for p in e.pieces]
                forced = sources.count(Source.GRAMMAR)
                drafted = sum(src not in (Source.MODEL, Source.GRAMMAR) for src in sources)
                steps = max(len(events) - 1, 1)
                print(f"{case:<11} {method:<5} {len(tokens):4d} tokens {len(tokens) / seconds:6.1f} tok/s"
                      f"   MAT {(len(tokens) - 1) / steps:.2f} (forced {forced / steps:.2f}, drafted"
                      f" {drafted / steps:.2f})   grammar {spent[0] / seconds * 100:4.1f}% of the time"
                      f" ({spent[0] / steps * 1e3:.2f} ms a step)")
            same = seen["ar"][0] == seen["racer"][0]
            print(f"{case:<11} racer/ar {seen['ar'][1] / seen['racer'][1]:.2f}x   same tokens: {same}")
    finally:
        reply.ReplyGrammar.constrain = constrain  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="a checkpoint folder whose tokenizer to use (default: embedded)")
    parser.add_argument("--rounds", type=int, default=5, help="compiles per grammar (the best is shown)")
    parser.add_argument("--replies", type=int, default=0, metavar="N",
                        help="also answer under each grammar with ar and racer, N new tokens at most")
    args = parser.parse_args(argv)
    tokenizer = _tokenizer(args.model)
    vocab_size = len(tokenizer)
    print(f"vocabulary: {vocab_size} tokens")
    for engine in _engines(tokenizer, vocab_size):
        print(f"{engine.name}: tokenizer set up in {engine.setup_s * 1e3:.0f} ms")
        for case, (schema, answer) in CASES.items():
            ids = list(tokenizer.encode(answer, add_special_tokens=False))
            compile_s, compiled = _timed(functools.partial(engine.compile, schema), args.rounds)
            times, _ = walk(engine, compiled, ids)
            other = list(tokenizer.encode('{"zzz": [1, 2, 3], "q": null}', add_special_tokens=False))
            fork = forks(engine, compiled, ids, other if schema is None else ids[:2] + other[2:], k=2)
            print(f"{engine.name} {case:<11} compile {compile_s * 1e3:7.1f} ms   mask {statistics.mean(times) * 1e6:6.0f} us"
                  f" mean, {statistics.median(times) * 1e6:6.0f} us median, {max(times) * 1e6:6.0f} us max"
                  f" over {len(ids)} tokens   fork/rollback {'ok' if fork else 'FAILS'}")
        if engine.name == "llguidance":
            print(f"racer_core.structured (llguidance, its mask unpacked to a bool per token): {racers_mask(tokenizer, vocab_size)}")
    if args.replies:
        replies(args.model, args.replies)
    return 0


def racers_mask(tokenizer: Any, vocab_size: int) -> str:
    """The nested answer walked by the decoder's own matcher (GrammarMatcher.allowed, then accept)."""
    from racer_core.common.grammar import Grammar
    from racer_core.structured.compile import compile_grammar

    grammar = Grammar("json_schema", json.dumps(NESTED))
    matcher = compile_grammar(grammar, tokenizer, vocab_size, frozenset(_eos(tokenizer))).matcher()
    times = []
    for token in tokenizer.encode(CASES["nested"][1], add_special_tokens=False):
        start = time.perf_counter()
        allowed = matcher.allowed()
        times.append(time.perf_counter() - start)
        assert allowed[token]
        matcher.accept(token)
    return f"mask {statistics.mean(times) * 1e6:.0f} us mean, {statistics.median(times) * 1e6:.0f} us median"


if __name__ == "__main__":
    raise SystemExit(main())
