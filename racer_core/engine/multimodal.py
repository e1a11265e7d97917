"""Images in the prompt of a vision-language model (Qwen2.5-VL, Qwen3-VL, LLaVA).

The model's own processor renders the chat (image parts included) and turns
each image into pixels and a run of placeholder tokens. The decoder then sees
an ordinary token list plus, for each image, the pixel inputs to hand the
model once, in the prefill that first covers the image's placeholders.

Qwen-VL models place tokens with 3-part rotary positions (time, height,
width): inside an image they follow the patch grid, and every text token
after it sits at its index plus a fixed offset (the rope delta). Decoding
only ever appends text, so a tree node at depth d after `base` cached tokens
sits at base + d + offset, on all three parts alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from racer_core.common.errors import InputError

# The attached image itself needs no torch: the chat UI reads it too.
from racer_core.engine.chat_image import (  # noqa: F401  (re-exported)
    IMAGE_SUFFIXES,
    ChatImage,
    image_from_pixels,
    load_image,
    split_inline_images,
)


@dataclass(frozen=True)
class ImageSpan:
    """The placeholder tokens [start, end) of one image and its content hash."""

    start: int
    end: int
    key: str


@dataclass
class VisionPrompt:
    """A rendered multimodal prompt: token ids, where each image sits, the
    pixel inputs of each image, and the rotary positions where they are 3-part."""

    ids: list[int]
    spans: list[ImageSpan]
    pixels: list[dict[str, torch.Tensor]]  # per image, what the model's forward takes
    positions: torch.Tensor | None  # (3, len(ids)) for multimodal rotary models
    offset: int  # text positions after the last image: index + offset
    token_types: torch.Tensor | None = None  # the processor's mm_token_type_ids (1, len(ids))

    def pixel_inputs(self, start: int, end: int) -> dict[str, torch.Tensor]:
        """The model inputs for the images whose placeholders lie in [start, end)."""
        chosen = [p for span, p in zip(self.spans, self.pixels, strict=True) if start <= span.start < end]
        if not chosen:
            return {}
        return {name: torch.cat([p[name] for p in chosen]) for name in chosen[0]}

    def generate_inputs(self) -> dict[str, torch.Tensor]:
        """Everything transformers' own `generate` needs besides the ids."""
        inputs = self.pixel_inputs(0, len(self.ids))
        if self.token_types is not None and inputs:
            inputs["mm_token_type_ids"] = self.token_types
        return inputs


class VisionAdapter:
    """What the engine needs to put images into one model's prompts."""

    def __init__(self, model: Any, processor: Any) -> None:
        self.model = model
        self.processor = processor
        config = model.config
        self.image_token_id = int(config.image_token_id)
        video = getattr(config, "video_token_id", None)
        # Placeholders stand for pixels: the automaton must never learn them.
        self.placeholder_ids = frozenset(i for i in (self.image_token_id, video) if i is not None)
        inner = getattr(model, "model", None)
        self._rope_index = getattr(inner, "get_rope_index", None)

    def render(self, messages: list[dict[str, Any]], images: list[ChatImage], enable_thinking: bool | None = False) -> VisionPrompt:
        """Render the chat (messages in the processor's part format) with its images."""
        # Only a template that reads the thinking switch is handed it (the processor warns otherwise).
        wanted = enable_thinking is not None and "enable_thinking" in str(self.processor.chat_template)
        switch = {"enable_thinking": enable_thinking} if wanted else {}
        text = self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **switch)
        if not images:
            ids = list(self.processor.tokenizer(text, add_special_tokens=False)["input_ids"])
            return VisionPrompt(ids, [], [], None, 0)
        inputs = self.processor(text=[text], images=[i.pixels for i in images], return_tensors="pt",
                                add_special_tokens=False)
        ids_tensor = inputs["input_ids"]
        ids = ids_tensor[0].tolist()
        runs = _placeholder_runs(ids, self.image_token_id)
        if len(runs) != len(images):
            raise InputError(f"the chat template placed {len(runs)} images, but {len(images)} were attached")
        spans = [ImageSpan(start, end, image.sha256) for (start, end), image in zip(runs, images, strict=True)]
        pixels = _split_pixels(inputs, len(images))
        positions, offset = None, 0
        if self._rope_index is not None:
            kwargs = {k: inputs[k] for k in ("mm_token_type_ids", "image_grid_thw") if k in inputs}
            pos, delta = self._rope_index(ids_tensor, attention_mask=inputs.get("attention_mask"), **kwargs)
            positions, offset = pos[:, 0, :].long(), int(delta.reshape(-1)[0])
        return VisionPrompt(ids, spans, pixels, positions, offset, inputs.get("mm_token_type_ids"))


def _placeholder_runs(ids: list[int], token: int) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    i = 0
    while i < len(ids):
        if ids[i] == token:
            j = i
            while j < len(ids) and ids[j] == token:
                j += 1
            runs.append((i, j))
            i = j
        else:
            i += 1
    return runs


def _split_pixels(inputs: Any, count: int) -> list[dict[str, torch.Tensor]]:
    """One dict of model inputs per image.

    Qwen-VL flattens every image's patches into one tensor, sized by its
    (t, h, w) grid; LLaVA stacks one tensor per image."""
    if "image_grid_thw" in inputs:
        grid = inputs["image_grid_thw"]
        sizes = [int(g.prod()) for g in grid]
        chunks = torch.split(inputs["pixel_values"], sizes)
        return [{"pixel_values": c, "image_grid_thw": grid[i : i + 1]} for i, c in enumerate(chunks)]
    values = inputs["pixel_values"]
    out = []
    for i in range(count):
        one = {"pixel_values": values[i : i + 1]}
        if "image_sizes" in inputs:
            one["image_sizes"] = inputs["image_sizes"][i : i + 1]
        out.append(one)
    return out
