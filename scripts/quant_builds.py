"""Two or more builds of the block kernel's extension (`_quant`) side by side in one process.

A kernel change is measured against the build before it on the same machine
in the same minutes: each build is loaded under its own name, every build
first multiplies a step's linears (the embedded model's 30 layers' q|k|v, o,
gate|up, down and the tied head, repacked as the engine loads them) for each
row count and the outputs are checked equal bit for bit, then the builds are
timed in interleaved rounds (round r starts at build r mod n, so a busy
moment on a shared machine hits them alike). Fastest and median per build and
row count, with each build's ratio to its own one row.

    git stash; python setup.py build_ext --inplace; cp racer_core/models/formats/quant/_quant*.so /tmp/before.so
    git stash pop; python setup.py build_ext --inplace
    python scripts/quant_builds.py /tmp/before.so racer_core/models/formats/quant/_quant*.so --sizes 1,2,4,8,16,32
    python scripts/quant_builds.py racer_core/models/formats/quant/_quant*.so --isa avx2,avxvnni   # two ISAs, one build
    python scripts/quant_builds.py /tmp/before.so racer_core/models/formats/quant/_quant*.so --model /tmp/llama-0.8b-q4_1.gguf
      (--model: a Llama-shaped GGUF's linears, as scripts/sized_gguf.py writes one, instead of the embedded model's)
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import os
import sys
import time
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def load_build(path: str, index: int) -> ModuleType:
    """The extension at `path` under a name of its own (its init function is PyInit__quant)."""
    name = f"build{index}._quant"
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    if spec is None:
        raise SystemExit(f"{path}: not a loadable extension")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("builds", nargs="+", help="paths of built _quant extensions (the first is the baseline)")
    parser.add_argument("--sizes", default="1,2,4,8,16,32")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--layers", type=int, default=30, help="decoder layers (the model's 30; fewer for a quick try)")
    parser.add_argument("--model", default=None,
                        help="a Llama-shaped GGUF (scripts/sized_gguf.py writes one) instead of the embedded model")
    parser.add_argument("--isa", default=None,
                        help="the kernel's ISA name, or several comma-separated to compare ISAs on each build "
                             "(default: the best this CPU has)")
    args = parser.parse_args(argv)
    missing = [b for b in args.builds if not Path(b).is_file()]
    if missing:
        raise SystemExit(f"no such build: {', '.join(missing)}")

    import numpy as np

    from racer_core.models.formats.quant import _quant
    from scripts.linear_cost import gguf_blocks

    isas = (args.isa or _quant.best()).split(",")
    loaded = [load_build(b, i) for i, b in enumerate(args.builds)]
    # one column per (build, ISA); the first is the baseline
    builds = [(build, isa) for build in loaded for isa in isas]
    names = [f"{os.path.basename(b)[-20:]} {isa}" if len(isas) > 1 else b for b in args.builds for isa in isas]
    sizes = [int(s) for s in args.sizes.split(",")]
    weights = gguf_blocks(args.layers, args.model)
    calls = [(w.kernel_type, w.blocks, int(w.shape[0]), int(w.shape[1])) for w in weights]
    rng = np.random.default_rng(0)
    widths = {c for *_, c in calls}
    xs = {t: {c: rng.standard_normal((t, c)).astype(np.float32) for c in widths} for t in sizes}
    ys = {t: [np.empty((t, rows), np.float32) for _, _, rows, _ in calls] for t in sizes}

    def step(column: tuple[ModuleType, str], t: int) -> None:
        build, isa = column
        for y, (kind, blocks, rows, cols) in zip(ys[t], calls, strict=True):
            build.matmul_q8(kind, blocks, rows, cols, xs[t][cols], y, isa, args.threads)

    for t in sizes:
        outputs = []
        for build in builds:
            step(build, t)
            outputs.append([y.copy() for y in ys[t]])
        for name, out in zip(names[1:], outputs[1:], strict=True):
            if not all(np.array_equal(a, b) for a, b in zip(outputs[0], out, strict=True)):
                raise SystemExit(f"{name} gives other bits than {names[0]} at {t} rows")
    print(f"ISA {','.join(isas)}, {args.threads} threads; every build gives the same bits at every size")
    times: dict[tuple[int, int], list[float]] = {}
    for r in range(args.rounds):
        for t in sizes:
            for i in [(r + k) % len(builds) for k in range(len(builds))]:
                start = time.perf_counter()
                step(builds[i], t)
                times.setdefault((i, t), []).append(time.perf_counter() - start)
    print(f"wall ms for a step's linears, fastest / median of {args.rounds} interleaved rounds "
          "(x = against the build's own first size)")
    print("T     " + "".join(f"{os.path.basename(b)[-28:]:>30}" for b in names))
    for t in sizes:
        cells = []
        for i in range(len(builds)):
            ts = sorted(times[(i, t)])
            cells.append(f"{ts[0] * 1e3:7.2f} /{ts[len(ts) // 2] * 1e3:7.2f} x{ts[0] / min(times[(i, sizes[0])]):5.2f}")
        print(f"{t:<6}" + "".join(f"{c:>30}" for c in cells))
    if len(builds) > 1:
        print("fastest against the first build: " + "  ".join(
            f"T={t}: " + "/".join(f"{min(times[(0, t)]) / min(times[(i, t)]):.2f}x" for i in range(1, len(builds)))
            for t in sizes))


if __name__ == "__main__":
    main()
