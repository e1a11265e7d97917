"""`racer-tui speed` on files in the original's format: its columns, totals and ranking."""

from __future__ import annotations

import json
import re

from racer_tui.cli import main


def _line(qid, category, tokens, seconds, accept):
    choice = {"index": 0, "turns": ["x"], "decoding_steps": [len(accept)], "new_tokens": [tokens],
              "wall_time": [seconds], "accept_lengths": accept}
    return {"question_id": qid, "category": category, "answer_id": f"a{qid}", "model_id": "m", "choices": [choice],
            "tstamp": 1.0}


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_folder_prints_the_original_columns_and_ranks_by_throughput(tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()
    base = tmp_path / "base.jsonl"
    _write(base, [_line(1, "writing", 10, 1.0, [1] * 10), _line(2, "rag", 20, 2.0, [1] * 20)])
    _write(runs / "runA.jsonl", [_line(1, "writing", 10, 0.5, [2] * 5), _line(2, "rag", 20, 0.5, [4] * 5)])
    _write(runs / "runB.jsonl", [_line(1, "writing", 10, 1.0, [1] * 10), _line(2, "rag", 20, 1.0, [2] * 10)])
    assert main(["speed", str(runs), "--base-path", str(base)]) == 0
    out = capsys.readouterr().out
    block = out[out.index("== runA ==") :]
    # a Spec-Bench mix: writing reads as multi_turn; 0.5 s for 10 tokens is 50 ms/token, 2x the base
    assert re.search(r"multi_turn\s+50\.00\s+2\.00\s+2\.00x", block)
    assert re.search(r"rag\s+25\.00\s+4\.00\s+4\.00x", block)
    assert "Total tokens: 30\nTotal time (s): 1.0000\nThroughput (token/s): 30.0000\nMAT: 3.0000\nSpeedup: 3.0000" in block
    ranking = out[out.index("Results (sorted by Throughput):") :].splitlines()[1:4]
    assert [re.search(r"File=(\S+)", r).group(1) for r in ranking] == ["runA", "runB", "base"]
    # the original's batch analysis reads these lines with regular expressions
    assert float(re.search(r"Throughput \(token/s\):\s*([\d.]+)", block).group(1)) == 30.0


def test_every_choice_counts(tmp_path, capsys):
    row = _line(1, "reasoning", 10, 1.0, [2] * 5)
    row["choices"].append(dict(row["choices"][0], index=1, new_tokens=[30], wall_time=[1.0], accept_lengths=[3] * 10))
    path = tmp_path / "racer.jsonl"
    _write(path, [row])
    assert main(["speed", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Total tokens: 40\nTotal time (s): 2.0000\nThroughput (token/s): 20.0000\nMAT: 2.6667" in out


def test_unreadable_lines_are_skipped_with_one_warning(tmp_path, capsys):
    """As the original's speed script: bad lines are passed over (counted once), the rest is read."""
    path = tmp_path / "racer.jsonl"
    good = [_line(1, "reasoning", 10, 1.0, [2] * 5), _line(2, "reasoning", 30, 1.0, [3] * 10)]
    bare = {"question_id": 3, "choices": [{"turns": ["no timing"]}]}
    path.write_text(json.dumps(good[0]) + "\n{cut\n" + json.dumps(bare) + "\n" + json.dumps(good[1]) + "\n")
    assert main(["speed", str(path)]) == 0
    captured = capsys.readouterr()
    assert "Total tokens: 40\nTotal time (s): 2.0000" in captured.out
    assert captured.err.count("\n") == 1
    assert captured.err.startswith("warning: skipped 2 unreadable answer lines (the first: ")
    assert "line 2: not valid JSON" in captured.err


def test_a_file_without_one_usable_line_is_refused(tmp_path, capsys):
    path = tmp_path / "racer.jsonl"
    path.write_text("{cut\n" + json.dumps({"question_id": 3, "choices": [{"turns": ["x"]}]}) + "\n")
    assert main(["speed", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no usable answer line (line 1: not valid JSON)" in err


def test_failed_questions_are_counted_apart_from_the_totals(tmp_path, capsys):
    path = tmp_path / "racer.jsonl"
    failed = {"question_id": 2, "category": "reasoning", "model_id": "m", "choices": [], "error": "RuntimeError: x"}
    _write(path, [_line(1, "reasoning", 10, 1.0, [2] * 5), failed])
    assert main(["speed", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Total tokens: 10\nTotal time (s): 1.0000" in out  # the failed question is in no total
    header = next(line for line in out.splitlines() if "method" in line)
    row = next(line for line in out.splitlines() if line.startswith("│ racer"))
    cols = [c.strip() for c in header.strip("┃ ").split("┃")]
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert dict(zip(cols, cells, strict=True))["failed"] == "1"
    assert "Failed questions: 1" in out[out.index("== racer ==") :]
