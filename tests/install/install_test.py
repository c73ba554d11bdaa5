#!/usr/bin/env python3
"""oversub installed as its users install it, then used through the installed command.

  --case prefix  `meson install --destdir` of this build folder: bin/oversub,
                 liboversub.so in libdir, the programs and device models beside;
  --case pip     `pip install .` of the repository (meson-python, pyproject.toml)
                 into a fresh virtual environment, offline (--no-index,
                 --no-build-isolation): the `oversub` command, liboversub.so inside
                 the package, and nothing of simgpu or the tests.

Both then check, through the installed `oversub` only:
  - `oversub run` preloads the installed liboversub.so by its absolute path (read
    back from the command's own /proc/self/maps), not a build folder's;
  - a bare `liboversub.so` already in LD_PRELOAD is replaced, with a message;
  - the demo: simtrain on simgpu, on a device of a third of its peak, fails
    without oversub and runs under `oversub run --mode swap --stats` to the same
    losses as with plenty of memory (simgpu and simtrain come from this build
    folder: they are not installed, See Note [Install layout] in meson.build);
  - `oversub simulate` runs the installed simulator on the installed device models;
  - `oversub options` runs the installed oversub-options, where it is built.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DEMO_ARGS = ["--depth", "8", "--width", "512", "--batch", "128", "--iters", "4"]
ITER_RE = re.compile(r"^iter \d+ loss \S+ \(bits 0x[0-9a-f]{8}\)$", re.MULTILINE)
PEAK_RE = re.compile(r"^peak device bytes: (\d+)$", re.MULTILINE)
OOM_RE = re.compile(r"cudaErrorMemoryAllocation")
LIB = "liboversub.so"


class Failure(Exception):
    pass


def expect(ok: bool, what: str, proc: subprocess.CompletedProcess[str] | None = None) -> None:
    if not ok:
        if proc is not None:
            what += (f"\n$ {' '.join(map(str, proc.args))}\nexit {proc.returncode}\n"
                     f"--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}")
        raise Failure(what)


def run(cmd: list, env: dict[str, str] | None = None, timeout: int = 300,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("OVERSUB_", "SIMGPU_")) and k != "LD_PRELOAD"}
    base.update(env or {})
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=base,
                          timeout=timeout, cwd=cwd)


def check_installed(oversub: Path, installed_lib: Path, tree: Path, args: argparse.Namespace,
                    work: Path) -> None:
    """The checks of the module docstring, through the command oversub."""
    modules = {p.name for p in (args.source / "scripts" / "lib").glob("*.py")}
    installed = {p.name for p in tree.rglob("*.py")}
    expect(modules <= installed, f"scripts/lib modules not installed (add them to the root "
           f"meson.build): {sorted(modules - installed)}")
    # The library preloaded is the installed one, by its absolute path.
    proc = run([oversub, "run", "--", "cat", "/proc/self/maps"])
    expect(proc.returncode == 0, "oversub run -- cat /proc/self/maps failed", proc)
    mapped = {line.split()[-1] for line in proc.stdout.splitlines()
              if line.split() and line.split()[-1].endswith("/" + LIB)}
    expect(mapped == {str(installed_lib.resolve())},
           f"the process mapped {sorted(mapped) or 'no liboversub.so'}, not the installed "
           f"{installed_lib.resolve()}", proc)
    expect(installed_lib.resolve().is_relative_to(tree.resolve()),
           f"{installed_lib} is not inside the installed tree {tree}")
    print(f"oversub run preloads {installed_lib}")

    # A bare name in LD_PRELOAD is replaced by the absolute path, and said so.
    proc = run([oversub, "run", "--", "/bin/sh", "-c", 'echo "$LD_PRELOAD"'],
               {"LD_PRELOAD": LIB})
    expect(proc.returncode == 0 and proc.stdout.strip() == str(installed_lib.resolve()),
           f"LD_PRELOAD={LIB}: the command saw LD_PRELOAD={proc.stdout.strip()!r}", proc)
    expect(f"names {LIB} without a path" in proc.stderr,
           "no message about the bare liboversub.so in LD_PRELOAD", proc)
    print(f"a bare {LIB} in LD_PRELOAD is replaced, with a message")

    # The demo: the same losses on a third of the memory, under oversub's swap mode.
    sim = {"LD_LIBRARY_PATH": str(args.simgpu), "SIMGPU_DEVICE": "h100-pcie",
           "SIMGPU_DEVICE_DIR": str(args.simgpu / "devices")}
    plain = run([args.simtrain, *DEMO_ARGS], {**sim, "SIMGPU_MEMORY": "1GiB"})
    expect(plain.returncode == 0, "simtrain fails on simgpu with 1GiB", plain)
    losses = ITER_RE.findall(plain.stdout)
    peak = PEAK_RE.search(plain.stdout)
    expect(len(losses) == 4 and peak is not None, "simtrain printed no losses or peak", plain)
    small = str(int(peak.group(1)) // 3)
    oom = run([args.simtrain, *DEMO_ARGS], {**sim, "SIMGPU_MEMORY": small})
    expect(oom.returncode != 0 and OOM_RE.search(oom.stdout + oom.stderr) is not None,
           f"simtrain does not run out of memory on {small} bytes", oom)
    swap = run([oversub, "run", "--mode", "swap", "--stats", "--", args.simtrain, *DEMO_ARGS],
               {**sim, "SIMGPU_MEMORY": small, "SIMGPU_RACE": "abort"})
    expect(swap.returncode == 0, f"oversub run --mode swap fails on {small} bytes", swap)
    expect(ITER_RE.findall(swap.stdout) == losses,
           "the losses under oversub differ from those with plenty of memory", swap)
    expect("swap device 0" in swap.stderr, "no swap statistics printed (--stats)", swap)
    print(f"demo: simtrain on {small} bytes (a third of its peak) runs out of memory alone "
          f"and, under the installed oversub in swap mode, gives the same {len(losses)} losses")

    # The simulator and the device models, from the installed tree.
    profile = args.source / "traces" / "resnet50-b32.oprof"
    proc = run([oversub, "simulate", profile, "--device", "a100", "--json"], cwd=work)
    expect(proc.returncode == 0, "oversub simulate fails", proc)
    result = json.loads(proc.stdout)
    expect(isinstance(result, dict) and result, "oversub simulate printed no JSON", proc)
    print(f"oversub simulate {profile.name} --device a100: the installed simulator and models")

    programs = [p for p in tree.rglob("oversub-options") if p.is_file()]
    if programs:
        proc = run([oversub, "options"])
        expect(proc.returncode == 0 and "OVERSUB_MODE" in proc.stdout,
               "oversub options fails with the installed oversub-options", proc)
        print("oversub options: the installed oversub-options")


def case_prefix(args: argparse.Namespace, work: Path) -> None:
    dest = work / "dest"
    proc = run(["meson", "install", "-C", args.build, "--no-rebuild", "--destdir", dest],
               timeout=600)
    expect(proc.returncode == 0, "meson install --destdir failed", proc)
    commands = [p for p in dest.rglob("bin/oversub") if p.is_file()]
    libs = [p for p in dest.rglob(LIB) if p.is_file()]
    expect(len(commands) == 1 and len(libs) == 1,
           f"installed: commands {commands}, libraries {libs} (one of each expected)")
    expect(os.access(commands[0], os.X_OK), f"{commands[0]} is not executable")
    for stray in ("libcuda.so.1", "libcudart.so.13", "simtrain"):
        expect(not list(dest.rglob(stray)), f"{stray} (simgpu, the tests) was installed")
    # Relocatable: move the whole tree, and it still finds its parts.
    moved = work / "moved"
    shutil.move(str(dest), str(moved))
    commands = [p for p in moved.rglob("bin/oversub") if p.is_file()]
    libs = [p for p in moved.rglob(LIB) if p.is_file()]
    print(f"meson install: {commands[0].relative_to(moved)}, {libs[0].relative_to(moved)}")
    check_installed(commands[0], libs[0], moved, args, work)


def python_with_mesonpy() -> str:
    for python in (sys.executable, "/usr/bin/python3"):
        if Path(python).is_file() and subprocess.run(
                [python, "-c", "import mesonpy, venv"], capture_output=True).returncode == 0:
            return python
    raise Failure("no Python with meson-python (mesonpy) and venv: install Debian's "
                  "python3-mesonpy python3-venv (./scripts/test does)")


def case_pip(args: argparse.Namespace, work: Path) -> None:
    python = python_with_mesonpy()
    venv = work / "venv"
    # The system's site-packages give the build backend (meson-python) offline.
    proc = run([python, "-m", "venv", "--system-site-packages", venv])
    expect(proc.returncode == 0, "python3 -m venv failed", proc)
    # A fresh build folder at a fixed place, so that ccache (where CC names it) finds
    # the objects of the last run.
    builddir = args.pip_build
    shutil.rmtree(builddir, ignore_errors=True)
    # meson-python 0.12 writes its native file into the source folder: not left there.
    native_file = args.source / ".mesonpy-native-file.ini"
    had_native_file = native_file.exists()
    proc = run([venv / "bin" / "python", "-m", "pip", "install", "--no-index",
                "--no-build-isolation", "--no-deps", "--quiet",
                f"--config-settings=builddir={builddir}",
                f"--config-settings=setup-args=-Dcudatoolkit={args.cuda_root}", args.source],
               timeout=1500)
    if not had_native_file:
        native_file.unlink(missing_ok=True)
    shutil.rmtree(builddir, ignore_errors=True)
    expect(proc.returncode == 0, "pip install . failed", proc)
    oversub = venv / "bin" / "oversub"
    expect(oversub.is_file(), f"pip install . made no {oversub}")
    site = [p for p in venv.glob("lib/python3*/site-packages/oversub") if p.is_dir()]
    expect(len(site) == 1, f"no package oversub in the venv's site-packages: {site}")
    installed_lib = site[0] / LIB
    expect(installed_lib.is_file(), f"no {LIB} inside the package ({site[0]})")
    record = next(venv.glob("lib/python3*/site-packages/oversub-*.dist-info/RECORD"))
    files = [line.split(",")[0] for line in record.read_text().splitlines()]
    for stray in ("libcuda", "libcudart", "libcupti", "simtrain", "_test", "setup.sh"):
        bad = [f for f in files if stray in Path(f).name]
        expect(not bad, f"the package holds test or simgpu files: {bad}")
    print(f"pip install .: {oversub.relative_to(work)}, {len(files)} files, "
          f"{installed_lib.relative_to(work)}")
    check_installed(oversub, installed_lib, site[0], args, work)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", choices=["prefix", "pip"], required=True)
    ap.add_argument("--build", type=Path, required=True, help="this meson build folder")
    ap.add_argument("--source", type=Path, required=True, help="the repository")
    ap.add_argument("--simgpu", type=Path, required=True, help="<build>/tests/simgpu")
    ap.add_argument("--simtrain", type=Path, required=True)
    ap.add_argument("--cuda-root", type=Path, required=True)
    ap.add_argument("--pip-build", type=Path, help="meson-python's build folder (pip case)")
    args = ap.parse_args()
    for name in ("build", "source", "simgpu", "simtrain", "pip_build"):
        if getattr(args, name) is not None:
            setattr(args, name, getattr(args, name).resolve())
    with tempfile.TemporaryDirectory(prefix=f"oversub-install-{args.case}-") as tmp:
        try:
            (case_prefix if args.case == "prefix" else case_pip)(args, Path(tmp))
        except (Failure, subprocess.TimeoutExpired) as e:
            print(f"FAIL: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
