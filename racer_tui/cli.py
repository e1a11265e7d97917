"""The `racer-tui` command: dispatches before importing anything heavy.

`--bench` and `speed` run headless and never import Textual; everything else
opens (or serves) the Textual app.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "speed":
        from racer_core.bench.speed import main as speed_main

        return speed_main(args[1:])
    if any(a == "--bench" or a.startswith("--bench=") for a in args):
        from racer_core.bench.cli import main as bench_main

        return bench_main(args)
    from racer_tui.app import main as app_main

    return app_main(args)


if __name__ == "__main__":
    sys.exit(main())
