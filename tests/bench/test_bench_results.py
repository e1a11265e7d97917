"""Totals from hand-made answers: speedup on common questions, categories, equality."""

from __future__ import annotations

import pytest

from racer_core.bench.answers import AnswerRecord, AnswerWriter
from racer_core.bench.results import BenchResult, load_results
from racer_core.common.errors import InputError


def rec(qid, method, tokens, seconds, category="qa", ids=None, text="t", steps=None, temp=0.0):
    steps = steps or [1] * tokens
    return AnswerRecord.single(
        question_id=qid,
        category=category,
        model_id="m",
        method=method,
        turns=(text,),
        new_tokens=(tokens,),
        wall_time=(seconds,),
        accept_lengths=tuple(steps),
        token_ids=None if ids is None else (tuple(ids),),
        config={"temperature": temp, "device": "cpu", "dtype": "float32", "warm": False},
    )


def make(records, baseline="ar", greedy=True):
    result = BenchResult(methods=[], baseline=baseline, greedy=greedy)
    for r in records:
        result.add(r.method, r)
    return result


def test_speedup_uses_questions_both_answered():
    result = make(
        [
            rec(1, "ar", 10, 1.0),
            rec(2, "ar", 10, 1.0),
            rec(1, "racer", 10, 0.5, steps=[5, 5]),
            rec(2, "racer", 10, 0.5, steps=[5, 5]),
            rec(3, "racer", 10, 100.0),  # ar never answered it: not in the speedup
        ]
    )
    t = result.totals("racer")
    assert t.versus.speedup == pytest.approx(2.0)
    assert t.stats.replies == 3 and t.stats.tokens == 30
    assert t.stats.mat == pytest.approx(30 / 14)
    assert result.totals("ar").versus.speedup == pytest.approx(1.0)
    assert result.totals("ar").stats.ms_per_token == pytest.approx(100.0)


def test_per_category_totals():
    result = make(
        [
            rec(1, "ar", 10, 1.0, "qa"),
            rec(2, "ar", 20, 1.0, "code"),
            rec(1, "racer", 10, 1.0, "qa"),
            rec(2, "racer", 20, 0.25, "code"),
        ]
    )
    cats = result.category_totals()
    assert list(cats) == ["qa", "code"]
    assert cats["qa"]["racer"].versus.speedup == pytest.approx(1.0)
    assert cats["code"]["racer"].versus.speedup == pytest.approx(4.0)
    summary = result.to_summary(suite="s")
    assert summary["categories"]["code"]["racer"]["speedup_vs_ar"] == pytest.approx(4.0)
    assert summary["suite"] == "s"


def test_identical_compares_token_ids_then_text():
    by_ids = make([rec(1, "ar", 2, 1.0, ids=[1, 2], text="a"), rec(1, "racer", 2, 1.0, ids=[1, 3], text="a")])
    assert by_ids.totals("racer").versus.identical is False  # same text, other tokens
    by_text = make([rec(1, "ar", 2, 1.0, text="a"), rec(1, "racer", 2, 1.0, text="a")])
    assert by_text.totals("racer").versus.identical is True
    sampled = make([rec(1, "ar", 2, 1.0), rec(1, "racer", 2, 1.0)], greedy=False)
    assert sampled.totals("racer").versus.identical is None


def write(path, records):
    with AnswerWriter(path, append=False) as w:
        for r in records:
            w.write(r)


def test_load_results_labels_files_and_reads_settings(tmp_path):
    write(tmp_path / "ar.jsonl", [rec(1, "ar", 10, 1.0)])
    write(tmp_path / "racer.jsonl", [rec(1, "racer", 10, 0.5, temp=0.5)])
    result = load_results(tmp_path)
    assert result.methods == ["ar", "racer"] and result.baseline == "ar"
    assert result.greedy is False and result.device == "cpu"
    assert result.totals("racer").versus.speedup == pytest.approx(2.0)


def test_load_results_two_files_of_one_method_and_explicit_base(tmp_path):
    write(tmp_path / "old.jsonl", [rec(1, "racer", 10, 1.0)])
    write(tmp_path / "new.jsonl", [rec(1, "racer", 10, 0.8)])
    result = load_results(tmp_path / "new.jsonl", base=tmp_path / "old.jsonl")
    assert result.methods == ["old", "new"] and result.baseline == "old"
    assert result.totals("new").versus.speedup == pytest.approx(1.25)


def test_load_results_empty_folder(tmp_path):
    with pytest.raises(InputError, match="no answer files"):
        load_results(tmp_path)


def test_spread_of_per_question_speedups_and_its_warning():
    result = make(
        [
            rec(1, "ar", 10, 1.0),
            rec(2, "ar", 10, 1.0),
            rec(1, "racer", 10, 1.0),
            rec(2, "racer", 10, 1 / 4),
        ]
    )
    v = result.totals("racer").versus
    assert (v.low, v.high) == (pytest.approx(1.0), pytest.approx(4.0))
    assert v.spread_text == "1.00-4.00x"
    assert result.totals("ar").versus.spread_text == "–"
    assert result.warnings() == ["racer: speedups per question span 1.00-4.00x, a wide spread "
                                 "(uneven questions or a busy machine); --repeats 3 keeps the median of 3 tries"]
    assert result.to_summary()["methods"]["racer"]["speedup_max"] == pytest.approx(4.0)
    # 1.25x to 3.33x: content differs that much between questions, no warning
    narrow = make([rec(1, "ar", 10, 1.0), rec(2, "ar", 10, 1.0), rec(1, "racer", 10, 0.8), rec(2, "racer", 10, 0.3)])
    assert narrow.warnings() == []
