"""`racer-tui` with no command: the chat in the terminal.

Generation options given here hold for this run only (the saved settings are
unchanged unless saved from the settings screen), like the original RACER
chat's command-line sampling options.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from racer_core.checkpoints import add_load_arguments, load_argument_words, load_arguments
from racer_core.drafters import missing_extra
from racer_core.events import METHODS
from racer_tui.cli.errors import print_error
from racer_tui.cli.params import TOP_P_HELP, param, top_p

DESCRIPTION = "Chat with RACER speculative decoding and benchmark it, in the terminal or a browser."
# The chat's generation options: (flag, settings field).
GENERATION_FLAGS = (
    ("--method", "method"),
    ("--temperature", "temperature"),
    ("--top-p", "top_p"),
    ("--max-new-tokens", "max_new_tokens"),
    ("--system-prompt", "system_prompt"),
)


def configure(p: argparse.ArgumentParser) -> None:
    """The options that choose the model and how replies are generated; `serve`
    hands them on to each app process it starts."""
    p.add_argument(
        "--model",
        "--model-path",  # the original RACER's spelling
        dest="model",
        default=None,
        metavar="PATH",
        help="a checkpoint folder, a .gguf file or a Hugging Face hub id org/name "
        "(default: the saved choice, else the embedded model)",
    )
    p.add_argument("--device", default=None, help="auto, cpu or cuda (default: the saved choice)")
    p.add_argument("--dtype", default=None, help="auto, float32, bfloat16, float16 (default: the saved choice)")
    add_load_arguments(p)
    g = p.add_argument_group("generation, for this run (default: the saved settings)")
    g.add_argument("--method", type=param("method"), default=None, help=f"one of {', '.join(METHODS)}")
    g.add_argument("--temperature", type=param("temperature"), default=None, help="0 is greedy")
    g.add_argument("--top-p", type=top_p, default=None, help=TOP_P_HELP)
    g.add_argument("--max-new-tokens", type=param("max_new_tokens"), default=None, metavar="N", help="per reply")
    g.add_argument("--system-prompt", default=None, metavar="TEXT", help="the system message of new chats")


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings fields the command line sets for this run."""
    return {field: getattr(args, field) for _, field in GENERATION_FLAGS if getattr(args, field) is not None}


def app_args(args: argparse.Namespace) -> list[str]:
    """The chat options again, as command-line words (for the served app processes)."""
    out: list[str] = []
    for flag, value in (("--model", args.model), ("--device", args.device), ("--dtype", args.dtype)):
        if value is not None:
            out += [flag, value]
    for flag, field in GENERATION_FLAGS:
        value = getattr(args, field)
        if value is not None:
            out += [flag, str(value)]
    return out + load_argument_words(args)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, **hooks: Any) -> int:
    problem = missing_extra(args.method) if args.method else None
    if problem is not None:  # a peer whose library is not installed: refused before the app starts
        print_error(problem)
        return 2
    from racer_tui.app import RacerApp
    from racer_tui.models import default_engine_factory

    load = load_arguments(args)
    factory = functools.partial(default_engine_factory, **load) if load else default_engine_factory
    app = RacerApp(
        hooks.get("engine_factory", factory),
        model_path=args.model,
        device=args.device,
        dtype=args.dtype,
        overrides=overrides(args),
    )
    app.run()
    return int(app.return_code or 0)
