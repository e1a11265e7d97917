"""The engine's tokenizer is built from each token's bytes: byte-level BPE
spellings (GPT-2's alphabet) and SentencePiece ones (`▁` a space, `<0xNN>` a
raw byte) both come out as the bytes the model writes; specials as their text;
ids past the tokenizer (a padded vocabulary) as nothing."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

from racer_core.structured.vocabulary import token_bytes
from racer_core.testing import tiny_tokenizer


def test_byte_level_tokens_are_their_bytes() -> None:
    tokenizer = tiny_tokenizer()
    tokens = token_bytes(tokenizer, 512)
    text = "The quick brown fox. 1 2 3\n"
    assert b"".join(tokens[i] for i in tokenizer.encode(text, add_special_tokens=False)) == text.encode()
    assert tokens[tokenizer.convert_tokens_to_ids("<|im_end|>")] == b"<|im_end|>"
    assert tokens[len(tokenizer):] == [b""] * (512 - len(tokenizer))


def test_sentencepiece_tokens_are_their_bytes() -> None:
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "\u2581the": 4, "\u2581fox": 5, "s": 6, "\u00e9": 7}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    tokens = token_bytes(tokenizer, 10)
    assert tokens[:8] == [b"<unk>", b"<s>", b"</s>", b"\n", b" the", b" fox", b"s", "\u00e9".encode()]
    assert tokens[8:] == [b"", b""]


def test_llguidance_reads_the_tokens_back() -> None:
    pytest.importorskip("llguidance")
    from racer_core.structured.vocabulary import vocabulary

    tokenizer = tiny_tokenizer()
    engine = vocabulary(tokenizer, 512, frozenset({tokenizer.eos_token_id})).engine
    ids = tokenizer.encode('{"a": [1, 2]}', add_special_tokens=False)
    assert engine.decode_bytes(ids) == b'{"a": [1, 2]}' and engine.vocab_size == 512
