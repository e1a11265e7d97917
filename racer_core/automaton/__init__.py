"""The RACER automaton: retrieval trie + copy-logit table -> draft trees.

`Automaton` is the compiled C++17 class; `ReferenceAutomaton` the pure-Python
reference with identical behaviour (docs/automaton.md).
"""

from racer_core.automaton.draft import DraftTree
from racer_core.automaton.reference import ReferenceAutomaton

try:
    from racer_core.automaton._automaton import Automaton
except ImportError:  # pragma: no cover - temporary until the extension lands
    Automaton = ReferenceAutomaton  # type: ignore[misc,assignment]

__all__ = ["Automaton", "DraftTree", "ReferenceAutomaton"]
