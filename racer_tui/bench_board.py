"""What the dashboard shows, folded from the runner's progress reports.

No Textual here: the board is plain data so it can be tested on its own and
filled either live (BenchProgress) or from a finished or loaded BenchResult.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from racer_core.bench.answers import AnswerRecord
from racer_core.bench.results import UNSTEPPED_METHODS, BenchResult
from racer_core.bench.runner import BenchProgress


@dataclass
class MethodBoard:
    done: int = 0
    tokens: int = 0
    seconds: float = 0.0
    accepted: int = 0
    steps: int = 0
    speeds: list[float] = field(default_factory=list)  # tokens/s of each finished question
    lengths: Counter[int] = field(default_factory=Counter)  # accepted length -> steps

    @property
    def tokens_per_s(self) -> float | None:
        return self.tokens / self.seconds if self.seconds > 0 else None

    @property
    def mat(self) -> float | None:
        return self.accepted / self.steps if self.steps else None


@dataclass
class BenchBoard:
    methods: list[str]
    question_count: int = 0
    per_method: dict[str, MethodBoard] = field(default_factory=dict)
    # (category, method) -> [accepted tokens, steps] over finished questions
    category_sums: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    categories: list[str] = field(default_factory=list)
    flight_method: str | None = None
    flight_question: str | None = None
    flight_category: str | None = None
    flight_lengths: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        for m in self.methods:
            self.per_method.setdefault(m, MethodBoard())

    def update(self, p: BenchProgress) -> None:
        if p.event is not None:
            if p.event.pieces:
                self.flight_lengths.append(p.event.accept_length)
            return
        if not p.question_done:
            self.flight_method, self.flight_question = p.method, str(p.question_id)
            self.flight_category = p.category
            self.flight_lengths = []
            return
        self.question_count = p.question_count
        if p.record is not None:
            self.add_record(p.method, p.record)

    def add_record(self, method: str, record: AnswerRecord) -> None:
        board = self.per_method.setdefault(method, MethodBoard())
        if method not in self.methods:
            self.methods.append(method)
        board.done += 1
        board.tokens += record.tokens
        board.seconds += record.seconds
        if record.seconds > 0:
            board.speeds.append(record.tokens / record.seconds)
        if method in UNSTEPPED_METHODS:
            return  # one event per reply: its "accepted lengths" are whole replies
        board.lengths.update(record.accept_lengths)
        board.accepted += sum(record.accept_lengths)
        board.steps += len(record.accept_lengths)
        if record.category not in self.categories:
            self.categories.append(record.category)
        sums = self.category_sums.setdefault((record.category, method), [0, 0])
        sums[0] += sum(record.accept_lengths)
        sums[1] += len(record.accept_lengths)

    def category_mat(self, category: str, method: str) -> float:
        accepted, steps = self.category_sums.get((category, method), (0, 0))
        return accepted / steps if steps else 0.0

    def stepped_methods(self) -> list[str]:
        return [m for m in self.methods if m not in UNSTEPPED_METHODS]

    @classmethod
    def from_result(cls, result: BenchResult) -> BenchBoard:
        board = cls(methods=list(result.methods), question_count=result.question_count)
        for key in result.question_order:
            for method in result.methods:
                record = result.records.get(method, {}).get(key)
                if record is not None:
                    board.add_record(method, record)
        return board
