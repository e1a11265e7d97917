"""A stored cost curve belongs to the processor it was measured on
(racer_core/budget/processor.py): the user cache moves with a home
directory, and a curve measured on another CPU of the same ISA class priced
this one's trees (an Intel Xeon's curve was read on an AMD Zen 4)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import scripted_on
from engine_helpers import SMALL_VOCAB

from racer_core.budget import cost_curve
from racer_core.budget.processor import processor, processor_name
from racer_core.engine import engine as engine_module
from racer_core.engine.engine import RacerEngine
from racer_core.testing import tiny_model

XEON = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480+
stepping\t: 8
flags\t\t: fpu avx2 avx512f avx512_vnni

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
"""
EPYC = XEON.replace("GenuineIntel", "AuthenticAMD").replace("cpu family\t: 6", "cpu family\t: 25").replace(
    "model\t\t: 143", "model\t\t: 17").replace("Intel(R) Xeon(R) Platinum 8480+", "AMD EPYC")
ARM = """processor\t: 0
BogoMIPS\t: 50.00
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c
CPU revision\t: 1
"""


def _file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_processor_is_its_vendor_family_model_stepping_and_name(tmp_path: Path) -> None:
    xeon = processor(_file(tmp_path, "xeon", XEON))
    assert xeon == ("vendor_id=GenuineIntel; cpu family=6; model=143; stepping=8; "
                    "model name=Intel(R) Xeon(R) Platinum 8480+")
    epyc = processor(_file(tmp_path, "epyc", EPYC))
    assert epyc != xeon and "cpu family=25; model=17" in epyc
    assert processor(_file(tmp_path, "arm", ARM)) == (
        "CPU implementer=0x41; CPU architecture=8; CPU variant=0x3; CPU part=0xd0c; CPU revision=1")


def test_without_cpuinfo_the_processor_is_what_platform_says(tmp_path: Path) -> None:
    assert processor(tmp_path / "missing") and processor(_file(tmp_path, "empty", ""))


def test_a_curve_measured_on_one_processor_is_not_read_on_another(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    keys: list[tuple[str, ...]] = []

    def record(key, grid, measure, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        keys.append(tuple(key))
        return scripted_on(grid)

    monkeypatch.setattr(cost_curve, "load_or_measure", record)
    model = tiny_model("llama", 0, vocab_size=SMALL_VOCAB)
    for text in (XEON, EPYC, XEON):
        named = processor(_file(tmp_path, "cpuinfo", text))
        monkeypatch.setattr(engine_module, "processor", lambda named=named: named)
        RacerEngine(model, None, "tiny-processor", eos_ids=frozenset()).cost_curve()
    assert keys[0] == keys[2] and keys[0] != keys[1]
    assert cost_curve.curve_cache_path(keys[0]) != cost_curve.curve_cache_path(keys[1])
    assert any("Xeon" in part for part in keys[0]) and any("AMD EPYC" in part for part in keys[1])


def test_the_processor_for_a_reader_is_its_name_family_and_model(tmp_path: Path) -> None:
    assert processor_name(_file(tmp_path, "xeon", XEON)) == "Intel(R) Xeon(R) Platinum 8480+ (family 6, model 143)"
    assert processor_name(_file(tmp_path, "epyc", EPYC)) == "AMD EPYC (family 25, model 17)"
    assert processor_name(_file(tmp_path, "arm", ARM)) == "ARM core, implementer 0x41, part 0xd0c"
    assert processor_name(tmp_path / "missing")
