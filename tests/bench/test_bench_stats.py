"""The one statistics model: a reply's steps, a method's answers, the live board."""

from __future__ import annotations

import pytest

from racer_core.bench.answers import AnswerRecord
from racer_core.bench.board import BenchBoard
from racer_core.bench.results import BenchResult
from racer_core.bench.runner import BenchProgress
from racer_core.common.events import Source, StepEvent, TokenPiece
from racer_core.common.stats import Stats

TWO = (TokenPiece(1, "a", Source.RETRIEVAL), TokenPiece(2, "b", Source.MODEL))


def _record(qid: str, method: str, category: str, lengths: tuple[int, ...], seconds: float) -> AnswerRecord:
    return AnswerRecord.single(
        question_id=qid,
        category=category,
        model_id="m",
        method=method,
        turns=("x",),
        new_tokens=(sum(lengths),),
        wall_time=(seconds,),
        accept_lengths=lengths,
    )


def test_reply_stats_from_steps_skip_the_prefill_and_a_closing_event_without_tokens():
    stats = Stats()
    assert (stats.tokens_per_s, stats.mat, stats.ms_per_token) == (None, None, None)
    stats.add_step(StepEvent(1, TWO[1:], 1, 8, 0.0, 0.1, 0.0))  # the prefill: timed, not a step
    stats.add_step(StepEvent(2, TWO, 5, 8, 0.1, 0.2, 0.1))
    stats.add_step(StepEvent(3, (), 0, 8, 0.0, 0.1, 0.0, True, "cancelled"))
    assert (stats.tokens, stats.steps, stats.accept_lengths) == (3, 1, [2])
    assert stats.seconds == pytest.approx(0.6)
    assert stats.tokens_per_s == pytest.approx(5.0) and stats.mat == 2.0


def test_answers_of_an_anchor_have_no_mat_and_plus_adds_up():
    stats = Stats()
    stats.add_reply(10, 2.0, (2, 3, 5), "racer")
    assert (stats.replies, stats.mat, stats.speeds, dict(stats.length_counts())) == (1, 10 / 3, [5.0], {2: 1, 3: 1, 5: 1})
    anchor = Stats()
    anchor.add_reply(8, 1.0, (8,), "pld")
    assert anchor.mat is None and anchor.tokens_per_s == 8.0
    both = stats.plus(anchor)
    assert (both.replies, both.tokens, both.seconds, both.mat) == (2, 18, 3.0, None)
    assert both.speedup_over(anchor) == pytest.approx(6.0 / 8.0)


def test_bench_board_folds_progress() -> None:
    board = BenchBoard(methods=["ar", "racer"])
    ev = StepEvent(2, TWO, 4, 8, 0, 0, 0)
    board.update(BenchProgress("racer", 0, 2, "q1", "code", None, False))
    board.update(BenchProgress("racer", 0, 2, "q1", "code", ev, False))
    assert board.flight_method == "racer" and board.flight.accept_lengths == [2]
    assert board.live("racer").tokens == 2 and board.live("ar").tokens == 0
    rec = _record("q1", "racer", "code", (2, 3, 1), 0.5)
    board.update(BenchProgress("racer", 0, 2, "q1", "code", None, True, rec))
    stats = board.per_method["racer"]
    assert (stats.replies, stats.tokens, stats.steps) == (1, 6, 3)
    assert stats.speeds == [12.0] and stats.mat == 2.0
    assert board.live("racer") == stats  # the finished question is not counted twice
    assert board.category_mat("code", "racer") == 2.0 and board.category_mat("qa", "racer") is None
    assert dict(stats.length_counts()) == {1: 1, 2: 1, 3: 1}
    assert board.question_count == 2


def test_bench_board_from_result_skips_unstepped_mat() -> None:
    result = BenchResult(methods=["ar", "pld"])
    result.add("ar", _record("1", "ar", "qa", (1, 1, 1, 1), 1.0))
    result.add("pld", _record("1", "pld", "qa", (4,), 0.5))
    board = BenchBoard.from_result(result)
    assert board.per_method["pld"].speeds == [8.0]
    assert board.stepped_methods() == ["ar"]
    assert board.category_mat("qa", "pld") is None and board.per_method["pld"].mat is None
