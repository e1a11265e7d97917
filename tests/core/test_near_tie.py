"""Near-tie accounting: tie margins in ulps, where the engine records them, and the verdicts."""

from __future__ import annotations

import pytest
import torch

from racer_core.bench.answers import AnswerRecord, Choice
from racer_core.bench.report import bench_tables
from racer_core.bench.results import BenchResult
from racer_core.bench.runner import run_benchmark
from racer_core.bench.suites import Question
from racer_core.common.events import GenerationConfig
from racer_core.engine.engine import RacerEngine
from racer_core.testing import tiny_model, tiny_tokenizer
from racer_core.verify.near_tie import MARGIN_CAP, NEAR_TIE_ULPS, classify_turns, first_difference, tie_margins

BF16_EPS = torch.finfo(torch.bfloat16).eps


def test_margins_are_in_ulps_of_the_top_logit():
    # bf16 at 16: ulp = 16 * 2**-7 = 0.125; at 0.75 (in [0.5, 1)): 2**-8
    rows = torch.tensor([[16.0, 15.875, 1.0], [0.75, 0.0, 0.75 - 2 * 2**-8], [3.0, 3.0, -1.0]], dtype=torch.bfloat16)
    assert tie_margins(rows, BF16_EPS) == [1.0, 2.0, 0.0]
    assert tie_margins(torch.tensor([[10.0, -10.0]]), torch.finfo(torch.float32).eps) == [MARGIN_CAP]


def test_first_difference_and_verdicts():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2
    ids, base = [(1, 2, 3), (4, 5)], [(1, 2, 3), (4, 6)]
    assert classify_turns(ids, ids, None, None) == "identical"
    # the first differing token is at turn 1, position 1: only its margins count
    tied_in_base = [(9.0, 9.0, 9.0), (9.0, 1.5)]
    apart = [(0.0, 0.0, 0.0), (9.0, 40.0)]
    assert classify_turns(ids, base, apart, tied_in_base) == "near-tie"
    assert classify_turns(ids, base, tied_in_base, apart) == "near-tie"
    assert classify_turns(ids, base, apart, apart) == "other"
    assert classify_turns(ids, base, None, None) == "other"  # nothing to account with


def _record(method: str, ids: tuple[int, ...], margins: tuple[float, ...], qid: int = 1) -> AnswerRecord:
    choice = Choice(0, ("t",), (len(ids),), (1.0,), (1,) * len(ids), token_ids=(ids,), tie_margins=(margins,))
    return AnswerRecord(qid, "qa", "m", method, (choice,))


def test_summary_counts_identical_near_tie_and_flags_other():
    result = BenchResult(methods=[], greedy=True)
    for qid, racer_ids, margin in [(1, (1, 2, 3), 50.0), (2, (1, 2, 4), NEAR_TIE_ULPS), (3, (1, 2, 4), 50.0)]:
        result.add("ar", _record("ar", (1, 2, 3), (50.0, 50.0, margin), qid))
        result.add("racer", _record("racer", racer_ids, (50.0, 50.0, 50.0), qid))
    versus = result.totals("racer").versus
    assert (versus.identical_questions, versus.near_tie_questions, versus.other_questions) == (1, 1, 1)
    assert versus.same_text == "no (1/3; near-tie 1, other 1)"
    summary = result.to_summary()
    assert summary["methods"]["racer"]["near_tie_questions"] == 1
    assert summary["methods"]["racer"]["other_divergence_questions"] == 1
    assert summary["warnings"] and "racer: 1 of 3" in summary["warnings"][0]
    caption = bench_tables(result)[-1].caption
    assert caption is not None and "not rounding" in str(caption)


def test_near_ties_alone_raise_no_warning():
    result = BenchResult(methods=[], greedy=True)
    result.add("ar", _record("ar", (1, 2, 3), (50.0, 0.5, 50.0)))
    result.add("racer", _record("racer", (1, 7, 3), (50.0, 50.0, 50.0)))
    assert result.totals("racer").versus.near_tie_questions == 1
    assert result.warnings() == [] and bench_tables(result)[-1].caption is None


def test_on_the_lean_forward_a_near_tie_is_no_excuse():
    """The lean forward is batch-invariant: racer differing from ar there is a bug
    even where the first difference is a near-tie."""
    result = BenchResult(methods=[], greedy=True, forward="lean")
    result.add("ar", _record("ar", (1, 2, 3), (50.0, 0.5, 50.0)))
    result.add("racer", _record("racer", (1, 7, 3), (50.0, 50.0, 50.0)))
    versus = result.totals("racer").versus
    assert (versus.near_tie_questions, versus.other_questions) == (0, 1)
    assert "batch-invariant lean forward: a bug" in result.warnings()[0]
    # an anchor runs transformers' own generate on the stock forward: near-ties stay near-ties
    result.add("pld", _record("pld", (1, 7, 3), (50.0, 50.0, 50.0)))
    assert result.totals("pld").versus.near_tie_questions == 1
    result.add("hf", _record("hf", (1, 2, 9), (50.0, 50.0, 50.0)))
    assert "a bug" in result.warnings()[-1]
    result.dtype = "gguf Q4_1+Q8_0"  # the anchors decode the dequantized model, the others the 4-bit blocks
    assert "another model than the 4-bit blocks" in result.warnings()[-1]


@pytest.fixture(scope="module")
def tied_engine():
    """A tiny fp32 model whose lm_head rows of two tokens are equal: an exact tie
    wherever the lower one is the model's choice."""
    model = tiny_model("llama", seed=3)
    tokenizer = tiny_tokenizer()
    engine = RacerEngine(model, tokenizer, "tiny-tied")
    conv = engine.new_conversation()
    ids = [p.token_id for ev in conv.send(PROMPT, GenerationConfig(method="ar", max_new_tokens=48)) for p in ev.pieces]
    common = max(set(ids), key=ids.count)
    unused = next(t for t in range(model.config.vocab_size - 1, common, -1) if t not in ids)
    with torch.no_grad():
        model.lm_head.weight[unused] = model.lm_head.weight[common]
    # a new engine: the lean forward packs its weights when built, so it must see the tied rows
    return RacerEngine(model, tokenizer, "tiny-tied"), common


PROMPT = "The cat sat on the mat, and the dog sat on the log. The cat sat on the mat, and the dog"


def test_engine_records_each_tokens_margin_and_fp32_racer_is_identical(tied_engine):
    engine, tied = tied_engine
    questions = [Question(1, "qa", (PROMPT,)), Question(2, "qa", ("Numbers: 1 2 3 4 5 6 7 8 9 10.", "Again."))]
    result = run_benchmark(engine, questions, ["ar", "racer"], GenerationConfig(max_new_tokens=48), warmup=False)
    versus = result.totals("racer").versus
    assert versus.identical and versus.other_questions == 0 and versus.near_tie_questions == 0
    seen_tie = False
    for method in ("ar", "racer"):
        for rec in result.records[method].values():
            assert rec.config is not None and "tie_margins" not in rec.config  # asked of the engine, no setting
            choice = rec.choices[0]
            assert choice.tie_margins is not None  # the runner asks for them: the caller's config did not
            for ids, margins in zip(choice.token_ids, choice.tie_margins, strict=True):
                assert len(ids) == len(margins)
                for token, margin in zip(ids, margins, strict=True):
                    # the tied token's margin is (about) zero, every other choice's is clear
                    assert (margin <= NEAR_TIE_ULPS) == (token == tied), (method, token, margin)
                    seen_tie = seen_tie or token == tied
    assert seen_tie


@pytest.mark.parametrize("method", ("ar", "racer"))
def test_margins_only_when_the_config_asks(tied_engine, method):
    # the top-2 over the vocabulary per token is the benchmark's: chat and the API leave it off
    engine, _ = tied_engine
    config = GenerationConfig(method=method, max_new_tokens=24, max_num_draft=8)
    unasked = list(engine.new_conversation().send(PROMPT, config))
    asked = list(engine.new_conversation().send(PROMPT, config.replace(tie_margins=True)))
    tokens = [t for ev in asked for t in ev.token_ids]
    assert tokens and tokens == [t for ev in unasked for t in ev.token_ids]
    assert all(ev.margins == () for ev in unasked)
    assert all(len(ev.margins) == len(ev.token_ids) for ev in asked)


def test_sampling_records_no_margins(tied_engine):
    engine, _ = tied_engine
    conv = engine.new_conversation()
    config = GenerationConfig(method="racer", max_new_tokens=16, temperature=0.7, seed=1, tie_margins=True)
    events = list(conv.send(PROMPT, config))
    assert all(ev.margins == () for ev in events)
