"""Resident memory of a process that loads the embedded model and writes one
128-token reply, for a dtype (auto: the GGUF's 4-bit blocks on a CPU;
float32: the dequantized checkpoint). One process per dtype, so neither
sees the other's pages.

    python scripts/reply_memory.py --dtype auto
    python scripts/reply_memory.py --dtype float32
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--method", default="racer")
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args(argv)
    from racer_core.common.events import GenerationConfig
    from racer_core.engine.engine import load_engine

    start = time.perf_counter()
    engine = load_engine(device="cpu", dtype=args.dtype)
    loaded = time.perf_counter() - start
    print(f"{engine.info.model}: {engine.info.dtype}, loaded in {loaded:.1f}s, resident {status_mb('VmRSS'):.0f} MB")
    chat = engine.new_conversation()
    list(chat.send("Write a short story about a lighthouse keeper.",
                   GenerationConfig(method=args.method, max_new_tokens=args.tokens)))
    print(f"after a {args.tokens}-token {args.method} reply: resident {status_mb('VmRSS'):.0f} MB, "
          f"peak {status_mb('VmHWM'):.0f} MB")


if __name__ == "__main__":
    main()
