"""A benchmark's live statistics, folded from the runner's progress reports.

The headless progress display and the dashboard both read this board; it can
be filled live (BenchProgress) or from a finished or loaded BenchResult.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from racer_core.bench.answers import AnswerRecord
from racer_core.bench.results import BenchResult
from racer_core.bench.runner import BenchProgress
from racer_core.common.stats import UNSTEPPED_METHODS, Stats


@dataclass
class BenchBoard:
    methods: list[str]
    question_count: int = 0
    per_method: dict[str, Stats] = field(default_factory=dict)  # finished answers
    per_category: dict[tuple[str, str], Stats] = field(default_factory=dict)  # (category, method)
    categories: list[str] = field(default_factory=list)
    flight_method: str | None = None
    flight_question: str | None = None
    flight_category: str | None = None
    flight_index: int = 0  # the question's place in the run, 0-based
    flight_repeat: int = 0  # its try in progress, 0-based, of `repeats`
    repeats: int = 1
    flight: Stats = field(default_factory=Stats)  # the latest question's step events
    in_flight: bool = False  # that question is still being answered
    failed: dict[str, int] = field(default_factory=dict)  # method -> questions that failed (in no Stats)

    def __post_init__(self) -> None:
        for m in self.methods:
            self.per_method.setdefault(m, Stats())

    def update(self, p: BenchProgress) -> None:
        self.question_count = p.question_count
        if p.event is not None:
            self.flight.add_step(p.event)
            return
        if not p.question_done:
            self.flight_method, self.flight_question = p.method, str(p.question_id)
            self.flight_category = p.category
            self.flight_index, self.flight_repeat, self.repeats = p.question_index, p.repeat, p.repeats
            self.flight = Stats()
            self.in_flight = True
            return
        self.in_flight = False
        if p.record is not None:
            self.add_record(p.method, p.record)

    def add_record(self, method: str, record: AnswerRecord) -> None:
        if method not in self.methods:
            self.methods.append(method)
        if record.error is not None:
            self.failed[method] = self.failed.get(method, 0) + 1
            return
        args = (record.tokens, record.seconds, record.accept_lengths, record.method or method)
        self.per_method.setdefault(method, Stats()).add_reply(*args)
        if record.category not in self.categories:
            self.categories.append(record.category)
        self.per_category.setdefault((record.category, method), Stats()).add_reply(*args)

    def finished(self, method: str) -> int:
        """Questions a method is done with: answered or failed."""
        return self.per_method[method].replies + self.failed.get(method, 0)

    def live(self, method: str) -> Stats:
        """A method's finished answers plus its question in flight."""
        done = self.per_method[method]
        return done.plus(self.flight) if self.in_flight and method == self.flight_method else done

    def flight_place(self) -> str:
        """Which question (and try, with repeats) is in flight: 'question 3/14, try 2/3'."""
        place = f"question {self.flight_index + 1}/{self.question_count or '?'}"
        return place if self.repeats == 1 else f"{place}, try {self.flight_repeat + 1}/{self.repeats}"

    def category_mat(self, category: str, method: str) -> float | None:
        stats = self.per_category.get((category, method))
        return None if stats is None else stats.mat

    def stepped_methods(self) -> list[str]:
        return [m for m in self.methods if m not in UNSTEPPED_METHODS]

    @classmethod
    def from_result(cls, result: BenchResult) -> BenchBoard:
        board = cls(methods=list(result.methods), question_count=result.question_count)
        for key in result.question_order:
            for method in result.methods:
                record = result.records.get(method, {}).get(key) or result.failures.get(method, {}).get(key)
                if record is not None:
                    board.add_record(method, record)
        return board
