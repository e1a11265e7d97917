"""A whole step's linears of the embedded model, T rows, weight formats side by side.

The weights are the embedded GGUF's own (30 layers' q|k|v, o, gate|up, down
and the tied Q8_0 head): `fp32` packed once for oneDNN (today's default,
packed_linear.py), `fp16` fbgemm's float16 weights (--fp16-weights), `q4`
the GGUF's blocks in the tree kernel with float32 activations, `q4q8` the same
blocks with activations quantized to 8 bits per block (integer products, the
default; quant_weights.py; threads: torch's count), `q8q8` the same weights
quantized again to Q8_0 blocks (8-bit weights and activations, W8A8), a `-1t` suffix runs a format on one thread. Rounds are interleaved (every
format, every T), so a busy moment on a shared machine hits all alike; the
fastest round is reported with its ratio to the format's one-row step.

    python scripts/quant_linear_cost.py --sizes 1,2,4,8,16,32
    python scripts/quant_linear_cost.py --sizes 1,2,4,8,16,32 --isa avx2
    python scripts/quant_linear_cost.py --formats fp32-1t,fp16-1t,q4-1t,q4q8-1t --clock cpu  # a loaded machine
    python scripts/quant_linear_cost.py --formats q4q8,q8q8 --sizes 1,8,32  # W4A8 against W8A8
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from racer_core.budget.cpu_class import ISA_CHOICES, reexec_with_isa  # noqa: E402


def step_weights(formats: list[str]) -> dict[str, list[Any]]:
    """Each format's linears of one step, in forward order (layer by layer, then the head)."""
    import torch

    from racer_core.models.checkpoint_files import CheckpointConfig
    from racer_core.models.embedded import embedded_gguf
    from racer_core.models.families import family_of
    from racer_core.models.formats.half_weights import HalfWeight
    from racer_core.models.formats.packed_linear import PackedWeight
    from racer_core.models.formats.quant_weights import QuantWeight
    from racer_core.models.gguf_blocks import read_blocks

    family = family_of(CheckpointConfig({"model_type": "llama"}))
    blocks = read_blocks(embedded_gguf(), family, 30, 9, 3).weights
    fused: list[QuantWeight] = []
    for i in range(30):
        name = f"model.layers.{i}."
        fused += [QuantWeight.stack([blocks[f"{name}self_attn.{p}_proj.weight"] for p in "qkv"]),
                  blocks[f"{name}self_attn.o_proj.weight"],
                  QuantWeight.stack([blocks[f"{name}mlp.{p}_proj.weight"] for p in ("gate", "up")]),
                  blocks[f"{name}mlp.down_proj.weight"]]
    fused.append(blocks["model.embed_tokens.weight"])
    found: dict[str, list[Any]] = {}
    made: dict[str, list[Any]] = {"q4": [QuantWeight(w.file_blocks(), w.qtype, *w.shape, acts="float") for w in fused],
                                  "q4q8": [QuantWeight(w.file_blocks(), w.qtype, *w.shape, acts="q8") for w in fused]}
    for fmt in formats:
        kind = fmt.removesuffix("-1t")
        if kind == "q8q8" and kind not in made:  # W8A8: the 4-bit values in Q8_0 blocks (8-bit weights)
            from gguf import GGMLQuantizationType, quants

            made[kind] = [QuantWeight(quants.quantize(w.plain().numpy(), GGMLQuantizationType.Q8_0), 8, *w.shape,
                                      acts="q8") for w in fused]
        elif kind not in made:
            made[kind] = [(PackedWeight if kind == "fp32" else HalfWeight)(w.plain()) for w in fused]
        found[fmt] = made[kind]
    torch.manual_seed(0)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,2,4,8,16,32")
    parser.add_argument("--formats", default="fp32,fp16,q4,q4q8")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--isa", choices=ISA_CHOICES, default="native")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: process CPU time, robust on a shared machine for -1t formats")
    args = parser.parse_args()
    reexec_with_isa(args.isa)
    import torch

    from racer_core.budget.cpu_class import describe
    from racer_core.models.formats.quant_weights import kernel_isa

    sizes = [int(s) for s in args.sizes.split(",")]
    formats = args.formats.split(",")
    weights = step_weights(formats)
    threads = torch.get_num_threads()
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    print(f"CPU class {describe()}, kernel ISA {kernel_isa()}, torch threads {threads}")
    best: dict[tuple[str, int], float] = {}
    with torch.inference_mode():
        for _ in range(args.rounds):
            for t in sizes:
                for fmt in formats:
                    torch.set_num_threads(1 if fmt.endswith("-1t") else threads)
                    xs = {cols: torch.randn(1, t, cols) for cols in (576, 1536)}
                    start = clock()
                    for w in weights[fmt]:
                        w(xs[w.shape[1]])
                    took = clock() - start
                    best[fmt, t] = min(best.get((fmt, t), took), took)
            torch.set_num_threads(threads)
    print("ms for a step's linears (fastest round); x = ratio to the format's own 1 row")
    print("T".rjust(4) + "".join(f"{fmt:>22}" for fmt in formats))
    for t in sizes:
        cells = [f"{best[fmt, t] * 1e3:10.1f} ({best[fmt, t] / best[fmt, sizes[0]]:4.2f}x)" for fmt in formats]
        print(f"{t:4d}" + "".join(f"{c:>22}" for c in cells))
    base = formats[0]
    print(f"against {base}: " + "  ".join(
        f"T={t}: " + " ".join(f"{fmt} {best[fmt, t] / best[base, t]:.2f}x" for fmt in formats[1:]) for t in sizes))


if __name__ == "__main__":
    main()
