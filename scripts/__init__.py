"""Measurement and study scripts, each run as `python scripts/NAME.py` from the
repository root; a package so that tests import them as `scripts.NAME` (the
repository root is on the tests' path) instead of editing sys.path."""
