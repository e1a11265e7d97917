"""Tiny random-weight models and a tiny tokenizer, built from configs in code:
tests and demos run the real engine without downloading anything."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import torch

TINY_VOCAB = 512
FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "qwen3_moe", "mixtral", "PanguEmbedded")

_CORPUS = """
The quick brown fox jumps over the lazy dog. A tiny model repeats what it saw.
def add(a, b):
    return a + b
Speculative decoding drafts several tokens and verifies them in one pass.
The cat sat on the mat, and the dog sat on the log. Numbers: 1 2 3 4 5 6 7 8 9 10.
Once upon a time there was a small robot who liked to count the stars at night.
"""

_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


# Qwen2.5's tool format, shortened: the tools described in the system turn,
# calls in <tool_call> tags, results as <tool_response> in a user turn. (A
# newline right after a tag is written as an expression: transformers trims it.)
_NL = "{{ '\\n' }}"
_HERMES_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}"
    "{% else %}You are a helpful assistant.{% endif %}" + _NL + "\n# Tools\n\nYou may call one or more functions "
    "to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:"
    "\n<tools>{% for tool in tools %}" + _NL + "{{ tool | tojson }}{% endfor %}" + _NL + "</tools>\n\nFor each "
    "function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:"
    "\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
    "{% elif messages[0]['role'] == 'system' %}<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n"
    "{% endif %}"
    "{% for m in messages %}{% if m['role'] == 'system' and loop.first %}"
    "{% elif m['role'] == 'assistant' and m['tool_calls'] %}<|im_start|>assistant"
    "{% if m['content'] %}" + _NL + "{{ m['content'] }}{% endif %}"
    "{% for call in m['tool_calls'] %}{% set call = call['function'] %}" + _NL + "<tool_call>\n{\"name\": \""
    "{{ call['name'] }}\", \"arguments\": {{ call['arguments'] | tojson }}}\n</tool_call>{% endfor %}"
    "<|im_end|>\n"
    "{% elif m['role'] == 'tool' %}{% if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}"
    "<|im_start|>user{% endif %}" + _NL + "<tool_response>\n{{ m['content'] }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}<|im_end|>\n{% endif %}"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@lru_cache(maxsize=1)
def tiny_tokenizer() -> Any:
    """A byte-level BPE tokenizer of TINY_VOCAB ids with a ChatML template."""
    tokenizer = bpe_tokenizer(())
    tokenizer.chat_template = _CHAT_TEMPLATE
    return tokenizer


@lru_cache(maxsize=1)
def tiny_hermes_tokenizer() -> Any:
    """tiny_tokenizer's vocabulary with a Qwen-style chat template that supports tools (Hermes' <tool_call>)."""
    tokenizer = bpe_tokenizer(())
    tokenizer.chat_template = _HERMES_TEMPLATE
    return tokenizer


def bpe_tokenizer(extra_specials: tuple[str, ...], **special_tokens: Any) -> Any:
    """A byte-level BPE of TINY_VOCAB ids trained on the tiny corpus, with the
    ChatML specials plus `extra_specials` (a VL family's image tokens)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *extra_specials]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TINY_VOCAB, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator([_CORPUS] * 4, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|im_end|>", bos_token="<|endoftext|>", pad_token="<|endoftext|>",
        **special_tokens,
    )


def tiny_config(family: str = "llama", vocab_size: int = TINY_VOCAB) -> Any:
    from transformers import AutoConfig

    common: dict[str, Any] = dict(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=False,
    )
    if family == "qwen3":
        common["head_dim"] = 16
    if family == "qwen3_moe":
        common.update(head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                      decoder_sparse_step=1, mlp_only_layers=[])
    if family == "mixtral":
        common.update(num_local_experts=4, num_experts_per_tok=2)
    if family == "mistral":
        common["sliding_window"] = None
    if family == "phi3":  # its defaults name ids past the tiny vocabulary
        common.update(pad_token_id=None, bos_token_id=1, eos_token_id=2)
    if family not in FAMILIES:
        raise ValueError(f"unknown tiny family {family!r}; choose from {FAMILIES}")
    if family == "PanguEmbedded":
        import racer_core.models.openpangu  # noqa: F401  (registers the model type)
    return AutoConfig.for_model(family, **common)


def tiny_model(family: str = "llama", seed: int = 0, vocab_size: int = TINY_VOCAB, dtype: torch.dtype = torch.float32) -> Any:
    """A random-weight causal LM of the family, in eval mode on the CPU.

    Weights are scaled up so the argmax is decisive (random init at 0.02 gives
    near-uniform logits, where the model repeats one token forever)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    config = tiny_config(family, vocab_size)
    config.initializer_range = 0.2
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.eval()
    return model


def tiny_engine(family: str = "llama", seed: int = 0) -> Any:
    """A RacerEngine over a tiny random model and the tiny tokenizer."""
    from racer_core.engine.engine import RacerEngine

    return RacerEngine(tiny_model(family, seed), tiny_tokenizer(), f"tiny-{family}")
