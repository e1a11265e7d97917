"""A plotext chart that redraws itself from its own data at every render.

Keeping the data on the widget and drawing in render() means many updates per
frame cost one drawing, and a snapshot always shows the latest data.
"""

from __future__ import annotations

from rich.console import RenderableType
from textual_plotext import PlotextPlot
from textual_plotext.plot import Plot


class DataPlot(PlotextPlot):
    def draw(self, plt: Plot) -> None:
        raise NotImplementedError

    def render(self) -> RenderableType:
        plt = self.plt
        plt.clear_figure()
        self.draw(plt)
        return super().render()
