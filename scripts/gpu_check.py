"""The GPU checks of DESIGN.md section 5, as one script.

Prints: the verification cost curve t(T) for T = 1..128; greedy agreement of
RACER with plain decoding; tokens/s of ar, racer and pld on the built-in
suite. Runs on any device (`--device cpu` for a smoke test). Where the
embedded model is not installed (the device machine gets only part of the
tree), `--random-model` measures the cost curve and the engine's overhead on
a random-weight model of SmolLM2-135M's shape instead; acceptance then comes
from CPU runs.

    python scripts/gpu_check.py                       # embedded model, auto device (bf16 on CUDA)
    python scripts/gpu_check.py --random-model --dtype bfloat16
"""

from __future__ import annotations

import argparse
import time

SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128)


def random_engine(device: str, dtype: str):  # noqa: ANN201 - RacerEngine
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from racer_core.engine import RacerEngine
    from racer_core.loading import resolve_device, resolve_dtype

    dev = resolve_device(device)
    config = LlamaConfig(  # SmolLM2-135M's shape
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
        num_key_value_heads=3, max_position_embeddings=8192, tie_word_embeddings=True, rope_theta=100000,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=resolve_dtype(dtype, dev)).to(dev).eval()
    return RacerEngine(model, None, "random SmolLM2-135M shape", eos_ids=frozenset())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--random-model", action="store_true")
    parser.add_argument("--questions", type=int, default=14)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--context", type=int, default=512, help="cached tokens for the cost curve")
    args = parser.parse_args()

    from racer_core.bench.runner import run_benchmark
    from racer_core.bench.suites import load_suite
    from racer_core.engine import load_engine
    from racer_core.events import GenerationConfig

    engine = random_engine(args.device, args.dtype) if args.random_model else load_engine(None, args.device, args.dtype)
    print(f"model: {engine.info.model}  device: {engine.info.device}  dtype: {engine.info.dtype}")

    print(f"\nverification cost t(T), {args.context} cached tokens, best of 5 interleaved rounds")
    curve = engine.time_forward(SIZES, context=args.context)
    for size, seconds in zip(SIZES, curve, strict=True):
        print(f"  T={size:4d}  {seconds * 1000:8.2f} ms  {seconds / curve[0]:5.2f}x t(1)")

    if args.random_model:
        # No tokenizer: time the engine's own loop on random prompts, plain vs drafted.
        import torch

        engine.cost_curve()  # measured before timing, as load_engine does
        prompt = torch.randint(0, 49152, (256,), generator=torch.Generator().manual_seed(1)).tolist()
        for method in ("ar", "racer"):
            config = GenerationConfig(method=method, max_new_tokens=args.max_new_tokens)
            start = time.perf_counter()
            steps = list(engine.decoder().generate(prompt, config))
            wall = time.perf_counter() - start
            overhead = sum(s.draft_s + s.update_s for s in steps) / max(wall, 1e-9)
            tokens = sum(len(s.tokens) for s in steps)
            print(f"  {method:6s} {tokens / wall:8.1f} tokens/s  time outside forward passes {overhead:.1%}")
        return

    questions = load_suite("builtin")[: args.questions]
    config = GenerationConfig(max_new_tokens=args.max_new_tokens)
    result = run_benchmark(engine, questions, ["ar", "racer", "pld"], config)
    summary = result.to_summary()
    print(f"\n{len(questions)} built-in questions, greedy, {args.max_new_tokens} new tokens")
    for method, row in summary["methods"].items():
        print(
            f"  {method:6s} {row['tokens_per_s'] or 0:8.1f} tokens/s  speedup {row['speedup_vs_ar'] or 0:5.2f}x  "
            f"MAT {row['mat'] or 0:5.2f}  identical to ar: {row.get('identical_questions')}/{row.get('compared_questions')}"
        )


if __name__ == "__main__":
    main()
