"""How a model is to be loaded (LoadOptions), the verification forwards, and
the from_pretrained arguments those options give (device map, bitsandbytes,
fp16 weights' checks)."""

from __future__ import annotations

from dataclasses import dataclass
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


FORWARDS = ("auto", "lean", "stock")
"""The verification forwards: lean_forward.py where the model has one (auto), it alone, or transformers' own."""
