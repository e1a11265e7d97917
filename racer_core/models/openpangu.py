"""OpenPangu dense models (`PanguEmbedded`) on transformers' own Llama classes.

The published architecture is a Llama decoder whose four attention
projections carry a bias (one `bias` switch in its config), a bias-free
SwiGLU MLP, RMSNorm and plain rotary positions with theta 16e6. Its
checkpoint keys are Llama's (`model.layers.N.self_attn.q_proj.bias`, ...), so
registering a config and a causal-LM class under its model type with the
Auto classes loads a checkpoint without its remote code, and tree
verification runs on the stock Llama attention.
"""

from __future__ import annotations

from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, LlamaModel

MODEL_TYPE = "PanguEmbedded"


class PanguEmbeddedConfig(LlamaConfig):
    model_type = MODEL_TYPE
    default_theta = 16_000_000.0

    vocab_size: int = 153376
    hidden_size: int = 4096
    intermediate_size: int = 12800
    num_hidden_layers: int = 34
    num_attention_heads: int = 32
    num_key_value_heads: int | None = 8
    max_position_embeddings: int = 32768
    rms_norm_eps: float = 1e-5
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 45892
    bias: bool = True  # the checkpoint's one switch for the q, k, v and o biases

    def __post_init__(self, **kwargs):
        self.attention_bias = self.bias
        self.mlp_bias = False
        super().__post_init__(**kwargs)


class PanguEmbeddedModel(LlamaModel):
    config_class = PanguEmbeddedConfig


class PanguEmbeddedForCausalLM(LlamaForCausalLM):
    config_class = PanguEmbeddedConfig


def register() -> None:
    """Make AutoConfig / AutoModelForCausalLM know the `PanguEmbedded` type (idempotent)."""
    AutoConfig.register(MODEL_TYPE, PanguEmbeddedConfig, exist_ok=True)
    AutoModelForCausalLM.register(PanguEmbeddedConfig, PanguEmbeddedForCausalLM, exist_ok=True)


register()
