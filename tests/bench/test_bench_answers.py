"""Answer files: format, durability of each line, tolerance of a cut-off tail."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from racer_core.bench import answers
from racer_core.bench.answers import (
    AnswerRecord,
    AnswerWriter,
    answer_path,
    default_answer_dir,
    read_answers,
)
from racer_core.common.errors import InputError


def record(qid: int | str = 1, text: str = "hello", method: str = "racer") -> AnswerRecord:
    return AnswerRecord.single(
        question_id=qid,
        category="qa",
        model_id="m",
        method=method,
        turns=(text,),
        new_tokens=(3,),
        wall_time=(0.5,),
        accept_lengths=(2, 1),
        token_ids=((5, 6, 7),),
        tstamp=1.0,
        config={"temperature": 0.0},
    )


def test_line_has_the_design_format(tmp_path):
    path = answer_path(tmp_path, "racer")
    with AnswerWriter(path, append=False) as w:
        w.write(record())
    obj = json.loads(path.read_text())
    assert set(obj) == {"question_id", "category", "answer_id", "model_id", "method", "choices", "tstamp", "config"}
    choice = obj["choices"][0]
    assert choice["index"] == 0
    assert choice["turns"] == ["hello"]
    assert choice["new_tokens"] == [3]
    assert choice["wall_time"] == [0.5]
    assert choice["accept_lengths"] == [2, 1]
    assert choice["token_ids"] == [[5, 6, 7]]
    assert read_answers(path) == [record()]


def test_each_answer_is_one_write_and_synced(tmp_path, monkeypatch):
    writes: list[bytes] = []
    syncs: list[int] = []
    real_write, real_fsync = os.write, os.fsync
    monkeypatch.setattr(answers.os, "write", lambda fd, b: writes.append(bytes(b)) or real_write(fd, b))
    monkeypatch.setattr(answers.os, "fsync", lambda fd: syncs.append(fd) or real_fsync(fd))
    with AnswerWriter(tmp_path / "a.jsonl", append=False) as w:
        w.write(record(1))
        w.write(record(2, "two\nlines"))
    assert len(writes) == 2 and len(syncs) == 2
    assert all(b.endswith(b"\n") and b.count(b"\n") == 1 for b in writes)


def test_foreign_answer_without_extras_reads(tmp_path):
    path = tmp_path / "spec.jsonl"
    line = {
        "question_id": 81,
        "category": "writing",
        "model_id": "vicuna",
        "choices": [{"index": 0, "turns": ["x", "y"], "new_tokens": [4, 5], "wall_time": [1.0, 2.0]}],
        "tstamp": 3.0,
    }
    path.write_text(json.dumps(line) + "\n")
    (rec,) = read_answers(path)
    assert rec.token_ids is None and rec.config is None and rec.accept_lengths == ()
    assert rec.tokens == 9 and rec.seconds == 3.0 and rec.key == "81"


def test_partial_tail_dropped_then_cut_before_appending(tmp_path):
    path = tmp_path / "a.jsonl"
    with AnswerWriter(path, append=False) as w:
        w.write(record(1))
    full = path.read_bytes()
    with AnswerWriter(path, append=True) as w:
        w.write(record(2))
    cut = path.read_bytes()[: len(full) + 20]  # the second line, cut by a kill
    path.write_bytes(cut)
    assert [r.question_id for r in read_answers(path)] == [1]
    with AnswerWriter(path, append=True) as w:
        w.write(record(3))
    assert [r.question_id for r in read_answers(path)] == [1, 3]


def test_bad_middle_line_is_an_error_naming_it(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps(record(1).to_json()) + "\n{broken\n" + json.dumps(record(2).to_json()) + "\n")
    with pytest.raises(InputError, match=r"a.jsonl, line 2"):
        read_answers(path)
    path.write_text('{"question_id": 1}\n')
    with pytest.raises(InputError, match="line 1: not an answer"):
        read_answers(path)


def test_writer_without_append_replaces(tmp_path):
    path = tmp_path / "a.jsonl"
    with AnswerWriter(path, append=False) as w:
        w.write(record(1))
    with AnswerWriter(path, append=False) as w:
        w.write(record(2))
    assert [r.question_id for r in read_answers(path)] == [2]


def test_default_answer_dir_follows_env(tmp_path, monkeypatch):
    monkeypatch.setenv("RACER_TUI_DATA_DIR", str(tmp_path))
    path = default_answer_dir("my suite", "SmolLM2/135M")
    assert path == tmp_path / "bench" / "my-suite" / "SmolLM2-135M"


texts = st.text(st.characters(codec="utf-8"), max_size=40)


@settings(max_examples=60, deadline=None)
@given(st.lists(texts, min_size=1, max_size=5), st.data())
def test_any_cut_keeps_exactly_the_complete_lines(tmp_path_factory, turns, data):
    path = tmp_path_factory.mktemp("cut") / "a.jsonl"
    recs = [record(i, t) for i, t in enumerate(turns)]
    with AnswerWriter(path, append=False) as w:
        for r in recs:
            w.write(r)
    blob = path.read_bytes()
    cut = data.draw(st.integers(0, len(blob)))
    path.write_bytes(blob[:cut])
    complete = blob[:cut].count(b"\n")
    assert read_answers(path) == recs[:complete]
