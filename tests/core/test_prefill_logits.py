"""A prompt's logits are computed only where they are read: every row for
racer under the paper's fixed budget (its logits table learns each prompt
position's top-k), only each chunk's last row otherwise (ar, suffix, racer
under its cost policy, whose table learns from the steps). The last row is
the same bits either way, so the first token cannot move."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from racer_core.common.events import GenerationConfig
from racer_core.models.formats.quant_weights import kernel_isa
from racer_core.models.lean_forward import LeanForward, Part
from racer_core.testing import tiny_engine, tiny_model
from racer_core.verify.kv_cache import TreeCache
from racer_core.verify.tree_attention import TreeMaskBuilder

MASKS = TreeMaskBuilder(torch.float32, "cpu", None)


def _prompt_last_row(lean: LeanForward, rows: int, last_only: bool, batched: bool) -> torch.Tensor:
    ids = torch.randint(0, 100, (rows,), generator=torch.Generator().manual_seed(3))
    cache = TreeCache(len(lean.weights.layers))
    if batched:  # as the engine loop runs it, beside another sequence's row
        other = TreeCache(len(lean.weights.layers))
        parts = [Part(ids, torch.arange(rows), MASKS.causal(0, rows), cache, last_only=last_only),
                 Part(ids[:1], torch.arange(1), MASKS.causal(0, 1), other)]
        return lean.batch(parts)[0]
    return lean(ids, torch.arange(rows), MASKS.causal(0, rows), cache, last_only=last_only)


def _forwards() -> list[tuple[str, LeanForward]]:
    """The engine's own float32 forward (packed weights, row-invariant), and one on Q4_1 blocks."""
    found = [("float32", tiny_engine("qwen3", seed=2).runtime.lean)]
    if kernel_isa() is not None:
        gguf = pytest.importorskip("gguf")
        from quant_helpers import quantized_lean

        found.append(("q4_1", quantized_lean(tiny_model("qwen3", seed=2), gguf.GGMLQuantizationType.Q4_1)[0]))
    return [(name, lean) for name, lean in found if lean is not None]


@pytest.mark.parametrize("batched", [False, True])
@torch.inference_mode()
def test_the_last_row_alone_is_the_same_bits_as_among_all(batched: bool) -> None:
    forwards = _forwards()
    assert forwards, "no lean forward to test"
    for name, lean in forwards:
        every = _prompt_last_row(lean, 17, last_only=False, batched=batched)
        last = _prompt_last_row(lean, 17, last_only=True, batched=batched)
        assert every.shape[0] == 17 and last.shape[0] == 1, name
        assert torch.equal(last[0], every[-1]), name


def _head_rows(engine: Any, config: GenerationConfig, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows each pass of a reply sent through the head."""
    seen: list[int] = []
    head = LeanForward._head

    def counting(self: LeanForward, h: torch.Tensor, parts: list[Part], *rest: Any) -> Any:
        out = head(self, h, parts, *rest)
        seen.append(sum(int(logits.shape[0]) for logits, _ in out))
        return out

    monkeypatch.setattr(LeanForward, "_head", counting)
    chat = engine.new_conversation()
    list(chat.send("the cat sat on the mat and the cat sat on the mat", config))
    monkeypatch.setattr(LeanForward, "_head", head)
    return seen


def test_only_the_papers_racer_pays_for_every_prompt_row(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = tiny_engine("llama", seed=0)
    assert engine.runtime.lean is not None
    for method, budget in (("ar", "auto"), ("suffix", "auto"), ("racer", "auto")):
        rows = _head_rows(engine, GenerationConfig(method=method, max_new_tokens=3, max_num_draft=budget),
                          monkeypatch)
        assert rows[0] == 1, f"{method}'s prefill sent {rows[0]} rows through the head"
    paper = _head_rows(engine, GenerationConfig(method="racer", max_new_tokens=3, max_num_draft=8), monkeypatch)
    assert paper[0] > 10, f"the paper's table learns every prompt row, got {paper[0]}"
