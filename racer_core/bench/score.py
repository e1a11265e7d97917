"""Math accuracy: the last \\boxed{} answer of each reply against the question's reference.

Two answers agree when they are the same after removing `$`, commas, spaces
and `\\text{...}` wrappers (as numbers when both parse as one, so 18 = 18.0),
or else when `math-verify` finds them symbolically equal (\\frac{1}{2} = 0.5).
A reference may list several accepted answers; any one counts.

With one choice per question the score is accuracy. With k choices, pass@k
is the share of questions with at least one correct choice, mean@k the mean
of the k per-choice accuracies and std their population standard deviation,
as the original reports them. A reply without a boxed answer is wrong and is
counted apart; a question without an answer line, or whose answer failed,
counts as wrong too (unanswered).
"""

from __future__ import annotations

import functools
import logging
import math
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from racer_core.bench.answers import AnswerRecord
from racer_core.common.counts import counted

_BOXED = re.compile(r"\\boxed\s*\{")
_TEXT = re.compile(r"\\text\{([^{}]*)\}")


def extract_boxed(text: str) -> str | None:
    """The contents of the last \\boxed{...} (braces balanced), or None."""
    starts = list(_BOXED.finditer(text or ""))
    if not starts:
        return None
    begin = starts[-1].end()
    depth = 1
    for i in range(begin, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[begin:i]
    return None  # cut off before its closing brace


def normalize(answer: str) -> str:
    text = _TEXT.sub(r"\1", str(answer))
    text = text.replace("$", "").replace(",", "").replace(" ", "").strip()
    return text[:-1] if text.endswith(".") else text


def _number(text: str) -> Decimal | None:
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


@functools.lru_cache(maxsize=8192)  # the dashboard re-scores a growing run after each answer
def answers_agree(prediction: str, reference: str) -> bool:
    a, b = normalize(prediction), normalize(reference)
    if a == b:
        return True
    x, y = _number(a), _number(b)
    if x is not None and y is not None:
        return x == y
    return _symbolic_equal(a, b)


def _symbolic_equal(prediction: str, reference: str) -> bool:
    try:
        from math_verify import parse, verify
    except ImportError:  # declared as a dependency; without it only exact matches count
        return False
    # math-verify times out with signals, which work in the main thread only
    limit = 5 if threading.current_thread() is threading.main_thread() else None
    logger = logging.getLogger("math_verify")
    level = logger.level
    logger.setLevel(logging.ERROR)  # it warns on every call made without a time limit
    try:
        gold = parse(f"${reference}$", parsing_timeout=limit)
        pred = parse(f"${prediction}$", parsing_timeout=limit)
        return bool(gold and pred and verify(gold, pred, timeout_seconds=limit))
    except Exception:  # a parser failure on odd text is a mismatch, not a crash
        return False
    finally:
        logger.setLevel(level)


def is_correct(reply: str, references: Iterable[str]) -> bool | None:
    """True/False against any reference; None when the reply has no boxed answer."""
    boxed = extract_boxed(reply)
    if boxed is None:
        return None
    return any(answers_agree(boxed, ref) for ref in references)


@dataclass(frozen=True)
class MathScore:
    questions: int  # questions with a reference
    correct: int  # questions with at least one correct choice (pass@k numerator)
    k: int | None  # choices per question; None when questions differ
    mean_at_k: float  # mean over questions of the share of correct choices
    std_at_k: float | None  # population std of the k per-choice accuracies
    boxed_missing: int  # replies with no boxed answer
    unanswered: int  # questions with a reference but no answer line

    @property
    def pass_at_k(self) -> float:
        return self.correct / self.questions if self.questions else 0.0

    def summary(self) -> str:
        """One line, in the original's terms."""
        if not self.questions:
            return "no questions with a reference"
        tail = f"no boxed answer in {counted(self.boxed_missing, 'reply', 'replies')}"
        if self.unanswered:
            tail += f", {counted(self.unanswered, 'question')} unanswered"
        if self.k == 1:
            return f"accuracy {self.correct}/{self.questions} = {100 * self.pass_at_k:.2f}% ({tail})"
        k = self.k if self.k is not None else "k"
        std = f" ± {100 * self.std_at_k:.2f}%" if self.std_at_k is not None else ""
        return (
            f"pass@{k} {self.correct}/{self.questions} = {100 * self.pass_at_k:.2f}%, "
            f"mean@{k} {100 * self.mean_at_k:.2f}%{std} ({tail})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "questions": self.questions,
            "correct": self.correct,
            "k": self.k,
            "pass_at_k": round(self.pass_at_k, 6),
            "mean_at_k": round(self.mean_at_k, 6),
            "std_at_k": None if self.std_at_k is None else round(self.std_at_k, 6),
            "boxed_missing": self.boxed_missing,
            "unanswered": self.unanswered,
        }


def score_answers(records: Mapping[str, AnswerRecord], references: Mapping[str, tuple[str, ...]]) -> MathScore:
    """Score answers (by question key) against references (by question key).

    Each choice is graded on its first turn's reply, as the original grades it.
    """
    hits: list[list[bool]] = []
    missing = unanswered = 0
    for key, refs in references.items():
        rec = records.get(key)
        if rec is None or rec.error is not None:  # a failed question has no reply to grade
            unanswered += 1
            continue
        row = []
        for choice in rec.choices:
            verdict = is_correct(choice.turns[0] if choice.turns else "", refs)
            missing += verdict is None
            row.append(bool(verdict))
        hits.append(row)
    counts = {len(row) for row in hits}
    k = counts.pop() if len(counts) == 1 else (1 if not counts else None)
    hits += [[False] * (k or 1) for _ in range(unanswered)]  # no answer: every choice wrong
    if not hits:
        return MathScore(0, 0, None, 0.0, None, 0, 0)
    mean = sum(sum(row) / len(row) for row in hits) / len(hits)
    std = None
    if k is not None:
        per_choice = [sum(row[i] for row in hits) / len(hits) for i in range(k)]
        centre = sum(per_choice) / k
        std = math.sqrt(sum((x - centre) ** 2 for x in per_choice) / k)
    return MathScore(len(hits), sum(any(row) for row in hits), k, mean, std, missing, unanswered)


def score_methods(records: Mapping[str, Mapping[str, AnswerRecord]]) -> dict[str, MathScore]:
    """Per method, the accuracy of the questions it has answered, by the
    references its answer lines carry; empty when none carries one."""
    refs = references_of(r for recs in records.values() for r in recs.values())
    if not refs:
        return {}
    return {m: score_answers(recs, {k: v for k, v in refs.items() if k in recs}) for m, recs in records.items()}


def references_of(items: Iterable[Any]) -> dict[str, tuple[str, ...]]:
    """Question key -> reference, for questions (or answer records) that have one."""
    return {str(x.question_id): tuple(x.reference) for x in items if getattr(x, "reference", None)}
