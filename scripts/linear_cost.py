"""The linear layers of a step for T rows, on random weights of the embedded
model's shape: the decoder layers' linears, the output layer (the lever of
computing only the accepted path's lm_head rows) and, in bf16, the same
linears with int8 weights (the int8 lever; torch's weight-only int8 kernel,
activations in bf16).

    python scripts/linear_cost.py [--dtype bfloat16] [--sizes 1,8,16,32]

The output layer of SmolLM2-135M reads a 49,152 x 576 matrix (56 MB in bf16):
on a CPU that read dominates, so extra rows cost little, and computing fewer
rows (only the accepted path's) would save less than a step's noise while
needing one call per node walked. Int8 weights halve what is read, which wins
for one row, but the kernel is a matrix-vector one and loses from a few rows on.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from racer_core.bench.timing import fastest_of_rounds


def best_of(rounds: int, fn) -> float:  # noqa: ANN001
    return fastest_of_rounds([fn], rounds, warmup=False)[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--sizes", default="1,8,16,32")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    hidden, inner, kv, layers, vocab = 576, 1536, 192, 30, 49152
    gen = torch.Generator().manual_seed(0)
    weights = [
        (torch.randn(hidden + 2 * kv, hidden, generator=gen, dtype=dtype), hidden),  # q|k|v
        (torch.randn(hidden, hidden, generator=gen, dtype=dtype), hidden),  # o
        (torch.randn(2 * inner, hidden, generator=gen, dtype=dtype), hidden),  # gate|up
        (torch.randn(hidden, inner, generator=gen, dtype=dtype), inner),  # down
    ] * layers
    head = torch.randn(vocab, hidden, generator=gen, dtype=dtype)
    int8 = dtype == torch.bfloat16 and hasattr(torch.ops.aten, "_weight_int8pack_mm")
    packed = [(torch.randint(-127, 128, w.shape, generator=gen, dtype=torch.int8), torch.rand(w.shape[0], dtype=dtype), w_in)
              for w, w_in in [*weights, (head, hidden)]] if int8 else []
    print(f"{args.dtype}: ms, fastest of {args.rounds}")
    print("T    decoder linears   lm_head   lm_head share" + ("   all linears, int8 weights" if int8 else ""))
    for t in (int(s) for s in args.sizes.split(",")):
        inputs = {width: torch.randn(t, width, generator=gen, dtype=dtype) for width in (hidden, inner)}
        linears = best_of(args.rounds, lambda x=inputs: [F.linear(x[w_in], w) for w, w_in in weights])
        lm = best_of(args.rounds, lambda x=inputs: F.linear(x[hidden], head))
        line = f"{t:<4} {1000 * linears:15.1f} {1000 * lm:9.1f} {100 * lm / (lm + linears):14.0f}%"
        if int8:
            q = best_of(args.rounds, lambda x=inputs: [torch.ops.aten._weight_int8pack_mm(x[w_in], w, sc)
                                                       for w, sc, w_in in packed])
            line += f" {1000 * q:28.1f}"
        print(line)


if __name__ == "__main__":
    main()
