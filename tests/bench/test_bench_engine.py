"""The benchmark on the real engine with a tiny random-weight model (no downloads)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from racer_core.bench.answers import read_answers  # noqa: E402
from racer_core.bench.runner import run_benchmark  # noqa: E402
from racer_core.bench.suites import Question  # noqa: E402
from racer_core.budget import cpu_class  # noqa: E402
from racer_core.common.events import GenerationConfig  # noqa: E402
from racer_tui import cli  # noqa: E402


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from racer_core.testing import tiny_engine

    return tiny_engine()


@pytest.fixture(autouse=True)
def private_dirs(tmp_path, monkeypatch):
    # the engine caches its measured cost curve; keep it out of the real home
    monkeypatch.setenv("RACER_TUI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("RACER_TUI_DATA_DIR", str(tmp_path / "data"))


def test_cli_on_tiny_engine_greedy_matches_ar(engine, tmp_path, capsys):
    qfile = tmp_path / "q.jsonl"
    rows = [
        {"question_id": 1, "category": "code", "turns": ["def add(a, b):"]},
        {"question_id": 2, "category": "story", "turns": ["Once upon a time", "The cat sat on the mat"]},
    ]
    qfile.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = tmp_path / "s.json"
    args = ["--bench", str(qfile), "--methods", "ar,racer,pld", "--max-new-tokens", "12", "--max-num-draft", "8"]
    rc = cli.main(
        [*args, "--answer-dir", str(tmp_path / "a"), "--summary-json", str(summary)], engine_loader=lambda **kw: engine
    )
    assert rc == 0, capsys.readouterr().err
    doc = json.loads(summary.read_text())
    assert doc["model"] == "tiny-llama" and doc["dtype"] == "float32"
    # which CPU and class the figures are for, in the summary and the run's first line
    assert doc["cpu"] == engine.info.cpu and doc["cpu"].endswith(cpu_class.capability())
    assert f"on {engine.info.cpu}" in "".join(capsys.readouterr())
    # fp32 greedy: RACER must reproduce plain decoding token for token
    assert doc["methods"]["racer"]["identical_to_ar"] is True
    assert doc["methods"]["pld"]["mat"] is None
    for method in ("ar", "racer", "pld"):
        recs = read_answers(tmp_path / "a" / f"{method}.jsonl")
        assert [r.question_id for r in recs] == [1, 2]
        for r in recs:
            assert [len(t) for t in r.token_ids] == list(r.new_tokens)
            assert all(0 < n <= 12 for n in r.new_tokens)
    assert doc["methods"]["ar"]["mat"] == 1.0


def test_a_sampled_run_of_one_choice_is_seeded_so_every_method_answers_the_same_text(engine):
    """--num-choices 1 samples choice 0 with seed 0, as its help says: the
    verifier draws once per emitted token, so ar and racer then answer the
    same text and their speeds are compared on it (unseeded, each drew its own)."""
    questions = [Question(1, "a", ("The quick brown fox",)), Question(2, "a", ("Once upon a time",))]
    config = GenerationConfig(max_new_tokens=24, max_num_draft=8, temperature=0.9)
    first = run_benchmark(engine, questions, ["ar", "racer"], config, warmup=False)
    again = run_benchmark(engine, questions, ["ar", "racer"], config, warmup=False)
    for key in ("1", "2"):
        ids = first.records["ar"][key].token_ids
        assert first.records["racer"][key].token_ids == ids
        assert again.records["ar"][key].token_ids == ids


def test_warm_runs_hand_over_the_automaton(engine):
    questions = [Question(1, "a", ("The quick brown fox",)), Question(2, "a", ("The quick brown fox",))]
    config = GenerationConfig(max_new_tokens=8, max_num_draft=8)
    fresh = run_benchmark(engine, questions, ["ar", "racer"], config, warmup=False)
    warm = run_benchmark(engine, questions, ["ar", "racer"], config, warm=True, warmup=False)
    assert warm.warm is True and warm.to_summary()["warm"] is True
    # the automaton changes drafts, never the greedy output
    for result in (fresh, warm):
        assert result.method_totals()["racer"].versus.identical is True
    assert warm.records["racer"]["2"].token_ids == fresh.records["racer"]["2"].token_ids
