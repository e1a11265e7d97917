"""The app's one palette: explicit colours, so charts and snapshots do not
depend on terminal themes, and every legend is drawn from the colours the
text itself uses.

The two draft greens differ in lightness, not only in hue, so they stay apart
on any screen: a mid green for the automaton and a light green for the logits
table. Both are xterm-256 colours (34 and 120), so a 256-colour terminal shows
them as they are.
"""

from __future__ import annotations

from racer_core.common import registry
from racer_core.common.events import Source

# Every source's colour is declared with its method (racer_core/common/registry.py).
SOURCE_STYLE: dict[Source, str] = {Source(spec.id): spec.colour for spec in registry.sources()}
RETRIEVAL_GREEN = SOURCE_STYLE[Source.RETRIEVAL]  # accepted draft token from the automaton (xterm 34)
LOGITS_GREEN = SOURCE_STYLE[Source.LOGITS]  # accepted draft token from the logits table (xterm 120)
HEAD_CYAN = SOURCE_STYLE[Source.HEAD]  # accepted draft token from a trained draft head, eagle3 (xterm 44)


def rgb_of(hex_colour: str) -> tuple[int, int, int]:
    """"#rrggbb" as the (r, g, b) tuple plotext takes."""
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return r, g, b


# The step charts: accepted drafts in the automaton's green, the bonus token in blue.
CHART_GREEN = rgb_of(RETRIEVAL_GREEN)
CHART_BLUE = (88, 166, 255)

# One colour per method in every dashboard chart (declared in the registry).
METHOD_COLORS: dict[str, tuple[int, int, int]] = {spec.name: spec.colour for spec in registry.METHOD_SPECS}


def method_color(method: str) -> tuple[int, int, int]:
    return METHOD_COLORS.get(method, (200, 200, 200))
