"""Greedy RACER equals plain greedy token for token on tiny Qwen2.5-VL,
Qwen3-VL and LLaVA models with an image in the first turn and a text-only
second turn; plain decoding equals transformers' own `generate` with the
image (so the multimodal positions are the model's), and the image matters."""

from __future__ import annotations

from functools import cache

import pytest
import torch

from racer_core.common.events import GenerationConfig, Source
from racer_core.engine.engine import RacerEngine
from racer_core.engine.multimodal import ChatImage, image_from_pixels
from racer_core.testing.tiny_vl import VL_FAMILIES, tiny_image, tiny_processor, tiny_vl_model

NEW_TOKENS = 48
TURNS = ("The quick brown fox jumps over the lazy dog.", "Once upon a time there was a small robot.")


@cache
def vl_engine(family: str) -> RacerEngine:
    """A tiny VL engine whose text attention is shrunk (as in engine_helpers'
    markov models) so replies fall into cycles the drafts can predict; the
    image still reaches every token through attention."""
    model = tiny_vl_model(family)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "language_model" in name and name.endswith("o_proj.weight"):
                param.mul_(0.05)
    processor = tiny_processor(family)
    return RacerEngine(model, processor.tokenizer, f"tiny-{family}", eos_ids=frozenset(), processor=processor)


@cache
def picture() -> ChatImage:
    return image_from_pixels(tiny_image(seed=3))


def chat(engine: RacerEngine, image: ChatImage | None, **config) -> tuple[list[list[int]], dict[Source, int], int]:
    """Two turns in one conversation: (tokens per turn, accepted drafts, steps)."""
    conversation = engine.new_conversation()
    replies, accepted, steps = [], dict.fromkeys(Source, 0), 0
    for turn, text in enumerate(TURNS):
        images = [image] if image is not None and turn == 0 else []
        events = list(conversation.send(text, GenerationConfig(max_new_tokens=NEW_TOKENS, **config), images=images))
        replies.append([p.token_id for e in events for p in e.pieces])
        for event in events[1:]:
            for piece in event.pieces:
                accepted[piece.source] += 1
        steps += len(events)
    placeholders = engine.vision.placeholder_ids if engine.vision else frozenset()
    assert not placeholders & set(_seen(conversation)), "the automaton learned image placeholders"
    return replies, accepted, steps


@pytest.mark.parametrize("family", VL_FAMILIES)
def test_plain_decoding_with_an_image_matches_transformers_generate(family: str) -> None:
    engine = vl_engine(family)
    plain, _, _ = chat(engine, picture(), method="ar")
    anchor, _, _ = chat(engine, picture(), method="hf")
    assert plain == anchor
    without_image, _, _ = chat(engine, None, method="ar")
    assert without_image[0] != plain[0]  # the image really reaches the reply


@pytest.mark.parametrize("family", VL_FAMILIES)
def test_greedy_drafting_with_an_image_matches_plain(family: str) -> None:
    engine = vl_engine(family)
    plain, _, plain_steps = chat(engine, picture(), method="ar")
    assert plain_steps == 2 * NEW_TOKENS
    for method in ("racer", "retrieval", "logits"):
        for budget in (4, 16, 64, "auto"):
            replies, accepted, steps = chat(engine, picture(), method=method, max_num_draft=budget)
            assert replies == plain, (method, budget)
            if method == "racer":
                assert accepted[Source.RETRIEVAL] + accepted[Source.LOGITS] > 0, budget
                assert steps < 2 * NEW_TOKENS


def _seen(conversation) -> list[int]:  # noqa: ANN001
    """The text racer's automaton was fed (nothing where racer never ran)."""
    racer = conversation.decoder.drafters.get("racer")
    return racer.seen if racer is not None else []
