"""Test-wide isolation: user data, settings and caches go to temporary
directories, never the real home. RACER_TUI_CACHE_DIR may be set by the caller
to reuse a dequantized embedded model between runs."""

from __future__ import annotations

import os
import tempfile

_root = tempfile.mkdtemp(prefix="racer-tests-")
os.environ["RACER_TUI_DATA_DIR"] = os.path.join(_root, "data")
os.environ["RACER_TUI_CONFIG_DIR"] = os.path.join(_root, "config")
os.environ.setdefault("RACER_TUI_CACHE_DIR", os.path.join(_root, "cache"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
