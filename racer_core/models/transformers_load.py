"""Loading a checkpoint folder through transformers for tree verification:
its config and Auto class (a text causal LM, a vision-language model,
OpenPangu registered here with no remote code, or a model whose own remote
code is trusted on request), and the probe that remote code works with the
engine's cache and mask.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from racer_core.common.errors import ModelLoadError, first_line
from racer_core.models.checkpoint.files import is_vision_config
from racer_core.models.load_options import LoadOptions
from racer_core.models.vl_processor import load_processor


def read_config(folder: Path, name: str, trust_remote_code: bool) -> Any:
    from transformers import AutoConfig

    import racer_core.models.openpangu  # noqa: F401  (registers PanguEmbedded before any config is read)

    try:
        return AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=trust_remote_code)
    except ValueError as error:
        if "trust_remote_code" in str(error):
            raise ModelLoadError(
                f"{name} needs its own code to load; rerun with --trust-remote-code if you trust its authors"
            ) from error
        raise ModelLoadError(f"cannot read the model config in {folder}: {first_line(error)}") from error
    except Exception as error:
        raise ModelLoadError(f"cannot read the model config in {folder}: {first_line(error)}") from error


def model_class(config: Any, name: str, trust_remote_code: bool) -> Any:
    """The Auto class that builds this checkpoint, or a clear refusal."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    )

    from racer_core.models.openpangu import MODEL_TYPE as PANGU

    model_type = config.model_type
    if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or model_type == PANGU:
        return AutoModelForCausalLM
    if model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES and is_vision_config(config):
        return AutoModelForImageTextToText
    if trust_remote_code and "AutoModelForCausalLM" in (getattr(config, "auto_map", None) or {}):
        return AutoModelForCausalLM
    raise ModelLoadError(f"{name} is a {model_type!r} model, not a causal language model")


def is_remote_code(model: Any) -> bool:
    return type(model).__module__.startswith("transformers_modules")


def check_tree_support(model: Any, name: str) -> None:
    """Remote code must accept the engine's cache and a 4D float mask and give
    the logits a plain forward gives: one probe, three tokens."""
    import torch

    from racer_core.verify.kv_cache import stock_tree_cache
    from racer_core.verify.tree_attention import TreeMaskBuilder, cache_argument_name

    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    masks = TreeMaskBuilder(dtype, device, None)
    ids = torch.tensor([[1, 2, 3]], device=device) % int(config.vocab_size)
    refusal = (f"{name}'s own code does not work with tree verification "
               "(it must accept a transformers Cache and a 4D attention mask)")
    try:
        with torch.inference_mode():
            full = model(input_ids=ids, attention_mask=masks.causal(0, 3), use_cache=False).logits[0, -1]
            cache = stock_tree_cache(int(config.num_hidden_layers))
            arg = {cache_argument_name(model): cache}
            model(input_ids=ids[:, :2], position_ids=torch.arange(2, device=device)[None],
                  attention_mask=masks.causal(0, 2), use_cache=True, **arg)
            step = model(input_ids=ids[:, 2:], position_ids=torch.tensor([[2]], device=device),
                         attention_mask=masks.causal(2, 1), use_cache=True, **arg).logits[0, -1]
    except Exception as error:
        raise ModelLoadError(f"{refusal}: {first_line(error)}") from error
    if cache.length != 3 or not torch.allclose(full.float(), step.float(), atol=1e-3, rtol=1e-3):
        raise ModelLoadError(refusal)


def load_transformers(folder: Path, name: str, options: LoadOptions, dev: str,
                       place: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(model, tokenizer, processor) through transformers' Auto classes."""
    from transformers import AutoTokenizer

    trust_remote_code = options.trust_remote_code
    config = read_config(folder, name, trust_remote_code)
    auto_class = model_class(config, name, trust_remote_code)
    processor = None
    try:
        if is_vision_config(config):
            processor = load_processor(folder, config, name, trust_remote_code)
            tokenizer = processor.tokenizer
        else:
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=trust_remote_code)
        model = auto_class.from_pretrained(folder, local_files_only=True, trust_remote_code=trust_remote_code, **place)
    except ModelLoadError:
        raise
    except Exception as error:
        raise ModelLoadError(f"cannot load {name}: {first_line(error)}") from error
    if "device_map" not in place:
        model.to(dev)
    model.eval()
    if is_remote_code(model):
        check_tree_support(model, name)
    return model, tokenizer, processor
