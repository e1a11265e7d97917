"""Tiny random-weight vision-language models (Qwen2.5-VL, Qwen3-VL, LLaVA)
with a processor built locally: the tiny tokenizer plus each family's image
tokens, and the family's own image processor class at a few pixels.

Nothing is downloaded; tests run the real multimodal code paths of the stock
transformers classes on a CPU in well under a second per forward pass.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch

from racer_core.models.vl_processor import image_only_processor
from racer_core.testing import TINY_VOCAB, bpe_tokenizer

VL_FAMILIES = ("qwen2_5_vl", "qwen3_vl", "llava")

_QWEN_SPECIALS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
_LLAVA_SPECIALS = ["<image>"]

# Each family's own way of writing an image part into the chat: the processor
# then expands the one placeholder into as many as the image has patches.
_IMAGE_PART = {
    "qwen2_5_vl": "<|vision_start|><|image_pad|><|vision_end|>",
    "qwen3_vl": "<|vision_start|><|image_pad|><|vision_end|>",
    "llava": "<image>\n",
}


def _chat_template(image_part: str) -> str:
    return (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
        "{% if m['content'] is string %}{{ m['content'] }}{% else %}"
        "{% for p in m['content'] %}{% if p['type'] == 'image' %}" + image_part + "{% else %}{{ p['text'] }}{% endif %}"
        "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )


@cache
def _tokenizer(family: str) -> Any:
    image_specials = _LLAVA_SPECIALS if family == "llava" else _QWEN_SPECIALS
    image_token = "<image>" if family == "llava" else "<|image_pad|>"
    tokenizer = bpe_tokenizer(tuple(image_specials), extra_special_tokens={"image_token": image_token})
    tokenizer.chat_template = _chat_template(_IMAGE_PART[family])
    return tokenizer


def tiny_processor(family: str) -> Any:
    """The family's processor class over the tiny tokenizer and a small image processor."""
    template = _chat_template(_IMAGE_PART[family])
    tokenizer = _tokenizer(family)
    if family == "llava":
        from transformers import LlavaProcessor
        from transformers.models.llava.image_processing_pil_llava import LlavaImageProcessorPil

        images = LlavaImageProcessorPil(size={"shortest_edge": 16}, crop_size={"height": 16, "width": 16})
        return LlavaProcessor(images, tokenizer, patch_size=4, vision_feature_select_strategy="default",
                              chat_template=template, num_additional_image_tokens=1)
    # The PIL backends: no torchvision needed.
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    patch = 4
    size = {"shortest_edge": 4 * patch * patch, "longest_edge": 64 * patch * patch}
    images = Qwen2VLImageProcessorPil(size=size, patch_size=patch, merge_size=2, temporal_patch_size=2)
    return image_only_processor(family, images, tokenizer, template)


def tiny_vl_config(family: str, **text_sizes: Any) -> Any:
    """The family's config at tiny sizes; `text_sizes` overrides the text
    tower's (a GPU check uses a realistic one behind the tiny processor)."""
    from transformers import AutoConfig

    tokenizer = _tokenizer(family)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (_LLAVA_SPECIALS if family == "llava" else _QWEN_SPECIALS)}
    text: dict[str, Any] = dict(
        vocab_size=TINY_VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    text.update(text_sizes)
    if family == "llava":
        vision = dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, image_size=16, patch_size=4, projection_dim=32)
        return AutoConfig.for_model(
            "llava", text_config={"model_type": "llama", **text}, vision_config=vision,
            image_token_id=ids["<image>"], vision_feature_layer=-1, vision_feature_select_strategy="default",
            projector_hidden_act="gelu", tie_word_embeddings=False,
        )
    text.setdefault("head_dim", 16)
    # mrope splits head_dim / 2 rotary frequencies over (time, height, width).
    # Qwen2.5-VL's proportions: a quarter for time, three eighths each for height and width.
    half = text["head_dim"] // 2
    section = [half - 2 * (3 * half // 8), 3 * half // 8, 3 * half // 8]
    if family == "qwen2_5_vl":
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section}
        vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=4, patch_size=4, spatial_merge_size=2,
                      temporal_patch_size=2, out_hidden_size=text["hidden_size"], window_size=16, fullatt_block_indexes=[1])
    else:
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section,
                                   "mrope_interleaved": True}
        vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=4, patch_size=4, spatial_merge_size=2,
                      temporal_patch_size=2, out_hidden_size=text["hidden_size"], num_position_embeddings=64,
                      deepstack_visual_indexes=[0])
    return AutoConfig.for_model(
        family, text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=False,
    )


def tiny_vl_model(family: str, seed: int = 0, dtype: torch.dtype = torch.float32) -> Any:
    """A random-weight VL model of the family, weights scaled up like the text ones."""
    from transformers import AutoModelForImageTextToText

    if family not in VL_FAMILIES:
        raise ValueError(f"unknown tiny VL family {family!r}; choose from {VL_FAMILIES}")
    torch.manual_seed(seed)
    config = tiny_vl_config(family)
    config.initializer_range = 0.2
    config.get_text_config().initializer_range = 0.2
    model = AutoModelForImageTextToText.from_config(config, dtype=dtype)
    model.eval()
    return model


def tiny_image(seed: int = 0, size: tuple[int, int] = (24, 16)) -> Any:
    """A small random RGB picture (PIL)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8), "RGB")


def tiny_vl_engine(family: str, seed: int = 0) -> Any:
    """A RacerEngine over a tiny VL model and its locally built processor."""
    from racer_core.engine.engine import RacerEngine

    processor = tiny_processor(family)
    return RacerEngine(tiny_vl_model(family, seed), processor.tokenizer, f"tiny-{family}", processor=processor)
