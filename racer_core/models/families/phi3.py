"""Phi-3: Llama's layer with q|k|v and gate|up stored fused in the checkpoint
(`qkv_proj`, `gate_up_proj`, gate first), and only the default rope: its
longrope (the 128k and Phi-3.5 checkpoints) and a partial rotary factor
(Phi-4-mini) are left to transformers."""

from racer_core.models.family import Family

FAMILY = Family(
    "phi3", qkv=("self_attn.qkv_proj",), gate_up=("mlp.gate_up_proj",), rope_types=("default",),
)
