"""Which processor a measurement was taken on (the cost curve's cache key).

A stored cost curve is this machine's: another CPU prices trees differently
(an AMD Zen 4 runs 512-bit vectors as two 256-bit halves, an Intel Xeon of
the same ISA class does not). The user cache moves with a home directory, a
container's mounted volume or a virtual machine moved to another host, so
the curve's key names the processor, not only its instruction set. Under a
hypervisor the model name may be generic ("AMD EPYC"); the family, model
and stepping still tell the generations apart. Torch-free.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
_FIELDS = ("vendor_id", "cpu family", "model", "stepping", "model name",  # x86
           "CPU implementer", "CPU architecture", "CPU variant", "CPU part", "CPU revision")  # ARM


def processor(cpuinfo: str | os.PathLike[str] = CPUINFO) -> str:
    """This CPU's identity: the first processor's vendor, family, model,
    stepping and model name from Linux's /proc/cpuinfo (an ARM core's
    implementer and part), else what `platform` says."""
    first = _first_processor(cpuinfo)
    if first:
        return "; ".join(f"{k}={first[k]}" for k in _FIELDS if k in first)
    return _platform()


def processor_name(cpuinfo: str | os.PathLike[str] = CPUINFO) -> str:
    """This CPU for a reader: its model name with its family and model
    ("AMD EPYC (family 25, model 17)"), an ARM core's part, else `platform`'s."""
    first = _first_processor(cpuinfo)
    if "model name" in first:
        generation = ", ".join(f"{k.removeprefix('cpu ')} {first[k]}" for k in ("cpu family", "model") if k in first)
        return f"{first['model name']} ({generation})" if generation else first["model name"]
    if "CPU part" in first:
        return f"ARM core, implementer {first.get('CPU implementer', '?')}, part {first['CPU part']}"
    return _platform()


def _platform() -> str:
    return f"{platform.machine()} {platform.processor()}".strip() or "unknown"


def _first_processor(cpuinfo: str | os.PathLike[str]) -> dict[str, str]:
    """The first processor's fields of _FIELDS in Linux's /proc/cpuinfo; {} where it cannot be read.
    Read line by line up to the end of that block: the kernel writes the file as it is read, a block
    per core, and every engine start asks (the curve's key, the benchmark's line)."""
    first: dict[str, str] = {}
    try:
        with open(cpuinfo, errors="replace") as lines:
            for line in lines:
                if not line.strip():
                    if first:
                        break  # the first processor's block only: the other cores repeat the package
                    continue
                name, _, value = line.partition(":")
                name = name.strip()
                if name in _FIELDS and name not in first:
                    first[name] = " ".join(value.split())
    except OSError:
        return {}
    return first
