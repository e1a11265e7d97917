"""The dashboard's four charts, each drawn from a shared BenchBoard."""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget
from textual_plotext.plot import Plot

from racer_core.bench.board import BenchBoard
from racer_tui.colors import method_color
from racer_tui.widgets.bars import HBar, HBars, StepBars, rgb
from racer_tui.widgets.plot_base import DataPlot

SPEED_TITLE = "tokens/s per question"


def speed_legend(methods: list[str], width: int) -> Text:
    """The chart's title, then a square in each method's colour and its name,
    as many to a line as fit (a line ends between entries, never inside one)."""
    entries = [Text(SPEED_TITLE, style="bold")]
    entries += [Text.assemble(("■", rgb(method_color(m))), " ", m) for m in methods]
    out, line = Text(no_wrap=True, overflow="crop"), 0
    for i, entry in enumerate(entries):
        if i and line + 1 + len(entry) > width:
            out.append("\n")
            line = 0
        elif i:
            out.append(" ")
            line += 1
        out.append_text(entry)
        line += len(entry)
    return out


class SpeedLegend(Widget):
    """The speed chart's title and legend, above the plot: plotext draws its
    legend inside the plot, over the lines, which at 80x24 hid most of them."""

    DEFAULT_CSS = "SpeedLegend { height: auto; }"

    def __init__(self, board: BenchBoard, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.board = board

    def show(self, board: BenchBoard) -> None:
        self.board = board
        self.refresh(layout=True)  # more methods may take another line

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(speed_legend(self.board.methods, width).plain.splitlines())

    def render(self) -> RenderableType:
        return speed_legend(self.board.methods, self.size.width)


class SpeedChart(DataPlot):
    """Tokens/s of each finished question, one line per method (plotext);
    SpeedLegend names them."""

    def __init__(self, board: BenchBoard, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.board = board

    def show(self, board: BenchBoard) -> None:
        self.board = board
        self.refresh()

    def draw(self, plt: Plot) -> None:
        top = 1.0
        count = max((len(self.board.per_method[m].speeds) for m in self.board.methods), default=0)
        if count:  # questions are whole numbers: at most 6 ticks, never 1.75
            ticks = list(range(1, count + 1, -(-count // 6)))
            plt.xticks(ticks, [str(t) for t in ticks])
        for method in self.board.methods:
            speeds = self.board.per_method[method].speeds
            if speeds:
                xs = list(range(1, len(speeds) + 1))
                plt.plot(xs, speeds, color=method_color(method), marker="braille")
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
