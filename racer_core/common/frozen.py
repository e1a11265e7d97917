"""A frozen dataclass built without its generated __init__ (issue 44)."""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def built(cls: type[T], **fields: Any) -> T:
    """`cls(**fields)` for a frozen dataclass without __post_init__ or
    __slots__, given every field: its __dict__ filled in one call, where the
    generated __init__ calls object.__setattr__ once a field. Racer builds
    a tree, its cut and the policy's selection on every step, cold from the
    forward pass (docs/performance.md); the tests check it builds what
    `cls(**fields)` builds."""
    made = object.__new__(cls)
    made.__dict__.update(fields)
    return made
