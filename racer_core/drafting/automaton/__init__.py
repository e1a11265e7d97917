"""The RACER automaton: retrieval trie + copy-logit table -> draft trees.

`Automaton` is the compiled C++17 class; `ReferenceAutomaton` the pure-Python
reference with identical behaviour (docs/automaton.md).
"""

from racer_core.drafting.automaton.draft import DraftTree
from racer_core.drafting.automaton.reference import ReferenceAutomaton

try:
    from racer_core.drafting.automaton._automaton import Automaton
except ImportError as error:  # the extension is built, never silently replaced
    raise ImportError(
        "racer_core.drafting.automaton._automaton is not built: run "
        "`pip install -e . --no-build-isolation --no-deps` or "
        "`python setup.py build_ext --inplace` in the repository root"
    ) from error

__all__ = ["Automaton", "DraftTree", "ReferenceAutomaton"]
