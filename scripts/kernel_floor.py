"""A GGUF's 4-bit step (the embedded model's, or --model's) beside this machine's floors.

One row reads every weight once: its floor is the blocks' bytes over the
memory read bandwidth (a float32 sum over a buffer far larger than the
caches, torch's vectorized threads). Every extra row is arithmetic: its floor
is the row's multiply-adds over the int8 kernel's rate with nothing waiting
on memory (the repacked kernel on a Q4_1 matrix that stays in L2, 32 rows:
this kernel's own compute rate, not the CPU's nominal peak). Beside it, the
kernel's integer dot instruction timed alone, and with each 32-value block's
float work beside its dots (the scale, the multiply-add into the row's sum,
and Q4_1's offset term): the "mix floor" prices each linear's extra row at the
rate its block type's instruction mix allows (on an AMD Zen 4 a 512-bit dot
shares its pipes with the float multiplies, so the mix, not the instruction,
is what a kernel can reach). Then the step
after `--context` cached tokens (the lean forward with its fused layers,
fastest of interleaved rounds, racer_core/bench/timing.py) for each row count,
beside floor(T) = bytes / bandwidth + (T - 1) * MACs per row / rate.

    python scripts/kernel_floor.py --threads 2
    python scripts/kernel_floor.py --threads 1 --clock cpu   # a busy machine
    python scripts/kernel_floor.py --threads 2 --model /tmp/llama-0.8b-q4_1.gguf --sizes 1,2,4,8,16
    python scripts/kernel_floor.py --threads 2 --isa avx2   # the AVX2 class on a newer CPU (cpu_class.py)

The int8 rate is the kernel's on the ISA the step runs (quant_weights.kernel_isa:
the AVX2 build under --isa avx2, its AVX-VNNI build under --isa avxvnni).
Before 5 Dec 2026, 21:40 UTC it was the CPU's best build's whatever the class,
so the AVX2 class's floors were those of the AVX-512 kernel.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from racer_core.budget.cpu_class import ISA_CHOICES, reexec_with_isa  # noqa: E402


def bandwidth(threads: int, rounds: int, clock) -> float:
    """Memory read bandwidth, bytes per second (a 256 MB float32 buffer summed)."""
    import torch

    from racer_core.bench.timing import fastest_of_rounds

    buf = torch.ones(64 * 1024 * 1024, dtype=torch.float32)
    torch.set_num_threads(threads)
    (best,) = fastest_of_rounds([lambda: buf.sum()], rounds, clock=clock)
    return buf.numel() * 4 / best


def int8_rate(threads: int, rounds: int, clock, isa: str) -> float:
    """The repacked integer kernel's multiply-adds per second on a Q4_1 matrix of 1,024 rows a thread, 32 rows, on
    `isa` (368 KB of blocks a thread, in L2 on most CPUs of 2019 on). 256 rows a thread before 6 Dec 2026, 17:10
    UTC: there a call's fixed costs (quantizing the activations, starting the threads) were about a tenth of it,
    and the rate read 1.2-1.4x below the kernel's own on an AMD Zen 4."""
    import numpy as np
    from gguf import GGMLQuantizationType, quants

    from racer_core.bench.timing import fastest_of_rounds
    from racer_core.models.formats.quant import _quant, repack

    rows, cols, t = 1024 * threads, 576, 32
    rng = np.random.default_rng(0)
    blocks = repack.repack(3, np.ascontiguousarray(quants.quantize(
        rng.standard_normal((rows, cols)).astype(np.float32), GGMLQuantizationType.Q4_1)))
    x = rng.standard_normal((t, cols)).astype(np.float32)
    y = np.empty((t, rows), dtype=np.float32)

    def many() -> None:
        for _ in range(20):
            _quant.matmul_q8(3 | _quant.REPACKED, blocks, rows, cols, x, y, isa, threads)

    (best,) = fastest_of_rounds([many], rounds, clock=clock)
    return 20 * rows * cols * t / best


NO_OFFSET = (8, 14)
"""Q8_0 and Q6_K: no offset term, so two float multiplies a block beside its dots, not three."""


def dot_peaks(threads: int, rounds: int, isa: str) -> dict[int, float]:
    """The kernel's integer dot instruction on `isa`, timed alone (0) and with each block's float work beside it
    (2: a Q8_0 or Q6_K block's, 3: with an offset term, Q4_0/Q4_1's): multiply-adds per second, the best of `rounds`
    (_quant.dot_peak; each time is taken inside the extension, not through Python)."""
    from racer_core.models.formats.quant import _quant

    return {floats: max(_quant.dot_peak(isa, threads, 2_000_000, floats) for _ in range(rounds))
            for floats in (0, 2, 3)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sizes", default="1,2,4,8,16,32")
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: process CPU time, robust on a shared machine when --threads 1")
    parser.add_argument("--model", default=None, help="a GGUF file (default: the embedded model)")
    parser.add_argument("--isa", choices=ISA_CHOICES, default="native",
                        help="avx2 or avxvnni: that class on a newer CPU (the process starts again with the libraries "
                        "limited, racer_core/budget/cpu_class.py)")
    args = parser.parse_args(argv)
    reexec_with_isa(args.isa)
    if args.threads < 1 or args.rounds < 1 or args.context < 1:
        raise SystemExit("--threads, --rounds and --context must be at least 1")
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        raise SystemExit(f"--sizes {args.sizes!r}: expected comma-separated row counts") from None
    import torch

    from racer_core.bench.timing import fastest_of_rounds
    from racer_core.common.errors import ModelLoadError
    from racer_core.models.formats.quant_weights import QuantWeight, kernel_isa
    from racer_core.models.loader import load
    from racer_core.verify.kv_cache import TreeCache

    clock = time.perf_counter if args.clock == "wall" else time.process_time
    torch.set_num_threads(args.threads)
    try:
        loaded = load(args.model, device="cpu")
    except ModelLoadError as exc:
        raise SystemExit(f"kernel_floor: {exc}") from None
    lean = loaded.lean
    if lean is None or not lean.quant:
        raise SystemExit(f"{loaded.name} did not load in its blocks (see the log)")
    linears = [w for layer in lean.weights.layers for w in (layer.qkv, layer.o, layer.gate_up, layer.down)]
    linears.append(lean.weights.lm_head)
    quant = [w for w in linears if isinstance(w, QuantWeight)]
    weight_bytes = sum(w.blocks.nbytes for w in quant)
    macs = sum(int(w.shape[0]) * int(w.shape[1]) for w in quant)
    bw = bandwidth(args.threads, args.rounds, clock)
    isa = kernel_isa()
    if isa is None:
        raise SystemExit("kernel_floor: the 4-bit kernel does not run here")
    rate = int8_rate(args.threads, args.rounds, clock, isa)
    peaks = dot_peaks(args.threads, args.rounds, isa)
    # The instruction's floor for one extra row: each linear's multiply-adds at the rate its block type's mix allows.
    mix_seconds = sum(int(w.shape[0]) * int(w.shape[1]) / peaks[2 if w.qtype in NO_OFFSET else 3] for w in quant)
    torch.set_num_threads(args.threads)
    print(f"{loaded.name}; {args.threads} threads, {args.clock} clock; weights {lean.quant}, repacked: "
          f"{sum(w.repacked for w in quant)} of {len(quant)} linears")
    print(f"memory read {bw / 1e9:.1f} GB/s; int8 kernel ({isa}) {rate / 1e9:.1f} GMAC/s")
    print(f"the dot instruction alone {peaks[0] / 1e9:.1f} GMAC/s; with each block's float work "
          f"{peaks[2] / 1e9:.1f} (Q8_0) / {peaks[3] / 1e9:.1f} (Q4_1); the kernel {rate / peaks[3]:.2f}x of the "
          f"Q4_1 mix, {rate / peaks[0]:.2f}x of the instruction")
    print(f"one row: {weight_bytes / 1e6:.1f} MB of blocks -> floor {1e3 * weight_bytes / bw:.2f} ms; "
          f"each extra row: {macs / 1e6:.1f} M multiply-adds -> floor {1e3 * macs / rate:.2f} ms "
          f"(at the instruction mix's rate {1e3 * mix_seconds:.2f} ms)")

    layers = len(lean.weights.layers)
    gen = torch.Generator().manual_seed(0)
    vocab = int(lean.weights.lm_head.shape[0])
    cache = TreeCache(layers)
    causal = torch.full((args.context, args.context), float("-inf")).triu(1)[None, None]
    with torch.inference_mode():
        lean(torch.randint(0, vocab, (args.context,), generator=gen), torch.arange(args.context), causal, cache)

        def step(t: int):
            ids = torch.randint(0, vocab, (t,), generator=gen)
            mask = torch.zeros((1, 1, t, args.context + t))
            mask[..., args.context:] = torch.full((t, t), float("-inf")).triu(1)
            return lambda: lean(ids, torch.arange(args.context, args.context + t), mask, cache)

        best = fastest_of_rounds([step(t) for t in sizes], args.rounds, after=lambda _: cache.truncate(args.context),
                                 clock=clock)
    one = best[0] if sizes[0] == 1 else None
    print(f"\nstep after {args.context} cached tokens, fastest of {args.rounds} interleaved rounds")
    print("T      step ms    floor ms   step/floor   step/one row   mix floor ms   step/mix floor")
    for t, spent in zip(sizes, best, strict=True):
        floor = weight_bytes / bw + (t - 1) * macs / rate
        mix_floor = weight_bytes / bw + (t - 1) * mix_seconds
        rel = f"{spent / one:8.2f}x" if one else "       -"
        print(f"{t:<5} {1e3 * spent:8.2f}   {1e3 * floor:8.2f}   {spent / floor:8.2f}x   {rel}      "
              f"{1e3 * mix_floor:8.2f}   {spent / mix_floor:8.2f}x")


if __name__ == "__main__":
    main()
