"""Drafting methods (their registry is racer_core/common/registry.py): the Drafter
protocol (protocol.py) and the one Tree (tree.py), then one file per method
(racer, plain for ar, eagle3, suffix, recycling, ngram), the automaton and the
chat corpus. docs/drafters.md says how to add one."""
