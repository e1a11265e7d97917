"""`python -m unittest tests.test_automaton_paper_alignment -v` from the
repository root, the command the original documents, runs the paper-alignment
cases, which live in tests/core/. pytest collects them there and leaves this
file out (tests/conftest.py)."""

from __future__ import annotations

import unittest
from importlib import import_module


def load_tests(loader: unittest.TestLoader, tests: unittest.TestSuite, pattern: str | None) -> unittest.TestSuite:
    return loader.loadTestsFromModule(import_module("tests.core.test_automaton_paper_alignment"))
