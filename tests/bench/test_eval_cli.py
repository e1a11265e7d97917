"""The original's flags on `racer-tui`: its quick check as written, and bad input in one line."""

from __future__ import annotations

import json
import sys

import pytest
from fake_engine import FakeEngine

from racer_core.bench.answers import read_answers
from racer_core.bench.runner import WARMUP_PROMPT
from racer_core.bench.suites import BOXED_INSTRUCTION
from racer_core.testing import tiny_model, tiny_tokenizer
from racer_tui.cli import main as racer_tui_main

GSM8K = [
    {"question_id": 1, "category": "reasoning", "turns": ["Tom has 2 apples and buys 3. How many?"], "reference": "5"},
    {"question_id": 2, "category": "reasoning", "turns": ["What is 10 - 4?"], "reference": "6"},
    {"question_id": 3, "category": "reasoning", "turns": ["Half of 9?"], "reference": ["4.5", "\\frac{9}{2}"]},
]


def _data(root, name="gsm8k", rows=GSM8K):
    folder = root / "data" / name
    folder.mkdir(parents=True)
    (folder / "question.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return root / "data"


def _no_model(**_kwargs):
    raise AssertionError("the model must not load on bad input")


def test_original_quick_check_as_written(tmp_path, monkeypatch, capsys):
    model = tmp_path / "tiny"
    tiny_model().save_pretrained(model)
    tiny_tokenizer().save_pretrained(model)
    _data(tmp_path)
    monkeypatch.chdir(tmp_path)  # ./data, the original's layout
    monkeypatch.setenv("RACER_TUI_DATA_DIR", str(tmp_path / "user"))
    argv = [
        "--bench-name", "gsm8k", "--model-path", str(model), "--model-id", "tiny-racer",
        "--enable-thinking", "False", "--question-end", "20",
    ]
    assert racer_tui_main([*argv, "--max-new-tokens", "12", "--max-num-draft", "8"]) == 0
    out = capsys.readouterr().out
    assert "ar: accuracy " in out and "racer: accuracy " in out  # accuracy beside speed
    files = sorted((tmp_path / "user").rglob("*.jsonl"))
    assert [f.name for f in files] == ["ar.jsonl", "racer.jsonl"]
    recs = read_answers(files[1])
    assert [r.question_id for r in recs] == [1, 2, 3]
    assert recs[0].model_id == "tiny-racer" and recs[2].reference == ("4.5", "\\frac{9}{2}")
    assert recs[0].config["enable_thinking"] is False
    assert recs[0].config["system_prompt"] == "You are a helpful assistant."


def test_flags_reach_the_run(tmp_path, capsys):
    root = _data(tmp_path)
    engine = FakeEngine()
    answer_file = tmp_path / "out" / "run.jsonl"
    code = racer_tui_main(
        [
            "--bench-name", "gsm8k", "--data-root", str(root), "--methods", "racer", "--answer-file", str(answer_file),
            "--num-choices", "3", "--temperature", "0.7", "--top-p", "0", "--system-prompt", "Be brief.",
            "--model-id", "fake-racer", "--max-new-tokens", "16",
        ],
        engine_loader=lambda **kw: engine,
    )
    assert code == 0, capsys.readouterr().err
    recs = read_answers(answer_file)
    assert len(recs) == 3 and all(len(r.choices) == 3 for r in recs)
    assert [c.index for c in recs[0].choices] == [0, 1, 2]
    sends = [c for c, (text, _) in zip(engine.configs, engine.prompts, strict=True) if text != WARMUP_PROMPT]
    assert {c.seed for c in sends} == {0, 1, 2}  # choice i sampled with seed i
    assert all(c.top_p == 1.0 and c.temperature == 0.7 and c.enable_thinking is None for c in sends)
    user_turns = [text for text, _ in engine.prompts]
    assert user_turns[-1] == GSM8K[2]["turns"][0] + "\n" + BOXED_INSTRUCTION
    assert all(conv.system_prompt == "Be brief." for conv in engine.conversations)
    assert "pass@3" in capsys.readouterr().out


def test_answer_file_alone_runs_racer_alone(tmp_path, capsys):
    """The original's inference_racer command: --answer-file without --methods answers with racer only."""
    root = _data(tmp_path)
    engine = FakeEngine()
    answer_file = tmp_path / "racer-run.jsonl"
    argv = ["--bench-name", "gsm8k", "--data-root", str(root), "--model-id", "ID", "--answer-file", str(answer_file),
            "--enable-thinking", "False", "--question-end", "20"]
    assert racer_tui_main(argv, engine_loader=lambda **kw: engine) == 0, capsys.readouterr().err
    recs = read_answers(answer_file)
    assert [r.method for r in recs] == ["racer"] * 3
    assert {c.method for c in engine.configs} == {"racer"}  # no ar run, not even its warm-up


def test_zero_turns_a_draft_source_off_as_the_original(tmp_path, capsys):
    root = _data(tmp_path)
    engine = FakeEngine()
    argv = ["--bench-name", "gsm8k", "--data-root", str(root), "--answer-file", str(tmp_path / "a.jsonl"),
            "--ngram", "0", "--max-breadth", "0"]
    assert racer_tui_main(argv, engine_loader=lambda **kw: engine) == 0, capsys.readouterr().err
    assert {(c.ngram, c.max_breadth) for c in engine.configs} == {(0, 0)}


def test_help_shows_both_spellings(capsys):
    with pytest.raises(SystemExit):
        racer_tui_main(["bench", "--help"])
    out = capsys.readouterr().out
    for flag in ("--bench ", "--bench-name", "--answer-dir", "--answer-file", "--model-id", "--num-choices",
                 "--enable-thinking", "--system-prompt", "--ray-address", "--num-workers", "--num-gpus-per-model",
                 "--num-gpus-total", "--data-root"):
        assert flag in out, flag
    assert "no nucleus" in out


@pytest.mark.parametrize(
    ("extra", "code", "message"),
    [
        (["--bench-name", "gsm9k"], 2, "invalid choice: 'gsm9k'"),
        (["--bench-name", "gsm8k", "--data-root", "{tmp}/nowhere"], 1, "no data folder"),
        (["--bench-name", "aime", "--data-root", "{tmp}/data"], 1, "no questions for aime: looked for"),
        (["--bench-name", "gsm8k", "--data-root", "{tmp}/data", "--num-choices", "0"], 2, "expected a whole number >= 1"),
        (["--bench-name", "mgsm", "--data-root", "{tmp}/data"], 1, "question.jsonl, line 1: reference must be"),
        (["--bench-name", "gsm8k", "--data-root", "{tmp}/data", "--num-gpus-total", "3", "--num-gpus-per-model", "2"],
         1, "positive multiple"),
        (["--bench-name", "gsm8k", "--data-root", "{tmp}/data", "--enable-thinking", "maybe"], 2, "expected true or false"),
        (["--bench-name", "gsm8k", "--data-root", "{tmp}/data", "--answer-file", "{tmp}/a.jsonl",
          "--methods", "ar,racer"], 1, "--answer-file holds one method's answers"),
    ],
)
def test_bad_input_is_one_line_before_the_model_loads(tmp_path, capsys, extra, code, message):
    _data(tmp_path)
    _data(tmp_path, "mgsm", [{"question_id": 1, "category": "c", "turns": ["q"], "reference": {"x": 1}}])
    argv = [a.replace("{tmp}", str(tmp_path)) for a in extra]
    if code == 2:
        with pytest.raises(SystemExit) as exc:
            racer_tui_main(argv, engine_loader=_no_model)
        assert exc.value.code == 2
    else:
        assert racer_tui_main(argv, engine_loader=_no_model) == code
    err = capsys.readouterr().err
    assert message in err
    if code == 1:
        assert err.count("\n") == 1


def test_ray_missing_or_unreachable_leaves_answers_alone(tmp_path, capsys, monkeypatch):
    root = _data(tmp_path)
    answers = tmp_path / "answers"
    answers.mkdir()
    before = '{"question_id": 1, "category": "reasoning", "choices": [{"index": 0, "turns": ["x"], "new_tokens": [1], "wall_time": [0.1]}]}\n'
    (answers / "racer.jsonl").write_text(before)
    base = ["--bench-name", "gsm8k", "--data-root", str(root), "--methods", "racer", "--answer-dir", str(answers)]

    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    assert racer_tui_main([*base, "--num-workers", "2"], engine_loader=_no_model) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and 'pip install -e ".[ray]"' in err
    monkeypatch.undo()

    pytest.importorskip("ray", reason="Ray is an optional extra")
    assert racer_tui_main([*base, "--ray-address", "127.0.0.1:1"], engine_loader=_no_model) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach Ray at 127.0.0.1:1" in err
    assert (answers / "racer.jsonl").read_text() == before
