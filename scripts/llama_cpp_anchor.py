"""racer-tui beside llama.cpp's plain decoding of the same GGUF, side by side.

The embedded model ships as a GGUF (Q4_1). By default racer-tui multiplies
its own blocks too (setup `auto` or `q4`: activations quantized to 8 bits per
block, as llama.cpp does; `q4f`: the same blocks with float32 activations);
`float32`, `bfloat16` and `fp16w` (--fp16-weights) dequantize it first. Each question's first turn is rendered
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
        --setups q4,fp16w --methods ar,racer,suffix --isa avx2

and for the native class of an AVX-512 CPU, in another environment,
`CMAKE_ARGS="-DGGML_NATIVE=ON"`. Where that build dies of an illegal
instruction in libggml-cpu.so on the first long prompt (its AMX path, on a
virtual machine that does not grant the tile state: the process ends with
status 132 and no message), build without AMX:
`CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON
-DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF"`.

`--setups`: racer-tui engines (q4 = auto, q4f, float32, bfloat16, fp16w), each
run with every method of `--methods`. `--paths`: `loop` decodes through the
engine loop, as the chat, the benchmark and the API do (the default, since
4 Dec 2026); `alone` on the calling thread (`SequenceDecoder.generate`, what
this script measured before); both, side by side, name the runners
`method@setup/path`. Besides speed, each runner's answers are
compared with llama.cpp's token for token: how many are identical, and where
the others first differ.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from racer_core.budget.cpu_class import ISA_CHOICES, reexec_with_isa  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="builtin")
    parser.add_argument("--question-begin", type=int, default=14)
    parser.add_argument("--question-end", type=int, default=42)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--setups", default="q4,fp16w")
    parser.add_argument("--methods", default="ar,racer,suffix")
    parser.add_argument("--paths", default="loop", help="loop, alone or both (comma list)")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--isa", choices=ISA_CHOICES, default="native")
    args = parser.parse_args(argv)
    paths = args.paths.split(",")
    if not paths or not set(paths) <= {"loop", "alone"}:
        raise SystemExit(f"--paths {args.paths!r}: give loop, alone or both")
    reexec_with_isa(args.isa)
    try:
        from llama_cpp import Llama
    except ImportError:
        raise SystemExit("llama-cpp-python is not installed (see this script's help for a source build)") from None

    import torch

    from racer_core.bench.suites import load_suite
    from racer_core.common.events import GenerationConfig
    from racer_core.engine.engine import load_engine
    from racer_core.models.embedded import embedded_gguf
    from racer_core.models.formats.quant_weights import activations_as
    from racer_core.models.load_options import HALF

    torch.set_num_threads(args.threads)
    engines = {}
    for setup in args.setups.split(","):
        options = {"quantize": HALF} if setup == "fp16w" else {"dtype": "auto" if setup in ("q4", "q4f") else setup}
        with activations_as("float" if setup == "q4f" else "q8"):
            engines[setup] = load_engine(device="cpu", **options)
        print(f"{setup}: racer-tui {engines[setup].info.dtype}, {torch.get_num_threads()} threads", flush=True)
    first = next(iter(engines.values()))
    llm = Llama(model_path=str(embedded_gguf()), n_ctx=4096, n_threads=args.threads, n_threads_batch=args.threads,
                verbose=False)
    print(f"llama.cpp: {embedded_gguf().name}, {args.threads} threads", flush=True)
    eos = set(first.runtime.eos_ids)
    questions = load_suite(args.suite)[args.question_begin : args.question_end]
    totals: dict[str, list[float]] = {}
    by_category: dict[tuple[str, str], list[float]] = {}  # (category, runner) -> [tokens, seconds]
    same: dict[str, list[int]] = {}  # runner -> [identical answers, first differing position of each other one...]
    reference: list[int] = []

    def add(name: str, tokens: list[int], seconds: float) -> None:
        for row in (totals.setdefault(name, [0, 0.0]), by_category.setdefault((question.category, name), [0, 0.0])):
            row[0] += len(tokens)
            row[1] += seconds
        if name != "llama.cpp":
            found = same.setdefault(name, [0])
            if tokens == reference:
                found[0] += 1
            else:
                found.append(next((i for i, (a, b) in enumerate(zip(tokens, reference, strict=False)) if a != b),
                                  min(len(tokens), len(reference))))

    for index, question in enumerate(questions):
        conversation = first.new_conversation()
        conversation.messages.append({"role": "user", "content": question.turns[0]})
        prompt = conversation.prompt_ids()
        quiet_loops(engines)
        start = time.perf_counter()
        reference = []
        for token in llm.generate(prompt, top_k=1, temp=0.0, reset=True):
            if token in eos:
                break
            reference.append(token)
            if len(reference) >= args.max_new_tokens:
                break
        add("llama.cpp", reference, time.perf_counter() - start)
        for setup, engine in engines.items():
            for method in args.methods.split(","):
                for path in paths:
                    config = GenerationConfig(method=method, max_new_tokens=args.max_new_tokens)
                    start = time.perf_counter()
                    decoder = engine.decoder()
                    if path == "loop":
                        steps = list(engine.loop.submit(decoder.steps(prompt, config)))
                    else:
                        quiet_loops(engines)
                        steps = list(decoder.generate(prompt, config))
                    tokens = [t for s in steps for t in s.tokens][: args.max_new_tokens]
                    tokens = tokens[: next((i for i, t in enumerate(tokens) if t in eos), len(tokens))]
                    add(f"{method}@{setup}" + (f"/{path}" if len(paths) > 1 else ""), tokens,
                        time.perf_counter() - start)
        print(f"question {index + 1}/{len(questions)} done", flush=True)
    anchor = totals["llama.cpp"][0] / totals["llama.cpp"][1]
    print(f"\n{'runner':<20}{'tokens':>8}{'tok/s':>8}{'vs llama.cpp':>14}  answers as llama.cpp's")
    for name, (tokens, seconds) in totals.items():
        speed = tokens / seconds
        agree = "" if name == "llama.cpp" else (
            f"  {same[name][0]}/{len(questions)} identical"
            + (f"; others differ from token {sorted(same[name][1:])}" if len(same[name]) > 1 else ""))
        print(f"{name:<20}{tokens:>8}{speed:>8.1f}{speed / anchor:>13.2f}x{agree}")
    runners = list(totals)
    print(f"\ntok/s per category\n{'category':<16}" + "".join(f"{name:>14}" for name in runners))
    for category in dict.fromkeys(q.category for q in questions):
        cells = [by_category.get((category, name), [0, 0.0]) for name in runners]
        print(f"{category:<16}" + "".join(f"{t / s if s else 0.0:>14.1f}" for t, s in cells))


def quiet_loops(engines: dict) -> None:
    """End the engines' idle loop threads before work on this thread: their
    OpenMP workers beside this thread's (llama.cpp's, the alone path's) would
    leave GNU OpenMP managing more threads than CPUs, and no worker would
    spin (racer_core/engine/openmp_threads.py)."""
    for engine in engines.values():
        engine.loop.close()


if __name__ == "__main__":
    main()
