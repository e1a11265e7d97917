"""The README and the command line agree: every flag the README names exists,
and every command's --help lists the options the README gives it.

A `racer-tui ...` command line in the README (a code span or a line of a
bash block) must parse its flags by the command it runs; a flag named in
prose belongs to the command of its table row (a first cell with `racer-tui
COMMAND`) or of its section (a heading with `racer-tui COMMAND` in a code
span), or else to some command. Flags of other programs
(`pip install --no-deps`, `python scripts/x.py --tiny`) are theirs.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from racer_tui.cli import LEGACY_FLAGS, SUBCOMMANDS, legacy_words, main

README = Path(__file__).resolve().parents[2] / "README.md"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
CHAT = "chat"  # the command `racer-tui` runs with no subcommand
ENV = re.compile(r"^\w+=\S*$")


def help_flags(command: str, capsys: pytest.CaptureFixture[str]) -> set[str]:
    """The option strings `racer-tui [COMMAND] --help` lists in its options column."""
    with pytest.raises(SystemExit) as exc:
        main([*([] if command == CHAT else [command]), "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    column = [re.split(r"\s{2,}", line.strip())[0] for line in out.splitlines() if re.match(r"^ {2}-", line)]
    return {flag for text in column for flag in FLAG.findall(text)}


def command_of(words: list[str]) -> tuple[str, list[str]]:
    """Which command a racer-tui command line runs (words after `racer-tui`), and its words
    as that command parses them (the original's `--serve` stands for the command)."""
    words = legacy_words(words)
    if words and words[0] in SUBCOMMANDS:
        return words[0], words[1:]
    return CHAT, words


def segments(code: str) -> Iterator[list[str]]:
    """The simple commands of a line of shell, without leading VAR=value words."""
    for part in re.split(r"&&|\|\||[|;]", code):
        try:
            words = shlex.split(part, comments=True)
        except ValueError:  # an unbalanced quote in a prose span
            words = part.split()
        while words and ENV.match(words[0]):
            words.pop(0)
        if words:
            yield words


def readme_mentions(text: str) -> Iterator[tuple[str | None, str, str]]:
    """(section's command or None, 'run' or 'prose', the code or text) for everything that may name a flag."""
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    section: str | None = None
    depth = 0  # the heading level of the command's section
    row: str | None = None  # the command of the table row, from its first cell
    cell = 0  # the cell of the row, from 1; 0 outside tables
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            level = int(token.tag[1])
            spans = [c.content for c in tokens[i + 1].children or [] if c.type == "code_inline"]
            named = [command_of(shlex.split(c)[1:])[0] for c in spans if c.startswith("racer-tui")]
            if named:  # a command's section: ### `racer-tui bench`
                section, depth = named[0], level
            elif level <= depth:  # a heading beside the command's, not under it
                section, depth = None, 0
        elif token.type == "fence":
            if token.info.strip() in ("bash", "sh", "shell", ""):
                for line in token.content.splitlines():
                    yield section, "run", line
        elif token.type in ("tr_open", "tr_close"):
            row, cell = None, 0
        elif token.type in ("th_open", "td_open"):
            cell += 1
        elif token.type == "inline":
            for child in token.children or []:
                if child.type == "code_inline":
                    if cell == 1 and row is None and child.content.startswith("racer-tui"):
                        row = command_of(shlex.split(child.content)[1:])[0]  # the row is that command's
                    yield row or section, "run", child.content
                elif child.type == "text":
                    yield row or section, "prose", child.content


def readme_flags(text: str) -> tuple[dict[str, set[str]], dict[str | None, set[str]]]:
    """Flags on racer-tui command lines, per command run; flags in prose, per section's command."""
    runs: dict[str, set[str]] = {}
    prose: dict[str | None, set[str]] = {}
    for section, kind, content in readme_mentions(text):
        if kind == "prose":
            prose.setdefault(section, set()).update(FLAG.findall(content))
            continue
        for words in segments(content):
            if words[0] == "racer-tui":
                command, rest = command_of(words[1:])
                runs.setdefault(command, set()).update(f for w in rest for f in FLAG.findall(w))
            elif words[0].startswith("--"):  # a flag quoted alone, `--dtype float32`: prose in code
                prose.setdefault(section, set()).update(FLAG.findall(" ".join(words)))
    return runs, prose


@pytest.fixture(scope="module")
def readme() -> str:
    return README.read_text(encoding="utf-8")


@pytest.fixture
def flags_of(capsys: pytest.CaptureFixture[str]) -> dict[str, set[str]]:
    """Each command's --help options, and the original's spellings that stand for it
    (`--serve`; `racer-tui --help` names them)."""
    flags = {name: help_flags(name, capsys) for name in (CHAT, *SUBCOMMANDS)}
    for flag, (name, _) in LEGACY_FLAGS.items():
        flags[name].add(flag)
    return flags


@pytest.mark.parametrize("doc", ["README.md", "docs/evaluation.md"])
def test_every_flag_the_readme_names_exists(doc: str, flags_of: dict[str, set[str]]) -> None:
    runs, prose = readme_flags((README.parent / doc).read_text(encoding="utf-8"))
    known = set().union(*flags_of.values())
    named = set().union(*runs.values(), *prose.values())
    assert len(named) > 10  # the walk sees the document's flags
    assert sorted(named - known) == []


def test_each_command_has_the_options_the_readme_gives_it(readme: str, flags_of: dict[str, set[str]]) -> None:
    runs, prose = readme_flags(readme)
    assert {CHAT, "bench", "serve", "speed", "score"} <= set(runs)  # every command is shown run
    for command in (CHAT, *SUBCOMMANDS):
        said = runs.get(command, set()) | prose.get(command, set())
        assert sorted(said - flags_of[command]) == [], f"racer-tui {command}"


def test_the_check_sees_a_flag_that_does_not_exist(flags_of: dict[str, set[str]]) -> None:
    text = (
        "## Use\n\n`racer-tui bench builtin --no-such-flag`\n\n| command | what |\n|---|---|\n"
        "| `racer-tui score F` | with --resume |\n\n### `racer-tui speed`\n\nSee `--methods`.\n"
    )
    runs, prose = readme_flags(text)
    assert runs["bench"] == {"--no-such-flag"} and prose["speed"] == {"--methods"} and prose["score"] == {"--resume"}
    assert "--methods" not in flags_of["speed"] and "--no-such-flag" not in set().union(*flags_of.values())


def test_the_shared_options_are_in_every_command_that_loads_a_model(flags_of: dict[str, set[str]]) -> None:
    from racer_tui.cli import options as o

    shared = {flag for option in (o.MODEL, o.DEVICE, o.DTYPE, *o.LOADING, *o.TUNING, o.SYSTEM_PROMPT)
              for flag in option.flags}
    assert "--model" in shared and "--max-nodes" in shared
    for command in (CHAT, "serve", "bench"):
        assert sorted(shared - flags_of[command]) == [], f"racer-tui {command}"
