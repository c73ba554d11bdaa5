#!/usr/bin/env python3
"""A program linked against NVIDIA's libcudart runs unchanged on simgpu.

Given the program (built with plain g++ against /usr/local/cuda) and simgpu's build
folder, checks that:
- the program needs libcudart.so.13 and binds every CUDA runtime symbol it uses at
  version libcudart.so.13, as a real build does;
- simgpu's libcudart.so.13 defines each of those symbols at that version;
- run with LD_LIBRARY_PATH=<simgpu folder>, the program loads simgpu's runtime (not
  NVIDIA's), exits 0 and prints ALL OK with the answers it checked.
Exit status 0 when all hold; 1 with a list of what did not.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

VERSION = "libcudart.so.13"


def readelf(*args: str) -> str:
    return subprocess.run(["readelf", "-W", *args], check=True, capture_output=True,
                          text=True).stdout


def undefined_cuda_symbols(program: Path) -> dict[str, str]:
    """Undefined cuda* symbols of the program -> the version they bind to ('' if none)."""
    found: dict[str, str] = {}
    for line in readelf("--dyn-syms", str(program)).splitlines():
        cols = line.split()
        if len(cols) < 8 or cols[6] != "UND":
            continue
        name, _, version = cols[7].partition("@")
        if name.startswith("cuda") or name.startswith("__cuda"):
            found[name] = version.split()[0].lstrip("@") if version else ""
    return found


def defined_symbols(library: Path) -> dict[str, set[str]]:
    """Defined dynamic symbols of the library -> the versions they are defined at."""
    defined: dict[str, set[str]] = {}
    for line in readelf("--dyn-syms", str(library)).splitlines():
        cols = line.split()
        if len(cols) < 8 or cols[6] == "UND":
            continue
        name, _, version = cols[7].partition("@")
        defined.setdefault(name, set()).add(version.lstrip("@"))
    return defined


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("program", type=Path)
    parser.add_argument("simgpu_dir", type=Path)
    args = parser.parse_args()
    problems: list[str] = []

    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]",
                        readelf("-d", str(args.program)))
    if VERSION not in needed:
        problems.append(f"program does not need {VERSION}: NEEDED {needed}")

    used = undefined_cuda_symbols(args.program)
    if len(used) < 10:
        problems.append(f"expected the program to use many runtime symbols, found {sorted(used)}")
    for name, version in sorted(used.items()):
        if version != VERSION:
            problems.append(f"program binds {name} at version '{version}', not {VERSION}")

    library = args.simgpu_dir / VERSION
    if not library.exists():
        problems.append(f"simgpu has no {library}")
    else:
        defined = defined_symbols(library)
        for name in sorted(used):
            if VERSION not in defined.get(name, set()):
                problems.append(f"simgpu's {VERSION} lacks {name}@{VERSION} "
                                f"(has {sorted(defined.get(name, set())) or 'nothing'})")

    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = str(args.simgpu_dir)
    env.setdefault("SIMGPU_DEVICE_DIR", str(args.simgpu_dir / "devices"))
    for var in ("SIMGPU_FAIL", "SIMGPU_MEMORY", "SIMGPU_DEVICE", "SIMGPU_RACE"):
        env.pop(var, None)
    run = subprocess.run([str(args.program)], env=env, capture_output=True, text=True,
                         timeout=60)
    sys.stdout.write(run.stdout)
    sys.stderr.write(run.stderr)
    if run.returncode != 0:
        problems.append(f"program exited with status {run.returncode}")
    if "ALL OK" not in run.stdout.splitlines():
        problems.append("program did not print ALL OK")
    loaded = re.search(r"^libcudart=(.+)$", run.stdout, re.MULTILINE)
    if not loaded:
        problems.append("program did not say where its runtime came from")
    elif Path(loaded.group(1)).resolve().parent != args.simgpu_dir.resolve():
        problems.append(f"program loaded {loaded.group(1)}, not simgpu's runtime")
    if "device_count=1" not in run.stdout.splitlines():
        problems.append("simgpu should show exactly one device")

    for p in problems:
        print(f"check_real_cudart: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
