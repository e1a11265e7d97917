"""Write a Llama-shaped GGUF of a chosen size, random weights, for measuring costs at the sizes users run.

ITS TEXT IS NOISE: the weights are random (at a trained model's magnitudes),
so the file is for step and prefill costs only (scripts/verify_cost.py,
llama_cpp_step_cost.py, kernel_floor.py with --model), never for replies or
acceptance. It is a tied Llama (the embedding is the head), in a download's
mix of block types as llama.cpp's quantizer chooses them: `q4_1` (every
linear Q4_1; the embedding Q6_K, or Q8_0 where its width is no multiple of
256, as in the embedded model), `q4_k_m` (Q4_K, with Q6_K for attn_v and
ffn_down in half the layers, and the embedding Q6_K), `q5_k_m` (the same
with Q5_K for Q4_K) or `q8_0` (every tensor Q8_0). The tokenizer fields are
the embedded model's (49152 tokens), so racer-tui and llama.cpp both load it.
Preset 0.8b: hidden 2048, 16 layers, FFN 5632, 32 heads of 64, 8 key-value
heads (0.82B parameters); a 0.8B file takes seconds (random blocks, no quantizer).

    python scripts/sized_gguf.py /tmp/llama-0.8b-q4_1.gguf --preset 0.8b --mix q4_1
    python scripts/sized_gguf.py /tmp/llama-0.8b-q4_k_m.gguf --preset 0.8b --mix q4_k_m
    python scripts/sized_gguf.py /tmp/llama-0.8b-q5_k_m.gguf --preset 0.8b --mix q5_k_m
    python scripts/sized_gguf.py /tmp/llama-0.8b-q8_0.gguf --preset 0.8b --mix q8_0
    python scripts/sized_gguf.py /tmp/small.gguf --hidden 1024 --layers 8 --ffn 2816 --heads 16 --kv-heads 4
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from racer_core.bench.sized_gguf import MIXES, PRESETS, Shape, write_sized_gguf  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the GGUF file to write (keep large ones out of the repository)")
    parser.add_argument("--preset", choices=sorted(PRESETS), help="a shape; the size options below override its parts")
    parser.add_argument("--hidden", type=int)
    parser.add_argument("--layers", type=int)
    parser.add_argument("--ffn", type=int)
    parser.add_argument("--heads", type=int)
    parser.add_argument("--kv-heads", type=int)
    parser.add_argument("--mix", choices=MIXES, default="q4_1")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    sizes = {name: getattr(args, name) for name in ("hidden", "layers", "ffn", "heads", "kv_heads")}
    if args.preset is None and None in sizes.values():
        parser.error("give --preset, or every one of --hidden, --layers, --ffn, --heads and --kv-heads")
    base = PRESETS[args.preset] if args.preset else Shape(**sizes)
    shape = replace(base, **{k: v for k, v in sizes.items() if v is not None})
    if args.out.suffix.lower() != ".gguf":
        parser.error(f"{args.out}: the file's name must end in .gguf (racer-tui reads a model file by it)")
    from racer_core.common.errors import ModelLoadError
    from racer_core.models.embedded import embedded_gguf

    try:
        tokenizer = embedded_gguf()
        start = time.perf_counter()
        written = write_sized_gguf(args.out, shape, args.mix, tokenizer, args.seed)
    except (ValueError, ModelLoadError, OSError) as exc:
        raise SystemExit(f"sized_gguf: {exc}") from None
    types = ", ".join(f"{n} {name}" for name, n in sorted(written.types.items()))
    print(f"wrote {written.path}: random weights (costs only; its text is noise), {args.mix}, "
          f"{written.params / 1e9:.3f}B parameters, {written.bytes / 1e6:.1f} MB, in {time.perf_counter() - start:.1f}s")
    print(f"shape: hidden {shape.hidden}, {shape.layers} layers, FFN {shape.ffn}, {shape.heads} heads "
          f"({shape.head_dim} wide), {shape.kv_heads} kv heads; tensors: {types}; tokenizer from {tokenizer.name}")


if __name__ == "__main__":
    main()
