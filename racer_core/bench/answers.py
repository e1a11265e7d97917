"""Answer files: one JSON line per question and method (docs/design.md section 4).

Each line is written with a single `os.write` of the whole line on an O_APPEND
descriptor, then fsynced, so a Ctrl-C or a kill loses at most the question in
flight. A final line without its newline (a write cut short by a crash or a full
disk) is dropped when read, and cut off before a file is appended to again.

A line has the original RACER's fields (`question_id`, `category`, `answer_id`,
`model_id`, `choices[{index, turns, decoding_steps, new_tokens, wall_time,
accept_lengths}]`, `tstamp`), so its speed and math scripts read our files and we
read theirs. Beyond that format, each line names its `method` and carries the
question's `reference` (when it has one, for scoring) and a `config` (the
settings that produced it, so `--resume` never mixes runs made with different
settings); each choice also carries `token_ids` (per turn, so runs can be
compared token for token) and, in greedy runs, `tie_margins` (per turn, each
token's top-2 logit gap in ulps, so a divergence can be told from rounding:
racer_core.verify.near_tie) and `accepted_by_source` (the drafted tokens its
verification steps accepted, by source key, as the API reports them: a
grammar's forced tokens count under `grammar`). A question with a JSON Schema
(a constrained suite) keeps it as `schema`, so validity can be checked from
the file alone. Readers accept lines without them. A question the
engine failed on has an `error` field with the reason, and only the choices
finished before the failure (no text stands in for a reply); `--resume`
answers it again.

`accept_lengths` holds the tokens each tree verification step produced; the
prefill, which emits the first token of a turn from the prompt alone, is not a
step, so MAT (their mean) is the original's mean accepted tokens.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from racer_core.bench.constrained import schema_text
from racer_core.common.errors import InputError

DATA_DIR_ENV = "RACER_TUI_DATA_DIR"  # read by racer_core.common.paths.data_dir


@dataclass(frozen=True)
class Choice:
    """One sampled reply to every turn of a question (the original's `choices[i]`)."""

    index: int
    turns: tuple[str, ...]
    new_tokens: tuple[int, ...]  # per turn
    wall_time: tuple[float, ...]  # seconds per turn
    accept_lengths: tuple[int, ...]  # tokens per tree verification step over all turns, prefill excluded
    decoding_steps: tuple[int, ...] | None = None  # verification steps per turn; None in files without it
    token_ids: tuple[tuple[int, ...], ...] | None = None  # per turn; None in foreign files
    tie_margins: tuple[tuple[float, ...], ...] | None = None  # per turn and token, greedy (racer_core.verify.near_tie)
    # source key -> drafted tokens the counted steps accepted (bonus tokens left out); None in files without it
    accepted_by_source: dict[str, int] | None = field(default=None, hash=False)

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"index": self.index, "turns": list(self.turns)}
        if self.decoding_steps is not None:
            obj["decoding_steps"] = list(self.decoding_steps)
        obj.update(
            new_tokens=list(self.new_tokens),
            wall_time=list(self.wall_time),
            accept_lengths=list(self.accept_lengths),
        )
        if self.token_ids is not None:
            obj["token_ids"] = [list(t) for t in self.token_ids]
        if self.tie_margins is not None:
            obj["tie_margins"] = [list(t) for t in self.tie_margins]
        if self.accepted_by_source is not None:
            obj["accepted_by_source"] = dict(self.accepted_by_source)
        return obj

    @classmethod
    def from_json(cls, obj: Any, position: int, *, turns_only: bool = False) -> Choice:
        """With `turns_only` the speed fields may be missing (empty here): a
        scorer needs only the replies, as the original's does."""
        if not isinstance(obj, dict):
            raise ValueError(f"choice {position} is not a JSON object")
        turns = tuple(str(t) for t in obj["turns"])
        timing = {k: obj.get(k, ()) for k in ("new_tokens", "wall_time")} if turns_only else obj
        new_tokens = tuple(int(n) for n in timing["new_tokens"])
        wall_time = tuple(float(s) for s in timing["wall_time"])
        if len(new_tokens) != len(wall_time):
            raise ValueError("new_tokens and wall_time differ in length")
        steps = obj.get("decoding_steps")
        ids = obj.get("token_ids")
        margins = obj.get("tie_margins")
        by_source = obj.get("accepted_by_source")
        return cls(
            index=int(obj.get("index", position)),
            turns=turns,
            new_tokens=new_tokens,
            wall_time=wall_time,
            accept_lengths=tuple(int(n) for n in obj.get("accept_lengths", ())),
            decoding_steps=None if steps is None else tuple(int(n) for n in steps),
            token_ids=None if ids is None else tuple(tuple(int(t) for t in turn) for turn in ids),
            tie_margins=None if margins is None else tuple(tuple(float(g) for g in turn) for turn in margins),
            accepted_by_source=None if by_source is None else {str(k): int(n) for k, n in by_source.items()},
        )


@dataclass(frozen=True)
class AnswerRecord:
    """One question answered by one method: one or more choices (samples).

    `turns`, `new_tokens`, `wall_time` and `token_ids` are the first choice's;
    `tokens`, `seconds` and `accept_lengths` count every choice, as the
    original's speed analysis reads them.
    """

    question_id: int | str
    category: str
    model_id: str
    method: str
    choices: tuple[Choice, ...]
    tstamp: float = 0.0
    config: dict[str, Any] | None = field(default=None, compare=False)
    answer_id: str = field(default="", compare=False)
    reference: tuple[str, ...] | None = None  # the question's expected final answer(s), for scoring
    # why the question failed: then `choices` holds only the choices finished before the failure
    error: str | None = None
    schema: str | None = None  # the JSON Schema (JSON text) the replies had to match: a constrained question

    @classmethod
    def single(
        cls,
        question_id: int | str,
        category: str,
        model_id: str,
        method: str,
        turns: tuple[str, ...],
        new_tokens: tuple[int, ...],
        wall_time: tuple[float, ...],
        accept_lengths: tuple[int, ...],
        token_ids: tuple[tuple[int, ...], ...] | None = None,
        **extra: Any,
    ) -> AnswerRecord:
        """A record with one choice (most runs)."""
        choice = Choice(0, turns, new_tokens, wall_time, accept_lengths, token_ids=token_ids)
        return cls(question_id, category, model_id, method, (choice,), **extra)

    @property
    def key(self) -> str:
        # ids from different files may be 81 or "81"; match them as text
        return str(self.question_id)

    @property
    def turns(self) -> tuple[str, ...]:
        return self.choices[0].turns

    @property
    def new_tokens(self) -> tuple[int, ...]:
        return self.choices[0].new_tokens

    @property
    def wall_time(self) -> tuple[float, ...]:
        return self.choices[0].wall_time

    @property
    def token_ids(self) -> tuple[tuple[int, ...], ...] | None:
        return self.choices[0].token_ids

    @property
    def accept_lengths(self) -> tuple[int, ...]:
        return tuple(n for c in self.choices for n in c.accept_lengths)

    def accepted_from(self, source_key: str) -> int:
        """Drafted tokens that source accepted over every choice (0 where a file does not say)."""
        return sum((c.accepted_by_source or {}).get(source_key, 0) for c in self.choices)

    @property
    def tokens(self) -> int:
        return sum(sum(c.new_tokens) for c in self.choices)

    @property
    def seconds(self) -> float:
        return sum(sum(c.wall_time) for c in self.choices)

    def to_json(self) -> dict[str, Any]:
        """The original's line (question_id, category, answer_id, model_id, choices, tstamp) plus ours."""
        obj: dict[str, Any] = {
            "question_id": self.question_id,
            "category": self.category,
            "answer_id": self.answer_id or new_answer_id(),
            "model_id": self.model_id,
            "method": self.method,
            "choices": [c.to_json() for c in self.choices],
            "tstamp": self.tstamp,
        }
        if self.reference is not None:
            obj["reference"] = list(self.reference)
        if self.config is not None:
            obj["config"] = self.config
        if self.error is not None:
            obj["error"] = self.error
        if self.schema is not None:
            obj["schema"] = json.loads(self.schema)
        return obj

    @classmethod
    def from_json(cls, obj: Any, *, turns_only: bool = False) -> AnswerRecord:
        """Raise ValueError (with a short reason) when `obj` is not an answer;
        with `turns_only`, a line with only `question_id` and `choices[].turns` is one."""
        if not isinstance(obj, dict):
            raise ValueError("expected a JSON object")
        try:
            raw = obj["choices"]
            error = obj.get("error")
            if error is not None and not isinstance(error, str):
                raise ValueError("error must be a string")
            if not isinstance(raw, list) or not (raw or error):  # a failed question may have none
                raise ValueError("choices must be a non-empty list")
            choices = tuple(Choice.from_json(c, i, turns_only=turns_only) for i, c in enumerate(raw))
            qid = obj["question_id"]
            if isinstance(qid, bool) or not isinstance(qid, int | str):
                raise ValueError("question_id must be a number or a string")
            return cls(
                question_id=qid,
                category=str(obj.get("category", "")),
                model_id=str(obj.get("model_id", "")),
                method=str(obj.get("method", "")),
                choices=choices,
                tstamp=float(obj.get("tstamp", 0.0)),
                config=obj.get("config") if isinstance(obj.get("config"), dict) else None,
                answer_id=str(obj.get("answer_id", "")),
                reference=_reference(obj.get("reference")),
                error=error,
                schema=_schema(obj.get("schema")),
            )
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise ValueError(f"not an answer ({type(exc).__name__}: {exc})") from None


def _reference(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    items = value if isinstance(value, list) else [value]
    return tuple(str(v) for v in items) or None


def _schema(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError("schema must be a JSON object")
    return schema_text(value)


def new_answer_id() -> str:
    """A short random id, like the original's 22-character ones."""
    return uuid.uuid4().hex[:22]


def read_answers(path: str | Path, *, turns_only: bool = False) -> list[AnswerRecord]:
    """Read an answer file; a final line cut short is dropped, other bad lines raise.
    With `turns_only`, lines need only what a scorer reads (AnswerRecord.from_json)."""
    records, problems = scan_answers(path, turns_only=turns_only)
    if problems:
        raise InputError(problems[0])
    return records


def scan_answers(path: str | Path, *, turns_only: bool = False) -> tuple[list[AnswerRecord], list[str]]:
    """Every readable answer of a file, and one message per line that is not
    one (`FILE, line N: why`); a final line cut short is dropped silently.
    Raise InputError only when the file cannot be read at all."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read answer file {path}: {exc.strerror or exc}") from None
    lines = data.split(b"\n")
    # the part after the last newline is either empty or a write cut short
    complete = lines[:-1]
    records: list[AnswerRecord] = []
    problems: list[str] = []
    for lineno, raw in enumerate(complete, start=1):
        if not raw.strip():
            continue
        try:
            records.append(AnswerRecord.from_json(json.loads(raw), turns_only=turns_only))
        except (UnicodeDecodeError, json.JSONDecodeError):
            problems.append(f"{path}, line {lineno}: not valid JSON")
        except ValueError as exc:
            problems.append(f"{path}, line {lineno}: {exc}")
    return records, problems


class AnswerWriter:
    """Appends answer lines to one file, each durable before the next question."""

    def __init__(self, path: str | Path, *, append: bool) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if append else os.O_TRUNC)
        self._fd = os.open(self.path, flags, 0o644)
        if append:
            self._drop_partial_tail()

    def _drop_partial_tail(self) -> None:
        # a line cut short would glue itself to the next answer; cut it off
        size = os.fstat(self._fd).st_size
        if size == 0:
            return
        with open(self.path, "rb") as fh:
            data = fh.read()
        if not data.endswith(b"\n"):
            os.ftruncate(self._fd, data.rfind(b"\n") + 1)

    def write(self, record: AnswerRecord) -> None:
        line = (json.dumps(record.to_json(), ensure_ascii=False) + "\n").encode("utf-8")
        written = os.write(self._fd, line)
        # a regular file takes the whole line unless the disk is full; finish it
        # anyway (a crash in between leaves a partial line that readers drop)
        while written < len(line):
            written += os.write(self._fd, line[written:])
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> AnswerWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def answer_path(answer_dir: str | Path, method: str) -> Path:
    return Path(answer_dir) / f"{method}.jsonl"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "model"


def default_answer_dir(suite: str, model: str) -> Path:
    """Stable per (suite, model), so `--resume` finds the previous run's answers."""
    from racer_core.common.paths import data_dir

    return data_dir() / "bench" / _slug(suite) / _slug(model)
