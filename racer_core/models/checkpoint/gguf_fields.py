"""A GGUF's config and tokenizer from its own fields (llama.cpp's metadata
keys), without transformers: what transformers' GGUF loading would write
into a checkpoint folder, for the files this reads exactly. Both answer None
for anything else (another architecture, a rope scaling, a sentencepiece
vocabulary, a pre-tokenizer regex of its own), and the parts folder is then
made through transformers as before (gguf_parts.py)."""

from __future__ import annotations

from typing import Any

from racer_core.models.byte_alphabet import bytes_to_unicode
from racer_core.models.checkpoint.gguf_blocks import field_value

ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
"""llama.cpp architectures whose config this module writes (Mistral's files say llama), and their classes."""

SPLIT_PRE_TOKENIZERS = frozenset({
    "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano",
    "dbrx", "smaug-bpe", "tekken", "qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "qwen35", "gpt-4o",
    "llama4", "kanana2", "talkie", "minimax-m2",
})
"""tokenizer.ggml.pre values for which transformers splits the text with a
regex of its own before the byte-level step (its GGUF_PRE_TOKENIZER_SPLITS; a
test keeps this in step with the installed transformers): declined here."""

CONTROL, USER_DEFINED = 3, 4  # tokenizer.ggml.token_type values


def config_from_fields(reader: Any) -> dict[str, Any] | None:
    """config.json for the GGUF's model, or None where this module does not write it."""
    arch = field_value(reader, "general.architecture")
    if arch not in ARCHITECTURES or any(key.startswith(f"{arch}.rope.scaling.") for key in reader.fields):
        return None

    def number(key: str) -> Any:
        return field_value(reader, f"{arch}.{key}")

    heads = int(number("attention.head_count"))
    hidden = int(number("embedding_length"))
    tokens = reader.get_field("tokenizer.ggml.tokens")
    config: dict[str, Any] = {
        "architectures": [ARCHITECTURES[arch]], "model_type": arch, "hidden_size": hidden,
        "intermediate_size": int(number("feed_forward_length")), "num_hidden_layers": int(number("block_count")),
        "num_attention_heads": heads, "num_key_value_heads": int(number("attention.head_count_kv") or heads),
        "head_dim": int(number("attention.key_length") or hidden // heads),
        "max_position_embeddings": int(number("context_length")),
        "rms_norm_eps": float(number("attention.layer_norm_rms_epsilon")),
        "rope_parameters": {"rope_theta": float(number("rope.freq_base") or 10000.0), "rope_type": "default"},
        "tie_word_embeddings": all(t.name != "output.weight" for t in reader.tensors),
        "vocab_size": int(number("vocab_size") or (len(tokens.data) if tokens is not None else 0)),
        "hidden_act": "silu", "attention_bias": arch == "qwen2", "mlp_bias": False, "dtype": "float32",
    }
    if arch == "qwen2":
        config["use_sliding_window"] = False
    for name in ("bos", "eos", "pad", "unk"):
        key = "unknown" if name == "unk" else "padding" if name == "pad" else name
        value = field_value(reader, f"tokenizer.ggml.{key}_token_id")
        if value is not None:
            config[f"{name}_token_id"] = int(value)
    return config


def generation_config_from(config: dict[str, Any]) -> dict[str, Any]:
    """generation_config.json as transformers derives it from the config."""
    ids = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in config}
    return {"_from_model_config": True, **ids, "use_cache": True}


def tokenizer_from_fields(reader: Any) -> tuple[Any, dict[str, Any]] | None:
    """(the `tokenizers` Tokenizer, tokenizer_config.json) of a byte-level BPE
    vocabulary, built as transformers' GGUF converter builds it (GPT2Tokenizer
    over the file's tokens and merges, its control tokens special, its
    user-defined ones added); None for other vocabularies."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    if field_value(reader, "tokenizer.ggml.model") != "gpt2" or reader.get_field("tokenizer.ggml.merges") is None:
        return None
    if field_value(reader, "tokenizer.ggml.pre") in SPLIT_PRE_TOKENIZERS:
        return None
    if field_value(reader, "tokenizer.ggml.add_bos_token") or field_value(reader, "tokenizer.ggml.add_eos_token"):
        return None  # transformers' post-processor then adds them; not reproduced here
    tokens = reader.get_field("tokenizer.ggml.tokens").contents()
    types_field = reader.get_field("tokenizer.ggml.token_type")
    types = types_field.contents() if types_field is not None else [0] * len(tokens)
    spelling = bytes_to_unicode()
    alphabet = set(spelling.values())
    vocab = {token if set(token) <= alphabet else "".join(spelling[b] for b in token.encode("utf-8")): index
             for index, token in enumerate(tokens)}
    merges = [tuple(merge.split(" ")) for merge in reader.get_field("tokenizer.ggml.merges").contents()]
    tokenizer = Tokenizer(models.BPE(vocab, merges, dropout=None, unk_token=None, continuing_subword_prefix="",
                                     end_of_word_suffix="", fuse_unk=False, byte_fallback=False, ignore_merges=False))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    tokenizer.post_processor = processors.TemplateProcessing(single="$A:0", pair="$A:0 $B:1", special_tokens=[])
    # llama.cpp marks a control token spelled outside the byte alphabet by mistake: transformers skips those.
    tokenizer.add_special_tokens([AddedToken(token, normalized=False, special=True)
                                  for token, kind in zip(tokens, types, strict=True)
                                  if kind == CONTROL and set(token) <= alphabet])
    tokenizer.add_tokens([AddedToken(token, normalized=False, special=False)
                          for token, kind in zip(tokens, types, strict=True) if kind == USER_DEFINED and token in vocab])
    config: dict[str, Any] = {"backend": "tokenizers", "tokenizer_class": "TokenizersBackend"}
    for name, key in (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("pad", "padding")):
        token_id = field_value(reader, f"tokenizer.ggml.{key}_token_id")
        config[f"{name}_token"] = tokens[int(token_id)] if token_id is not None else None
    template = field_value(reader, "tokenizer.chat_template")
    if template is not None:
        config["chat_template"] = template
    return tokenizer, config
