"""bf16, the default dtype on CPUs with native bf16 and on GPUs: greedy racer
against plain greedy (`ar`) on tiny random models of several families, through
the lean forward and the stock one.

In bf16 a tree of tokens is computed in other blocks than one token, so a
reply may leave ar's where the top two logits are within rounding. Every such
divergence must be a near-tie (racer_core/verify/near_tie.py), none "other": an
"other" one is a bug, not rounding. Mixture-of-experts families are left out:
on tiny qwen3_moe models bf16 racer shows divergences that the logits' margins
do not account for (2 of 4 seeds here). An expert choice can flip on rounding,
which no logit margin sees; computing the router in fp32 removed one of the
two, so whether that is the whole cause is not established.
"""

from __future__ import annotations

import pytest
import torch

from racer_core.bench.runner import run_benchmark
from racer_core.bench.suites import Question
from racer_core.common.events import GenerationConfig
from racer_core.engine.engine import RacerEngine
from racer_core.testing import tiny_model, tiny_tokenizer
from racer_core.verify.near_tie import NEAR_TIE_ULPS

QUESTIONS = [
    Question(1, "qa", ("The cat sat on the mat, and the dog sat on the log. The cat sat on the mat, and the dog",)),
    Question(2, "qa", ("Numbers: 1 2 3 4 5 6 7 8 9 10.", "Again.")),
    Question(3, "coding", ("def add(a, b): return a + b",)),
]
# a fixed draft budget: no cost curve to measure first (timing-free, and fast)
CONFIG = GenerationConfig(max_new_tokens=96, max_num_draft=16)


@pytest.mark.parametrize(("family", "forward"), [("llama", "lean"), ("qwen3", "lean"), ("PanguEmbedded", "stock")])
def test_bf16_racer_leaves_ar_only_at_near_ties(family: str, forward: str) -> None:
    engine = RacerEngine(tiny_model(family, dtype=torch.bfloat16), tiny_tokenizer(), f"tiny-{family}")
    assert (engine.info.dtype, engine.info.forward) == ("bfloat16", forward)
    result = run_benchmark(engine, QUESTIONS, ["ar", "racer"], CONFIG, warmup=False)

    versus = result.totals("racer").versus
    assert versus.other_questions == 0, f"{family}: a bf16 divergence that is not a near-tie"
    assert versus.identical_questions + versus.near_tie_questions == len(QUESTIONS)
    racer = result.totals("racer").stats
    assert racer.steps < racer.tokens  # drafts were accepted: trees were verified, not one token a step

    # Every token carries its margin, in ulps of bf16: gaps of one or two ulps are common at bf16's
    # coarse resolution, while in fp32's ulps any gap but an exact tie would be thousands.
    margins = []
    for method in ("ar", "racer"):
        for record in result.records[method].values():
            (choice,) = record.choices
            assert choice.tie_margins is not None
            for ids, turn_margins in zip(choice.token_ids, choice.tie_margins, strict=True):
                assert len(turn_margins) == len(ids)
                margins.extend(turn_margins)
    assert any(0 < m <= NEAR_TIE_ULPS for m in margins)
