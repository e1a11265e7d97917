"""One step's draft tree as text: every verified node with its token and
source, the accepted path highlighted, the bonus token, and why the tree has
this size."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from racer_core.common.events import Source
from racer_core.common.step_record import StepRecord
from racer_tui.chat.step_log import LoggedStep
from racer_tui.colors import CHART_BLUE, RETRIEVAL_GREEN, SOURCE_STYLE

TokenText = Callable[[int], str]
ACCEPTED = f"bold black on {RETRIEVAL_GREEN}"
BONUS = "bold black on rgb({},{},{})".format(*CHART_BLUE)


def shown(text: str) -> str:
    """A token's text with its whitespace visible."""
    return repr(text)


def _node_label(record: StepRecord, index: int, token_text: TokenText, accepted: set[int]) -> Text:
    node = record.nodes[index]
    label = Text()
    token = shown(token_text(node.token_id))
    if index == 0:
        label.append(token, style=ACCEPTED)
        label.append("  root: the last step's bonus token", style="dim")
        return label
    label.append(token, style=ACCEPTED if index in accepted else "")
    color = SOURCE_STYLE[Source(node.source_id)]
    label.append(f"  {node.source}", style=color)
    if node.estimate is not None:
        label.append(f"  p {node.estimate:.2f}", style="dim")
    return label


def emitted_split(record: StepRecord, emitted: int) -> tuple[int, bool]:
    """Of a step's `emitted` tokens, how many were accepted drafts and whether
    the bonus was among them. The reply may end inside the accepted path (an
    end-of-turn draft, the length limit): the tokens after it were verified
    but never emitted, the bonus included."""
    drafts = len(record.accepted) - 1
    return min(emitted, drafts), emitted > drafts


def draft_tree(record: StepRecord, token_text: TokenText, emitted: int | None = None) -> Tree:
    """The verified tree; with `emitted` (the step's token count), accepted
    nodes past where the reply ended, and the bonus, are marked as not emitted."""
    drafts, with_bonus = emitted_split(record, len(record.accepted) if emitted is None else emitted)
    kept = set(record.accepted[: drafts + 1])
    nodes = [Tree(_node_label(record, 0, token_text, kept), guide_style="dim")]
    branches: dict[int, Tree] = {0: nodes[0]}
    for index in range(1, record.size):  # breadth-first: a parent comes before its children
        label = _node_label(record, index, token_text, kept)
        if index in record.accepted and index not in kept:
            label.append("  accepted, not emitted: the reply had ended", style="dim")
        branches[index] = branches[record.parents[index]].add(label)
    bonus = Text()
    if with_bonus:
        bonus.append(shown(token_text(record.bonus)), style=BONUS)
        bonus.append("  bonus: the model's own next token after the accepted path", style="dim")
    else:
        bonus.append(shown(token_text(record.bonus)), style="dim strike")
        bonus.append("  bonus not emitted: the reply had ended", style="dim")
    branches[record.accepted[-1]].add(bonus)
    return nodes[0]


def options_table(record: StepRecord) -> Table:
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    for name in ("", "nodes", "rows fed", "expected tokens", "ms", "tokens/s"):
        table.add_column(name, justify="right")
    options = record.options
    chosen = record.chosen_option
    # The root alone, the chosen size with its neighbours, and the largest: the rest elided.
    shown = sorted({0, len(options) - 1, *range(chosen - 2, chosen + 3)} & set(range(len(options))))
    previous = -1
    for i in shown:
        if i > previous + 1:
            table.add_row("", "…", "", "", "", "", style="dim")
        previous = i
        option = options[i]
        mark = "▶" if i == chosen else ""
        table.add_row(
            mark, str(option.nodes), str(option.fed), f"{option.expected_tokens:.2f}",
            f"{option.seconds * 1e3:.2f}", f"{option.tokens_per_s:.0f}",
            style="bold" if mark else "dim",
        )
    return table


def step_view(entry: LoggedStep, token_text: TokenText) -> RenderableType:
    """Everything the inspector shows about one logged step."""
    record = entry.record
    tokens = "".join(p.text for p in entry.pieces)
    count = len(entry.pieces)
    if record is None:  # the prefill, or an anchor's whole reply: the pieces say which were drafted
        drafts, with_bonus = sum(1 for p in entry.pieces if p.source != Source.MODEL), True
    else:
        drafts, with_bonus = emitted_split(record, count)
    head = Text()
    head.append(f"{count} token{'s' if count != 1 else ''}", style="bold")
    what = f"{drafts} accepted draft{'s' if drafts != 1 else ''}"
    head.append(f" ({what} + the bonus): " if with_bonus else f" ({what}; the reply ended there, no bonus): ")
    head.append(shown(tokens))
    if record is None:
        if entry.step == 1:
            why = (f"The prompt's forward pass ({entry.tree_size} new tokens) gave the first token. "
                   "Nothing is drafted before it: it becomes the root of the next step's tree.")
        else:
            why = "This method's steps are transformers' own; their drafts are not visible."
        return Group(head, Text(""), Text(why))
    budget = Text()
    budget.append("budget ", style="bold")
    budget.append(f"{record.size} nodes verified of {record.drafted} drafted, {record.fed} rows fed ({record.budget_rule})")
    if record.paused:
        budget.append("  drafting paused: plain decoding", style="bold yellow")
    why = Text()
    why.append("why ", style="bold")
    why.append(record.why)
    parts: list[RenderableType] = [head, budget, why, Text(""), draft_tree(record, token_text, count)]
    if record.options:
        parts += [Text(""), Text("the sizes the policy weighed (cost curve against expected tokens)", style="bold"),
                  options_table(record)]
    return Group(*parts)
