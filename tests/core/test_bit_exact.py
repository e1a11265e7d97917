"""The lean forward is batch-invariant: every row of a verified tree gets the
logits, bit for bit, that plain one-token decoding computes for its token
after the same prefix, and the cache after committing the accepted path is
plain decoding's cache, bit for bit. For every lean family, in float32,
bfloat16, with fp16 weights and on a GGUF's 4-bit blocks with 8-bit or float
activations (racer_core/verify/attention.py, docs/design.md "Bit-exact
verification")."""

from __future__ import annotations

import itertools

import pytest
import torch
from engine_helpers import PROMPT, make_markov

from racer_core.common.events import GenerationConfig, Source
from racer_core.engine.engine import RacerEngine
from racer_core.models import lean_forward as lean_module
from racer_core.models.families import FAMILIES
from racer_core.models.formats import packed_linear
from racer_core.models.formats.half_weights import half_works
from racer_core.models.lean_forward import LeanForward, lean_forward_for
from racer_core.models.load_options import HALF
from racer_core.models.loader import LoadedModel, choose_forward
from racer_core.testing import tiny_model
from racer_core.testing.bit_exact import mismatches
from racer_core.verify import attention

pytestmark = pytest.mark.skipif(attention._attention is None, reason="the attention extension is not built")

DENSE = tuple(sorted(FAMILIES))
PRECISIONS = ("float32", "bfloat16", "fp16-weights", "q4_1-q8", "q4_1-q8-file", "q4_1-float", "q4_1-q8-torch")
"""q4_1-*: a GGUF's blocks through the fused C++ layers (formats/quant_layer.py); -torch: through torch ops;
q8 repacked (quant/repack.py) but for -file, the file's layout and its kernel."""


def lean_for(family: str, precision: str) -> LeanForward:
    if precision == "fp16-weights" and not half_works():
        pytest.skip("no fbgemm fp16-weight linear here")
    if precision.startswith("q4_1"):
        from racer_core.models.formats.quant_weights import kernel_isa, repacking_as

        gguf = pytest.importorskip("gguf")
        if kernel_isa() is None:
            pytest.skip("the 4-bit kernel does not run on this CPU")
        from quant_helpers import quantized_lean

        acts = precision.split("-")[1]
        with repacking_as(not precision.endswith("-file")):
            lean = quantized_lean(tiny_model(family, seed=4), gguf.GGMLQuantizationType.Q4_1, acts)[0]
        assert lean.fused is not None
        linears = [w for layer in lean.weights.layers for w in (layer.qkv, layer.o, layer.gate_up, layer.down)]
        assert all(w.repacked == (acts == "q8" and not precision.endswith("-file")) for w in linears)
        if precision.endswith("-torch"):
            lean.fused = None
        return lean
    dtype = torch.bfloat16 if precision == "bfloat16" else torch.float32
    lean = lean_forward_for(tiny_model(family, seed=4, dtype=dtype), half=precision == "fp16-weights")
    assert lean is not None
    return lean


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("family", DENSE)
def test_tree_rows_and_cache_equal_plain_decoding_bit_for_bit(family: str, precision: str) -> None:
    lean = lean_for(family, precision)
    assert mismatches(lean, PROMPT) == []


def layout_ordered(q, keys, values, mask, scale):
    """The kernel with one reduction order changed: keys a row may not see
    take part with a weight that underflows, so each row's softmax sum is laid
    out by the tree's indices instead of by the row's own keys in order."""
    return attention.attend(q, keys, values, mask.clamp(min=-1e4), scale)


def sdpa(q, keys, values, mask, scale):
    gqa = q.shape[1] != keys.shape[1]
    return torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=scale,
                                                            enable_gqa=gqa)


@pytest.mark.parametrize("changed", (layout_ordered, sdpa), ids=("softmax-sum-by-layout", "sdpa"))
def test_one_changed_reduction_order_is_caught(monkeypatch, changed) -> None:
    lean = lean_for("llama", "float32")
    assert mismatches(lean, PROMPT) == []
    monkeypatch.setattr(lean_module, "attend", changed)
    assert mismatches(lean, PROMPT) != []


def generate(engine: RacerEngine, **config) -> tuple[list[int], list[float], int]:
    """Tokens, their tie margins (from the logits that chose them) and the drafts accepted."""
    steps = list(engine.decoder().generate(PROMPT, GenerationConfig(max_new_tokens=64, tie_margins=True, **config)))
    tokens = [t for s in steps for t in s.tokens]
    margins = [m for s in steps for m in s.margins]
    assert len(margins) == len(tokens)  # compared below: they must be there
    accepted = sum(s.sources.count(src) for s in steps[1:] for src in Source if src != Source.MODEL)
    return tokens, margins, accepted


def greedy_engine(family: str, precision: str) -> RacerEngine:
    """A lean engine on a tiny model whose greedy replies cycle, so drafts land."""
    if precision == "fp16-weights":
        if not half_works():
            pytest.skip("no fbgemm fp16-weight linear here")
        model = make_markov(tiny_model(family))
        loaded = LoadedModel(model, None, None, f"tiny-{family}-fp16w", choose_forward(model, "auto", half=True))
        engine = RacerEngine.from_loaded(loaded, eos_ids=frozenset())
        assert engine.info.dtype == HALF
    else:
        model = make_markov(tiny_model(family, dtype=torch.bfloat16))
        engine = RacerEngine(model, None, f"tiny-{family}-bf16", eos_ids=frozenset(), forward="lean")
        assert engine.info.dtype == "bfloat16"
    assert engine.info.forward == "lean"
    return engine


@pytest.mark.parametrize("precision", ("bfloat16", "fp16-weights"))
@pytest.mark.parametrize("family", DENSE)
def test_greedy_racer_equals_ar_bit_for_bit(family: str, precision: str) -> None:
    # fp16 weights on AVX2 too: their rows are padded to fbgemm's row-invariant kernels (half_rows.py)
    engine = greedy_engine(family, precision)
    plain, plain_margins, _ = generate(engine, method="ar")
    for budget in (4, 16):
        tokens, margins, accepted = generate(engine, method="racer", max_num_draft=budget)
        assert tokens == plain, budget
        assert margins == plain_margins, budget  # the choosing logits' top-2 gaps: the same bits
        assert accepted > 0, budget  # drafts were verified in trees and accepted


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
@pytest.mark.parametrize("inputs", (576, 1536, 2048))
def test_a_packed_linear_gives_a_row_the_same_bits_alone_and_beside_others(dtype: torch.dtype, inputs: int) -> None:
    # oneDNN multiplies a lone row on another path (over 1024 inputs it sums in another order):
    # PackedWeight sends it as two rows (real models' down projections are that wide)
    if not packed_linear.packing_works(dtype):
        pytest.skip(f"no packed {dtype} linear here")
    gen = torch.Generator().manual_seed(5)
    weight = packed_linear.PackedWeight(torch.randn(576, inputs, generator=gen).to(dtype))
    x = torch.randn(1, 40, inputs, generator=gen).to(dtype)
    alone = torch.cat([weight(x[:, i : i + 1]) for i in range(40)], dim=1)
    for rows in (2, 3, 8, 17, 40):
        assert torch.equal(weight(x[:, :rows]), alone[:, :rows]), rows


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
@pytest.mark.parametrize("hidden", (64, 576, 2048, 4096))
def test_rms_norm_gives_a_row_the_same_bits_alone_and_beside_others(dtype: torch.dtype, hidden: int) -> None:
    # torch reduces each row of the last dimension in one order here, whatever the rows or threads
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(1, 33, hidden, generator=gen).to(dtype)
    weight = torch.randn(hidden, generator=gen).to(dtype)
    threads = torch.get_num_threads()
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            alone = torch.cat([lean_module._rms(x[:, i : i + 1], weight, 1e-6) for i in range(33)], dim=1)
            for rows in (2, 7, 33):
                assert torch.equal(lean_module._rms(x[:, :rows], weight, 1e-6), alone[:, :rows]), (count, rows)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="2 threads or more")
@pytest.mark.parametrize("precision", PRECISIONS)
def test_rows_keep_their_bits_when_the_thread_count_changes_between_forwards(monkeypatch, precision: str) -> None:
    # On a busy machine the thread count follows the free cores between steps
    # (racer_core/budget/free_cores.py): a row must not notice. fbgemm's fp16
    # linear does notice (its sums split by thread): such a forward keeps its count.
    from racer_core.engine.openmp_threads import thread_invariant

    lean = lean_for("llama", precision)
    if not thread_invariant(lean):
        assert precision == "fp16-weights"
        pytest.skip("fp16 weights keep their thread count")
    threads = torch.get_num_threads()
    counts = itertools.cycle((1, threads))
    plain_call = LeanForward.__call__

    def alternating(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        torch.set_num_threads(next(counts))
        return plain_call(self, *args, **kwargs)

    monkeypatch.setattr(LeanForward, "__call__", alternating)
    try:
        assert mismatches(lean, PROMPT) == []
    finally:
        torch.set_num_threads(threads)


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="2 threads or more")
def test_a_reply_is_the_same_when_the_free_cores_change_between_steps(monkeypatch) -> None:
    from racer_core.engine import openmp_threads

    engine = RacerEngine(make_markov(tiny_model("llama")), None, "tiny-llama", eos_ids=frozenset(), forward="lean")
    threads = torch.get_num_threads()
    plain = generate(engine, method="racer", max_num_draft=8)

    class Alternating:  # a machine whose free cores change at every step
        most = threads
        counts = itertools.cycle((1, threads))

        def choose(self) -> int:
            return next(self.counts)

    monkeypatch.setattr(openmp_threads, "_choice", Alternating())
    try:
        assert generate(engine, method="racer", max_num_draft=8) == plain
        assert generate(engine, method="ar")[0] == plain[0]
    finally:
        torch.set_num_threads(threads)
