"""Incremental detokenizing, a pass's tokens at a time, on tricky text: the
pieces add up to the whole decoding, never split a character, and each token
gets the text that decoding it one at a time gives (the way it was done before
a pass's tokens went in together)."""

from __future__ import annotations

import random

import pytest

from racer_core.engine.detokenize import WINDOW, IncrementalDecoder

TEXTS = [
    "héllo wörld, naïve café",
    "日本語のテキストと東京",
    "emoji 🙂🚀 and a family 👩‍👩‍👧 end",
    "mixed: 東京 🍣! 'quotes' and\nnew lines\ttabs  double  spaces",
]


def _decode(tokenizer, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)


def one_at_a_time(tokenizer, ids: list[int]) -> list[str]:
    """The reference: each token's text from a window that starts at the piece before the last."""
    pieces, prefix, read = [], 0, 0
    for end in range(1, len(ids) + 1):
        before, after = _decode(tokenizer, ids[prefix:read]), _decode(tokenizer, ids[prefix:end])
        if after.endswith("\ufffd") or len(after) <= len(before):
            pieces.append("")
        else:
            pieces.append(after[len(before):])
            prefix, read = read, end
    return pieces


def byte_level():
    from racer_core.testing import tiny_tokenizer

    return tiny_tokenizer()


def metaspace_byte_fallback():
    """A Llama-style tokenizer: '▁' for spaces (the leading one dropped when decoding) and
    characters outside its vocabulary as <0xNN> byte tokens."""
    from tokenizers import Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set("abcdefghijklmnopqrstuvwxyz',.!:\n\t") | {"▁"})
    vocab = {"<unk>": 0, **{f"<0x{b:02X}>": 1 + b for b in range(256)}}
    vocab.update({c: len(vocab) + i for i, c in enumerate(chars)})
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    backend.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")


TOKENIZERS = {"byte-level BPE": byte_level, "metaspace with byte fallback": metaspace_byte_fallback}


def passes(ids: list[int], sizes: str, seed: int = 0) -> list[list[int]]:
    """`ids` cut into passes: one token each, three each, all at once, or random sizes."""
    if sizes == "all":
        return [ids]
    rng = random.Random(seed)
    out, at = [], 0
    while at < len(ids):
        n = {"one": 1, "three": 3}.get(sizes) or rng.randint(1, 6)
        out.append(ids[at:at + n])
        at += n
    return out


@pytest.mark.parametrize("kind", TOKENIZERS)
@pytest.mark.parametrize("sizes", ["one", "three", "all", "random"])
def test_a_pass_at_a_time_gives_each_token_the_text_it_gets_alone(kind, sizes) -> None:
    tokenizer = TOKENIZERS[kind]()
    for text in [*TEXTS, " ".join(TEXTS) * 3]:  # the last runs past WINDOW: the window moves on
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert len(ids) > 2 * WINDOW or text in TEXTS
        detok = IncrementalDecoder(tokenizer)
        pieces = [piece for chunk in passes(ids, sizes) for piece in detok.push_all(chunk)]
        assert pieces == one_at_a_time(tokenizer, ids)
        assert all("\ufffd" not in p for p in pieces)
        assert any(p == "" for p in pieces) or text.isascii()  # a character split over tokens came whole later
        assert "".join(pieces) + detok.flush() == detok.text() == _decode(tokenizer, ids)


@pytest.mark.parametrize("kind", TOKENIZERS)
def test_a_reply_cut_inside_a_character_ends_before_it(kind) -> None:
    # A byte-fallback tokenizer decodes a run of byte tokens that ends mid-character as
    # U+FFFD for every byte, the complete characters before it included: the reply keeps those.
    tokenizer = TOKENIZERS[kind]()
    ids = tokenizer("東京 🍣 sushi 🚀", add_special_tokens=False)["input_ids"]
    cuts = [i for i in range(1, len(ids)) if _decode(tokenizer, ids[:i]).endswith("\ufffd")]
    assert cuts  # the tokenizer splits the characters into bytes
    for cut in cuts:
        whole = _decode(tokenizer, ids[:max(j for j in range(cut) if not _decode(tokenizer, ids[:j]).endswith("\ufffd"))])
        detok = IncrementalDecoder(tokenizer)
        pieces = detok.push_all(ids[:cut])
        assert detok.text() == whole  # before the end too (a cancelled reply's)
        pieces.append(detok.flush())
        assert "".join(pieces) == detok.text() == whole
        assert all("\ufffd" not in p for p in pieces)


def test_push_is_push_all_of_one_token() -> None:
    tokenizer = byte_level()
    ids = tokenizer(TEXTS[2], add_special_tokens=False)["input_ids"]
    one, many = IncrementalDecoder(tokenizer), IncrementalDecoder(tokenizer)
    assert [one.push(t) for t in ids] == many.push_all(ids)
