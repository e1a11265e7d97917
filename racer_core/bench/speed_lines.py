"""The original RACER's speed summary: per category mean ms/token, MAT and
speed-up, then total tokens, total time and throughput; on several runs, a
ranking by throughput as its batch analysis prints.

The `Throughput (token/s): X`, `MAT: X` and `Speedup: X` lines keep the
original's wording, so scripts that parse its output read ours.
"""

from __future__ import annotations

from dataclasses import dataclass

from racer_core.bench.results import BenchResult


@dataclass(frozen=True)
class Figures:
    tokens: int
    seconds: float
    ms_per_token: float | None
    mat: float | None
    speedup: float | None
    throughput: float | None


def figures(result: BenchResult, label: str, category: str | None = None) -> Figures:
    t = result.totals(label, category)
    s, v = t.stats, t.versus
    return Figures(s.tokens, s.seconds, s.ms_per_token, s.mat, v.speedup, s.tokens_per_s)


def _num(x: float | None, digits: int = 2, suffix: str = "") -> str:
    return "-" if x is None else f"{x:.{digits}f}{suffix}"


def run_lines(result: BenchResult, label: str) -> list[str]:
    """One run (answer file): its categories, then its totals."""
    cats = [c for c, rows in result.category_totals().items() if label in rows]
    width = max([len("category"), *(len(c) for c in cats)])
    lines = [f"{'category':<{width}}  ms/token    MAT  speed-up"]
    for cat in cats:
        f = figures(result, label, cat)
        lines.append(f"{cat:<{width}}  {_num(f.ms_per_token):>8}  {_num(f.mat):>5}  {_num(f.speedup, suffix='x'):>8}")
    f = figures(result, label)
    lines += [
        f"Total tokens: {f.tokens}",
        f"Total time (s): {f.seconds:.4f}",
        f"Throughput (token/s): {_num(f.throughput, 4)}",
    ]
    if f.mat is not None:
        lines.append(f"MAT: {f.mat:.4f}")
    if f.speedup is not None:
        lines.append(f"Speedup: {f.speedup:.4f}")
    if failed := result.failed(label):
        lines.append(f"Failed questions: {failed}")
    return lines


def ranking_lines(result: BenchResult) -> list[str]:
    """Every run, best throughput first."""
    rows = [(label, figures(result, label)) for label in result.methods]
    rows.sort(key=lambda r: r[1].throughput or 0.0, reverse=True)
    lines = ["Results (sorted by Throughput):"]
    for label, f in rows:
        speedup = f", Speedup={_num(f.speedup, 4)}" if result.baseline is not None else ""
        lines.append(f"MAT={_num(f.mat, 4)}{speedup}, Throughput={_num(f.throughput, 4)}, File={label}")
    return lines
