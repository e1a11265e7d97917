"""What one decoder family is, as far as the checkpoint reader (reader.py)
and the lean forward (lean_forward.py) need to know: where each weight sits
(the same dotted path names a checkpoint tensor, without `.weight`, and a
module of transformers' model of the family), which optional parts its
transformers class always has, and which config switches it honours.

Every family here has the decoder layer the lean forward computes: rmsnorm,
attention (q/k/v in one matmul, optional q/k bias and q/k rmsnorm, rotary
positions, optional sliding window through the mask), residual, rmsnorm,
SiLU-gated MLP (gate|up in one matmul), residual. A family with another
layer (other norms, activations, embeddings scaled or not) is not one of
these: it keeps transformers' forward.
"""

from __future__ import annotations

from dataclasses import dataclass

ROPE_TYPES = ("default", "linear", "llama3")
"""The rope types the lean forward computes (their frequencies are fixed; dynamic ones change with the length)."""


@dataclass(frozen=True)
class Family:
    model_type: str
    # Per layer, relative to `layers.N.`; the fused ones listed in the order they are stacked.
    qkv: tuple[str, ...] = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
    gate_up: tuple[str, ...] = ("mlp.gate_proj", "mlp.up_proj")
    o: str = "self_attn.o_proj"
    down: str = "mlp.down_proj"
    input_norm: str = "input_layernorm"
    post_norm: str = "post_attention_layernorm"
    q_norm: str = "self_attn.q_norm"
    k_norm: str = "self_attn.k_norm"
    # Outside the layers.
    embed: str = "model.embed_tokens"
    final_norm: str = "model.norm"
    lm_head: str = "lm_head"
    layers: str = "model.layers"
    # What the family's transformers class always has (a checkpoint without it, or
    # with it where the class has none, is read by transformers instead).
    qkv_bias: bool = False
    qk_norm: bool = False
    rope_types: tuple[str, ...] = ROPE_TYPES
    # A config switch that must be on for `sliding_window` to apply (Qwen2/3's
    # use_sliding_window, off when absent); None: `sliding_window` alone decides.
    window_switch: str | None = None

    def layer_tensors(self) -> list[str]:
        """Every weight name of one layer (relative to `layers.N.`)."""
        names = [self.input_norm, self.post_norm, *self.qkv, self.o, *self.gate_up, self.down]
        if self.qk_norm:
            names += [self.q_norm, self.k_norm]
        tensors = [f"{name}.weight" for name in names]
        if self.qkv_bias:
            tensors += [f"{name}.bias" for name in self.qkv]
        return tensors
