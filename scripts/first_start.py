"""Time the first start on a fresh cache, and a later start, of the embedded model.

Each start runs in a fresh Python (imports count, as a user's start does) with
RACER_TUI_CACHE_DIR pointed at a new empty folder. The dequantized model
(`models/`) is linked from an existing cache unless --dequantize is given, so
the cost curve's share is seen apart; with --dequantize the dequantize is
timed on its own first.

    python scripts/first_start.py --models-from /work/cache            # first and later start
    python scripts/first_start.py --models-from /work/cache --dequantize
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from racer_core.loading import load_model
from racer_core.engine import RacerEngine
t1 = time.perf_counter()
model, tokenizer, name, processor = load_model(None, "cpu", sys.argv[1])
t2 = time.perf_counter()
engine = RacerEngine(model, tokenizer, name, processor=processor)
engine.cost_curve()
t3 = time.perf_counter()
figures = {"imports_s": t1 - t0, "load_s": t2 - t1, "cost_curve_s": t3 - t2, "total_s": t3 - t0}
if sys.argv[2] == "1":  # the whole grid in 5 rounds, as every first start measured it before the quick curve
    from racer_core.budget import CPU_GRID
    t4 = time.perf_counter()
    engine.time_forward(CPU_GRID)
    figures["full_grid_curve_s"] = time.perf_counter() - t4
print(json.dumps(figures))
"""


def start(cache: Path, dtype: str, full: bool = False) -> dict[str, float]:
    env = {**os.environ, "RACER_TUI_CACHE_DIR": str(cache)}
    began = time.perf_counter()
    argv = [sys.executable, "-c", CHILD, dtype, "1" if full else "0"]
    out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True)
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    figures["process_s"] = time.perf_counter() - began
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models-from", type=Path, required=True, help="a cache whose models/ folder is linked")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--dequantize", action="store_true", help="time a dequantize into the fresh cache first")
    parser.add_argument("--full", action="store_true",
                        help="after the first start, also time the whole-grid measurement the start used to make")
    args = parser.parse_args()
    print("load:", os.getloadavg(), flush=True)
    with tempfile.TemporaryDirectory(prefix="racer-first-start-") as tmp:
        if args.dequantize:
            fresh = Path(tmp) / "dequantize"
            fresh.mkdir()
            t0 = time.perf_counter()
            start(fresh, args.dtype)
            print(f"dequantize + first start (cost curve included): {time.perf_counter() - t0:.1f} s", flush=True)
        cache = Path(tmp) / "cache"
        cache.mkdir()
        (cache / "models").symlink_to((args.models_from / "models").resolve())
        for label, full in (("first start (fresh cache, models linked)", args.full), ("later start", False)):
            figures = start(cache, args.dtype, full)
            parts = ", ".join(f"{k.removesuffix('_s')} {v:.1f} s" for k, v in figures.items())
            print(f"{label}: {parts}", flush=True)
    print("load:", os.getloadavg(), flush=True)


if __name__ == "__main__":
    main()
