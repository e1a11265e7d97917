"""The `racer-tui` command: dispatches before importing anything heavy.

`--bench`/`--bench-name`, `speed` and `score` run headless and never import Textual; everything else
opens (or serves) the Textual app.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "speed":
        from racer_core.bench.speed import main as speed_main

        return speed_main(args[1:])
    if args and args[0] == "score":
        from racer_core.bench.score_cli import main as score_main

        return score_main(args[1:])
    if any(a in ("--bench", "--bench-name") or a.startswith(("--bench=", "--bench-name=")) for a in args):
        from racer_core.bench.cli import main as bench_main

        return bench_main(args)
    from racer_tui.app import main as app_main

    return app_main(args)


if __name__ == "__main__":
    sys.exit(main())
