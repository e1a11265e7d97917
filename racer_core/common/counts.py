"""Counts in messages: "1 question", "2 questions", never "1 questions"."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`count` and `noun`, plural unless the count is 1 (`plural`: an irregular plural)."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"
