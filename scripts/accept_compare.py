"""Where one method's drafts were accepted and another's were not, on the same text.

Two answer files of one `racer-tui bench` run (ANSWER_DIR/A.jsonl and
B.jsonl): for every question turn whose tokens are the same in both (greedy
in float32 they all are; in bf16 a near-tie can fork the text), each token
is marked as drafted (accepted from a draft) or made by the model (the
step's bonus token). Printed per category: tokens A drafted and B did not,
and the other way, the steps each took, and A's longest spans that B did
not draft, as text, so one can read which drafts A had that B lacked.

    python scripts/accept_compare.py ANSWER_DIR suffix racer --category rag --spans 5
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def drafted(accept_lengths: list[int]) -> list[bool]:
    """Per token: True when accepted from a draft, False for a step's own (last)
    token; the turn's first token comes from the prompt's pass (not a step)."""
    marks: list[bool] = [False]
    for length in accept_lengths:
        marks += [True] * (length - 1) + [False]
    return marks


def turns_of(path: Path) -> dict[tuple[str, int], dict]:
    found = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        choice = record["choices"][0]
        for turn, ids in enumerate(choice.get("token_ids") or []):
            found[(str(record["question_id"]), turn)] = {
                "category": record["category"], "ids": ids,
                "accepts": choice["accept_lengths"][turn] if isinstance(choice["accept_lengths"][0], list)
                else None,
                "steps": choice["decoding_steps"][turn],
            }
        if choice.get("accept_lengths") and not isinstance(choice["accept_lengths"][0], list):
            # one flat list for all turns: split it by each turn's step count
            flat, start = choice["accept_lengths"], 0
            for turn, steps in enumerate(choice["decoding_steps"]):
                found[(str(record["question_id"]), turn)]["accepts"] = flat[start : start + steps]
                start += steps
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("answer_dir", type=Path)
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--category", default=None, help="spans of this category only")
    parser.add_argument("--spans", type=int, default=5)
    args = parser.parse_args(argv)
    a, b = (turns_of(args.answer_dir / f"{m}.jsonl") for m in (args.a, args.b))
    tokenizer = None
    try:
        from racer_core.models.checkpoint.base import load_tokenizer
        from racer_core.models.checkpoint.gguf_dequantized import cache_folder
        from racer_core.models.checkpoint.gguf_parts import blocks_folder
        from racer_core.models.embedded import embedded_gguf

        folders = (blocks_folder(embedded_gguf()), cache_folder(embedded_gguf()))  # either holds the tokenizer
        tokenizer = load_tokenizer(next((f for f in folders if f.exists()), folders[1]), "embedded", False)
    except Exception:  # text is a convenience; counts come without it
        pass
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0, 0])
    spans = []
    for key in sorted(set(a) & set(b)):
        ta, tb = a[key], b[key]
        if (ta["ids"] != tb["ids"] or ta["accepts"] is None or tb["accepts"] is None
                or len(drafted(ta["accepts"])) != len(ta["ids"]) or len(drafted(tb["accepts"])) != len(tb["ids"])):
            totals[ta["category"]][5] += 1
            continue
        da, db = drafted(ta["accepts"]), drafted(tb["accepts"])
        row = totals[ta["category"]]
        row[0] += sum(x and not y for x, y in zip(da, db, strict=True))
        row[1] += sum(y and not x for x, y in zip(da, db, strict=True))
        row[2] += ta["steps"]
        row[3] += tb["steps"]
        row[4] += len(ta["ids"])
        start = None
        for i, (x, y) in enumerate([*zip(da, db, strict=True), (False, False)]):
            if x and not y and start is None:
                start = i
            elif not (x and not y) and start is not None:
                spans.append((i - start, key, ta["category"], ta["ids"][start:i], ta["ids"][max(0, start - 8) : start]))
                start = None
    print(f"{'category':<16}{'tokens':>7}{args.a + ' only':>14}{args.b + ' only':>14}"
          f"{'steps ' + args.a:>14}{'steps ' + args.b:>14}{'forked':>8}")
    for category, (only_a, only_b, steps_a, steps_b, tokens, forked) in sorted(totals.items()):
        print(f"{category:<16}{tokens:>7}{only_a:>14}{only_b:>14}{steps_a:>14}{steps_b:>14}{forked:>8}")
    chosen = [s for s in spans if args.category in (None, s[2])]
    chosen.sort(key=lambda s: -s[0])
    print(f"\nlongest spans {args.a} drafted and {args.b} did not"
          + (f" ({args.category})" if args.category else "") + ":")
    for length, key, category, ids, before in chosen[: args.spans]:
        text = tokenizer.decode(ids) if tokenizer else ids
        lead = tokenizer.decode(before) if tokenizer else before
        print(f"  {length:>3} tokens, question {key[0]} turn {key[1] + 1} ({category}): ...{lead!r} -> {text!r}")


if __name__ == "__main__":
    main()
