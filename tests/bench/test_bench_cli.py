"""`racer-tui bench` (and `--bench`) and `racer-tui speed`, with the scripted engine."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from fake_engine import REPLY, FakeEngine, tokenize

from racer_core.bench.answers import AnswerRecord, AnswerWriter, read_answers
from racer_core.bench.report import ProgressDisplay
from racer_core.bench.runner import BenchProgress
from racer_core.common.errors import ModelLoadError
from racer_core.common.events import EngineInfo, Source, StepEvent, TokenPiece
from racer_tui.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def qfile(tmp_path):
    path = tmp_path / "mini.jsonl"
    rows = [
        {"question_id": 1, "category": "qa", "turns": ["What is a fox?"]},
        {"question_id": 2, "category": "writing", "turns": ["A poem.", "Shorter."]},
        {"question_id": 3, "category": "qa", "turns": ["Why?"]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def cells(line: str) -> list[str]:
    """The cells of one row of a rich table."""
    return [c.strip() for c in line.strip().strip("│").split("│")]


def run(args, engine=None, loaded=None):
    def loader(**kwargs):
        if loaded is not None:
            loaded.append(kwargs)
        return engine or FakeEngine()

    return main(args, engine_loader=loader)


def test_bench_writes_answers_summary_and_tables(qfile, tmp_path, capsys):
    out_dir, summary = tmp_path / "answers", tmp_path / "sum.json"
    loaded: list[dict] = []
    rc = run(
        [
            "--bench",
            str(qfile),
            "--methods",
            "ar,racer",
            "--answer-dir",
            str(out_dir),
            "--summary-json",
            str(summary),
            "--max-num-draft",
            "16",
            "--device",
            "cpu",
        ],
        loaded=loaded,
    )
    assert rc == 0
    assert loaded == [{"model_path": None, "device": "cpu", "dtype": "auto", "progress": None}]
    for m in ("ar", "racer"):
        recs = read_answers(out_dir / f"{m}.jsonl")
        assert [r.question_id for r in recs] == [1, 2, 3]
        assert recs[0].config["max_num_draft"] == 16
    doc = json.loads(summary.read_text())
    assert {"suite", "model", "device", "dtype", "questions", "warm", "methods"} <= set(doc)
    assert doc["suite"] == "mini" and doc["questions"] == 3 and doc["warm"] is False
    racer = doc["methods"]["racer"]
    assert {"tokens", "seconds", "tokens_per_s", "mat", "speedup_vs_ar", "identical_to_ar"} <= set(racer)
    assert racer["identical_to_ar"] is True and doc["methods"]["ar"]["identical_to_ar"] is None
    # a Spec-Bench mix: MT-Bench's `writing` reads as multi_turn in reports
    assert set(doc["categories"]) == {"qa", "multi_turn"}
    out, err = capsys.readouterr()
    lines = [line.rstrip() for line in out.splitlines()]
    assert {"qa", "multi_turn", "all questions"} <= set(lines)
    racer_row = [cells(line) for line in lines if line.startswith("│ racer")][-1]  # all questions
    # 3 questions, 4 turns, the whole scripted reply each time, all equal to ar's
    assert racer_row[1:3] == ["3", str(4 * len(tokenize(REPLY)))] and racer_row[-1] == "yes"
    assert "fresh drafting state per question" in out
    assert f"answers: {out_dir}" in out
    # stderr is not a TTY here: one line per finished question and method
    assert "[racer] 3/3 question 3 (qa)" in err
    assert "\x1b[" not in err


@pytest.mark.parametrize("flag", ["--model", "--model-path"])
def test_the_model_path_flag_is_the_chats_and_the_originals(flag, qfile, tmp_path):
    loaded: list[dict] = []
    words = ["bench", str(qfile), flag, "/models/m", "--load-in-8bit", "--forward", "stock", "--question-end", "1",
             "--answer-dir", str(tmp_path / "a")]
    assert run(words, loaded=loaded) == 0
    assert loaded == [{"model_path": "/models/m", "device": "auto", "dtype": "auto", "progress": None,
                       "quantize": "8bit", "forward": "stock"}]


@pytest.mark.parametrize("flag", ["--draft-model", "--eagle-model-path"])
def test_eagle3_takes_its_head_and_tree_flags_with_the_originals_names(flag, qfile, tmp_path):
    loaded: list[dict] = []
    engine = FakeEngine(info=EngineInfo("fake-model", "cpu", "float32", draft_head="h"))  # loaded with its head
    words = ["bench", str(qfile), "--methods", "ar,eagle3", flag, "/heads/h", "--total-token", "30", "--depth", "4",
             "--top-k", "6", "--question-end", "1", "--answer-dir", str(tmp_path / "a")]
    assert run(words, engine, loaded) == 0
    assert loaded[0]["draft_model"] == "/heads/h"
    eagle = [c for c in engine.configs if c.method == "eagle3"]
    assert eagle and all((c.total_token, c.depth, c.top_k) == (30, 4, 6) for c in eagle)


def test_eagle3_without_a_head_is_refused_in_one_line_before_loading(qfile, tmp_path, capsys):
    loaded: list[dict] = []
    words = ["bench", "builtin", "--methods", "ar,racer,eagle3", "--answer-dir", str(tmp_path / "a")]
    assert run(words, loaded=loaded) == 2
    err = capsys.readouterr().err
    assert "eagle3 needs a draft head" in err and "--draft-model" in err and err.count("\n") == 1
    assert loaded == [] and not (tmp_path / "a").exists()


def test_question_range_and_resume(qfile, tmp_path):
    out_dir = tmp_path / "a"
    assert run(["--bench", str(qfile), "--answer-dir", str(out_dir), "--question-end", "1"]) == 0
    assert len(read_answers(out_dir / "ar.jsonl")) == 1
    engine = FakeEngine()
    args = ["--bench", str(qfile), "--answer-dir", str(out_dir), "--question-begin", "0", "--resume"]
    assert run(args, engine) == 0
    assert ("ar", "What is a fox?") not in engine.calls
    assert [r.question_id for r in read_answers(out_dir / "ar.jsonl")] == [1, 2, 3]


def test_default_answer_dir_is_under_the_data_dir(qfile, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RACER_TUI_DATA_DIR", str(tmp_path / "data"))
    assert run(["--bench", str(qfile), "--warm"]) == 0
    expected = tmp_path / "data" / "bench" / "mini" / "fake-model"
    assert (expected / "racer.jsonl").is_file()
    out = capsys.readouterr().out
    assert f"answers: {expected}" in out and "--warm" in out


def test_repeats_answer_each_question_n_times_and_keep_the_median(qfile, tmp_path, capsys):
    engine = FakeEngine()
    summary = tmp_path / "s.json"
    args = ["bench", str(qfile), "--answer-dir", str(tmp_path / "a"), "--repeats", "3", "--question-end", "1",
            "--summary-json", str(summary)]
    assert run(args, engine) == 0
    asked = [c for c in engine.calls if c[1] == "What is a fox?"]
    assert asked == [("ar", "What is a fox?"), ("racer", "What is a fox?")] * 3
    assert len(read_answers(tmp_path / "a" / "racer.jsonl")) == 1  # the median try only
    doc = json.loads(summary.read_text())
    assert doc["repeats"] == 3 and doc["methods"]["racer"]["speedup_min"] is not None
    assert "3 tries per question, the median kept" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra",
    [
        ["--methods", "ar,nope"],
        ["--max-num-draft", "0"],
        ["--max-num-draft", "many"],
        ["--question-begin", "2", "--question-end", "2"],
        ["--temperature", "-1"],
        ["--top-p", "1.5"],  # 0 is allowed: the original's "no nucleus filter"
        ["--max-new-tokens", "0"],
        ["--repeats", "0"],
        ["--repeats", "two"],
    ],
)
def test_usage_errors_exit_2(qfile, extra, capsys):
    with pytest.raises(SystemExit) as exc:
        run(["--bench", str(qfile), *extra])
    assert exc.value.code == 2
    assert "usage: racer-tui bench SUITE [options]" in capsys.readouterr().err


def test_malformed_suite_fails_before_loading_or_writing(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question_id": 1, "category": "qa", "turns": ["x"]}\n{"question_id": 2}\n')
    loaded: list[dict] = []
    rc = run(["--bench", str(bad), "--answer-dir", str(tmp_path / "out")], loaded=loaded)
    assert rc == 1 and loaded == [] and not (tmp_path / "out").exists()
    err = capsys.readouterr().err
    assert err.startswith("racer-tui: error: ") and f"{bad}, line 2" in err
    assert err.count("\n") == 1


def test_model_load_error_is_one_line(qfile, tmp_path, capsys):
    def loader(**kwargs):
        raise ModelLoadError("no model at /nowhere")

    rc = main(["--bench", str(qfile), "--answer-dir", str(tmp_path / "o")], engine_loader=loader)
    assert rc == 1
    assert capsys.readouterr().err == "racer-tui: error: no model at /nowhere\n"
    assert not (tmp_path / "o").exists()


def test_ctrl_c_exits_130_keeping_finished_answers(qfile, tmp_path, capsys):
    engine = FakeEngine()

    def interrupt(method: str) -> None:
        if len(engine.calls) == 5:  # warm-ups (2), q1 by both, q2's first turn by ar
            raise KeyboardInterrupt

    engine.step_hook = interrupt
    rc = run(["--bench", str(qfile), "--answer-dir", str(tmp_path)], engine)
    assert rc == 130
    assert [r.question_id for r in read_answers(tmp_path / "ar.jsonl")] == [1]
    assert [r.question_id for r in read_answers(tmp_path / "racer.jsonl")] == [1]
    assert "interrupted" in capsys.readouterr().err


def test_unexpected_engine_failure_is_one_line_unless_debugging(qfile, tmp_path, capsys, monkeypatch):
    def boom(method: str) -> None:
        raise RuntimeError("CUDA out of memory")

    engine = FakeEngine(step_hook=boom)
    assert run(["--bench", str(qfile), "--answer-dir", str(tmp_path)], engine) == 1
    err = capsys.readouterr().err
    last = err.splitlines()[-1]
    assert last.startswith("racer-tui: error: RuntimeError: CUDA out of memory") and "Traceback" not in err
    monkeypatch.setenv("RACER_TUI_DEBUG", "1")
    with pytest.raises(RuntimeError):
        run(["--bench", str(qfile), "--answer-dir", str(tmp_path)], FakeEngine(step_hook=boom))


def test_a_failed_question_is_recorded_and_the_run_goes_on(qfile, tmp_path, capsys):
    """As the original: the error goes in the answer line (no fake text), the run answers the
    rest, the tables and the summary count it, and the exit status says so at the end."""
    engine = FakeEngine()

    def boom(method: str) -> None:
        if method == "racer" and engine.prompts[-1][0] == "A poem.":
            raise RuntimeError("CUDA out of memory")

    engine.step_hook = boom
    summary = tmp_path / "sum.json"
    args = ["--bench", str(qfile), "--answer-dir", str(tmp_path / "a"), "--summary-json", str(summary)]
    assert run(args, engine) == 1
    out, err = capsys.readouterr()
    assert err.splitlines()[-1] == (
        "racer-tui: error: 1 question failed (see the error field of the answer lines; --resume answers them again)"
    )
    assert "[racer] 2/3 question 2 (writing): failed (RuntimeError: CUDA out of memory)" in err
    racer = read_answers(tmp_path / "a" / "racer.jsonl")
    assert [(r.question_id, r.error) for r in racer] == [(1, None), (2, "RuntimeError: CUDA out of memory"), (3, None)]
    assert racer[1].choices == ()  # nothing finished: no text stands in for the reply
    line = json.loads((tmp_path / "a" / "racer.jsonl").read_text().splitlines()[1])
    assert line["error"] == "RuntimeError: CUDA out of memory" and line["choices"] == []
    assert [r.error for r in read_answers(tmp_path / "a" / "ar.jsonl")] == [None] * 3
    doc = json.loads(summary.read_text())
    assert doc["failed"] == 1 and doc["methods"]["racer"]["failed"] == 1 and doc["methods"]["ar"]["failed"] == 0
    assert doc["categories"]["multi_turn"]["racer"]["failed"] == 1
    racer_row = [cells(x) for x in out.splitlines() if x.startswith("│ racer")][-1]  # all questions
    assert racer_row[1:3] == ["2", "1"]  # answered, failed
    assert "racer: 1 question failed and count in no total" in out
    # --resume answers the failed question again, and only it
    engine.step_hook = None
    assert run([*args, "--resume"], engine) == 0
    assert [r.error for r in read_answers(tmp_path / "a" / "racer.jsonl")][-1] is None


def test_tty_progress_is_a_rich_bar_per_method():
    stream = io.StringIO()
    with ProgressDisplay(["ar", "racer"], 4, stream, tty=True) as display:
        display(BenchProgress("ar", 0, 4, 1, "qa", None, False))
        record = AnswerRecord.single(1, "qa", "m", "ar", ("x",), (4,), (2.0,), (1, 1, 1, 1))
        display(BenchProgress("ar", 0, 4, 1, "qa", None, True, record))
    final = stream.getvalue().rsplit("ar    ", 1)[1].splitlines()
    assert "1/4" in final[0] and "2.0 tok/s  MAT 1.00" in final[0]
    racer = next(line for line in final if line.startswith("racer"))
    assert "0/4" in racer and "– tok/s  MAT –" in racer


def test_progress_counts_the_question_in_flight():
    display = ProgressDisplay(["racer"], 2, io.StringIO(), tty=False)
    display(BenchProgress("racer", 0, 2, 1, "qa", None, False))
    pieces = (TokenPiece(1, "a", Source.RETRIEVAL), TokenPiece(2, "b", Source.MODEL))
    display(BenchProgress("racer", 0, 2, 1, "qa", StepEvent(1, pieces[1:], 1, 8, 0.25, 0.25, 0.0), False))
    display(BenchProgress("racer", 0, 2, 1, "qa", StepEvent(2, pieces, 4, 8, 0.5, 0.5, 0.0), False))
    live = display.board.live("racer")  # the prefill (step 1) is timed but not a step
    assert (live.tokens, live.steps, live.tokens_per_s, live.mat) == (3, 1, 2.0, 2.0)
    assert display.board.per_method["racer"].tokens == 0


def write(path, records):
    with AnswerWriter(path, append=False) as w:
        for r in records:
            w.write(r)


def answer(qid, method, tokens, seconds, category="qa"):
    return AnswerRecord.single(qid, category, "m", method, ("t",), (tokens,), (seconds,), (2,) * (tokens // 2))


def test_speed_folder_with_base(tmp_path, capsys):
    write(tmp_path / "ar.jsonl", [answer(1, "ar", 10, 1.0), answer(2, "ar", 10, 1.0, "code")])
    write(tmp_path / "racer.jsonl", [answer(1, "racer", 10, 0.5), answer(2, "racer", 10, 0.25, "code")])
    assert main(["speed", str(tmp_path), "--base", str(tmp_path / "ar.jsonl")]) == 0
    out = capsys.readouterr().out
    code = out.split("code", 1)[1].split("\n\n", 1)[0]
    rows = [cells(line) for line in code.splitlines() if line.startswith("│")]
    assert ["ar", "1", "10", "100.00", "2.00", "1.00x"] in rows
    assert ["racer", "1", "10", "25.00", "2.00", "4.00x"] in rows
    assert "ms/token" in out and "vs ar" in out


def test_speed_single_file_has_no_speedup(tmp_path, capsys):
    write(tmp_path / "racer.jsonl", [answer(1, "racer", 10, 0.5)])
    assert main(["speed", str(tmp_path / "racer.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "50.00" in out and "vs " not in out


def test_speed_errors(tmp_path, capsys):
    assert main(["speed", str(tmp_path / "missing.jsonl")]) == 1
    (tmp_path / "bad.jsonl").write_text("{oops\n")
    assert main(["speed", str(tmp_path / "bad.jsonl")]) == 1
    err = capsys.readouterr().err
    assert "racer-tui: error: no such file" in err and "bad.jsonl: no usable answer line (line 1" in err
    with pytest.raises(SystemExit) as exc:
        main(["speed"])
    assert exc.value.code == 2


def test_headless_entry_points_import_no_textual_or_torch(tmp_path):
    """Through racer_tui.cli: --bench and speed never load Textual (nor torch, here)."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{\n")
    code = (
        "import sys; from racer_tui.cli import main\n"
        f"rc1 = main(['--bench', {str(bad)!r}])\n"
        f"rc2 = main(['speed', {str(tmp_path)!r}])\n"
        "heavy = [m for m in ('textual', 'torch') if m in sys.modules]\n"
        "print(rc1, rc2, heavy)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "1 1 []", proc.stderr
    assert "line 1" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_a_stop_signal_ends_a_run_like_ctrl_c_and_resume_completes_it(signame, qfile, tmp_path, capsys):
    """A real process stopped mid-run: one line, exit 128+N, every answer line whole."""
    import os
    import signal
    import time

    out = tmp_path / "answers"
    code = (
        "import sys, time\n"
        "sys.path.insert(0, 'tests')\n"
        "from fake_engine import FakeEngine\n"
        "from racer_tui.cli import main\n"
        "engine = FakeEngine(step_hook=lambda method: time.sleep(0.05))\n"
        f"sys.exit(main(['--bench', {str(qfile)!r}, '--answer-dir', {str(out)!r}], "
        "engine_loader=lambda **kw: engine))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (out / "racer.jsonl").exists() or not (out / "racer.jsonl").read_text().strip():
            assert proc.poll() is None and time.monotonic() < deadline, "the run never answered a question"
            time.sleep(0.05)
        proc.send_signal(getattr(signal, signame))
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + getattr(signal, signame)
    assert err.strip().splitlines()[-1] == (
        f"racer-tui: error: stopped by {signame}; finished answers are kept (rerun with --resume to continue)"
    )
    assert "Traceback" not in err
    done = {m: [r.question_id for r in read_answers(out / f"{m}.jsonl")] for m in ("ar", "racer")}
    assert 1 <= len(done["racer"]) < 3
    assert run(["--bench", str(qfile), "--answer-dir", str(out), "--resume"]) == 0
    for m in ("ar", "racer"):
        assert sorted(r.question_id for r in read_answers(out / f"{m}.jsonl")) == [1, 2, 3]


def test_repeats_are_not_sharded(qfile, capsys):
    assert run(["bench", str(qfile), "--repeats", "2", "--num-workers", "2"]) == 1
    assert "--repeats interleaves the tries on one engine" in capsys.readouterr().err


def test_one_question_is_counted_in_the_singular(qfile, tmp_path, capsys):
    # issue 41: `racer-tui bench` said "1 questions"
    out_dir = tmp_path / "a"
    assert run(["--bench", str(qfile), "--methods", "ar", "--answer-dir", str(out_dir), "--question-end", "1"]) == 0
    err = capsys.readouterr().err
    assert "mini: 1 question x ar on " in err and "1 questions" not in err
    assert main(["speed", str(out_dir)]) == 0
    out = capsys.readouterr().out
    assert "; 1 question\n" in out and "1 questions" not in out


def test_the_workers_are_counted_in_words() -> None:
    from racer_core.bench.shard import ShardPlan
    from racer_tui.cli.bench import _workers_text

    assert _workers_text(ShardPlan(1)) == "1 CPU worker on a local Ray cluster"
    assert _workers_text(ShardPlan(2, 1.0, address="h:1")) == "2 workers of 1 GPU each on Ray at h:1"
    assert _workers_text(ShardPlan(1, 0.5)) == "1 worker of 0.5 GPU each on a local Ray cluster"
