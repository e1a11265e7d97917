"""`ar`: plain decoding, the drafter that never drafts (every step verifies the root alone)."""

from __future__ import annotations

from racer_core.drafting.protocol import Drafter


class PlainDrafter(Drafter):
    """The protocol's defaults: no state, no drafts."""
