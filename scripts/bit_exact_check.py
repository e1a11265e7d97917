"""Is the lean forward bit-exact on a real model? Trees of several shapes are
verified one after another beside plain one-token decoding of the same tokens
(racer_core/testing/bit_exact.py); every tree row's logits and the cache after
each commit must equal plain decoding's, bit for bit. Prints each difference.

    python scripts/bit_exact_check.py --dtype bfloat16
    python scripts/bit_exact_check.py --dtype float32 --sdpa   # today's SDPA attention, for contrast
    python scripts/bit_exact_check.py --dtype float32 --isa avx2
    python scripts/bit_exact_check.py --fp16-weights   # float16 weights (fbgemm), float32 arithmetic
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from racer_core.budget.cpu_class import ISA_CHOICES, reexec_with_isa  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=None, help="model id or path (default: the embedded model)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--context", type=int, default=200, help="prompt tokens before the first tree")
    parser.add_argument("--sdpa", action="store_true", help="attention through SDPA instead of the exact kernel")
    parser.add_argument("--fp16-weights", action="store_true", help="linears in float16 (half_weights.py)")
    parser.add_argument("--isa", choices=ISA_CHOICES, default="native",
                        help="avx2: check the AVX2 class (the libraries limited; the process starts again)")
    args = parser.parse_args(argv)
    reexec_with_isa(args.isa)
    if args.sdpa:
        os.environ["RACER_EXACT_ATTENTION"] = "0"

    import torch

    from racer_core.engine.engine import RacerEngine
    from racer_core.models.load_options import HALF
    from racer_core.models.loader import load
    from racer_core.testing.bit_exact import mismatches

    loaded = load(args.model, device="cpu", dtype=args.dtype, quantize=HALF if args.fp16_weights else None)
    engine = RacerEngine(loaded.model, loaded.tokenizer, loaded.name)
    if engine.lean is None:
        raise SystemExit(f"{loaded.name} has no lean forward")
    vocab = engine.runtime.vocab_size
    prompt = torch.randint(0, vocab, (args.context,), generator=torch.Generator().manual_seed(0)).tolist()
    print(f"{loaded.name}, {engine.info.dtype}, {torch.get_num_threads()} threads, packed weights: {engine.lean.packed}, "
          f"attention: {'SDPA' if args.sdpa else 'exact kernel'}")
    found = mismatches(engine.lean, prompt, steps=("chain", "siblings", "deep branch"), vocab=vocab)
    print("\n".join(found) if found else "every tree row and the cache equal plain decoding bit for bit")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
