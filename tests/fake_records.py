"""Scripted step records for the fake engine: a small deterministic draft
tree around each step's accepted tokens, so the inspector has something real
in shape to show (siblings the model rejected, a rejected draft after the
accepted path, the budget options)."""

from __future__ import annotations

from racer_core.common.events import Source, TokenPiece
from racer_core.common.step_record import BudgetOption, StepRecord

REJECTED_BASE = 5000  # token ids of drafts the model did not accept
REJECTED_WORDS = ("maybe ", "the ", "tree ", "draft ", "token ", "cheap ", "model ")
PROMPT_END = 999  # the root of the first step: the prompt's last token


def fake_token_text(words: list[str], token_id: int) -> str:
    if token_id == PROMPT_END:
        return "\n"
    if token_id >= REJECTED_BASE and token_id < REJECTED_BASE + 1000:
        return REJECTED_WORDS[token_id % len(REJECTED_WORDS)]
    index = (token_id - 1000) % 1_000_000
    return words[index] if 0 <= index < len(words) else f"<{token_id}>"


def fake_record(method: str, step: int, pieces: tuple[TokenPiece, ...], root: int, budget: int) -> StepRecord | None:
    """The tree for a step that emitted `pieces` (drafts, then the bonus)."""
    if method in ("hf", "pld") or not pieces:
        return None
    if method == "ar":
        return StepRecord.build([root], [-1], [0], [0], [0], [-1], [0], pieces[-1].token_id, 1, 1, "plain")
    tokens, parents, depths, sources, context, rank, estimates = [root], [-1], [0], [0], [0], [-1], [1.0]
    accepted = [0]

    def add(token: int, parent: int, depth: int, bits: int, p: float, logits_rank: int) -> int:
        tokens.append(token)
        parents.append(parent)
        depths.append(depth)
        sources.append(bits)
        context.append(3 + depth if bits == Source.RETRIEVAL else 0)
        rank.append(logits_rank if bits == Source.LOGITS else -1)
        estimates.append(p)
        return len(tokens) - 1

    drafts = pieces[:-1]
    for depth, piece in enumerate(drafts, 1):  # breadth-first: each level's accepted node, then its rival
        parent = accepted[-1]
        accepted.append(add(piece.token_id, parent, depth, piece.source, round(0.9**depth, 2), 0))
        add(REJECTED_BASE + 10 * (step % 50) + depth, parent, depth, Source.LOGITS, 0.1, 1)
    add(REJECTED_BASE + 10 * (step % 50) + 9, accepted[-1], len(drafts) + 1, Source.RETRIEVAL, 0.3, -1)
    expected = 1.0 + sum(estimates[1:])
    options = (BudgetOption(1, 1, 1.0, 0.012), BudgetOption(len(tokens), budget, expected, 0.016))
    return StepRecord.build(
        tokens, parents, depths, sources, context, rank, accepted, pieces[-1].token_id, budget, len(tokens) + 5,
        "auto", estimates, options, 1,
    )
