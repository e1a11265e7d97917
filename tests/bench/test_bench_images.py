"""Question lines carry images per turn, relative to the question file."""

from __future__ import annotations

from pathlib import Path

import pytest

from racer_core.bench.images import images_of_turn, parse_turn_images
from racer_core.errors import InputError
from racer_core.tiny_vl import tiny_image


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
