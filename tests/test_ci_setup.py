"""CI runs what the README tells a user to run, and its property tests reproduce.

.ci/run takes the fenced bash block under the README's "## Test" heading and
runs it as written (.ci/readme-block extracts it), so the two cannot drift;
these tests catch a README whose block CI could not find before CI does.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]


def readme_block(readme: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(ROOT / ".ci" / "readme-block"), str(readme), "## Test"],
                          capture_output=True, text=True, timeout=30)


def test_ci_runs_the_readmes_test_block() -> None:
    done = readme_block(ROOT / "README.md")
    assert done.returncode == 0, done.stderr
    command = done.stdout
    for step in (".venv", 'pip install -e ".[test', "python -m pytest"):  # .[test] or .[test,more extras]
        assert step in command, step
    run = (ROOT / ".ci" / "run").read_text()
    assert ".ci/readme-block README.md" in run and 'bash -eo pipefail -c "$test_command"' in run
    assert "pip install" not in run and "-m pytest" not in run  # not repeated: the README's block does it


def test_a_readme_without_the_block_fails_in_one_line(tmp_path: Path) -> None:
    for text in ("# x\n## Test\nno block\n## Use\n```bash\nnot this\n```\n", "## Test\n```bash\nunclosed\n",
                 "## Test\n```bash\n```\n", "## Testing\n```bash\nx\n```\n"):
        readme = tmp_path / "README.md"
        readme.write_text(text)
        done = readme_block(readme)
        assert done.returncode != 0 and done.stdout == "", text
        assert done.stderr.strip() == f'ci: no fenced bash block under "## Test" in {readme}'
    readme.write_text("## Test\n\nrun it:\n\n```bash\nmake venv &&\n  python -m pytest\n```\n\n## Use\n")
    assert readme_block(readme).stdout == "make venv &&\n  python -m pytest\n"


def test_property_tests_are_derandomized_in_ci() -> None:
    ci = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
    # tests/conftest.py picks the profile: the same examples every CI run, none replayed from a database
    assert settings.default.derandomize == ci
    assert (settings.default.database is None) == ci
