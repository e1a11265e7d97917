"""Totals over answer records (racer_core.common.stats rows): per method, per category, against a baseline.

The runner builds a BenchResult as it goes; `load_results` rebuilds the same
shape from answer files, so the dashboard and `racer-tui speed` share it.
Speedup compares tokens/s with the baseline (`ar`) on the questions both
answered; identical_to_ar compares token ids per turn (text where a file has
no ids) and applies only to greedy runs; a question that differs counts as a
near-tie divergence or an other one (racer_core.verify.near_tie), and other ones are
flagged: they are bugs, not rounding. On the lean forward, which is
batch-invariant (every tree row's logits are plain decoding's, bit for bit),
no divergence is rounding: every one counts as other.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from racer_core.bench.answers import AnswerRecord, read_answers, scan_answers
from racer_core.bench.constrained import Validity, validity
from racer_core.bench.suites import report_categories
from racer_core.common import registry
from racer_core.common.counts import counted
from racer_core.common.errors import InputError
from racer_core.common.stats import Row, Stats, Versus
from racer_core.verify.near_tie import Verdict, classify_turns, worst


def divergence(a: AnswerRecord, b: AnswerRecord) -> Verdict:
    """Whether `a` equals the baseline's `b`, and where not, whether the first difference is a near-tie."""
    if len(a.choices) != len(b.choices):
        return "other"
    verdicts: list[Verdict] = []
    for x, y in zip(a.choices, b.choices, strict=True):
        if x.token_ids is None or y.token_ids is None:  # foreign files: text only, no margins
            verdicts.append("identical" if x.turns == y.turns else "other")
        else:
            verdicts.append(classify_turns(x.token_ids, y.token_ids, x.tie_margins, y.tie_margins))
    return worst(verdicts)


@dataclass
class BenchResult:
    """Answers of several methods (labels) on one question list."""

    methods: list[str]
    records: dict[str, dict[str, AnswerRecord]] = field(default_factory=dict)
    question_order: list[str] = field(default_factory=list)  # question keys
    baseline: str | None = "ar"
    greedy: bool | None = None  # None: unknown (answer files without config)
    suite: str | None = None
    model: str | None = None
    device: str | None = None
    dtype: str | None = None
    cpu: str | None = None  # which CPU and class ran it (EngineInfo.cpu); None for loaded files and other devices
    forward: str | None = None  # "lean" (batch-invariant: no near-tie excuse) or "stock"; None for loaded files
    warm: bool | None = None
    question_count: int = 0  # questions selected for the run
    completed: bool = True  # False when stopped before the last question
    answer_dir: Path | None = None
    skipped_for_images: int = 0  # questions with images left out: the model reads text only
    repeats: int = 1  # tries per question (the median one is in records)
    repeat_speeds: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # label -> key -> tok/s per try
    unreadable: list[str] = field(default_factory=list)  # answer lines load_results skipped, one message each
    # label -> key -> the record of a question that failed (its `error` set); kept out of `records`,
    # so no total counts its tokens or time
    failures: dict[str, dict[str, AnswerRecord]] = field(default_factory=dict)

    def add(self, label: str, record: AnswerRecord) -> None:
        """Record an answer; a failed one goes to `failures`, and a later answer
        to the same question (a rerun) replaces either."""
        if label not in self.methods:
            self.methods.append(label)
        answered, failed = self.records.setdefault(label, {}), self.failures.setdefault(label, {})
        answered.pop(record.key, None)
        failed.pop(record.key, None)
        (failed if record.error is not None else answered)[record.key] = record
        if record.key not in self.question_order:
            self.question_order.append(record.key)

    def failed(self, label: str, category: str | None = None) -> int:
        """How many of a label's questions (in `category`) failed."""
        recs = self.failures.get(label, {}).values()
        if category is None:
            return len(recs)
        fold = self._fold()
        return sum(fold.get(r.category, r.category) == category for r in recs)

    def failure_count(self) -> int:
        return sum(len(recs) for recs in self.failures.values())

    def _all_records(self) -> list[AnswerRecord]:
        return [r for recs in (*self.records.values(), *self.failures.values()) for r in recs.values()]

    def _fold(self) -> dict[str, str]:
        """Report categories: a Spec-Bench mix shows MT-Bench's eight as multi_turn."""
        return report_categories(r.category for r in self._all_records())

    def categories(self) -> list[str]:
        fold = self._fold()
        seen: dict[str, None] = {}
        for key in self.question_order:
            for label in self.methods:
                rec = self.records.get(label, {}).get(key) or self.failures.get(label, {}).get(key)
                if rec is not None:
                    seen.setdefault(fold.get(rec.category, rec.category))
                    break
        return list(seen)

    def totals(self, label: str, category: str | None = None) -> Row:
        recs = self._select(label, category)
        versus = Versus()
        if self.baseline is not None and self.baseline in self.records:
            base = self._select(self.baseline, category)
            common = [k for k in recs if k in base]
            speedup = tally(recs[k] for k in common).speedup_over(tally(base[k] for k in common))
            ratios = [r for k in common if (r := tally([recs[k]]).speedup_over(tally([base[k]]))) is not None]
            spread = (min(ratios), max(ratios)) if ratios and label != self.baseline else (None, None)
            versus = Versus(speedup, low=spread[0], high=spread[1])
            if label != self.baseline and self.greedy is not False and common:
                verdicts = [divergence(recs[k], base[k]) for k in common]
                same = verdicts.count("identical")
                near = 0 if self._exact(label) else verdicts.count("near-tie")
                versus = Versus(
                    speedup, same == len(common), same, len(common),
                    near, len(common) - same - near, *spread,
                )
        return Row(tally(recs.values()), versus)

    def _exact(self, label: str) -> bool:
        """Whether `label`'s answers come from the batch-invariant lean forward, where no
        divergence from the baseline is rounding (anchors run transformers' own generate)."""
        spec = registry.method(label)
        return self.forward == "lean" and spec is not None and spec.kind != registry.ANCHOR

    def _other_model(self, label: str) -> bool:
        """An anchor (transformers' generate) beside methods on a GGUF's 4-bit blocks: it
        decodes the dequantized float32 model, so it may answer differently."""
        spec = registry.method(label)
        return spec is not None and spec.kind == registry.ANCHOR and (self.dtype or "").startswith("gguf")

    def _select(self, label: str, category: str | None) -> dict[str, AnswerRecord]:
        recs = self.records.get(label, {})
        if category is None:
            return recs
        fold = self._fold()
        return {k: r for k, r in recs.items() if fold.get(r.category, r.category) == category}

    @property
    def constrained(self) -> bool:
        """Whether any answer had a schema to match (a constrained suite): the tables then show validity."""
        return any(r.schema is not None for r in self._all_records())

    def validity(self, label: str, category: str | None = None) -> Validity:
        """How many of a label's constrained replies (in `category`) parse and validate, checked from their text."""
        return validity(self._select(label, category).values())

    def method_totals(self) -> dict[str, Row]:
        return {label: self.totals(label) for label in self.methods}

    def category_totals(self) -> dict[str, dict[str, Row]]:
        return {
            cat: {
                label: self.totals(label, cat)
                for label in self.methods
                if self._select(label, cat) or self.failed(label, cat)
            }
            for cat in self.categories()
        }

    def warnings(self) -> list[str]:
        """What a reader must not miss under the tables: failed questions,
        divergences from the baseline that are not near-ties, and speed figures
        too noisy to trust."""
        lines = []
        for label, row in self.method_totals().items():
            if failed := self.failed(label):
                first = next(iter(self.failures[label].values()))
                lines.append(
                    f"{label}: {counted(failed, 'question')} failed and count in no total "
                    f"(question {first.question_id}: {first.error})"
                )
            v = row.versus
            if v.other_questions:
                differ = (f"{label}: {v.other_questions} of {counted(v.compared_questions, 'question')} "
                          f"{'differs' if v.other_questions == 1 else 'differ'} from {self.baseline}")
                if self._other_model(label):
                    lines.append(f"{differ}: {label} runs transformers' forward on the GGUF dequantized to float32, "
                                 "another model than the 4-bit blocks the others multiply (--dtype float32 runs "
                                 "all on that one)")
                else:
                    why = "on the batch-invariant lean forward" if self._exact(label) else "other than at a near-tie"
                    lines.append(f"{differ} {why}: a bug, not rounding")
            if v.low and v.high and v.high / v.low > WIDE_SPREAD:
                hint = "" if self.repeats > 1 else "; --repeats 3 keeps the median of 3 tries"
                lines.append(
                    f"{label}: speedups per question span {v.low:.2f}-{v.high:.2f}x, a wide spread "
                    f"(uneven questions or a busy machine){hint}"
                )
            noise = self.repeat_noise(label)
            if noise is not None and noise[1] > NOISY_REPEATS:
                lines.append(
                    f"{label}: the speedup of question {noise[0]} changed {noise[1]:.2f}x between tries: "
                    "the machine was busy, the figures are uncertain"
                )
        return lines

    def repeat_noise(self, label: str) -> tuple[str, float] | None:
        """The question whose per-try speedups over the baseline varied most, and by how much (max/min)."""
        mine, base = self.repeat_speeds.get(label, {}), self.repeat_speeds.get(self.baseline or "", {})
        if label == self.baseline or not mine or not base:
            return None
        worst_key, worst_ratio = None, 1.0
        for key, speeds in mine.items():
            ratios = [s / b for s, b in zip(speeds, base.get(key, []), strict=False) if s > 0 and b > 0]
            if len(ratios) > 1 and max(ratios) / min(ratios) >= worst_ratio:
                worst_key, worst_ratio = key, max(ratios) / min(ratios)
        return None if worst_key is None else (worst_key, worst_ratio)

    def to_summary(self, **extra: Any) -> dict[str, Any]:
        """The --summary-json document; `extra` keys are added at the top level.

        identical_to_ar is null for the ar row itself (nothing to compare) and
        for sampling runs; speedup_vs_ar is null when the run has no ar.
        """
        summary: dict[str, Any] = {
            "suite": self.suite,
            "model": self.model,
            "device": self.device,
            "dtype": self.dtype,
            "cpu": self.cpu,
            "questions": self.question_count or len(self.question_order),
            "warm": self.warm,
            "greedy": self.greedy,
            "completed": self.completed,
            "answer_dir": None if self.answer_dir is None else str(self.answer_dir),
            "methods": {label: self._row_json(t, label) for label, t in self.method_totals().items()},
            "categories": {
                cat: {label: self._row_json(t, label, cat) for label, t in rows.items()}
                for cat, rows in self.category_totals().items()
            },
            "failed": self.failure_count(),
            "repeats": self.repeats,
            "warnings": self.warnings(),
        }
        summary.update(extra)
        return summary


    def _row_json(self, row: Row, label: str, category: str | None = None) -> dict[str, Any]:
        """A summary row: the totals, failures and, for a constrained suite, validity."""
        extra = {"validity": self.validity(label, category).to_json()} if self.constrained else {}
        return {**row.to_json(), "failed": self.failed(label, category), **extra}


WIDE_SPREAD = 3.0
"""Per-question speedups whose largest is this many times the smallest are called a wide spread."""
NOISY_REPEATS = 1.25
"""One question's speedup changing this much between tries means the machine was busy."""


def tally(records: Iterable[AnswerRecord]) -> Stats:
    """The Stats of some answers."""
    stats = Stats()
    for r in records:
        stats.add_reply(r.tokens, r.seconds, r.accept_lengths, r.method, r.accepted_from(registry.GRAMMAR.key))
    return stats


def load_results(
    paths: str | Path | list[str | Path], *, base: str | Path | None = None, skip_bad: bool = False
) -> BenchResult:
    """Answer files (or a folder of `*.jsonl`) as a BenchResult.

    Each file is one label: its method name, or the file's stem when two files
    hold the same method. `base` (a file, also loaded) is the baseline for
    speedups; without it a file of method `ar` is, if there is one.

    A line that is not an answer raises InputError; with `skip_bad` it is
    skipped and noted in `unreadable` (as the original's speed script goes on
    past such lines), and only a file with lines but no usable one raises.
    """
    files: list[Path] = []
    for p in [paths] if isinstance(paths, str | Path) else paths:
        p = Path(p)
        if p.is_dir():
            files.extend(sorted(p.glob("*.jsonl")))
        else:
            files.append(p)
    base_path = Path(base) if base is not None else None
    if base_path is not None:
        files = [f for f in files if f.resolve() != base_path.resolve()]
        files.insert(0, base_path)
    if not files:
        raise InputError(f"no answer files (*.jsonl) in {paths}")

    unreadable: list[str] = []
    loaded = [(f, _read_skipping(f, unreadable) if skip_bad else read_answers(f)) for f in files]
    methods = [_file_method(f, recs) for f, recs in loaded]
    labels = [m if methods.count(m) == 1 else f.stem for f, m in zip(files, methods, strict=True)]
    if len(set(labels)) != len(labels):
        labels = [str(f) for f in files]

    result = BenchResult(methods=[], unreadable=unreadable)
    result.baseline = labels[0] if base_path is not None else ("ar" if "ar" in labels else None)
    configs: list[dict[str, Any] | None] = []
    for label, (_, recs) in zip(labels, loaded, strict=True):
        result.methods.append(label)
        result.records.setdefault(label, {})
        for rec in recs:
            result.add(label, rec)  # a repeated question keeps its last answer
            configs.append(rec.config)
    first = next((r for _, recs in loaded for r in recs), None)
    if first is not None:
        result.model = first.model_id
    known = [c for c in configs if c is not None]
    if known and len(known) == len(configs):
        result.greedy = all(float(c.get("temperature", 0.0)) <= 0.0 for c in known)
        result.device = _common(c.get("device") for c in known)
        result.dtype = _common(c.get("dtype") for c in known)
        result.warm = _common(c.get("warm") for c in known)
        result.repeats = _common(c.get("repeats", 1) for c in known) or 1  # the files keep the median tries only
    result.question_count = len(result.question_order)
    return result


def _read_skipping(path: Path, unreadable: list[str]) -> list[AnswerRecord]:
    records, problems = scan_answers(path)
    if problems and not records:
        raise InputError(f"{path}: no usable answer line ({problems[0].removeprefix(f'{path}, ')})")
    unreadable.extend(problems)
    return records


def _file_method(path: Path, recs: list[AnswerRecord]) -> str:
    names = {r.method for r in recs if r.method}
    return names.pop() if len(names) == 1 else path.stem


def _common(values: Any) -> Any:
    values = set(values)
    return values.pop() if len(values) == 1 else None
