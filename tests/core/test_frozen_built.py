"""common/frozen.py's `built`: what the frozen dataclass's own __init__ builds (issue 44)."""

from __future__ import annotations

import dataclasses

import pytest

from racer_core.budget.tree_policy import Selection
from racer_core.common.frozen import built
from racer_core.drafting.tree import Tree


@pytest.mark.parametrize("cls", [Tree, Selection])
def test_built_is_the_dataclass_init(cls: type) -> None:
    fields = {f.name: object() for f in dataclasses.fields(cls)}  # distinct values, compared by identity
    made, reference = built(cls, **fields), cls(**fields)
    assert type(made) is cls
    assert {k: id(v) for k, v in vars(made).items()} == {k: id(v) for k, v in vars(reference).items()}
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.rule = "x"  # still frozen
    assert dataclasses.replace(made, fed=3).fed == 3
