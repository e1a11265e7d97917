"""racer-tui beside llama.cpp's plain decoding of the same GGUF, side by side.

The embedded model ships as a GGUF (Q4_1); racer-tui dequantizes it and
decodes in float32 (or bfloat16, or float32 on float16 weights), llama.cpp
decodes the Q4_1 weights themselves. Each question's first turn is rendered
once with the model's chat template and the same token ids go to every
runner; every runner answers a question before the next question starts
(interleaved, so a busy moment hits them alike). Times are wall clock from
the prompt to the last token (prefill included); tok/s is new tokens over
those seconds, summed over the questions.

llama-cpp-python is not a dependency: build it from source in its own
environment, for the CPU class being measured, for example

    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF" \\
        pip install llama-cpp-python

    python scripts/llama_cpp_anchor.py --question-begin 14 --question-end 42 --max-new-tokens 128 \\
        --setups float32,fp16w --isa avx2

`--setups`: racer-tui engines, each run with ar and racer (float32, bfloat16,
fp16w = --fp16-weights, auto).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from racer_core.budget.cpu_class import ISA_CHOICES, reexec_with_isa  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="builtin")
    parser.add_argument("--question-begin", type=int, default=14)
    parser.add_argument("--question-end", type=int, default=42)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--setups", default="auto,fp16w")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--isa", choices=ISA_CHOICES, default="native")
    args = parser.parse_args()
    reexec_with_isa(args.isa)
    try:
        from llama_cpp import Llama
    except ImportError:
        raise SystemExit("llama-cpp-python is not installed (see this script's help for a source build)") from None

    import torch

    from racer_core.bench.suites import load_suite
    from racer_core.common.events import GenerationConfig
    from racer_core.engine.engine import load_engine
    from racer_core.models.checkpoints import HALF
    from racer_core.models.embedded import embedded_gguf

    torch.set_num_threads(args.threads)
    engines = {}
    for setup in args.setups.split(","):
        options = {"quantize": HALF} if setup == "fp16w" else {"dtype": setup}
        engines[setup] = load_engine(device="cpu", **options)
        print(f"{setup}: racer-tui {engines[setup].info.dtype}, {torch.get_num_threads()} threads", flush=True)
    first = next(iter(engines.values()))
    llm = Llama(model_path=str(embedded_gguf()), n_ctx=4096, n_threads=args.threads, n_threads_batch=args.threads,
                verbose=False)
    print(f"llama.cpp: {embedded_gguf().name}, {args.threads} threads", flush=True)
    eos = set(first.runtime.eos_ids)
    questions = load_suite(args.suite)[args.question_begin : args.question_end]
    totals: dict[str, list[float]] = {}

    def add(name: str, tokens: int, seconds: float) -> None:
        row = totals.setdefault(name, [0, 0.0])
        row[0] += tokens
        row[1] += seconds

    for index, question in enumerate(questions):
        conversation = first.new_conversation()
        conversation.messages.append({"role": "user", "content": question.turns[0]})
        prompt = conversation.prompt_ids()
        start = time.perf_counter()
        made = 0
        for token in llm.generate(prompt, top_k=1, temp=0.0, reset=True):
            if token in eos:
                break
            made += 1
            if made >= args.max_new_tokens:
                break
        add("llama.cpp", made, time.perf_counter() - start)
        for setup, engine in engines.items():
            for method in ("ar", "racer"):
                config = GenerationConfig(method=method, max_new_tokens=args.max_new_tokens)
                start = time.perf_counter()
                steps = list(engine.decoder().generate(prompt, config))
                add(f"{method}@{setup}", sum(len(s.tokens) for s in steps), time.perf_counter() - start)
        print(f"question {index + 1}/{len(questions)} done", flush=True)
    anchor = totals["llama.cpp"][0] / totals["llama.cpp"][1]
    print(f"\n{'runner':<20}{'tokens':>8}{'tok/s':>8}{'vs llama.cpp':>14}")
    for name, (tokens, seconds) in totals.items():
        speed = tokens / seconds
        print(f"{name:<20}{tokens:>8}{speed:>8.1f}{speed / anchor:>13.2f}x")


if __name__ == "__main__":
    main()
