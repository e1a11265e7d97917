"""Explicit colours, so charts and snapshots do not depend on terminal themes."""

from __future__ import annotations

from racer_core.events import Source

RETRIEVAL_GREEN = "#3fb950"  # accepted draft token from the automaton
LOGITS_GREEN = "#8ddb8c"  # accepted draft token from the logits table
SOURCE_STYLE: dict[Source, str] = {
    Source.MODEL: "",
    Source.RETRIEVAL: RETRIEVAL_GREEN,
    Source.LOGITS: LOGITS_GREEN,
}

# One colour per method in every dashboard chart (plotext takes RGB tuples).
METHOD_COLORS: dict[str, tuple[int, int, int]] = {
    "ar": (160, 160, 160),
    "racer": (63, 185, 80),
    "retrieval": (88, 166, 255),
    "logits": (210, 153, 34),
    "hf": (188, 140, 255),
    "pld": (255, 123, 114),
    "suffix": (57, 197, 207),
    "recycling": (219, 97, 162),
}
CHART_GREEN = (63, 185, 80)
CHART_BLUE = (88, 166, 255)


def method_color(method: str) -> tuple[int, int, int]:
    return METHOD_COLORS.get(method, (200, 200, 200))
