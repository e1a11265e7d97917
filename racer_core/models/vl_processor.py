"""A vision-language model's processor: the checkpoint's own, or for Qwen-VL
the processor class without its video half where torchvision is missing (the
video processor imports it; images alone do not need it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from racer_core.common.errors import ModelLoadError, first_line


def load_processor(folder: Path, config: Any, name: str, trust_remote_code: bool) -> Any:
    """A VL model's processor; Qwen-VL's without its video half where torchvision is missing."""
    from transformers import AutoProcessor

    try:
        processor = AutoProcessor.from_pretrained(folder, local_files_only=True, trust_remote_code=trust_remote_code)
        if not hasattr(processor, "image_processor"):  # AutoProcessor falls back to the bare tokenizer
            raise ValueError("the checkpoint has no image processor")
        return processor
    except Exception as error:
        if config.model_type not in ("qwen2_5_vl", "qwen3_vl", "qwen2_vl"):
            raise ModelLoadError(f"cannot load the processor of {name}: {first_line(error)}") from error
        fallback_error = error
    # The video processor imports torchvision; images alone do not need it.
    from transformers import AutoImageProcessor, AutoTokenizer

    try:
        images = AutoImageProcessor.from_pretrained(folder, local_files_only=True, backend="pil")
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except Exception as error:
        raise ModelLoadError(f"cannot load the processor of {name}: {first_line(fallback_error)}") from error
    family = "qwen2_5_vl" if config.model_type != "qwen3_vl" else "qwen3_vl"
    template = getattr(tokenizer, "chat_template", None)
    return image_only_processor(family, images, tokenizer, template)


def image_only_processor(family: str, image_processor: Any, tokenizer: Any, chat_template: str | None) -> Any:
    """The Qwen-VL processor class without its video half: the video
    processor needs torchvision, images do not."""
    from transformers import Qwen2_5_VLProcessor, Qwen3VLProcessor
    from transformers.processing_utils import ProcessorMixin

    base = Qwen2_5_VLProcessor if family == "qwen2_5_vl" else Qwen3VLProcessor

    class ImageOnlyProcessor(base):  # type: ignore[misc, valid-type]
        def __init__(self, image_processor: Any = None, tokenizer: Any = None, chat_template: str | None = None) -> None:
            self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
            self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
            self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
            self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
            # Qwen3-VL's processor also names the tokens around an image.
            self.vision_start_token, self.vision_end_token = "<|vision_start|>", "<|vision_end|>"
            self.vision_start_token_id = tokenizer.convert_tokens_to_ids(self.vision_start_token)
            self.vision_end_token_id = tokenizer.convert_tokens_to_ids(self.vision_end_token)
            ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    return ImageOnlyProcessor(image_processor, tokenizer, chat_template=chat_template)
