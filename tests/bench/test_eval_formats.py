"""The original RACER's data layout and answer format, both directions."""

from __future__ import annotations

import gzip
import json

import pytest

from racer_core.bench.answers import AnswerRecord, AnswerWriter, Choice, read_answers
from racer_core.bench.results import load_results
from racer_core.bench.suites import (
    BENCH_NAMES,
    BOXED_INSTRUCTION,
    HUMANEVAL_CATEGORY,
    load_bench,
    load_question_file,
    report_categories,
)
from racer_core.common.errors import InputError

# Two lines as the original's evaluation writes them: no method, no config, no token ids.
ORIGINAL_LINES = [
    {
        "question_id": 1,
        "category": "reasoning",
        "answer_id": "Zq8nV3bT9kLmP2xR4sWcYd",
        "model_id": "qwen3-1.7b-racer-temperature-0.0-top_p-0-draft-64-n-10-node-10000-breadth-8",
        "choices": [
            {
                "index": 0,
                "turns": ["She sells 9 eggs, so \\boxed{18}."],
                "decoding_steps": [4],
                "new_tokens": [12],
                "wall_time": [0.25],
                "accept_lengths": [4, 3, 3, 2],
            }
        ],
        "tstamp": 1700000000.5,
    },
    {
        "question_id": 2,
        "category": "writing",
        "answer_id": "Aa1Bb2Cc3Dd4Ee5Ff6Gg7H",
        "model_id": "qwen3-1.7b-racer-temperature-0.0-top_p-0-draft-64-n-10-node-10000-breadth-8",
        "choices": [
            {
                "index": 0,
                "turns": ["A poem.", "Shorter."],
                "decoding_steps": [2, 1],
                "new_tokens": [5, 3],
                "wall_time": [0.1, 0.05],
                "accept_lengths": [3, 2, 3],
            }
        ],
        "tstamp": 1700000001.0,
    },
]


def _write_lines(path, rows) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def _original_style_reader(path) -> dict:
    """What the original's analysis reads from a line, field by field (its speed and
    math scripts index these keys directly, so a missing one would raise)."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        first = row["choices"][0]
        out[row["question_id"]] = {
            "category": row["category"],
            "model_id": row["model_id"],
            "answer_id": row["answer_id"],
            "tstamp": row["tstamp"],
            "tokens": sum(first["new_tokens"]),
            "time": sum(first["wall_time"]),
            "accept": list(first["accept_lengths"]),
            "steps": list(first["decoding_steps"]),
            "texts": [c["turns"][0] for c in row["choices"]],
            "indexes": [c["index"] for c in row["choices"]],
        }
    return out


def test_original_answer_file_reads_and_totals(tmp_path):
    path = tmp_path / "racer.jsonl"
    _write_lines(path, ORIGINAL_LINES)
    recs = read_answers(path)
    assert [r.question_id for r in recs] == [1, 2]
    first = recs[0]
    assert first.answer_id == "Zq8nV3bT9kLmP2xR4sWcYd"
    assert first.choices[0].decoding_steps == (4,)
    assert first.token_ids is None and first.config is None and first.method == ""
    result = load_results(path)
    totals = result.totals(result.methods[0])
    assert totals.stats.tokens == 20
    assert totals.stats.mat == pytest.approx((4 + 3 + 3 + 2 + 3 + 2 + 3) / 7)


def test_our_file_reads_as_the_original_reads_it(tmp_path):
    # read an original line, write it back with our writer: the original's fields survive intact
    src = tmp_path / "theirs.jsonl"
    _write_lines(src, ORIGINAL_LINES)
    ours = tmp_path / "ours.jsonl"
    with AnswerWriter(ours, append=False) as w:
        for rec in read_answers(src):
            w.write(rec)
    assert _original_style_reader(ours) == _original_style_reader(src)
    for theirs, mine in zip(ORIGINAL_LINES, (json.loads(x) for x in ours.read_text().splitlines()), strict=True):
        for key, value in theirs.items():
            assert mine[key] == value, key


def test_several_choices_round_trip_and_all_count(tmp_path):
    choices = tuple(
        Choice(i, (f"reply {i}",), (4 + i,), (0.5,), (2, 2 + i), decoding_steps=(2,), token_ids=((1,) * (4 + i),))
        for i in range(3)
    )
    rec = AnswerRecord(7, "reasoning", "m", "racer", choices, 1.0, {"temperature": 0.7})
    path = tmp_path / "racer.jsonl"
    with AnswerWriter(path, append=False) as w:
        w.write(rec)
    (back,) = read_answers(path)
    assert back == rec
    assert back.tokens == 4 + 5 + 6 and back.seconds == pytest.approx(1.5)
    assert back.accept_lengths == (2, 2, 2, 3, 2, 4)
    seen = _original_style_reader(path)[7]
    assert seen["indexes"] == [0, 1, 2] and seen["texts"] == ["reply 0", "reply 1", "reply 2"]
    assert len(seen["answer_id"]) == 22


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ({"question_id": 1, "category": "c", "turns": ["q"], "reference": {"a": 1}}, "reference must be"),
        ({"question_id": 1, "category": "c", "turns": ["q"], "reference": []}, "reference must be"),
        ({"question_id": 1, "category": "c", "turns": ["q"], "reference": [""]}, "reference must be"),
        ({"question_id": 1, "category": "c", "turns": ["q"], "reference": True}, "reference must be"),
        ({"question_id": 1, "category": "c", "turns": ["q"], "level": [1]}, "level must be"),
        ({"task_id": "HumanEval/0", "prompt": ""}, "a HumanEval task needs"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, line, reason):
    path = tmp_path / "question.jsonl"
    _write_lines(path, [{"question_id": 0, "category": "c", "turns": ["ok"]}, line])
    with pytest.raises(InputError, match=rf"question.jsonl, line 2: {reason}"):
        load_question_file(path)


def test_reference_and_level_read_as_text(tmp_path):
    path = tmp_path / "question.jsonl"
    rows = [
        {"question_id": 1, "category": "reasoning", "turns": ["q"], "reference": "18"},
        {"question_id": 2, "category": "Level 3", "turns": ["q"], "reference": ["\\frac{1}{2}", "0.5"], "level": 3},
        {"question_id": 3, "category": "reasoning", "turns": ["q"], "reference": 42},
        {"question_id": 4, "category": "writing", "turns": ["q"]},
    ]
    _write_lines(path, rows)
    qs = load_question_file(path)
    assert [q.reference for q in qs] == [("18",), ("\\frac{1}{2}", "0.5"), ("42",), None]
    assert qs[1].level == 3


def _data_root(tmp_path, name, rows):
    folder = tmp_path / "data" / name
    folder.mkdir(parents=True)
    _write_lines(folder / "question.jsonl", rows)
    return tmp_path / "data"


def test_math_benches_ask_for_a_boxed_answer(tmp_path):
    root = _data_root(tmp_path, "gsm8k", [{"question_id": 1, "category": "reasoning", "turns": ["2+2?  "], "reference": "4"}])
    (q,) = load_bench("gsm8k", root)
    assert q.turns == ("2+2?\n" + BOXED_INSTRUCTION,)
    assert "\\boxed{}" in BOXED_INSTRUCTION
    root2 = _data_root(tmp_path / "b", "mt_bench", [{"question_id": 1, "category": "writing", "turns": ["Poem."]}])
    assert load_bench("mt_bench", root2)[0].turns == ("Poem.",)


def test_raw_humaneval_file_becomes_coding_questions(tmp_path):
    folder = tmp_path / "data" / "human_eval"
    folder.mkdir(parents=True)
    task = {"task_id": "HumanEval/0", "prompt": "def f(x):\n    \"\"\"Return x.\"\"\"\n", "test": "", "entry_point": "f"}
    with gzip.open(folder / "HumanEval.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.write(json.dumps(task) + "\n")
    (q,) = load_bench("human_eval", tmp_path / "data")
    assert q.question_id == "HumanEval/0" and q.category == HUMANEVAL_CATEGORY == "coding"
    assert "def f(x):" in q.turns[0] and q.turns[0] != task["prompt"]


def test_bench_names_and_missing_data_say_where(tmp_path):
    assert set(BENCH_NAMES) == {"spec_bench", "mt_bench", "gsm8k", "mgsm", "math", "aime", "human_eval"}
    with pytest.raises(InputError, match="unknown benchmark 'gsm9k'; choose from spec_bench"):
        load_bench("gsm9k", tmp_path)
    with pytest.raises(InputError, match=r"no data folder .*nowhere .*looked for .*nowhere/aime/question.jsonl"):
        load_bench("aime", tmp_path / "nowhere")
    (tmp_path / "data").mkdir()
    with pytest.raises(InputError, match=r"no questions for math: looked for .*data/math/question.jsonl; copy data/math/"):
        load_bench("math", tmp_path / "data")


def test_spec_bench_mix_folds_mt_bench_categories_only():
    mix = report_categories(["writing", "coding", "translation", "rag"])
    assert mix == {"writing": "multi_turn", "coding": "multi_turn", "translation": "translation", "rag": "rag"}
    # gsm8k's questions are all `reasoning`: nothing to fold there
    assert report_categories(["reasoning"]) == {"reasoning": "reasoning"}


def test_reports_fold_a_spec_bench_mix(tmp_path):
    rows = [dict(ORIGINAL_LINES[1], question_id=i, category=c) for i, c in enumerate(["writing", "coding", "rag"])]
    path = tmp_path / "racer.jsonl"
    _write_lines(path, rows)
    result = load_results(path)
    assert result.categories() == ["multi_turn", "rag"]
    assert result.totals(result.methods[0], "multi_turn").stats.replies == 2
    # the file keeps the original categories
    assert [r.category for r in read_answers(path)] == ["writing", "coding", "rag"]
