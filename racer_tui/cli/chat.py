"""`racer-tui` with no command: the chat in the terminal.

Generation options given here hold for this run only (the saved settings are
unchanged unless saved from the settings screen), like the original RACER
chat's command-line sampling options.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

import racer_tui.cli.options as o
from racer_tui.cli.errors import print_error

DESCRIPTION = "Chat with RACER speculative decoding and benchmark it, in the terminal or a browser."
# Options that default to the saved settings (None: not given), then those for this run's loading only.
SAVED_OPTIONS = (o.MODEL, o.DEVICE, o.DTYPE)
SETTINGS_OPTIONS = (o.METHOD, *o.TUNING, o.SYSTEM_PROMPT)
"""The settings fields the command line can set for this run."""


def configure(p: argparse.ArgumentParser) -> None:
    """The options that choose the model and how replies are generated; `serve`
    hands them on to each app process it starts."""
    o.MODEL.add(p, None, shown="the saved choice, else the embedded model")
    o.add_all(p, SAVED_OPTIONS[1:], None, shown="the saved choice")
    o.add_loading(p)
    g = p.add_argument_group("generation, for this run (default: the saved settings)")
    o.add_all(g, SETTINGS_OPTIONS, None, shown="")  # the group's title says the default


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings fields the command line sets for this run."""
    return {opt.dest: getattr(args, opt.dest) for opt in SETTINGS_OPTIONS if getattr(args, opt.dest) is not None}


def app_args(args: argparse.Namespace) -> list[str]:
    """The chat options again, as command-line words (for the served app processes)."""
    return (o.words_of(args, (*SAVED_OPTIONS, *SETTINGS_OPTIONS), unset=None)
            + o.words_of(args, o.LOADING))


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, **hooks: Any) -> int:
    refusal = o.method_refusal([args.method] if args.method else [], args)
    if refusal is not None:  # a peer whose library is missing, no draft head: refused before the app starts
        print_error(refusal)
        return 2
    from racer_tui.app import RacerApp
    from racer_tui.engine_loader import default_engine_factory

    load = o.load_arguments(args)
    factory = functools.partial(default_engine_factory, **load) if load else default_engine_factory
    app = RacerApp(
        hooks.get("engine_factory", factory),
        model_path=args.model_path,
        device=args.device,
        dtype=args.dtype,
        overrides=overrides(args),
    )
    app.run()
    return int(app.return_code or 0)
