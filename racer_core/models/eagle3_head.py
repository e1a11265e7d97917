"""An EAGLE-3 draft head read from a folder, and its one-layer forward.

Two checkpoint layouts are read, both a single Llama-style decoder layer
whose attention takes [norm(embedding), norm(hidden)] (2 x hidden inputs):

- the EAGLE authors' (`LlamaForCausalLMEagle3`): config.json is the layer's
  Llama config plus `draft_vocab_size`; tensors `fc`, `midlayer.*`, `norm`,
  `lm_head`, `d2t`, `t2d` (and `embed_tokens` when the head has its own);
- vLLM's speculators format (`speculators_model_type: eagle3`): the layer's
  config under `transformer_layer_config`, the same tensors with `layers.0.`
  for `midlayer.`, `norm_before_residual` (default true there) and
  `eagle_aux_hidden_state_layer_ids`.

`fc` maps three of the target's hidden states (EAGLE-3's low, middle and
high layers, concatenated) to the head's width. A layer id j is the residual
stream entering target layer j (transformers' `hidden_states[j]`); without
ids in the config the layers are (2, N // 2, N - 3), as EAGLE and vLLM choose.
The draft vocabulary is a subset of the target's: draft id i is target id
i + d2t[i].

The forward is written out here rather than built from transformers' Llama
decoder layer: that layer's q/k/v take `hidden_size` inputs and its cache is
a transformers Cache, so both would need replacing, and the draft tree's
attention over a committed prefix plus temporary tree rows is plainer with
two tensors. The math (RMSNorm in fp32, rotary, SDPA, SiLU MLP) is the lean
forward's own (lean_forward.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from racer_core.common.errors import ModelLoadError, first_line
from racer_core.models import hub
from racer_core.models.checkpoint.files import CONFIG, CheckpointConfig, read_json, weight_files
from racer_core.models.lean_forward import _rms, _rotate
from racer_core.models.reader import rope_inv_freq

BIN_WEIGHTS = "pytorch_model.bin"  # the EAGLE authors' heads are published as one .bin file
LAYER_PREFIXES = ("midlayer.", "layers.0.")  # EAGLE's, speculators'
LAYER_TENSORS = ("hidden_norm", "input_layernorm", "post_attention_layernorm", "self_attn.q_proj",
                 "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
                 "mlp.down_proj")


@dataclass
class Eagle3Head:
    """The head's weights (fused q|k|v and gate|up, as the lean forward's) and numbers."""

    name: str
    fc: torch.Tensor  # (H, 3 * target hidden)
    embed: torch.Tensor  # (vocab, H): the head's own, or the target's
    input_norm: torch.Tensor
    hidden_norm: torch.Tensor
    qkv: torch.Tensor  # (q + k + v, 2H)
    o: torch.Tensor
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor
    norm: torch.Tensor
    lm_head: torch.Tensor  # (draft vocab, H)
    draft_to_target: torch.Tensor  # (draft vocab,) target ids, long
    aux_layers: tuple[int, ...]
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    inv_freq: torch.Tensor
    norm_before_residual: bool

    @property
    def hidden_size(self) -> int:
        return int(self.fc.shape[0])

    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(self.fc.dtype)[None, None], emb.sin().to(self.fc.dtype)[None, None]

    def forward(self, hidden: torch.Tensor, ids: torch.Tensor, positions: torch.Tensor,
                past: tuple[torch.Tensor, torch.Tensor] | None, mask: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The layer on T rows: `hidden` (T, 3 x target hidden: the target's
        states, through fc) or (T, H: the head's own previous outputs); `ids`
        the tokens that follow; `past` the keys and values the rows attend to
        besides themselves, `mask` (T, past + T) bool where a row may look.
        Returns the rows' pre-norm outputs (T, H) and their keys and values."""
        if hidden.shape[-1] != self.hidden_size:
            hidden = F.linear(hidden, self.fc)
        t, h = ids.shape[0], hidden[None]
        embeds = _rms(F.embedding(ids, self.embed)[None], self.input_norm, self.eps)
        normed = _rms(h, self.hidden_norm, self.eps)
        residual = normed if self.norm_before_residual else h
        x = torch.cat((embeds, normed), dim=-1)
        d = self.head_dim
        nq, nkv = self.heads * d, self.kv_heads * d
        qkv = F.linear(x, self.qkv)
        cos, sin = self.rope(positions)
        q = _rotate(qkv[..., :nq].view(1, t, self.heads, d).transpose(1, 2), cos, sin)
        k = _rotate(qkv[..., nq : nq + nkv].view(1, t, self.kv_heads, d).transpose(1, 2), cos, sin)
        v = qkv[..., nq + nkv :].view(1, t, self.kv_heads, d).transpose(1, 2)
        keys, values = (k, v) if past is None else (torch.cat((past[0], k), 2), torch.cat((past[1], v), 2))
        a = F.scaled_dot_product_attention(q, keys, values, attn_mask=None if mask is None else mask[None, None],
                                           scale=d**-0.5, enable_gqa=self.heads != self.kv_heads)
        h = residual + F.linear(a.transpose(1, 2).reshape(1, t, nq), self.o)
        gate, up = F.linear(_rms(h, self.post_norm, self.eps), self.gate_up).chunk(2, dim=-1)
        h = h + F.linear(F.silu(gate) * up, self.down)
        return h[0], k, v

    def log_probs(self, out: torch.Tensor) -> torch.Tensor:
        """(T, draft vocab) log-probabilities of the token after each row."""
        return torch.log_softmax(F.linear(_rms(out, self.norm, self.eps), self.lm_head).float(), dim=-1)


def resolve_head(path: str) -> Path:
    """The head's folder: a local folder, or a hub id from the Hugging Face cache
    (downloaded only when the hub is not turned off, as for models)."""
    folder = Path(path).expanduser()
    if not folder.exists() and hub.looks_like_hub_id(path):
        cached = hub.check_available(path)
        folder = cached if cached is not None else hub.download(path)
    if not folder.is_dir():
        raise ModelLoadError(f"draft model path does not exist or is not a folder: {folder}")
    return folder


def _layer_config(data: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """(the decoder layer's config, norm_before_residual) of either format."""
    if data.get("speculators_model_type") == "eagle3" or "transformer_layer_config" in data:
        layer = data.get("transformer_layer_config")
        if not isinstance(layer, dict):
            raise ModelLoadError("a speculators config without transformer_layer_config")
        return layer, bool(data.get("norm_before_residual", True))
    return data, bool(data.get("norm_before_residual", False))


def _read_tensors(folder: Path) -> dict[str, torch.Tensor]:
    files = weight_files(folder)
    if files is not None:
        from safetensors.torch import load_file

        tensors: dict[str, torch.Tensor] = {}
        for file in files:
            tensors.update(load_file(str(file)))
    elif (folder / BIN_WEIGHTS).is_file():
        tensors = torch.load(folder / BIN_WEIGHTS, map_location="cpu", weights_only=True)
    else:
        raise ModelLoadError(f"no weights in {folder} (model.safetensors or {BIN_WEIGHTS})")
    return tensors


def aux_layer_ids(data: dict[str, Any], target_layers: int) -> tuple[int, ...]:
    """The target layers whose input states the head reads (see the module doc)."""
    ids = data.get("eagle_aux_hidden_state_layer_ids") or (data.get("eagle_config") or {}).get(
        "eagle_aux_hidden_state_layer_ids")
    if not ids:
        return (2, target_layers // 2, target_layers - 3)
    return tuple(int(i) for i in ids)


def load_head(path: str, target_config: Any, target_embed: torch.Tensor) -> Eagle3Head:
    """Read an EAGLE-3 head for a target (its text config and input embedding,
    whose device and dtype the head takes); a head for another target is refused in one line."""
    folder = resolve_head(path)
    name = path.rstrip("/").split("/")[-1] or str(folder)
    data = read_json(folder / CONFIG)
    if data is None:
        raise ModelLoadError(f"not an EAGLE-3 head: {folder} has no readable config.json")
    try:
        tensors = _read_tensors(folder)
        return head_from_tensors(name, data, tensors, target_config, target_embed)
    except ModelLoadError:
        raise
    except Exception as error:  # a damaged file, a missing tensor or field: one line, no traceback
        raise ModelLoadError(f"cannot read the EAGLE-3 head in {folder}: {type(error).__name__}: {first_line(error)}") from None


def head_from_tensors(name: str, data: dict[str, Any], tensors: dict[str, torch.Tensor], target: Any,
                      target_embed: torch.Tensor) -> Eagle3Head:
    """A head from its config.json contents and tensors (either format's names),
    for the target whose text config and input embedding are given."""
    layer, norm_before_residual = _layer_config(data)
    config = CheckpointConfig(layer)
    if int(getattr(config, "num_hidden_layers", 1)) != 1:
        raise ModelLoadError(f"{name}: an EAGLE-3 head has one decoder layer, this config names "
                             f"{config.num_hidden_layers}")
    hidden, heads = int(config.hidden_size), int(config.num_attention_heads)
    head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    target_hidden, target_vocab = int(target.hidden_size), int(target.vocab_size)
    target_layers = int(target.num_hidden_layers)
    vocab = int(layer.get("vocab_size", data.get("vocab_size", target_vocab)))
    if vocab != target_vocab:
        raise ModelLoadError(f"the draft head {name} is for a vocabulary of {vocab} tokens; "
                             f"this model has {target_vocab}")
    tensors = {key.removeprefix("model."): value for key, value in tensors.items()}
    prefix = next((p for p in LAYER_PREFIXES if f"{p}self_attn.q_proj.weight" in tensors), None)
    if prefix is None or "fc.weight" not in tensors or "lm_head.weight" not in tensors:
        raise ModelLoadError(f"not an EAGLE-3 head: {name}'s weights have no fc, midlayer and lm_head")
    fc = tensors["fc.weight"]
    if fc.shape[1] != 3 * target_hidden:
        raise ModelLoadError(f"the draft head {name} reads hidden states of width {fc.shape[1] // 3}; "
                             f"this model's are {target_hidden} wide")
    embed = tensors.get("embed_tokens.weight")
    if embed is None and hidden != target_hidden:
        raise ModelLoadError(f"the draft head {name} has no embedding of its own and a width of {hidden}; "
                             f"this model's embedding is {target_hidden} wide")
    aux = aux_layer_ids(data, target_layers)
    if len(aux) != 3 or not all(0 <= i < target_layers for i in aux):
        raise ModelLoadError(f"the draft head {name} reads target layers {list(aux)}; "
                             f"this model has {target_layers}")
    lm_head = tensors["lm_head.weight"]
    draft_vocab = int(lm_head.shape[0])
    if "d2t" in tensors:
        d2t = torch.arange(draft_vocab) + tensors["d2t"].long()
    elif draft_vocab == target_vocab:
        d2t = torch.arange(draft_vocab)
    else:
        raise ModelLoadError(f"the draft head {name} has a draft vocabulary of {draft_vocab} and no d2t map")
    if d2t.shape[0] != draft_vocab or int(d2t.min()) < 0 or int(d2t.max()) >= target_vocab:
        raise ModelLoadError(f"the draft head {name}'s d2t map points outside this model's vocabulary")
    inv_freq = rope_inv_freq(config, head_dim)
    if inv_freq is None:
        raise ModelLoadError(f"the draft head {name} uses a rope this reader does not know")
    device, dtype = target_embed.device, target_embed.dtype

    def get(key: str) -> torch.Tensor:
        return tensors[key].to(device=device, dtype=dtype)

    def layer_part(part: str) -> torch.Tensor:
        return get(f"{prefix}{part}.weight")

    qkv = torch.cat([layer_part(f"self_attn.{p}_proj") for p in "qkv"])
    if qkv.shape != (heads * head_dim + 2 * kv_heads * head_dim, 2 * hidden):
        raise ModelLoadError(f"the draft head {name}'s attention weights do not match its config")
    return Eagle3Head(
        name=name, fc=get("fc.weight"), embed=target_embed if embed is None else embed.to(device=device, dtype=dtype),
        input_norm=layer_part("input_layernorm"), hidden_norm=layer_part("hidden_norm"), qkv=qkv,
        o=layer_part("self_attn.o_proj"), post_norm=layer_part("post_attention_layernorm"),
        gate_up=torch.cat([layer_part("mlp.gate_proj"), layer_part("mlp.up_proj")]),
        down=layer_part("mlp.down_proj"), norm=get("norm.weight"), lm_head=get("lm_head.weight"),
        draft_to_target=d2t.to(device), aux_layers=aux, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        eps=float(config.rms_norm_eps), inv_freq=inv_freq.to(device), norm_before_residual=norm_before_residual,
    )
