"""Every linear of one step (30 decoder layers' q|k|v, o, gate|up, down and the
lm_head; SmolLM2-135M's shapes) for T rows, ways of multiplying side by side.

Formats (--formats, a comma list; a `-1t` suffix runs a format on one thread):

  on dense weights (random ones of the embedded model's shapes, or the GGUF's dequantized, --weights):
    flinear   F.linear on the plain weights, --dtype (the matrix library repacks them per call)
    onednn    packed once by oneDNN (torch.ops.mkldnn._reorder_linear_weight, then
              _linear_pointwise, what torch's compiler uses when it freezes weights), --dtype
    mkl       MKL's packed GEMM (torch.ops.mkl._mkl_linear; float32 only, packed for one
              batch size, so packed here per T)
    compiled  torch.compile with weight freezing (inductor), dynamic shapes, --dtype
    int8      torch's dynamic-quantized linears (x86 engine, weights packed once; float32 activations)
    int8w     torch's weight-only int8 kernel (aten._weight_int8pack_mm), activations --dtype
    fp32      packed once for oneDNN as the engine does (formats/packed_linear.py), float32
    fp16      fbgemm's float16 weights, float32 arithmetic (--fp16-weights, formats/half_weights.py)
  on the embedded GGUF's own blocks (formats/quant_weights.py), or random blocks of --qtype and --shapes:
    q4        the Q4_1/Q8_0 blocks in the tree kernel, float32 activations
    q4q8      the same blocks, activations quantized to 8 bits per block (the engine's default:
              repacked where the type allows, quant/repack.py)
    q4q8file  the same, the blocks in the file's layout (RACER_QUANT_REPACK=0's kernel)
    q8q8      the same values quantized again to Q8_0 blocks (W8A8)

`--qtype Q4_K --shapes 2048x2048,5632x2048` times one matrix of each shape of random
blocks of that type (rows x cols) instead of the model's step (--layers and --split-head
do not apply; the dense formats multiply their dequantized values).

Rounds are interleaved (round r: every size, every format), so a busy moment on a
shared machine hits all alike (racer_core/bench/timing.py); the fastest and the
median round are printed, with each format's ratio to its own first size, then
each format against the first. `--split-head` times the decoder linears and the
lm_head apart and prints the head's share (the lever of computing only the
accepted path's lm_head rows).

    python scripts/linear_cost.py --formats fp32,fp16,q4,q4q8 --sizes 1,2,4,8,16,32 [--isa avx2]
    python scripts/linear_cost.py --formats fp32-1t,fp16-1t,q4-1t,q4q8-1t --clock cpu   # a loaded machine
    python scripts/linear_cost.py --formats flinear,onednn,mkl,int8 --dtype float32
    python scripts/linear_cost.py --formats flinear,int8w --dtype bfloat16 --sizes 1,8,16,32 --split-head
    python scripts/linear_cost.py --formats q4q8file-1t,q4q8-1t --qtype Q4_K --shapes 2048x2048,5632x2048 --clock cpu
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from racer_core.budget.cpu_class import ISA_CHOICES, reexec_with_isa  # noqa: E402

DENSE = ("flinear", "onednn", "mkl", "compiled", "int8", "int8w", "fp32", "fp16")
BLOCKS = ("q4", "q4q8", "q4q8file", "q8q8")
HIDDEN, INNER, KV, LAYERS, VOCAB = 576, 1536, 192, 30, 49152
LAYER_SHAPES = [(HIDDEN + 2 * KV, HIDDEN), (HIDDEN, HIDDEN), (2 * INNER, HIDDEN), (HIDDEN, INNER)]
Multiply = Callable[[dict[int, Any], int], object]  # (inputs by width, T) -> the linears' outputs


def gguf_blocks(layers: int, path: str | None = None) -> list[Any]:
    """A Llama-shaped GGUF's linears (the embedded model's, or the file at `path`, as sized_gguf.py writes)
    of one step's first `layers` layers and the head as QuantWeights, in forward order (layer by layer,
    then the head: the tied embedding, or output.weight)."""
    from racer_core.models.checkpoint.files import CheckpointConfig
    from racer_core.models.checkpoint.gguf_blocks import read_blocks
    from racer_core.models.checkpoint.gguf_fields import config_from_fields
    from racer_core.models.checkpoint.gguf_reader import open_reader
    from racer_core.models.embedded import embedded_gguf
    from racer_core.models.families import family_of
    from racer_core.models.formats.quant_weights import QuantParts, QuantWeight, stack_blocks

    reader = open_reader(path or embedded_gguf())
    config = config_from_fields(reader)
    if config is None or config["model_type"] != "llama":
        raise SystemExit(f"{path}: not a Llama-shaped GGUF")
    family = family_of(CheckpointConfig({"model_type": "llama"}))
    count = int(config["num_hidden_layers"])
    blocks = read_blocks(reader.tensors, "llama", family, count, int(config["num_attention_heads"]),
                         int(config["num_key_value_heads"])).weights
    fused: list[QuantWeight] = []
    for i in range(min(layers, count)):
        name = f"model.layers.{i}."
        qkv = stack_blocks([blocks[f"{name}self_attn.{p}_proj.weight"] for p in "qkv"])
        fused += [*(qkv.parts if isinstance(qkv, QuantParts) else [qkv]),  # a Q4_K_M layer's v may be Q6_K: its calls
                  blocks[f"{name}self_attn.o_proj.weight"],
                  QuantWeight.stack([blocks[f"{name}mlp.{p}_proj.weight"] for p in ("gate", "up")]),
                  blocks[f"{name}mlp.down_proj.weight"]]
    fused.append(blocks.get("lm_head.weight", blocks["model.embed_tokens.weight"]))  # the head (the embedded's: tied Q8_0)
    return fused


def random_blocks(qtype_name: str, shapes: list[tuple[int, int]]) -> list[Any]:
    """One QuantWeight of random `qtype_name` blocks per (rows, cols) shape."""
    import numpy as np

    from racer_core.models.formats.quant import reference
    from racer_core.models.formats.quant_weights import TYPE_NAMES, QuantWeight

    qtype = {name: code for code, name in TYPE_NAMES.items()}[qtype_name]
    rng = np.random.default_rng(0)
    return [QuantWeight(reference.random_blocks(qtype, rows, cols, rng), qtype, rows, cols) for rows, cols in shapes]


def parse_shapes(text: str, values: int) -> list[tuple[int, int]]:
    """'2048x2048,5632x2048' -> [(2048, 2048), (5632, 2048)]; cols a multiple of `values`."""
    shapes = []
    for item in text.split(","):
        rows, _, cols = item.strip().partition("x")
        if not (rows.isdigit() and cols.isdigit()) or int(rows) < 1 or int(cols) < 1 or int(cols) % values:
            raise ValueError(f"shape {item!r}: ROWSxCOLS with COLS a positive multiple of {values}")
        shapes.append((int(rows), int(cols)))
    return shapes


def random_weights(layers: int) -> list[Any]:
    import torch

    gen = torch.Generator().manual_seed(0)
    return [torch.randn(*s, generator=gen) * s[1] ** -0.5 for s in [*LAYER_SHAPES * layers, (VOCAB, HIDDEN)]]


def multiplier(kind: str, plain: list[Any], blocks: list[Any], dtype: Any, sizes: list[int]) -> Multiply:
    """`kind`'s multiplication of the given linears (plain: float32 tensors; blocks: their GGUF blocks)."""
    import torch
    import torch.nn.functional as F

    if kind == "flinear":
        ws = [w.to(dtype) for w in plain]
        return lambda xs, t: [F.linear(xs[w.shape[1]], w) for w in ws]
    if kind == "onednn":
        pairs = [(w.to(dtype), torch.ops.mkldnn._reorder_linear_weight(w.to(dtype), 16)) for w in plain]
        return lambda xs, t: [torch.ops.mkldnn._linear_pointwise(xs[w.shape[1]], p, None, "none", [], "")
                              for w, p in pairs]
    if kind == "mkl":
        if dtype != torch.float32 or not hasattr(torch.ops.mkl, "_mkl_linear"):
            raise SystemExit("mkl: MKL's packed GEMM takes float32 (--dtype float32) in a torch built with MKL")
        mkl = {t: [torch.ops.mkl._mkl_reorder_linear_weight(w, t) for w in plain] for t in sizes}
        return lambda xs, t: [torch.ops.mkl._mkl_linear(xs[w.shape[1]], p, w, None, t)
                              for w, p in zip(plain, mkl[t], strict=True)]
    if kind == "compiled":
        return compiled(plain, dtype)
    if kind == "int8":
        import warnings

        from torch.ao.nn.quantized.dynamic import Linear as QLinear

        warnings.filterwarnings("ignore", "torch.quantize_per_tensor", UserWarning)  # deprecated, still what it measured

        torch.backends.quantized.engine = "x86" if "x86" in torch.backends.quantized.supported_engines else "fbgemm"
        qlin = []
        for w in plain:
            q = QLinear(w.shape[1], w.shape[0], bias_=False, dtype=torch.qint8)
            scale = w.abs().amax(1).clamp(min=1e-8) / 127
            q.set_weight_bias(torch.quantize_per_channel(w, scale, torch.zeros_like(scale, dtype=torch.long), 0,
                                                         torch.qint8), None)
            qlin.append(q)
        return lambda xs, t: [q(xs[q.in_features].float()) for q in qlin]
    if kind == "int8w":
        if not hasattr(torch.ops.aten, "_weight_int8pack_mm"):
            raise SystemExit("int8w: this torch has no aten._weight_int8pack_mm")
        packed = []
        for w in plain:
            scale = w.abs().amax(1).clamp(min=1e-8) / 127
            packed.append(((w / scale[:, None]).round().to(torch.int8), scale.to(dtype), w.shape[1]))
        return lambda xs, t: [torch.ops.aten._weight_int8pack_mm(xs[cols], q, s) for q, s, cols in packed]
    if kind in ("fp32", "fp16"):
        from racer_core.models.formats.half_weights import HalfWeight
        from racer_core.models.formats.packed_linear import PackedWeight

        ws = [(PackedWeight if kind == "fp32" else HalfWeight)(w) for w in plain]
        return lambda xs, t: [w(xs[w.shape[1]]) for w in ws]
    from racer_core.models.formats.quant_weights import QuantWeight

    if kind == "q8q8":  # W8A8: the 4-bit values in Q8_0 blocks (8-bit weights)
        from gguf import GGMLQuantizationType, quants

        ws = [QuantWeight(quants.quantize(w.plain().numpy(), GGMLQuantizationType.Q8_0), 8, *w.shape, acts="q8")
              for w in blocks]
    else:
        ws = [QuantWeight(w.file_blocks(), w.qtype, *w.shape, acts="float" if kind == "q4" else "q8",
                          repacked=False if kind == "q4q8file" else None) for w in blocks]
    return lambda xs, t: [w(xs[w.shape[1]]) for w in ws]


def compiled(plain: list[Any], dtype: Any) -> Multiply:
    """torch.compile of the linears with their weights frozen (inductor), dynamic shapes."""
    import torch
    import torch._inductor.config as inductor

    inductor.freezing = True

    class Step(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linears = torch.nn.ModuleList(torch.nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=dtype)
                                               for w in plain)
            for lin, w in zip(self.linears, plain, strict=True):
                lin.weight.data = w.to(dtype)

        def forward(self, a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
            return [lin(a if lin.in_features == HIDDEN else b) for lin in self.linears]

    step = torch.compile(Step().eval(), dynamic=True)
    start = time.perf_counter()
    with torch.no_grad():
        step(torch.randn(3, HIDDEN, dtype=dtype), torch.randn(3, INNER, dtype=dtype))
    print(f"compiled: first call {time.perf_counter() - start:.1f}s")
    return lambda xs, t: step(xs[HIDDEN], xs[INNER])


def acts_dtype(kind: str, dtype: Any) -> Any:
    """The activations' dtype a format multiplies."""
    import torch

    return dtype if kind in ("flinear", "onednn", "mkl", "compiled", "int8w") else torch.float32


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--formats", default="fp32,fp16,q4,q4q8", help="comma list, see above")
    parser.add_argument("--sizes", default="1,2,4,8,16,32")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dtype", default="float32", choices=("bfloat16", "float32"),
                        help="weights and activations of flinear, onednn, mkl, compiled; activations of int8w")
    parser.add_argument("--weights", default="auto", choices=("auto", "random", "embedded"),
                        help="the dense formats' weights (auto: embedded when a block format is asked for)")
    parser.add_argument("--layers", type=int, default=LAYERS, help="decoder layers (the model's 30; fewer for a quick try)")
    parser.add_argument("--split-head", action="store_true", help="the decoder linears and the lm_head apart")
    parser.add_argument("--qtype", choices=("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"),
                        help="random blocks of this type in --shapes instead of the model's step")
    parser.add_argument("--shapes", default="2048x2048,5632x2048", help="with --qtype: ROWSxCOLS, comma list")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: process CPU time, robust on a shared machine for -1t formats")
    parser.add_argument("--isa", choices=ISA_CHOICES, default="native",
                        help="avx2: measure the AVX2 class (the libraries limited; the process starts again)")
    args = parser.parse_args(argv)
    formats = [f for f in args.formats.split(",") if f]
    unknown = [f for f in formats if f.removesuffix("-1t") not in (*DENSE, *BLOCKS)]
    if unknown or not formats:
        parser.error(f"unknown format {', '.join(unknown) or '(none)'}: one of {', '.join((*DENSE, *BLOCKS))}")
    sizes = [int(s) for s in args.sizes.split(",")]
    kinds = {f.removesuffix("-1t") for f in formats}
    source = args.weights if args.weights != "auto" else ("embedded" if kinds & set(BLOCKS) else "random")
    shapes: list[tuple[int, int]] = []
    if args.qtype:
        if args.split_head or "compiled" in kinds:
            parser.error("--qtype times its --shapes alone: no --split-head, no compiled")
        try:
            shapes = parse_shapes(args.shapes, 256 if args.qtype.endswith("_K") else 32)
        except ValueError as error:
            parser.error(str(error))
        source = f"random {args.qtype} blocks {args.shapes}"
    reexec_with_isa(args.isa)

    import torch

    from racer_core.bench.timing import fastest_and_median, timed_rounds
    from racer_core.budget.cpu_class import describe
    from racer_core.models.formats.quant_weights import kernel_isa

    dtype = getattr(torch, args.dtype)
    if not 1 <= args.layers <= LAYERS:
        parser.error(f"--layers takes 1 to {LAYERS}")
    blocks = random_blocks(args.qtype, shapes) if shapes else gguf_blocks(args.layers) if source == "embedded" else []
    plain = [w.plain() for w in blocks] if blocks else random_weights(args.layers)
    parts = {"layers": slice(0, -1), "head": slice(-1, None)} if args.split_head else {"all": slice(None)}
    made = {(kind, part): multiplier(kind, plain[cut], blocks[cut], dtype, sizes)
            for kind in sorted(kinds) for part, cut in parts.items()}
    threads = torch.get_num_threads()
    gen = torch.Generator().manual_seed(1)
    widths = {int(w.shape[1]) for w in plain} | {HIDDEN, INNER}
    inputs = {(t, d): {w: torch.randn(t, w, generator=gen).to(d) for w in sorted(widths)}
              for t in sizes for d in {acts_dtype(k, dtype) for k in kinds}}
    keys = [(t, fmt, part) for t in sizes for fmt in formats for part in parts]
    calls = [lambda t=t, f=f, p=p: made[f.removesuffix("-1t"), p](inputs[t, acts_dtype(f.removesuffix("-1t"), dtype)], t)
             for t, f, p in keys]
    what = source if shapes else f"{source} weights, {args.layers} layers"
    print(f"CPU class {describe()}, kernel ISA {kernel_isa()}, torch threads {threads}; {what}, --dtype {args.dtype}")
    with torch.inference_mode():
        spans = timed_rounds(calls, args.rounds, clock=time.perf_counter if args.clock == "wall" else time.process_time,
                             before=lambda i: torch.set_num_threads(1 if keys[i][1].endswith("-1t") else threads),
                             after=lambda i: torch.set_num_threads(threads))
    got = {key: fastest_and_median(s) for key, s in zip(keys, spans, strict=True)}
    columns = [(f, p) for f in formats for p in parts]
    subject, digits = ("the matrices", 3) if shapes else ("a step's linears", 1)
    print(f"{args.clock} ms for {subject}, fastest / median of {args.rounds} interleaved rounds "
          f"(x = against the format's own T={sizes[0]})")
    print("T".rjust(4) + "".join(f"{f if p == 'all' else f + ' ' + p:>26}" for f, p in columns))
    for t in sizes:
        cells = [f"{got[t, f, p][0] * 1e3:8.{digits}f} /{got[t, f, p][1] * 1e3:7.{digits}f} "
                 f"({got[t, f, p][0] / got[sizes[0], f, p][0]:4.2f}x)"
                 for f, p in columns]
        print(f"{t:4d}" + "".join(f"{c:>26}" for c in cells))
    if args.split_head:
        print("lm_head share of the step's linears: " + "  ".join(
            f"T={t}: " + " ".join(f"{f} {100 * got[t, f, 'head'][0] / (got[t, f, 'head'][0] + got[t, f, 'layers'][0]):.0f}%"
                                  for f in formats) for t in sizes))
    if len(formats) > 1:
        base, part = formats[0], next(iter(parts))
        print(f"against {base} (time / {base}'s): " + "  ".join(
            f"T={t}: " + " ".join(f"{f} {got[t, f, part][0] / got[t, base, part][0]:.2f}x" for f in formats[1:])
            for t in sizes))


if __name__ == "__main__":
    main()
