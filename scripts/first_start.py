"""Time racer-tui's start to a usable chat: a first start on a fresh cache and
later starts, each the real app in a fresh Python (headless, so no terminal is
needed; the imports count, as in a user's start).

"Usable" is the moment the chat screen is shown with the model loaded and its
cost curve known, ready to answer (the app's EngineReady handled and the frame
drawn). Each start prints its milestones in seconds from the process's spawn:
first frame (the loading view drawn), typing (the loading view's prompt has
the keys: a message typed there is sent once the model is ready), the
loader's steps as the loading view shows them, and ready.

    python scripts/first_start.py                      # a fresh cache: dequantize, cost curve; then later starts
    python scripts/first_start.py --models-from /work/cache --later 5   # reuse a dequantized model
    python scripts/first_start.py --cpu-marks          # each milestone in the child's CPU seconds: where a start's work goes

Settings, history and the cache go to temporary folders (deleted afterwards),
so the user's own are neither read nor changed. Python may write bytecode in
the children (as a pip install has it compiled): the figures are a user's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


CHILD = r"""
import json, sys, time
from pathlib import Path
spawned = float(sys.argv[1])
cpu_marks = sys.argv[3] == "cpu"
def now():
    # CPU seconds of all threads (--cpu-marks): a busy machine stretches the wall time, hardly this
    return round(time.process_time(), 2) if cpu_marks else round(time.monotonic() - spawned, 2)
marks = {}
from racer_tui.app import RacerApp
from racer_tui.engine_loader import default_engine_factory
marks["ui imports"] = now()

def factory(*args, progress=None, **kwargs):
    marks["loader starts"] = now()
    def told(text, fraction):
        marks.setdefault(text.split("(")[0].split("...")[0].strip(), now())
        if progress:
            progress(text, fraction)
    return default_engine_factory(*args, progress=told, **kwargs)

class Timed(RacerApp):
    CSS_PATH = str(Path(sys.modules[RacerApp.__module__].__file__).with_name(RacerApp.CSS_PATH))

    def on_ready(self):
        marks["first frame"] = now()
        self.typing()
    def typing(self):
        if getattr(self.focused, "id", None) == "early-prompt":
            marks.setdefault("typing", now())
        elif "typing" not in marks and "ready" not in marks:
            self.set_timer(0.01, self.typing)
    def on_engine_ready(self, message):
        super().on_engine_ready(message)
        def shown():
            marks["ready"] = now()
            marks["cpu"] = round(time.process_time(), 2)  # all threads: near the wall time on an idle machine
            self.exit()
        self.call_after_refresh(shown)
    def on_engine_failed(self, message):
        marks["failed"] = message.error
        self.exit(return_code=1)

app = Timed(factory, dtype=sys.argv[2])
app.run(headless=True, size=(100, 30))
print(json.dumps(marks))
"""


def child_environment(root: Path) -> dict[str, str]:
    """The children's environment: cache, data and config folders under `root`;
    the embedded model where `racer-tui install-model` put it (this user's
    models folder), as a user's app finds it."""
    from racer_core.common.paths import models_dir

    env = {**os.environ, **{f"RACER_TUI_{d.upper()}_DIR": str(root / d) for d in ("cache", "data", "config")}}
    env["RACER_TUI_MODELS_DIR"] = str(models_dir())
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def start(child: Path, env: dict[str, str], dtype: str, cpu_marks: bool = False) -> dict[str, float]:
    """One app start in a fresh Python; its milestones in seconds from the spawn (CPU seconds with `cpu_marks`)."""
    spawned = time.monotonic()
    argv = [sys.executable, str(child), repr(spawned), dtype, "cpu" if cpu_marks else "wall"]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    lines = out.stdout.strip().splitlines()
    if out.returncode or not lines:
        sys.exit(f"the app did not start: {(lines or out.stderr.strip().splitlines() or ['?'])[-1]}")
    marks = json.loads(lines[-1])
    if "failed" in marks:  # the app ran but its engine did not load (the child exits 0 either way)
        sys.exit(f"the app did not start: {marks['failed']}")
    return marks


def show(label: str, marks: dict[str, float], digits: int = 1) -> None:
    steps = ", ".join(f"{k} {v:.{digits}f}" for k, v in marks.items() if k not in ("ready", "cpu"))
    print(f"{label}: ready {marks['ready']:.1f} s, CPU {marks['cpu']:.1f} s  ({steps})", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models-from", type=Path, help="link this cache's models/ folder (no dequantize)")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--later", type=int, default=3, metavar="N", help="later starts to time (default 3)")
    parser.add_argument("--cpu-marks", action="store_true",
                        help="the milestones in the child's CPU seconds (all threads) instead of wall seconds; "
                             "ready is then a CPU figure too")
    args = parser.parse_args(argv)
    print("load average:", " ".join(f"{x:.2f}" for x in os.getloadavg()),
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}", flush=True)
    with tempfile.TemporaryDirectory(prefix="racer-first-start-") as tmp:
        root = Path(tmp)
        child = root / "timed_app.py"  # a file: Textual reads its classes' source
        child.write_text(CHILD)
        env = child_environment(root)
        if args.models_from is not None:
            (root / "cache").mkdir()
            (root / "cache" / "models").symlink_to((args.models_from / "models").resolve())
        first = start(child, env, args.dtype, args.cpu_marks)
        digits = 2 if args.cpu_marks else 1  # CPU marks are steadier: their hundredths mean something
        show("first start" + (" (models linked)" if args.models_from else ""), first, digits)
        later = [start(child, env, args.dtype, args.cpu_marks) for _ in range(args.later)]
        for i, marks in enumerate(later):
            show(f"later start {i + 1}", marks, digits)
        for what in ("typing", "ready", "cpu"):
            values = [m[what] for m in later if what in m]
            if values:
                print(f"later starts, {what}: min {min(values):.1f} s, median {statistics.median(values):.1f} s",
                      flush=True)
    print("load average:", " ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)


if __name__ == "__main__":
    main()
