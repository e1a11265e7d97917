"""Which kind of checkpoint a folder holds and how to load it for tree
verification: a text causal LM, a vision-language model with its processor,
OpenPangu (registered here, no remote code), or a model whose own remote code
is trusted on request; spread over GPUs or quantized on request.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from racer_core.common.errors import ModelLoadError

QUANTIZE_CHOICES = ("8bit", "4bit")
"""bitsandbytes' weights (CUDA)."""
HALF = "fp16-weights"
"""float16 weights, float32 arithmetic, on a CPU (half_weights.py, through the lean forward)."""


@dataclass(frozen=True)
class LoadOptions:
    """How to load a model: `device` "auto" spreads a model over every visible
    GPU when CUDA is present; `quantize` is "8bit" or "4bit" (bitsandbytes, CUDA)
    or "fp16-weights" (half_weights.py, a CPU and the lean forward);
    remote code runs only with `trust_remote_code`; `forward` is the
    verification forward, one of FORWARDS; `draft_model` an EAGLE-3 draft
    head (a folder or hub id) for method eagle3."""

    device: str = "auto"
    dtype: str = "auto"
    quantize: str | None = None
    trust_remote_code: bool = False
    forward: str = "auto"
    draft_model: str | None = None


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


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

    from racer_core.models.checkpoint_files import is_vision_config
    from racer_core.models.openpangu import MODEL_TYPE as PANGU

    model_type = config.model_type
    if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or model_type == PANGU:
        return AutoModelForCausalLM
    if model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES and is_vision_config(config):
        return AutoModelForImageTextToText
    if trust_remote_code and "AutoModelForCausalLM" in (getattr(config, "auto_map", None) or {}):
        return AutoModelForCausalLM
    raise ModelLoadError(f"{name} is a {model_type!r} model, not a causal language model")


def placement(options: LoadOptions, device: str, torch_dtype: Any) -> dict[str, Any]:
    """from_pretrained arguments for the device map and quantization."""
    import torch

    kwargs: dict[str, Any] = {"dtype": torch_dtype}
    if options.quantize == HALF:
        check_half(options, device)
    elif options.quantize is not None:
        if options.quantize not in QUANTIZE_CHOICES:
            raise ModelLoadError(f"unknown quantization {options.quantize!r}: use 8bit or 4bit (CUDA), or fp16-weights (CPU)")
        if not torch.cuda.is_available():
            raise ModelLoadError(f"--load-in-{options.quantize} needs a CUDA GPU (bitsandbytes); this machine has none")
        try:
            import bitsandbytes  # noqa: F401
        except ImportError as error:
            raise ModelLoadError(f"--load-in-{options.quantize} needs bitsandbytes: pip install bitsandbytes") from error
        from transformers import BitsAndBytesConfig

        if options.quantize == "8bit":
            kwargs["quantization_config"] = BitsAndBytesConfig(load_in_8bit=True)
        else:
            kwargs["quantization_config"] = BitsAndBytesConfig(
                load_in_4bit=True, bnb_4bit_compute_dtype=torch_dtype, bnb_4bit_quant_type="nf4"
            )
        kwargs["device_map"] = "auto" if options.device == "auto" else device
    elif options.device == "auto" and device.startswith("cuda"):
        # Spread over the visible GPUs (accelerate) when one is too small; the
        # first layer's GPU holds the inputs, the tree mask and the positions.
        kwargs["device_map"] = "auto"
    return kwargs


def check_half(options: LoadOptions, device: str) -> None:
    """fp16 weights are for a CPU, the lean forward and fp32 arithmetic; refuse anything else in one line."""
    from racer_core.models.formats.half_weights import half_works

    if device != "cpu":
        raise ModelLoadError("--fp16-weights is for CPUs; on a CUDA GPU use --dtype float16 or bfloat16")
    if options.dtype not in ("auto", "float32", "fp32"):
        raise ModelLoadError("--fp16-weights computes in float32 around its float16 weights; drop --dtype")
    if options.forward == "stock":
        raise ModelLoadError("--fp16-weights runs through the lean forward; it cannot go with --forward stock")
    if not half_works():
        raise ModelLoadError("--fp16-weights needs fbgemm's fp16 linear (torch's x86 quantized engine), "
                             "which this torch lacks or which failed its check")


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


FORWARDS = ("auto", "lean", "stock")
"""The verification forwards: lean_forward.py where the model has one (auto), it alone, or transformers' own."""
