"""Structured output: a reply's Grammar (racer_core/common/grammar.py)
compiled for a model's vocabulary and followed token by token, on every tree
node (docs/design.md, "Structured output"). Needs the optional extra
[structured] (llguidance); `library.llguidance()` refuses in one line without it.

- library.py: the optional import and its one-line refusal;
- vocabulary.py: a tokenizer's tokens as bytes, and the engine's tokenizer built from them;
- compile.py: a Grammar as llguidance's grammar text, checked and cached per vocabulary;
- matcher.py: one reply's grammar state: masks, forced tokens, accept and roll back;
- tree_walk.py: a drafted tree walked with the matcher: pruned, extended, a mask per node.
"""
