"""Every linear of one step (30 decoder layers + lm_head, SmolLM2-135M
shapes, random weights) for T rows, each way of multiplying side by side,
interleaved in one process (round r: every path, every size):

- flinear: F.linear on the plain weights (the matrix library repacks them per call)
- onednn: weights packed once by oneDNN (torch.ops.mkldnn._reorder_linear_weight,
  then torch.ops.mkldnn._linear_pointwise, what torch's compiler uses when it freezes weights)
- mkl: MKL's packed GEMM (torch.ops.mkl._mkl_linear; fp32 only, packed for one batch size,
  so packed here per T - it falls back to the plain weights for any other T)
- compiled: torch.compile with weight freezing (inductor), dynamic shapes
- int8: torch's dynamic-quantized linears (x86 engine, weights packed once; activations fp32)

    python scripts/packed_linear_cost.py --dtype float32 [--isa avx2] [--paths flinear,onednn,mkl]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from racer_core.budget.cpu_class import ISA_CHOICES, reexec_with_isa  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float32", choices=("bfloat16", "float32"))
    parser.add_argument("--sizes", default="1,2,4,8,16,32")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--paths", default="flinear,onednn,mkl,int8")
    parser.add_argument("--isa", choices=ISA_CHOICES, default="native")
    args = parser.parse_args()
    reexec_with_isa(args.isa)

    import torch
    import torch.nn.functional as F

    from racer_core.budget.cpu_class import describe

    dtype = getattr(torch, args.dtype)
    hidden, inner, kv, layers, vocab = 576, 1536, 192, 30, 49152
    gen = torch.Generator().manual_seed(0)
    shapes = [(hidden + 2 * kv, hidden), (hidden, hidden), (2 * inner, hidden), (hidden, inner)] * layers
    shapes.append((vocab, hidden))
    plain = [(torch.randn(*s, generator=gen) * s[1] ** -0.5).to(dtype) for s in shapes]
    sizes = [int(s) for s in args.sizes.split(",")]
    paths = args.paths.split(",")
    calls: dict[str, object] = {}
    if "flinear" in paths:
        calls["flinear"] = lambda xs, t: [F.linear(xs[w.shape[1]], w) for w in plain]
    if "onednn" in paths:
        packed = [torch.ops.mkldnn._reorder_linear_weight(w, 16) for w in plain]
        calls["onednn"] = lambda xs, t: [torch.ops.mkldnn._linear_pointwise(xs[w.shape[1]], p, None, "none", [], "")
                                         for w, p in zip(plain, packed, strict=True)]
    if "mkl" in paths and dtype == torch.float32 and hasattr(torch.ops.mkl, "_mkl_linear"):
        mkl = {t: [torch.ops.mkl._mkl_reorder_linear_weight(w, t) for w in plain] for t in sizes}
        calls["mkl"] = lambda xs, t: [torch.ops.mkl._mkl_linear(xs[w.shape[1]], p, w, None, t)
                                      for w, p in zip(plain, mkl[t], strict=True)]
    if "compiled" in paths:
        import torch._inductor.config as inductor

        inductor.freezing = True

        class Step(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.linears = torch.nn.ModuleList(torch.nn.Linear(s[1], s[0], bias=False, dtype=dtype) for s in shapes)
                for lin, w in zip(self.linears, plain, strict=True):
                    lin.weight.data = w

            def forward(self, a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
                return [lin(a if lin.in_features == hidden else b) for lin in self.linears]

        step = Step().eval()
        compiled = torch.compile(step, dynamic=True)
        start = time.perf_counter()
        with torch.no_grad():
            compiled(torch.randn(3, hidden, dtype=dtype), torch.randn(3, inner, dtype=dtype))
        print(f"compiled: first call {time.perf_counter() - start:.1f}s")
        calls["compiled"] = lambda xs, t: compiled(xs[hidden], xs[inner])
    if "int8" in paths:
        from torch.ao.nn.quantized.dynamic import Linear as QLinear

        torch.backends.quantized.engine = "x86" if "x86" in torch.backends.quantized.supported_engines else "fbgemm"
        qlin = []
        for w in plain:
            q = QLinear(w.shape[1], w.shape[0], bias_=False, dtype=torch.qint8)
            scale = w.float().abs().amax(1).clamp(min=1e-8) / 127
            qw = torch.quantize_per_channel(w.float(), scale, torch.zeros_like(scale, dtype=torch.long), 0, torch.qint8)
            q.set_weight_bias(qw, None)
            qlin.append(q)
        calls["int8"] = lambda xs, t: [q(xs[q.in_features].float()) for q in qlin]

    print(f"{describe()}, {args.dtype}, torch threads {torch.get_num_threads()}; ms for all {len(shapes)} linears")
    times: dict[tuple[str, int], list[float]] = {(p, t): [] for p in calls for t in sizes}
    with torch.inference_mode():
        for r in range(args.rounds + 1):
            for t in sizes:
                xs = {w: torch.randn(t, w, generator=gen).to(dtype) for w in (hidden, inner)}
                for name, call in calls.items():
                    start = time.perf_counter()
                    call(xs, t)
                    if r:
                        times[(name, t)].append(time.perf_counter() - start)
    print("fastest / median of", args.rounds, "interleaved rounds; x = flinear fastest / path fastest")
    print("T   " + "".join(f"{p:>22}" for p in calls))
    for t in sizes:
        cells = []
        for p in calls:
            ts = times[(p, t)]
            ratio = f" x{min(times[('flinear', t)]) / min(ts):4.2f}" if "flinear" in calls else ""
            cells.append(f"{1000 * min(ts):6.1f} /{1000 * statistics.median(ts):6.1f}{ratio}")
        print(f"{t:<3} " + "".join(f"{c:>22}" for c in cells))


if __name__ == "__main__":
    main()
