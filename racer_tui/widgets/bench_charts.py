"""The dashboard's four charts, each drawn from a shared BenchBoard."""

from __future__ import annotations

from textual_plotext.plot import Plot

from racer_core.bench.board import BenchBoard
from racer_tui.colors import method_color
from racer_tui.widgets.bars import HBar, HBars, StepBars
from racer_tui.widgets.plot_base import DataPlot


class SpeedChart(DataPlot):
    """Tokens/s of each finished question, one line per method (plotext)."""

    def __init__(self, board: BenchBoard, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.board = board

    def show(self, board: BenchBoard) -> None:
        self.board = board
        self.refresh()

    def draw(self, plt: Plot) -> None:
        plt.title("tokens/s per question")
        plt.xlabel("question")
        top = 1.0
        count = max((len(self.board.per_method[m].speeds) for m in self.board.methods), default=0)
        if count:  # questions are whole numbers: at most 6 ticks, never 1.75
            ticks = list(range(1, count + 1, -(-count // 6)))
            plt.xticks(ticks, [str(t) for t in ticks])
        for method in self.board.methods:
            speeds = self.board.per_method[method].speeds
            if speeds:
                xs = list(range(1, len(speeds) + 1))
                plt.plot(xs, speeds, color=method_color(method), label=method, marker="braille")
                top = max(top, *speeds)
        plt.ylim(0, top * 1.15)


class CategoryChart(HBars):
    """Mean accepted tokens per step, per category and method."""

    def __init__(self, board: BenchBoard, *, id: str | None = None) -> None:
        super().__init__("mean accepted tokens by category", id=id)
        self.board = board

    def show(self, board: BenchBoard) -> None:  # type: ignore[override]
        self.board = board
        bars = []
        for cat in board.categories:
            for i, method in enumerate(board.stepped_methods()):
                mat = board.category_mat(cat, method)
                if mat is not None:
                    label = cat if i == 0 else ""
                    bars.append(HBar(label, mat, method_color(method), f"{method} {mat:.2f}"))
        super().show(bars)


class HistogramChart(HBars):
    """Share of steps that accepted 1, 2, 3… tokens, per method."""

    def __init__(self, board: BenchBoard, *, id: str | None = None) -> None:
        super().__init__("accepted length: share of steps", id=id)
        self.board = board

    def show(self, board: BenchBoard) -> None:  # type: ignore[override]
        self.board = board
        counts = {m: board.per_method[m].length_counts() for m in board.stepped_methods()}
        methods = [m for m in counts if counts[m]]
        bars = []
        longest = max((max(counts[m]) for m in methods), default=0)
        for n in range(1, longest + 1):
            for i, method in enumerate(methods):
                share = counts[method].get(n, 0) / sum(counts[method].values())
                label = f"{n} token{'s' if n > 1 else ''}" if i == 0 else ""
                bars.append(HBar(label, share, method_color(method), f"{method} {share:5.1%}"))
        super().show(bars)


class FlightChart(StepBars):
    """Accepted tokens per step of the question in flight; once the run ends,
    of the last question it ran."""

    def __init__(self, board: BenchBoard, *, id: str | None = None) -> None:
        super().__init__("in flight: no question yet", id=id)
        self.board = board
        self.running = False

    def show(self, board: BenchBoard) -> None:
        self.board = board
        self.sync()

    def sync(self) -> None:
        b = self.board
        if not b.flight_method:
            title = "in flight: none"
        else:
            title = f"{'in flight' if self.running else 'last question'}: {b.flight_method} · {b.flight_place()}"
        self.reset(b.flight.accept_lengths, title)
