"""GPT-2's byte-level alphabet: the printable character that spells each byte
in a byte-level BPE vocabulary. Pure Python (read by the GGUF tokenizer
builder and by racer_core/structured's vocabulary without their imports)."""

from __future__ import annotations


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable spelling of each byte (the byte-level BPE alphabet)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, (chr(c) for c in chars), strict=True))
