"""Tiny GGUFs of the five lean families, written with gguf's own writer under
llama.cpp's tensor names and metadata keys (convert_hf_to_gguf.py's), in a
Q4_K_M-like mix of types, from a tiny transformers model whose weights are
then set to the file's dequantized values: that model is the reference a
load of the file must give back."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as Q
from quant_helpers import permute_for_llama_cpp, quantize

from racer_core.testing import tiny_config, tiny_tokenizer


@dataclass(frozen=True)
class Quirks:
    """What a family's GGUF does differently (llama.cpp's converter for it)."""

    arch: str  # general.architecture (Mistral's converter writes llama)
    tied: bool  # no output.weight: the head is the embedding
    permuted: bool  # q and k rows in llama.cpp's rope order (LlamaModel.permute)
    embed: Q  # token_embd's type
    pre: str = "smollm"  # tokenizer.ggml.pre
    rope_scaling: dict[str, Any] | None = None  # transformers' rope_scaling, written as rope.scaling.* keys


FAMILIES = {
    "llama": Quirks("llama", tied=True, permuted=True, embed=Q.Q4_K),
    "mistral": Quirks("llama", tied=False, permuted=True, embed=Q.F16),
    "qwen2": Quirks("qwen2", tied=True, permuted=False, embed=Q.Q6_K, pre="qwen2"),
    "qwen3": Quirks("qwen3", tied=False, permuted=False, embed=Q.Q4_K),
    "phi3": Quirks("phi3", tied=False, permuted=False, embed=Q.F16),
}
HIDDEN, FFN, HEADS, KV_HEADS, HEAD_DIM, LAYERS = 256, 512, 4, 2, 64, 2  # rows of 256 and 512: K types' blocks
VALUE_TYPES = ("attn_v", "ffn_down", "output", "attn_qkv")
"""Q4_K_M's choice in small: these in Q6_K, the other linears in Q4_K."""
MIXES = {"Q4_K_M": (Q.Q4_K, Q.Q6_K), "Q5_K_M": (Q.Q5_K, Q.Q6_K), "Q5_0": (Q.Q5_0, Q.Q5_1)}
"""A download's mix in small: (the linears' type, VALUE_TYPES' type); "Q5_0" as llama.cpp's legacy Q5_0 files,
with Q5_1 where the K mixes give more bits."""


def reference_model(family: str, seed: int = 0, rope_scaling: dict[str, Any] | None = None,
                    rotary: float = 1.0) -> Any:
    """A tiny model of `family` at K-block widths, its attention outputs shrunk so
    that greedy text falls into cycles the drafts predict (engine_helpers.make_markov)."""
    from engine_helpers import SMALL_VOCAB, make_markov
    from transformers import AutoModelForCausalLM

    quirks = FAMILIES[family]
    torch.manual_seed(seed)
    config = tiny_config(family, len(_tokens()[0]))
    config.hidden_size, config.intermediate_size, config.initializer_range = HIDDEN, FFN, 0.2
    config.num_attention_heads, config.num_key_value_heads, config.head_dim = HEADS, KV_HEADS, HEAD_DIM
    config.num_hidden_layers, config.tie_word_embeddings = LAYERS, quirks.tied
    config.bos_token_id, config.eos_token_id, config.pad_token_id = None, None, None
    if rope_scaling is not None:
        config.rope_parameters = {"rope_theta": 10000.0, **rope_scaling}
        if family == "phi3" and "original_max_position_embeddings" in rope_scaling:  # Phi3Config's own field
            config.original_max_position_embeddings = rope_scaling["original_max_position_embeddings"]
    if rotary != 1.0:  # Phi-4-mini's partial rotary factor
        config.partial_rotary_factor = rotary
        config.rope_parameters = {**config.rope_parameters, "partial_rotary_factor": rotary}
    model = AutoModelForCausalLM.from_config(config).eval()
    make_markov(model)
    with torch.no_grad():  # greedy text among the first ids, as engine_helpers' small-vocabulary models: it cycles
        model.get_output_embeddings().weight[SMALL_VOCAB:] *= 0.05
    if family == "qwen2":  # its biases non-zero, or a lost bias goes unseen
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith("proj.bias"):
                    param.normal_(0, 0.5)
    if family == "qwen3":
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith(("q_norm.weight", "k_norm.weight")):
                    param.uniform_(0.5, 1.5)
    return model


def _quantized(values: np.ndarray, qtype: Q) -> tuple[np.ndarray, np.ndarray]:
    """(what the file holds, its values as gguf's numpy dequantizes them)."""
    if qtype == Q.F32:
        return values.astype(np.float32), values.astype(np.float32)
    if qtype == Q.F16:
        half = values.astype(np.float16)
        return half, half.astype(np.float32)
    blocks = quantize(values, qtype)
    return blocks, gguf.quants.dequantize(blocks, qtype).reshape(values.shape)


def _llama_cpp_tensors(model: Any, family: str, mix: str) -> dict[str, tuple[np.ndarray, Q, str | None]]:
    """llama.cpp's name -> (float values in the file's row order, type, the
    model parameter it comes from), as convert_hf_to_gguf writes them."""
    quirks = FAMILIES[family]
    main, more = MIXES[mix]
    state = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    out: dict[str, tuple[np.ndarray, Q, str | None]] = {
        "token_embd.weight": (state["model.embed_tokens.weight"], quirks.embed, "model.embed_tokens.weight"),
        "output_norm.weight": (state["model.norm.weight"], Q.F32, "model.norm.weight"),
    }
    if not quirks.tied:
        out["output.weight"] = (state["lm_head.weight"], more, "lm_head.weight")
    for i in range(LAYERS):
        hf, blk = f"model.layers.{i}.", f"blk.{i}."
        names = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
                 "attn_output": "self_attn.o_proj", "ffn_down": "mlp.down_proj"}
        if family == "phi3":  # fused as in the checkpoint: llama.cpp names gate|up ffn_up
            names |= {"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"}
        else:
            names |= {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
                      "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj"}
        if family == "qwen3":
            names |= {"attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
        for ours, theirs in names.items():
            values = state[f"{hf}{theirs}.weight"]
            qtype = Q.F32 if values.ndim == 1 else more if ours in VALUE_TYPES else main
            if quirks.permuted and ours in ("attn_q", "attn_k"):
                values = permute_for_llama_cpp(values, HEADS if ours == "attn_q" else KV_HEADS)
            out[f"{blk}{ours}.weight"] = (values, qtype, f"{hf}{theirs}.weight")
        if family == "qwen2":
            for ours, theirs in (("attn_q", "q_proj"), ("attn_k", "k_proj"), ("attn_v", "v_proj")):
                out[f"{blk}{ours}.bias"] = (state[f"{hf}self_attn.{theirs}.bias"], Q.F32, f"{hf}self_attn.{theirs}.bias")
    return out


def _unpermute(values: np.ndarray, heads: int) -> np.ndarray:
    dim = values.shape[0] // heads // 2
    return values.reshape(heads, dim, 2, *values.shape[1:]).swapaxes(1, 2).reshape(values.shape)


def write_family_gguf(path: Path, family: str, seed: int = 0, rope_scaling: dict[str, Any] | None = None,
                      arch: str | None = None, mix: str = "Q4_K_M", rotary: float = 1.0) -> Any:
    """Write `family`'s tiny GGUF at `path`; returns the reference model, its
    weights overwritten with the file's dequantized values (q/k rows back in the
    model's order). `arch` overrides general.architecture (an unsupported one)."""
    quirks = FAMILIES[family]
    model = reference_model(family, seed, rope_scaling, rotary)
    writer = gguf.GGUFWriter(str(path), arch or quirks.arch)
    writer.add_name(f"tiny-{family}")
    writer.add_block_count(LAYERS)
    writer.add_context_length(model.config.max_position_embeddings)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    writer.add_rope_dimension_count(int(HEAD_DIM * rotary))
    writer.add_rope_freq_base(float(model.config.rope_parameters.get("rope_theta") or 10000.0))
    writer.add_layer_norm_rms_eps(float(model.config.rms_norm_eps))
    writer.add_vocab_size(model.config.vocab_size)
    writer.add_file_type(gguf.LlamaFileType[f"MOSTLY_{mix}"])
    if rope_scaling is not None and rope_scaling["rope_type"] == "llama3":  # a tensor of factors, no keys
        writer.add_tensor("rope_freqs.weight", llama3_rope_freqs(rope_scaling, HEAD_DIM))
    elif rope_scaling is not None and rope_scaling["rope_type"] == "longrope":  # Phi3MiniModel's tensors and keys
        for kind in ("long", "short"):
            writer.add_tensor(f"rope_factors_{kind}.weight", np.array(rope_scaling[f"{kind}_factor"], dtype=np.float32))
        original = rope_scaling["original_max_position_embeddings"]
        writer.add_rope_scaling_orig_ctx_len(original)
        scale = model.config.max_position_embeddings / original
        writer.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(original)))
    elif rope_scaling is not None:  # convert_hf_to_gguf's keys for linear and yarn scaling
        writer.add_rope_scaling_type(gguf.RopeScalingType(rope_scaling["rope_type"]))
        writer.add_rope_scaling_factor(float(rope_scaling["factor"]))
        if "original_max_position_embeddings" in rope_scaling:
            writer.add_rope_scaling_orig_ctx_len(int(rope_scaling["original_max_position_embeddings"]))
    write_tokenizer_fields(writer, quirks.pre)
    dequantized: dict[str, torch.Tensor] = {}
    for name, (values, qtype, source) in _llama_cpp_tensors(model, family, mix).items():
        data, back = _quantized(values, qtype)
        writer.add_tensor(name, data, raw_dtype=qtype if data.dtype == np.uint8 else None)
        if quirks.permuted and (".attn_q." in name or ".attn_k." in name):
            back = _unpermute(back, HEADS if ".attn_q." in name else KV_HEADS)
        dequantized[source] = torch.from_numpy(np.array(back, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(dequantized[name])
    return model


def llama3_rope_freqs(params: dict[str, Any], dim: int, base: float = 10000.0) -> np.ndarray:
    """convert_hf_to_gguf's rope_freqs tensor of a Llama 3 rope (LlamaModel.generate_extra_tensors)."""
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
    context = params["original_max_position_embeddings"]
    factors = []
    for freq in freqs.tolist():
        wavelen = 2 * math.pi / freq
        if wavelen < context / high:
            factors.append(1.0)
        elif wavelen > context / low:
            factors.append(factor)
        else:
            smooth = (context / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def write_tokenizer_fields(writer: gguf.GGUFWriter, pre: str = "smollm", model: str = "gpt2") -> None:
    """tokenizer.ggml.* fields of racer_core.testing's tiny byte-level BPE: its
    ChatML specials marked control, one user-defined token added, its template."""
    tokens, types, merges = _tokens()
    vocab = {token: index for index, token in enumerate(tokens)}
    writer.add_tokenizer_model(model)
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(vocab["<|im_start|>"])
    writer.add_eos_token_id(vocab["<|im_end|>"])
    writer.add_pad_token_id(vocab["<|endoftext|>"])
    writer.add_chat_template(tiny_tokenizer().chat_template)


def _tokens() -> tuple[list[str], list[int], list[str]]:
    """(tokens, their llama.cpp token types, merges) of the tiny tokenizer, "<think>" added user-defined."""
    backend = json.loads(tiny_tokenizer().backend_tokenizer.to_str())
    vocab = backend["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.get) + ["<think>"]
    types = [3 if t.startswith("<|") else 1 for t in tokens[:-1]] + [4]
    return tokens, types, [m if isinstance(m, str) else " ".join(m) for m in backend["model"]["merges"]]
