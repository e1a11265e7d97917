"""What one count of the chat's context costs the app's thread: the chat
screen counts the typed, unsent message (ctx USED+PENDING/MAX) with
Engine.context_usage, which templates and tokenizes the whole chat.

    python scripts/context_count_cost.py [--model PATH] [--repeats 20]

A short chat (a question and a 400-word reply) with a typed message of 10,
1,000 and 10,000 words; the mean wall time of a count, after one untimed.
"""

from __future__ import annotations

import argparse
import time

from racer_core.engine.engine import load_engine

WORDS = (10, 1000, 10_000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a checkpoint folder or .gguf (default: the embedded model)")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    engine = load_engine(args.model)
    chat = [{"role": "user", "content": "hello there"}, {"role": "assistant", "content": "word " * 400}]
    for words in WORDS:
        messages = [*chat, {"role": "user", "content": "word " * words}]
        engine.context_usage(messages)
        start = time.perf_counter()
        for _ in range(args.repeats):
            usage = engine.context_usage(messages)
        seconds = (time.perf_counter() - start) / args.repeats
        used = usage.used if usage is not None else "?"
        print(f"typed {words:>6} words: chat of {used} tokens, {seconds * 1000:.1f} ms a count")


if __name__ == "__main__":
    main()
