"""Question lines carry images per turn, relative to the question file."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from racer_core.bench.images import images_of_turn, parse_turn_images
from racer_core.common.errors import InputError
from racer_core.testing.tiny_vl import tiny_image


def test_paths_resolve_against_the_question_file(tmp_path: Path) -> None:
    (tmp_path / "pics").mkdir()
    tiny_image().save(tmp_path / "pics" / "a.png")
    images = parse_turn_images([["pics/a.png"], []], 3, tmp_path, "q.jsonl, line 1")
    assert images == ((str(tmp_path / "pics" / "a.png"),), (), ())
    assert images_of_turn(images, 0)[0].pixels.size == (24, 16)
    assert images_of_turn(images, 2) == []
    assert parse_turn_images(["pics/a.png"], 1, tmp_path, "x") == ((str(tmp_path / "pics" / "a.png"),),)
    assert parse_turn_images(None, 2, tmp_path, "x") == ()
    assert parse_turn_images([[], []], 2, tmp_path, "x") == ()


@pytest.mark.parametrize(
    ("value", "message"),
    [("a.png", "one entry per turn"), ([["a.png"], [], []], "at most 2"), ([[3]], "a path or a list of paths"),
     ([["missing.png"]], "image of turn 1 not found")],
)
def test_bad_images_name_the_line(tmp_path: Path, value, message: str) -> None:
    with pytest.raises(InputError, match=message) as caught:
        parse_turn_images(value, 2, tmp_path, "q.jsonl, line 4")
    assert str(caught.value).startswith("q.jsonl, line 4: ")


def _question_file(folder: Path) -> Path:
    import json

    tiny_image(seed=5).save(folder / "cat.png")
    rows = [
        {"question_id": 1, "category": "vision", "turns": ["What is this?", "Once upon a time"], "images": [["cat.png"]]},
        {"question_id": 2, "category": "text", "turns": ["The quick brown fox"]},
    ]
    path = folder / "q.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_vl_model_answers_questions_with_images(tmp_path: Path) -> None:
    from racer_core.bench.runner import run_benchmark
    from racer_core.bench.suites import load_question_file
    from racer_core.common.events import GenerationConfig
    from racer_core.testing.tiny_vl import tiny_vl_engine

    questions = load_question_file(_question_file(tmp_path))
    assert questions[0].images == ((str(tmp_path / "cat.png"),), ())
    config = GenerationConfig(max_new_tokens=10, max_num_draft=8)
    engine = tiny_vl_engine("qwen2_5_vl")
    result = run_benchmark(engine, questions, ["ar", "racer"], config, warmup=False)
    assert result.skipped_for_images == 0
    assert result.records["racer"]["1"].token_ids == result.records["ar"]["1"].token_ids
    assert set(result.records["ar"]) == {"1", "2"}
    # The picture reached the model: the same questions without it get another reply to the first.
    blind = run_benchmark(engine, [replace(q, images=()) for q in questions], ["ar"], config, warmup=False)
    assert blind.records["ar"]["1"].token_ids[0] != result.records["ar"]["1"].token_ids[0]
    assert blind.records["ar"]["2"].token_ids == result.records["ar"]["2"].token_ids  # text alone: the same


def test_a_text_model_skips_image_questions_with_a_counted_warning(tmp_path: Path, capsys) -> None:
    from racer_core.testing import tiny_engine
    from racer_tui import cli

    engine = tiny_engine("llama")
    args = ["--bench", str(_question_file(tmp_path)), "--methods", "ar", "--max-new-tokens", "6",
            "--answer-dir", str(tmp_path / "a")]
    assert cli.main(args, engine_loader=lambda **kw: engine) == 0
    out = capsys.readouterr().out
    assert "warning: 1 question with images skipped (the model reads text only)" in out
    from racer_core.bench.answers import read_answers

    assert [r.question_id for r in read_answers(tmp_path / "a" / "ar.jsonl")] == [2]
