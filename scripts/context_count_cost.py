"""What one count of the chat's context costs the app's thread: the chat
screen counts the typed, unsent message (ctx USED+PENDING/MAX) with
Engine.context_usage, which templates and tokenizes the whole chat.

    python scripts/context_count_cost.py [--model PATH] [--repeats 20]

A short chat (a question and a 400-word reply) with a typed message of 10,
1,000 and 10,000 words; the three counted in turn for --repeats interleaved
rounds after one untimed (racer_core/bench/timing.py): the mean wall time of a
count, and the fastest and median round.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from racer_core.bench.timing import fastest_and_median, timed_rounds  # noqa: E402
from racer_core.engine.engine import load_engine  # noqa: E402

WORDS = (10, 1000, 10_000)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a checkpoint folder or .gguf (default: the embedded model)")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    engine = load_engine(args.model)
    chat = [{"role": "user", "content": "hello there"}, {"role": "assistant", "content": "word " * 400}]
    chats = [[*chat, {"role": "user", "content": "word " * words}] for words in WORDS]
    spans = timed_rounds([lambda m=m: engine.context_usage(m) for m in chats], args.repeats)
    for words, messages, seconds in zip(WORDS, chats, spans, strict=True):
        usage = engine.context_usage(messages)
        used = usage.used if usage is not None else "?"
        fastest, median = fastest_and_median(seconds)
        print(f"typed {words:>6} words: chat of {used} tokens, {statistics.mean(seconds) * 1000:.1f} ms a count "
              f"(fastest {fastest * 1000:.1f}, median {median * 1000:.1f})")

if __name__ == "__main__":
    main()
