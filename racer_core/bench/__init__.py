"""Headless benchmarks: question suites, answer files, the runner, speed analysis.

Nothing here imports Textual; torch loads only when the CLI loads an engine.
"""
