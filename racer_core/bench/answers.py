"""Answer files: one JSON line per question and method (DESIGN.md section 4).

Each line is written with a single `os.write` of the whole line on an O_APPEND
descriptor, then fsynced, so a Ctrl-C or a kill loses at most the question in
flight. A final line without its newline (a write cut short by a crash or a full
disk) is dropped when read, and cut off before a file is appended to again.

Beyond the format, each choice also carries `token_ids` (per turn, so runs can
be compared token for token) and each line a `config` (the settings that
produced it, so `--resume` never mixes runs made with different settings).
Readers accept lines without them.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from racer_core.errors import InputError

DATA_DIR_ENV = "RACER_TUI_DATA_DIR"  # read by racer_core.paths.data_dir


@dataclass(frozen=True)
class AnswerRecord:
    """One question answered by one method."""

    question_id: int | str
    category: str
    model_id: str
    method: str
    turns: tuple[str, ...]
    new_tokens: tuple[int, ...]  # per turn
    wall_time: tuple[float, ...]  # seconds per turn
    accept_lengths: tuple[int, ...]  # tokens per step over all turns, bonus included
    token_ids: tuple[tuple[int, ...], ...] | None = None  # per turn; None in foreign files
    tstamp: float = 0.0
    config: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def key(self) -> str:
        # ids from different files may be 81 or "81"; match them as text
        return str(self.question_id)

    @property
    def tokens(self) -> int:
        return sum(self.new_tokens)

    @property
    def seconds(self) -> float:
        return sum(self.wall_time)

    def to_json(self) -> dict[str, Any]:
        choice: dict[str, Any] = {
            "index": 0,
            "turns": list(self.turns),
            "new_tokens": list(self.new_tokens),
            "wall_time": list(self.wall_time),
            "accept_lengths": list(self.accept_lengths),
        }
        if self.token_ids is not None:
            choice["token_ids"] = [list(t) for t in self.token_ids]
        obj: dict[str, Any] = {
            "question_id": self.question_id,
            "category": self.category,
            "model_id": self.model_id,
            "method": self.method,
            "choices": [choice],
            "tstamp": self.tstamp,
        }
        if self.config is not None:
            obj["config"] = self.config
        return obj

    @classmethod
    def from_json(cls, obj: Any) -> AnswerRecord:
        """Raise ValueError (with a short reason) when `obj` is not an answer."""
        if not isinstance(obj, dict):
            raise ValueError("expected a JSON object")
        try:
            choice = obj["choices"][0]
            turns = tuple(str(t) for t in choice["turns"])
            new_tokens = tuple(int(n) for n in choice["new_tokens"])
            wall_time = tuple(float(s) for s in choice["wall_time"])
            accept = tuple(int(n) for n in choice.get("accept_lengths", ()))
            ids = choice.get("token_ids")
            token_ids = None if ids is None else tuple(tuple(int(t) for t in turn) for turn in ids)
            record = cls(
                question_id=obj["question_id"],
                category=str(obj.get("category", "")),
                model_id=str(obj.get("model_id", "")),
                method=str(obj.get("method", "")),
                turns=turns,
                new_tokens=new_tokens,
                wall_time=wall_time,
                accept_lengths=accept,
                token_ids=token_ids,
                tstamp=float(obj.get("tstamp", 0.0)),
                config=obj.get("config") if isinstance(obj.get("config"), dict) else None,
            )
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise ValueError(f"not an answer ({type(exc).__name__}: {exc})") from None
        if len(new_tokens) != len(wall_time):
            raise ValueError("new_tokens and wall_time differ in length")
        return record


def read_answers(path: str | Path) -> list[AnswerRecord]:
    """Read an answer file; a final line cut short is dropped, other bad lines raise."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read answer file {path}: {exc.strerror or exc}") from None
    lines = data.split(b"\n")
    # the part after the last newline is either empty or a write cut short
    complete = lines[:-1]
    records = []
    for lineno, raw in enumerate(complete, start=1):
        if not raw.strip():
            continue
        try:
            records.append(AnswerRecord.from_json(json.loads(raw)))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise InputError(f"{path}, line {lineno}: not valid JSON") from None
        except ValueError as exc:
            raise InputError(f"{path}, line {lineno}: {exc}") from None
    return records


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
    from racer_core.paths import data_dir

    return data_dir() / "bench" / _slug(suite) / _slug(model)
