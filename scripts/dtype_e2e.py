"""Engine setups (dtype and verification forward) side by side in one run, on
one machine moment: by default the old default (fp32, transformers'
forward) beside today's (`auto`: bf16 where the CPU has it natively, and the
lean forward).

One engine per setup (the embedded model, CPU); every question is answered by
every (setup, method) before the next question, with --repeats tries each
(interleaved, the median kept), as the bench runner does for methods. Answers
go to ANSWER_DIR/SETUP/METHOD.jsonl as each question ends, so a cut-short run
keeps its questions, a rerun resumes it and `--report` prints what is there. Prints
the bench tables per setup (racer against ar of the same setup, with the
near-tie accounting) and a cross table: each setup's tokens/s against the
first setup's ar and racer.

    python scripts/dtype_e2e.py --suite builtin --question-begin 14 --max-new-tokens 128 --answer-dir DIR
    python scripts/dtype_e2e.py --setups float32:stock,float32:lean --answer-dir DIR   # the forward alone
    python scripts/dtype_e2e.py --setups float32:lean,fp16w:lean --answer-dir DIR      # --fp16-weights

DTYPE `fp16w` is float32 arithmetic on float16 weights (--fp16-weights, half_weights.py).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from racer_core.bench.report import bench_tables, plain_console, print_tables
from racer_core.bench.results import BenchResult, load_results, tally
from racer_core.bench.runner import run_benchmark
from racer_core.bench.suites import load_suite
from racer_core.common.events import GenerationConfig
from racer_core.engine.engine import load_engine
from racer_core.models.load_options import HALF


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--suite", default="builtin")
    parser.add_argument("--question-begin", type=int, default=0)
    parser.add_argument("--question-end", type=int, default=None)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--setups", default="float32:stock,auto:auto",
                        help="comma list of DTYPE:FORWARD (forward: auto, lean, stock); the first is the baseline")
    parser.add_argument("--methods", default="ar,racer")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--summary-json", type=Path, default=None)
    parser.add_argument("--answer-dir", type=Path, required=True)
    parser.add_argument("--report", action="store_true", help="only print the tables of the answers there")
    args = parser.parse_args(argv)
    questions = load_suite(args.suite)[args.question_begin : args.question_end]
    methods = args.methods.split(",")
    setups = {}
    for item in args.setups.split(","):
        dtype, _, forward = item.partition(":")
        setups[item.replace(":", "-")] = (dtype, forward or "auto")
    dtypes = list(setups)  # labels
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p)
    print("load before:", os.getloadavg(), flush=True)
    results = {d: BenchResult(methods=list(methods), greedy=config.greedy, dtype=dt) for d, (dt, _) in setups.items()}
    if not args.report:
        engines = {d: load_engine(device="cpu", forward=fw, **({"quantize": HALF} if dt == "fp16w" else {"dtype": dt}))
                   for d, (dt, fw) in setups.items()}
        for d, engine in engines.items():
            results[d].dtype = engine.info.dtype
            print(f"{d}: {engine.info.dtype}, {engine.info.forward} forward", flush=True)
        for index, q in enumerate(questions):
            for d in dtypes:
                one = run_benchmark(engines[d], [q], methods, config, warmup=index == 0, repeats=args.repeats,
                                    answer_dir=args.answer_dir / d, resume=True)
                for m in methods:
                    results[d].repeat_speeds.setdefault(m, {}).update(one.repeat_speeds.get(m, {}))
            print(f"question {index + 1}/{len(questions)} ({q.category}) done; load {os.getloadavg()[0]:.2f}",
                  flush=True)
    wanted = {str(q.question_id) for q in questions}
    console = plain_console()
    for d in dtypes:
        loaded = load_results([args.answer_dir / d / f"{m}.jsonl" for m in methods])
        for m in methods:
            for key, rec in loaded.records.get(m, {}).items():
                if key in wanted and all(key in loaded.records.get(b, {}) for b in methods):
                    results[d].add(m, rec)  # questions every method answered
        results[d].repeats = args.repeats
        results[d].question_count = len(results[d].question_order)
        console.print(f"\n== {d} ==")
        print_tables(bench_tables(results[d]), console)
    base = {m: tally(results[dtypes[0]].records[m].values()) for m in methods}
    console.print(f"\n== tokens/s against {dtypes[0]} ==")
    cross = {}
    for d in dtypes:
        for m in methods:
            stats = tally(results[d].records[m].values())
            row = {"tokens_per_s": stats.tokens_per_s, "mat": stats.mat}
            row.update({f"vs_{dtypes[0]}_{b}": stats.speedup_over(base[b]) for b in methods})
            cross[f"{m}@{d}"] = row
            ratios = "  ".join(f"vs {b}@{dtypes[0]} {row[f'vs_{dtypes[0]}_{b}']:.2f}x" for b in methods)
            console.print(f"{m}@{d}: {stats.tokens_per_s:.1f} tok/s, MAT {stats.mat or 0:.2f}, {ratios}")
    print("load after:", os.getloadavg(), flush=True)
    if args.summary_json:
        doc = {d: results[d].to_summary() for d in dtypes}
        doc["cross"] = cross
        args.summary_json.write_text(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
