"""Cost of verifying T tokens after C cached ones, forward variants side by side.

Variants run interleaved in one process (round r: every variant, every size),
so a busy moment on a shared machine hits them alike; the fastest and the
median round are reported, and ratios against the first variant. `lean` is
the lean forward as the engine runs it (weights packed once for oneDNN where
the CPU takes them, packed_linear.py), `lean-flinear` the same on the plain
weights with F.linear, `lean-fp16w` with --fp16-weights (half_weights.py), `lean-q4` the embedded GGUF's
own Q4_1/Q8_0 blocks in the tree kernel (formats/quant_weights.py, the default for a GGUF on a CPU; each
layer one C++ call, formats/quant_layer.py; its Q4_1/Q8_0 blocks repacked, quant/repack.py), `lean-q4-file` the
same with the blocks in the file's layout (the kernel before repacking), `lean-q4-torch` the same as lean-q4 with
the layer body in torch ops, `lean-q4-kv32` the same as lean-q4 with a float32 key/value cache (quant_layer.py),
`lean-q4-attn256` the same as lean-q4 with the attention on its AVX2 path where its 512-bit one would run,
`lean-q4-parts` the same as lean-q4 with the pass in parts (the embedding, the layers, the final norm and the head each
its own call from Python, as before 6 Dec 2026; lean-q4 makes them one native call, FusedLayers.step),
`lean-sdpa` the lean forward with SDPA attention instead of the batch-invariant kernel
(racer_core/verify/attention.py). `--isa avx2` measures the AVX2 class on an AVX-512
machine (the process starts again with the libraries limited, cpu_class.py).

    python scripts/verify_cost.py --variants lean-flinear,lean --sizes 1,2,4,8,16,32 --dtype float32
    python scripts/verify_cost.py --variants lean-flinear,lean --sizes 1,2,4,8,16,32 --dtype float32 --isa avx2
    python scripts/verify_cost.py --variants lean-flinear,lean,lean-fp16w --sizes 1,2,4,8,16,32 --dtype float32
    python scripts/verify_cost.py --variants stock,lean,lean-compiled --dtype bfloat16
    python scripts/verify_cost.py --variants lean,lean-fp16w,lean-q4 --sizes 1,2,4,8,16,32 --threads 1 --clock cpu
    python scripts/verify_cost.py --variants lean-sdpa,lean --sizes 1,8,32 --context 2048 --threads 1 --clock cpu
    python scripts/verify_cost.py --variants lean-q4-file,lean-q4 --sizes 1,2,4,8,16,32 --threads 2 --rounds 9
    python scripts/verify_cost.py --variants lean-fp16w-fbgemm,lean-fp16w,lean-fp16w-rows --sizes 1,2,3,4,7,8,16,32 --threads 1 --clock cpu
    python scripts/verify_cost.py --variants lean-q4-file,lean-q4 --model /tmp/llama-0.8b-q4_1.gguf --sizes 1,2,4,8,16 --threads 2
    python scripts/verify_cost.py --variants lean-q4-file,lean-q4 --prefill 1000 --threads 2 --rounds 5
    python scripts/verify_cost.py --variants lean-q4-kv32,lean-q4 --sizes 1,2,4,8 --context 600 --threads 2
    python scripts/verify_cost.py --variants lean-q4-attn256,lean-q4 --sizes 1,2,4,8,16,32 --context 1024 --threads 2
    python scripts/verify_cost.py --variants lean-q4-parts,lean-q4 --sizes 1,2,4,8,16,32 --threads 2 --rounds 30

`--model` names another GGUF file (scripts/sized_gguf.py writes one of any
size); a run of lean-q4 variants only loads it in its blocks throughout (no
float32 copy). `--prefill N` times the prefill of an N-token prompt instead of
the steps: a fresh cache each round, fed as the engine feeds a prompt (chunks
of decoder.PREFILL_CHUNK rows, each chunk's last row through the head;
`--prefill-every-row`: every row's, as racer's fixed-budget table reads them).
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

Forward = Callable[[Any, Any, Any, Any], Any]


QUANT_VARIANTS = {"lean-q4", "lean-q4f", "lean-q4-torch", "lean-q4-file", "lean-q4-kv32", "lean-q4-attn256",
                  "lean-q4-parts"}
"""The variants on a GGUF's own blocks, each loaded again in its own setting (quant_weights.py)."""


def variants(engine: Any, names: list[str], model_path: str | None = None) -> dict[str, Forward]:
    import torch

    from racer_core.models.families import family_of
    from racer_core.models.lean_forward import LeanForward, weights_from_model

    rt = engine.runtime
    # the transformers model, only for the variants built from it (reading it takes seconds)
    model = engine.model if set(names) - {"lean", "lean-sdpa", *QUANT_VARIANTS} else None

    def stock(ids, positions, mask, cache):
        out = model(input_ids=ids[None], position_ids=positions[None], attention_mask=mask, use_cache=True,
                    **{rt.cache_arg: cache})
        return out.logits[0]

    found: dict[str, Forward] = {}
    for name in names:
        if name == "stock":
            found[name] = stock
        elif name == "lean":
            assert engine.lean is not None, "this model has no lean forward"
            print(f"lean: weights {'packed for oneDNN' if engine.lean.packed else 'plain (packing unavailable)'}")
            found[name] = engine.lean
        elif name == "lean-sdpa":  # today's attention: the lean forward with SDPA
            assert engine.lean is not None, "this model has no lean forward"
            found[name] = with_sdpa(engine.lean)
        elif name == "lean-flinear":
            assert engine.lean is not None, "this model has no lean forward"
            found[name] = LeanForward(weights_from_model(model, family_of(model.config)), pack=False)
        elif name in ("lean-fp16w", *HALF_ROWS):  # --fp16-weights: fbgemm's float16 weights, float32 arithmetic
            if engine.info.dtype != "float32":
                raise SystemExit(f"{name} multiplies float32 activations: run it with --dtype float32, "
                                 f"not {engine.info.dtype}")
            lean = LeanForward(weights_from_model(model, family_of(model.config)), half=True)
            found[name] = with_half_rows(lean, HALF_ROWS[name]) if name in HALF_ROWS else lean
        elif name in QUANT_VARIANTS:  # the GGUF's blocks (quant_weights.py)
            from racer_core.models.formats.quant_weights import activations_as, repacking_as
            from racer_core.models.loader import load

            with activations_as("float" if name == "lean-q4f" else "q8"), repacking_as(name != "lean-q4-file"):
                lean = load(model_path, device="cpu").lean
            assert lean is not None and lean.quant, "the GGUF's blocks did not load (see the log)"
            if name == "lean-q4-torch":  # the layer body in torch ops instead of one C++ call (quant_layer.py)
                lean.fused = None
            if name == "lean-q4-kv32" and lean.fused is not None:  # a float32 cache (the default before 5 Dec 2026)
                lean.fused.kv_dtype = torch.float32
            if name == "lean-q4-attn256" and lean.fused is not None:  # the attention's AVX2 path where AVX-512 runs
                lean.fused.wide_attention = False
            if name == "lean-q4-parts" and lean.fused is not None:  # each part of the pass its own call
                lean.fused.whole_step = False
            print(f"{name}: weights {lean.quant}, layers {'fused' if lean.fused is not None else 'in torch ops'}")
            found[name] = lean
        elif name == "lean-compiled":
            lean = LeanForward(weights_from_model(model, family_of(model.config)), pack=False)
            assert lean is not None
            start = time.perf_counter()
            found[name] = torch.compile(lean.__call__, dynamic=True)
            print(f"compile wrapper {time.perf_counter() - start:.1f}s (compiles at first call)")
        else:
            raise SystemExit(f"unknown variant {name}")
    return found


def with_sdpa(forward: Forward) -> Forward:
    """`forward` with attention through SDPA (the exact kernel switched off for the call)."""
    import os

    from racer_core.verify.attention import DISABLE_ENV

    def call(*args: Any) -> Any:
        os.environ[DISABLE_ENV] = "0"
        try:
            return forward(*args)
        finally:
            del os.environ[DISABLE_ENV]

    return call


HALF_ROWS = {"lean-fp16w-fbgemm": "fbgemm", "lean-fp16w-rows": "rows"}
"""fp16 weights as the engine ran them before 4 Dec 2026 (fbgemm's own split of the rows: on AVX2 not
row-invariant), and each row alone through the one-row kernel (the other row-invariant choice)."""


def with_half_rows(forward: Forward, how: str) -> Forward:
    """`forward` with its fp16 linears' rows split `how` for the call instead of padded (half_rows.py)."""
    from racer_core.models.formats import half_weights
    from racer_core.models.formats.half_rows import ALL_EVEN, RowCounts

    counts = ALL_EVEN if how == "fbgemm" else RowCounts((0, 1), 1, exact=True)  # rows: chunks of one

    def call(*args: Any) -> Any:
        padded = half_weights.row_counts
        half_weights.row_counts = lambda: counts
        try:
            return forward(*args)
        finally:
            half_weights.row_counts = padded

    return call


def resident_mb() -> float:
    """This process's resident memory (Linux), MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default="lean-flinear,lean")
    parser.add_argument("--sizes", default="1,8,32,64")
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: process CPU time, robust on a shared machine when --threads 1")
    parser.add_argument("--isa", choices=ISA_CHOICES, default="native",
                        help="avx2: measure the AVX2 class (the libraries limited; the process starts again); avxvnni: the "
                             "same with the 4-bit kernel on AVX-VNNI")
    parser.add_argument("--model", default=None, help="a GGUF file (default: the embedded model)")
    parser.add_argument("--prefill-every-row", action="store_true",
                        help="with --prefill: every row's logits, as racer's fixed-budget table reads them")
    parser.add_argument("--prefill", type=int, default=0, metavar="N",
                        help="time the prefill of an N-token prompt (a fresh cache each round) instead of the steps")
    args = parser.parse_args(argv)
    if args.prefill < 0 or args.rounds < 1 or args.context < 1:
        parser.error("--prefill must be 0 or more, --rounds and --context at least 1")
    reexec_with_isa(args.isa)
    from racer_core.common.errors import ModelLoadError

    try:
        run(args)
    except ModelLoadError as exc:
        raise SystemExit(f"verify_cost: {exc}") from None


def run(args: argparse.Namespace) -> None:
    import torch

    from racer_core.budget.cpu_class import describe
    from racer_core.engine.engine import RacerEngine
    from racer_core.models.loader import load

    if args.threads:
        torch.set_num_threads(args.threads)
    names = args.variants.split(",")
    # the blocks' variants load the file again each: the engine's own load (its masks and vocabulary) stays in
    # blocks too, not a float32 copy of the whole model
    dtype = "auto" if set(names) <= QUANT_VARIANTS else args.dtype
    print(f"CPU class {describe()}, {dtype}, {torch.get_num_threads()} threads")
    loaded = load(args.model, device="cpu", dtype=dtype)  # read without transformers where it can be
    engine = RacerEngine(loaded.model, loaded.tokenizer, loaded.name)
    print(f"{loaded.name}; resident memory with the model loaded: {resident_mb():.0f} MB")
    forwards = variants(engine, names, args.model)
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    layers = int(loaded.model.config.num_hidden_layers)
    with torch.inference_mode():
        if args.prefill:
            prefill_costs(engine.runtime, forwards, layers, args.prefill, args.rounds, clock, args.prefill_every_row)
        else:
            step_costs(engine.runtime, forwards, layers, args, clock)
    print(f"resident memory after the runs: {resident_mb():.0f} MB")


def new_cache(variant: str, layers: int) -> Any:
    from racer_core.verify.kv_cache import TreeCache, stock_tree_cache

    return stock_tree_cache(layers) if variant == "stock" else TreeCache(layers)  # transformers takes its Cache kind


def step_costs(rt: Any, forwards: dict[str, Forward], layers: int, args: argparse.Namespace,
               clock: Callable[[], float]) -> None:
    """Each variant's step of T rows after `args.context` cached tokens, for each T in `args.sizes`."""
    import torch

    from racer_core.bench.timing import fastest_and_median, timed_rounds

    sizes = [int(s) for s in args.sizes.split(",")]
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, rt.vocab_size, (args.context,), generator=gen)
    caches = {}
    for v, fwd in forwards.items():
        cache = new_cache(v, layers)
        start = time.perf_counter()
        fwd(prompt, torch.arange(args.context), rt.masks.causal(0, args.context), cache)
        print(f"{v}: prefill {args.context} in {time.perf_counter() - start:.2f}s")
        caches[v] = cache
    inputs = {s: (torch.randint(0, rt.vocab_size, (s,), generator=gen), torch.arange(args.context, args.context + s),
                  rt.masks.causal(args.context, s)) for s in sizes}
    first = next(iter(forwards))
    for s in sizes:  # the untimed first calls, each variant's logits against the first's
        ref = None
        for v, fwd in forwards.items():
            start = clock()
            logits = fwd(*inputs[s], caches[v]).float()
            print(f"{v} T={s}: first call {clock() - start:.2f}s")
            caches[v].truncate(args.context)
            if ref is None:
                ref = logits
            else:
                same = bool((logits.argmax(-1) == ref.argmax(-1)).all())
                print(f"   max |logit diff| vs {first}: {(logits - ref).abs().max().item():.2e}; same argmax: {same}")
    keys = [(s, v) for s in sizes for v in forwards]
    spans = timed_rounds([lambda s=s, v=v: forwards[v](*inputs[s], caches[v]) for s, v in keys], args.rounds,
                         warmup=0, clock=clock, after=lambda i: caches[keys[i][1]].truncate(args.context))
    times = dict(zip(keys, spans, strict=True))
    print(f"\n{args.clock} ms, fastest / median of {args.rounds} interleaved rounds; ratio = {first} fastest / variant fastest")
    print("T     " + "  ".join(f"{v:>22}" for v in forwards))
    for s in sizes:
        cells = []
        for v in forwards:
            fastest, median = fastest_and_median(times[(s, v)])
            cells.append(f"{1000 * fastest:6.1f} /{1000 * median:6.1f} x{min(times[(s, first)]) / fastest:4.2f}")
        print(f"{s:<5} " + "  ".join(f"{c:>22}" for c in cells))


def prefill_costs(rt: Any, forwards: dict[str, Forward], layers: int, tokens: int, rounds: int,
                  clock: Callable[[], float], every_row: bool = False) -> None:
    """Each variant's prefill of a `tokens`-token prompt into a fresh cache, fed as the engine feeds one:
    each chunk's last row through the head (every method but racer under the paper's fixed budget,
    whose table learns every prompt row: `every_row`; a variant that is no lean forward gives every row)."""
    import torch

    from racer_core.bench.timing import fastest_and_median, timed_rounds
    from racer_core.engine.decoder import PREFILL_CHUNK
    from racer_core.models.lean_forward import LeanForward

    prompt = torch.randint(0, rt.vocab_size, (tokens,), generator=torch.Generator().manual_seed(0))
    chunks = [(start, min(start + PREFILL_CHUNK, tokens)) for start in range(0, tokens, PREFILL_CHUNK)]
    masks = [rt.masks.causal(start, end - start) for start, end in chunks]

    def prefill(v: str) -> None:
        cache = new_cache(v, layers)
        last = {"last_only": True} if not every_row and isinstance(forwards[v], LeanForward) else {}
        for (start, end), mask in zip(chunks, masks, strict=True):
            forwards[v](prompt[start:end], torch.arange(start, end), mask, cache, **last)

    # one untimed round first (first-call allocations), then the variants in turn each round
    spans = timed_rounds([lambda v=v: prefill(v) for v in forwards], rounds, clock=clock)
    first = next(iter(forwards))
    rows = "every row's logits" if every_row else "each chunk's last row's logits"
    print(f"\nprefill of {tokens} tokens in chunks of {PREFILL_CHUNK} ({rows}), a fresh cache each "
          f"round; {'wall' if clock is time.perf_counter else 'cpu'} ms, fastest / median of {rounds} interleaved rounds")
    print(f"{'variant':<16} {'fastest ms':>11} {'median ms':>10} {'ms/token':>9}   ratio = {first} fastest / variant's")
    best = {v: fastest_and_median(t) for v, t in zip(forwards, spans, strict=True)}
    for v, (fastest, median) in best.items():
        print(f"{v:<16} {1000 * fastest:11.1f} {1000 * median:10.1f} {1000 * fastest / tokens:9.2f}   "
              f"x{best[first][0] / fastest:4.2f}")


if __name__ == "__main__":
    main()
