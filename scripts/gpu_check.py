"""The GPU checks of docs/design.md section 5, as one script.

Prints: the verification cost curve t(T) for T = 1..128; greedy agreement of
RACER with plain decoding (identical / near-tie / other divergences; exit 1 on
any other one); tokens/s of ar, racer and pld on the built-in suite. Runs on any device (`--device cpu` for a smoke test). Where the
embedded model is not installed (the device machine gets only part of the
tree), `--random-model` measures the cost curve and the engine's overhead on
a random-weight model of SmolLM2-135M's shape instead; acceptance then comes
from CPU runs.

    python scripts/gpu_check.py                       # embedded model, auto device (bf16 on CUDA)
    python scripts/gpu_check.py --random-model --dtype bfloat16
    python scripts/gpu_check.py --random-model --forward stock   # transformers' forward, to compare
    python scripts/gpu_check.py --families            # a VL model with an image; device_map="auto"
    python scripts/gpu_check.py --model meta-llama/Llama-3.1-8B-Instruct \
        --draft-model yuhuili/EAGLE3-LLaMA3.1-Instruct-8B   # adds eagle3, the paper's comparison

`--draft-model` (an EAGLE-3 head for `--model`, see docs/evaluation.md) adds
`eagle3` to the methods compared on the built-in suite.

`--families` (no downloads): a random-weight Qwen2.5-VL (text tower of
Qwen2.5-0.5B's shape, the tiny processor) answers about an image with `ar`,
`hf` and `racer` in fp32, which must agree token for token; then a tiny
checkpoint is loaded with `--device auto` (device_map="auto" through
accelerate) and split layer by layer over the GPUs, or over GPU 0 and the CPU
where there is one GPU, and `racer` must again equal `ar`.
"""

from __future__ import annotations

import argparse
import time

from racer_core.models.load_options import FORWARDS

SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128)


def random_engine(device: str, dtype: str, forward: str = "auto"):  # noqa: ANN201 - RacerEngine
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from racer_core.engine.engine import RacerEngine
    from racer_core.models.loader import resolve_device, resolve_dtype

    dev = resolve_device(device)
    config = LlamaConfig(  # SmolLM2-135M's shape
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
        num_key_value_heads=3, max_position_embeddings=8192, tie_word_embeddings=True, rope_theta=100000,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=resolve_dtype(dtype, dev)).to(dev).eval()
    return RacerEngine(model, None, "random SmolLM2-135M shape", eos_ids=frozenset(), forward=forward)


def _reply(engine, images, method: str, max_new_tokens: int) -> tuple[list[int], float]:  # noqa: ANN001
    from racer_core.common.events import GenerationConfig

    config = GenerationConfig(method=method, max_new_tokens=max_new_tokens, max_num_draft=16)
    start = time.perf_counter()
    events = list(engine.new_conversation().send("Describe the picture. The quick brown fox", config, images=images))
    return [p.token_id for e in events for p in e.pieces], time.perf_counter() - start


def family_checks(device: str, max_new_tokens: int) -> bool:
    import tempfile

    import torch
    from transformers import AutoModelForImageTextToText

    from racer_core.engine.engine import RacerEngine, load_engine
    from racer_core.engine.multimodal import image_from_pixels
    from racer_core.models.loader import resolve_device
    from racer_core.testing.tiny_vl import tiny_image, tiny_processor, tiny_vl_config, tiny_vl_model

    dev = resolve_device(device)
    ok = True
    config = tiny_vl_config("qwen2_5_vl", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                            num_attention_heads=14, num_key_value_heads=2, head_dim=64)
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32).to(dev).eval()
    processor = tiny_processor("qwen2_5_vl")
    engine = RacerEngine(model, processor.tokenizer, "random Qwen2.5-VL", eos_ids=frozenset(), processor=processor)
    image = [image_from_pixels(tiny_image(size=(112, 84)))]
    print(f"\nQwen2.5-VL (random weights, fp32) on {dev}, one image, {max_new_tokens} new tokens")
    replies = {}
    for method in ("ar", "hf", "racer"):
        replies[method], seconds = _reply(engine, image, method, max_new_tokens)
        print(f"  {method:6s} {len(replies[method]) / seconds:8.1f} tokens/s")
    same = replies["ar"] == replies["hf"] == replies["racer"]
    ok &= same
    print(f"  ar == hf == racer: {same}")

    if not torch.cuda.is_available():
        print("\ndevice_map='auto': skipped (no CUDA)")
        return ok
    with tempfile.TemporaryDirectory() as folder:
        tiny_vl_model("qwen2_5_vl").save_pretrained(folder)
        processor.save_pretrained(folder)
        auto = load_engine(folder, device="auto", dtype="float32")
        print(f"\ndevice_map='auto': {sorted(set(map(str, auto.model.hf_device_map.values())))}")
        gpus = torch.cuda.device_count()
        split = {"model.visual": 0, "model.language_model.embed_tokens": 0, "model.language_model.rotary_emb": 0,
                 "model.language_model.layers.0": 0, "model.language_model.layers.1": 1 if gpus > 1 else "cpu",
                 "model.language_model.norm": 1 if gpus > 1 else "cpu", "lm_head": 1 if gpus > 1 else "cpu"}
        split_model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32, device_map=split).eval()
        spread = RacerEngine(split_model, processor.tokenizer, "split", eos_ids=frozenset(), processor=processor)
        for name, eng in (("auto", auto), (f"split over {sorted(set(map(str, split.values())))}", spread)):
            ar, _ = _reply(eng, image, "ar", max_new_tokens)
            racer, _ = _reply(eng, image, "racer", max_new_tokens)
            print(f"  {name}: racer == ar: {racer == ar}")
            ok &= racer == ar
    return ok


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--forward", default="auto", choices=FORWARDS,
                        help="the verification forward (auto: lean_forward.py where the model has one)")
    parser.add_argument("--random-model", action="store_true")
    parser.add_argument("--families", action="store_true", help="a VL model with an image, and device_map='auto'")
    parser.add_argument("--questions", type=int, default=14)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--context", type=int, default=512, help="cached tokens for the cost curve")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="the cost curve's token counts")
    parser.add_argument("--model", default=None, help="a checkpoint folder or hub id (default: the embedded model)")
    parser.add_argument("--draft-model", default=None, help="an EAGLE-3 head for --model: adds method eagle3")
    args = parser.parse_args(argv)
    if args.draft_model and args.random_model:
        parser.error("--draft-model needs the head's own target (--model), not a random model")

    from racer_core.bench.runner import run_benchmark
    from racer_core.bench.suites import load_suite
    from racer_core.common.events import GenerationConfig
    from racer_core.engine.engine import load_engine

    if args.families:
        raise SystemExit(0 if family_checks(args.device, args.max_new_tokens) else 1)
    if args.random_model:
        engine = random_engine(args.device, args.dtype, args.forward)
    else:
        engine = load_engine(args.model, device=args.device, dtype=args.dtype, forward=args.forward,
                             draft_model=args.draft_model)
    info = engine.info
    print(f"model: {info.model}  device: {info.device}  dtype: {info.dtype}  forward: {info.forward}")

    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"\nverification cost t(T), {args.context} cached tokens, best of 5 interleaved rounds")
    curve = engine.time_forward(sizes, context=args.context)
    for size, seconds in zip(sizes, curve, strict=True):
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
    methods = ["ar", "racer", "pld", *(["eagle3"] if args.draft_model else [])]
    result = run_benchmark(engine, questions, methods, config)
    summary = result.to_summary()
    print(f"\n{len(questions)} built-in questions, greedy, {args.max_new_tokens} new tokens")
    for method, row in summary["methods"].items():
        print(
            f"  {method:6s} {row['tokens_per_s'] or 0:8.1f} tokens/s  speedup {row['speedup_vs_ar'] or 0:5.2f}x  "
            f"MAT {row['mat'] or 0:5.2f}  identical to ar: {row.get('identical_questions')}/{row.get('compared_questions')}"
            f"  near-tie: {row.get('near_tie_questions')}  other: {row.get('other_divergence_questions')}"
        )
    # In bf16 a divergence from ar must begin at a near-tie (racer_core.verify.near_tie); any other is a bug.
    for warning in summary["warnings"]:
        print(f"WARNING {warning}")
    if any(row.get("other_divergence_questions") for row in summary["methods"].values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
