"""Issue 46's targets on the `structured` suite (20 prompts, a JSON schema each):
constrained racer against constrained plain decoding (ar), greedy, on one
engine (the embedded model unless --model), methods interleaved per question
as `racer-tui bench` runs them.

Prints the bench tables (the last one is the constrained replies': MAT with
the grammar's forced tokens apart, and validity checked from each reply's
text against its schema), then one line per target:

1. racer's tokens/s over ar's (target: at least 1.5x);
3. every reply parses and validates against its schema (target: all);
and MAT split into the grammar's part and the rest. Target 2 (the mask costs
at most 5% of a step) is the engine's own timing and is not measured here.

    python scripts/structured_targets.py --isa avx2 --answer-dir /tmp/structured --summary-json s.json
    python scripts/structured_targets.py --question-end 5 --max-new-tokens 128 --answer-dir /tmp/s5

Without the [structured] extra (llguidance) it refuses in one line (exit 2).
The exit status is 0 whether or not the targets are met: it is a measurement.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from racer_core.bench.constrained import structured_refusal
from racer_core.bench.report import bench_tables, plain_console, print_tables
from racer_core.bench.results import BenchResult
from racer_core.bench.runner import DEFAULT_SYSTEM_PROMPT, run_benchmark
from racer_core.bench.suites import load_suite, suite_name
from racer_core.budget.cpu_class import ISA_CHOICES, reexec_with_isa
from racer_core.common.events import GenerationConfig

SPEEDUP_TARGET = 1.5
METHODS = ("ar", "racer")


def target_lines(result: BenchResult) -> list[str]:
    """One line per target (met or not) and the MAT split, from a finished run."""
    totals = result.method_totals()
    lines = []
    racer, ar = totals.get("racer"), totals.get("ar")
    speedup = racer.versus.speedup if racer is not None else None
    if speedup is None:
        lines.append("speedup: no racer and ar answers to compare")
    else:
        met = "met" if speedup >= SPEEDUP_TARGET else "NOT met"
        same = {True: "tokens equal ar's", False: "tokens DIFFER from ar's", None: "tokens not compared"}
        lines.append(f"speedup: racer {speedup:.2f}x constrained ar (target >= {SPEEDUP_TARGET}x): {met}; "
                     f"{same[racer.versus.identical]}")
    for label, row in totals.items():
        s = row.stats
        if s.mat is not None:
            lines.append(f"MAT {label}: {s.mat:.2f} = grammar {s.mat_grammar:.2f} + other {s.mat_without_grammar:.2f}")
    valid = {label: result.validity(label) for label in totals}
    every = all(v.total and v.valid == v.total for v in valid.values())
    counts = ", ".join(f"{label} {v.text} ({v.invalid} invalid, {v.unparsable} not JSON)" for label, v in valid.items())
    lines.append(f"validity: {counts} (target: all valid): {'met' if every else 'NOT met'}")
    if ar is None:
        lines.append("no ar answers: the speedup needs them")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="structured", help="a suite with a schema per question (default: structured)")
    parser.add_argument("--question-begin", type=int, default=0)
    parser.add_argument("--question-end", type=int, default=None)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=1, help="tries per question, the median kept (default: 1)")
    parser.add_argument("--model", default=None, help="a model path or hub id (default: the embedded model)")
    parser.add_argument("--isa", choices=ISA_CHOICES, default="native", help="the CPU class to measure (default: native)")
    parser.add_argument("--answer-dir", type=Path, default=None, help="where METHOD.jsonl answers go")
    parser.add_argument("--summary-json", type=Path, default=None, help="the bench summary plus the target lines")
    args = parser.parse_args(argv)
    questions = load_suite(args.suite)[args.question_begin : args.question_end]
    refusal = structured_refusal(questions, suite_name(args.suite))
    if refusal is not None:
        print(f"error: {refusal}", file=sys.stderr)
        return 2
    if not any(q.schema is not None for q in questions):
        print(f"error: no question of {args.suite} has a schema", file=sys.stderr)
        return 2
    reexec_with_isa(args.isa)  # before torch loads
    from racer_core.engine.engine import load_engine

    engine = load_engine(args.model)
    result = run_benchmark(
        engine, questions, list(METHODS), GenerationConfig(max_new_tokens=args.max_new_tokens),
        answer_dir=args.answer_dir, suite=suite_name(args.suite), system_prompt=DEFAULT_SYSTEM_PROMPT,
        repeats=args.repeats,
    )
    info = engine.info
    print(f"{suite_name(args.suite)}: {len(questions)} questions, {info.model} ({info.device}, {info.dtype}, "
          f"{info.forward} forward, isa {args.isa}), greedy, max {args.max_new_tokens} new tokens")
    print_tables(bench_tables(result, categories=True), plain_console())
    lines = target_lines(result)
    print("\n".join(lines))
    if args.summary_json is not None:
        args.summary_json.write_text(json.dumps(result.to_summary(targets=lines, isa=args.isa), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
