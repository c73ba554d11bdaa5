#!/usr/bin/env python3
"""Runs programs under LD_PRELOAD=liboversub.so and checks what they print.

Each --case is one meson test (suite 'preload'). Programs run as subprocesses in
the environment meson gives the test (simgpu_env for the simgpu programs), with
LD_PRELOAD set, and OVERSUB_* variables per run:

  losses       simtrain's per-iteration loss bits are identical without the library
               and under OVERSUB_MODE=off and track, for one simtrain mode
               (--mode-args: '', '--caching', '--streams 2', ...)
  oom          OVERSUB_DEVICE_LIMIT below simtrain's footprint: simtrain's clean
               cudaErrorMemoryAllocation message and exit 1, no signal
  memgetinfo   cudaMemGetInfo reports the virtual total and free under a limit and
               an allocation past it is refused with nothing allocated
  bad-value    OVERSUB_DEVICE_LIMIT=12XB (and other bad values) exit 2 before main,
               naming the variable; an unknown OVERSUB_* name only warns
  real-runtime a program linked against the real CUDA runtime (no GPU here: every
               call fails) prints the same return codes with and without the library
  real-runtime-stub
               the same over the toolkit's stub libcuda.so (loaded by the runtime as
               libcuda.so.1, its cuGetProcAddress_v2 found through our dlsym)
  fork         a child forked after CUDA use passes through (its return codes are
               CUDA's, as without the library, not a limit refusal), exits cleanly, and
               prints no stats of its own
  stress       8 threads allocate/launch/free; the JSON stats count every
               allocation and free, and nothing is left live
  cli          scripts/oversub run: appends to LD_PRELOAD, sets the OVERSUB_*
               variables from its options, passes the command's exit status on
  pool-losses  simtrain's loss bits identical without the library and under
               OVERSUB_MODE=pool with OVERSUB_POOL=online and planned, with
               SIMGPU_RACE=abort (a block reused before the work on it is ordered
               aborts); the pool served the allocations, planned mode learned the
               iteration and served from its plan
  pool-memgetinfo, pool-stress
               memgetinfo and stress under OVERSUB_MODE=pool
  pool-oom     a device (SIMGPU_MEMORY) smaller than simtrain's footprint under
               OVERSUB_MODE=pool: simtrain's clean cudaErrorMemoryAllocation, exit 1
  swap-below-page
               OVERSUB_MODE=swap with OVERSUB_DEVICE_LIMIT below one 2 MiB page: oversub
               says that swap mode needs at least one page and how many bytes to give
               it (the run goes on, every call's memory read from host memory); with
               room for a page it says nothing of the kind
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

RUN_TIMEOUT_S = 120
SIMTRAIN_ARGS = ["--depth", "6", "--width", "96", "--batch", "48", "--iters", "3"]
# Large enough that half the footprint is well above the 1 MiB smallest byte limit.
# More iterations for the pool: planned mode learns from two and serves the rest.
SIMTRAIN_POOL_ARGS = ["--depth", "6", "--width", "96", "--batch", "48", "--iters", "6"]
SIMTRAIN_OOM_ARGS = ["--depth", "8", "--width", "256", "--batch", "64", "--iters", "2"]
ITER_RE = re.compile(r"^iter (\d+) loss \S+ \(bits 0x([0-9a-f]{8})\)$", re.MULTILINE)
PEAK_RE = re.compile(r"^peak device bytes: (\d+)$", re.MULTILINE)
OOM_RE = re.compile(r"^simtrain: CUDA error cudaErrorMemoryAllocation", re.MULTILINE)
MiB = 1 << 20


class Failure(Exception):
    pass


def run(cmd: list[str], lib: Path | None, options: dict[str, str] | None = None,
        drop: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("OVERSUB_") and k not in drop}
    env.pop("LD_PRELOAD", None)
    if lib is not None:
        env["LD_PRELOAD"] = str(lib)
    env.update(options or {})
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                          timeout=RUN_TIMEOUT_S, check=False)
    settings = " ".join(f"{k}={v}" for k, v in sorted((options or {}).items()))
    print(f"$ {'LD_PRELOAD=liboversub.so ' if lib else ''}{settings} {shlex.join(cmd)}"
          f" -> exit {proc.returncode}")
    return proc


def describe(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}---"


def expect(condition: bool, message: str, proc: subprocess.CompletedProcess[str] | None = None) -> None:
    if not condition:
        raise Failure(message + ("\n" + describe(proc) if proc is not None else ""))


def read_stats(path: Path) -> dict:
    lines = [l for l in path.read_text().splitlines() if l.startswith('{"oversub_stats"')]
    if not lines:
        raise Failure(f"no oversub stats in {path}")
    return json.loads(lines[-1])


def case_losses(args: argparse.Namespace) -> None:
    cmd = [str(args.simtrain), *SIMTRAIN_ARGS, *shlex.split(args.mode_args)]
    base = run(cmd, None)
    expect(base.returncode == 0, "simtrain fails without the library", base)
    want = ITER_RE.findall(base.stdout)
    expect(len(want) == 3, "simtrain printed no per-iteration losses", base)
    for mode in ("off", "track"):
        with tempfile.TemporaryDirectory() as tmp:
            stats_file = Path(tmp) / "stats.json"
            proc = run(cmd, args.lib, {"OVERSUB_MODE": mode, "OVERSUB_STATS": "json",
                                       "OVERSUB_STATS_FILE": str(stats_file)})
            expect(proc.returncode == 0, f"simtrain fails under OVERSUB_MODE={mode}", proc)
            got = ITER_RE.findall(proc.stdout)
            expect(got == want, f"loss bits differ under OVERSUB_MODE={mode}: {got} != {want}",
                   proc)
            stats = read_stats(stats_file)
            counters = stats["counters"]
            if mode == "track":
                expect(counters["allocations"]["total"] > 0, f"track saw no allocation: {stats}")
                expect(counters["launches"]["total"] > 0, f"track saw no launch: {stats}")
                expect(counters["allocations"]["current"] == 0 and
                       counters["device_bytes"]["current"] == 0,
                       f"allocations left live at exit: {stats}")
            else:
                expect(counters["allocations"]["total"] == 0, f"off mode counted: {stats}")
    print(f"{len(want)} iterations, loss bits identical without the library, off and track")


def case_oom(args: argparse.Namespace) -> None:
    for extra in ([], ["--caching"]):
        cmd = [str(args.simtrain), *SIMTRAIN_OOM_ARGS, *extra]
        base = run(cmd, None)
        expect(base.returncode == 0, "simtrain fails without the library", base)
        peak = int(PEAK_RE.search(base.stdout).group(1))
        limit = max(MiB, peak // 2)
        proc = run(cmd, args.lib, {"OVERSUB_MODE": "track", "OVERSUB_DEVICE_LIMIT": str(limit)})
        expect(proc.returncode == 1, f"want exit 1 under a limit of {limit} < {peak}", proc)
        expect(OOM_RE.search(proc.stderr + proc.stdout) is not None,
               "no cudaErrorMemoryAllocation message from simtrain", proc)
        expect("OVERSUB_DEVICE_LIMIT" in proc.stderr, "oversub did not say why", proc)
        print(f"simtrain {' '.join(extra)}: peak {peak} bytes, limit {limit}: clean OOM")


def case_memgetinfo(args: argparse.Namespace, extra: dict[str, str] | None = None) -> None:
    extra = extra or {}
    limit = 64 * MiB
    proc = run([str(args.probe)], args.lib, {"OVERSUB_DEVICE_LIMIT": "64MiB", **extra})
    expect(proc.returncode == 0, "memgetinfo probe failed", proc)
    values = {m.group(1): (int(m.group(2)), int(m.group(3))) for m in
              re.finditer(r"^(\w+) total (\d+) free (\d+)$", proc.stdout, re.MULTILINE)}
    expect(values.get("before", (0, 0))[0] == limit, "total is not the limit", proc)
    expect(values["before"][1] == limit, "free is not the limit before allocating", proc)
    expect(values["after"] == (limit, limit - 16 * MiB), "free did not drop by 16 MiB", proc)
    expect(values["freed"] == (limit, limit), "free did not come back", proc)
    expect(re.search(r"^over 2 null$", proc.stdout, re.MULTILINE) is not None,
           "allocation past the limit not refused with cudaErrorMemoryAllocation (2)", proc)
    fraction = run([str(args.probe)], args.lib, {"OVERSUB_DEVICE_LIMIT": "0.5", **extra})
    real = run([str(args.probe)], None)
    expect(fraction.returncode == 0 and real.returncode == 0, "probe failed", fraction)
    real_total = int(re.search(r"^before total (\d+)", real.stdout, re.MULTILINE).group(1))
    frac_total = int(re.search(r"^before total (\d+)", fraction.stdout, re.MULTILINE).group(1))
    expect(frac_total == real_total // 2, f"0.5 of {real_total} reported as {frac_total}",
           fraction)
    print(f"limit 64MiB and 0.5 (of {real_total}) reported by cudaMemGetInfo")


def case_bad_value(args: argparse.Namespace) -> None:
    target = ["/bin/true"]
    for name, value in (("OVERSUB_DEVICE_LIMIT", "12XB"), ("OVERSUB_MODE", "fast"),
                        ("OVERSUB_STATS", "xml"), ("OVERSUB_LOG", "loud")):
        proc = run(target, args.lib, {name: value})
        expect(proc.returncode == 2, f"{name}={value} must exit 2", proc)
        expect(f"oversub: {name}='{value}' is not valid: " in proc.stderr,
               "message does not name the variable and value", proc)
    proc = run(target, args.lib, {"OVERSUB_DEVICE_LIMT": "1GiB"})
    expect(proc.returncode == 0, "an unknown name must not stop the program", proc)
    expect("did you mean OVERSUB_DEVICE_LIMIT?" in proc.stderr, "no closest-name warning", proc)
    proc = run(target, args.lib, {"OVERSUB_VERBOSE": "1", "OVERSUB_DEVICE_LIMIT": "12GiB"})
    expect(proc.returncode == 0 and "OVERSUB_DEVICE_LIMIT=12884901888" in proc.stderr,
           "OVERSUB_VERBOSE=1 does not print the effective configuration", proc)
    print("malformed values exit 2 naming the variable; unknown names warn")


def case_real_runtime(args: argparse.Namespace) -> None:
    drop = ("LD_LIBRARY_PATH",)
    base = run([str(args.probe)], None, drop=drop)
    expect(base.returncode == 0 and base.stdout.rstrip().endswith("done"),
           "probe fails without the library", base)
    for options in ({"OVERSUB_MODE": "off"}, {"OVERSUB_MODE": "track"}, {"OVERSUB_MODE": "pool"},
                    {"OVERSUB_DEVICE_LIMIT": "0.5"}, {"OVERSUB_DEVICE_LIMIT": "64MiB",
                                                      "OVERSUB_STATS": "1"}):
        proc = run([str(args.probe)], args.lib, options, drop=drop)
        expect(proc.returncode == 0, f"probe crashed or failed under {options}", proc)
        expect(proc.stdout == base.stdout,
               f"return codes differ under {options}:\n{base.stdout}\nvs\n{proc.stdout}", proc)
    codes = sorted({l.split()[1] for l in base.stdout.splitlines() if len(l.split()) == 2})
    print(f"{len(base.stdout.splitlines()) - 1} calls, codes {codes}, identical under the library")


def case_real_runtime_stub(args: argparse.Namespace) -> None:
    """The real runtime over the toolkit's stub libcuda (what a machine without a GPU
    driver has): the runtime dlopens libcuda.so.1 and looks its cuGetProcAddress_v2
    up through our dlsym; every call fails the same way with and without us."""
    stub = Path(args.cuda_root) / "lib64" / "stubs" / "libcuda.so"
    if not stub.exists():
        print(f"SKIP: {stub} not found")
        return
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "libcuda.so.1").symlink_to(stub)
        where = {"LD_LIBRARY_PATH": tmp}
        base = run([str(args.probe)], None, where)
        expect(base.returncode == 0 and base.stdout.rstrip().endswith("done"),
               "probe fails over the stub without the library", base)
        for options in ({"OVERSUB_MODE": "track"}, {"OVERSUB_MODE": "swap"},
                        {"OVERSUB_MODE": "track", "OVERSUB_DEVICE_LIMIT": "64MiB"}):
            proc = run([str(args.probe)], args.lib, {**where, **options})
            expect(proc.returncode == 0, f"probe crashed over the stub under {options}", proc)
            expect(proc.stdout == base.stdout,
                   f"return codes differ over the stub under {options}:\n{base.stdout}\nvs\n"
                   f"{proc.stdout}", proc)
    codes = sorted({l.split()[1] for l in base.stdout.splitlines() if len(l.split()) == 2})
    print(f"over the stub libcuda: {len(base.stdout.splitlines()) - 1} calls, codes {codes}, "
          f"identical under the library")


def case_fork(args: argparse.Namespace) -> None:
    base = run([str(args.probe), "64"], None)
    expect(base.returncode == 0 and "parent ok" in base.stdout,
           "fork probe fails without the library", base)
    child_codes = re.findall(r"^child (?:malloc|free) -?\d+$", base.stdout, re.MULTILINE)
    expect(len(child_codes) == 2, "the child printed no return codes", base)
    with tempfile.TemporaryDirectory() as tmp:
        stats_file = Path(tmp) / "stats.json"
        proc = run([str(args.probe), "64"], args.lib,
                   {"OVERSUB_DEVICE_LIMIT": "32MiB", "OVERSUB_STATS": "json",
                    "OVERSUB_STATS_FILE": str(stats_file)})
        expect(proc.returncode == 0, "fork probe failed under the library", proc)
        got = re.findall(r"^child (?:malloc|free) -?\d+$", proc.stdout, re.MULTILINE)
        # Tracking in the child would refuse 64 MiB under a 32 MiB limit with
        # cudaErrorMemoryAllocation (2) before CUDA saw the call.
        expect(got == child_codes,
               f"the child did not pass through: {got} != {child_codes} (without the library)",
               proc)
        expect("child exit 0" in proc.stdout and "parent ok" in proc.stdout,
               "child or parent did not finish cleanly", proc)
        lines = [l for l in stats_file.read_text().splitlines() if l.strip()]
        expect(len(lines) == 1, f"want the parent's stats only, got {len(lines)} reports")
        counters = read_stats(stats_file)["counters"]
        expect(counters["allocations"]["total"] == 1 and counters["frees"]["total"] == 1 and
               counters["limit_refusals"]["total"] == 0,
               f"parent's stats counted the child's calls: {counters}")
    print(f"child passed through ({', '.join(child_codes)} as without the library), exited 0; "
          "parent's stats count only the parent")


def case_stress(args: argparse.Namespace, extra: dict[str, str] | None = None) -> None:
    rounds = 100
    with tempfile.TemporaryDirectory() as tmp:
        stats_file = Path(tmp) / "stats.json"
        proc = run([str(args.probe), str(rounds)], args.lib,
                   {"OVERSUB_STATS": "json", "OVERSUB_STATS_FILE": str(stats_file),
                    "OVERSUB_DEVICE_LIMIT": "1GiB", **(extra or {})})
        expect(proc.returncode == 0, "stress probe failed", proc)
        made = int(re.search(r"^allocations (\d+)", proc.stdout, re.MULTILINE).group(1))
        expect(made == 8 * rounds, f"probe made {made} allocations, want {8 * rounds}", proc)
        stats = read_stats(stats_file)
        c = stats["counters"]
        expect(c["allocations"]["total"] == made, f"allocations.total != {made}: {c}")
        expect(c["frees"]["total"] == made, f"frees.total != {made}: {c}")
        expect(c["allocations"]["current"] == 0, f"allocations left live: {c}")
        expect(c["device_bytes"]["current"] == 0, f"bytes left live: {c}")
        expect(c["untracked_frees"]["total"] == 0, f"frees not matched: {c}")
        expect(c["launches"]["total"] == made, f"launches {c['launches']} != {made}")
        calls = stats["calls"]
        expect(calls.get("cudaMalloc", 0) + calls.get("cudaMallocAsync", 0) == made,
               f"per-entry-point counts do not add up: {calls}")
    print(f"8 threads x {rounds} rounds: {made} allocations, {made} frees, none lost")


def case_cli(args: argparse.Namespace) -> None:
    oversub = [sys.executable, str(args.oversub), "run", "--lib", str(args.lib)]
    show = ["/bin/sh", "-c", 'echo "$LD_PRELOAD|$OVERSUB_DEVICE_LIMIT|$OVERSUB_MODE|$OVERSUB_STATS"']
    proc = run([*oversub, "--limit", "12GiB", "--mode", "off", "--stats", "json", "--", *show],
               None, {"LD_PRELOAD": "/lib/nonexistent-earlier.so"})
    expect(proc.returncode == 0, "oversub run failed", proc)
    want = f"/lib/nonexistent-earlier.so {args.lib}|12GiB|off|json"
    expect(proc.stdout.strip() == want, f"environment {proc.stdout.strip()!r} != {want!r}", proc)
    proc = run([*oversub, "--", "/bin/sh", "-c", "exit 7"], None)
    expect(proc.returncode == 7, "the command's exit status is not passed on", proc)
    proc = run([*oversub, "--limit", "12XB", "--", "/bin/true"], None)
    expect(proc.returncode == 2 and "OVERSUB_DEVICE_LIMIT='12XB'" in proc.stderr,
           "a bad --limit does not stop the command with status 2", proc)
    print("oversub run: LD_PRELOAD appended, options set, exit status passed on")


def case_pool_losses(args: argparse.Namespace) -> None:
    cmd = [str(args.simtrain), *SIMTRAIN_POOL_ARGS, *shlex.split(args.mode_args)]
    base = run(cmd, None)
    expect(base.returncode == 0, "simtrain fails without the library", base)
    want = ITER_RE.findall(base.stdout)
    expect(len(want) == 6, "simtrain printed no per-iteration losses", base)
    caching = "--caching" in args.mode_args
    for kind in ("online", "planned"):
        with tempfile.TemporaryDirectory() as tmp:
            stats_file = Path(tmp) / "stats.json"
            proc = run(cmd, args.lib, {"OVERSUB_MODE": "pool", "OVERSUB_POOL": kind,
                                       "OVERSUB_STATS": "json", "SIMGPU_RACE": "abort",
                                       "OVERSUB_STATS_FILE": str(stats_file)})
            expect(proc.returncode == 0, f"simtrain fails under OVERSUB_POOL={kind}", proc)
            got = ITER_RE.findall(proc.stdout)
            expect(got == want, f"loss bits differ under OVERSUB_POOL={kind}: {got} != {want}",
                   proc)
            stats = read_stats(stats_file)
            c = stats["counters"]
            expect(c["pool_allocations"]["total"] == c["allocations"]["total"] > 0,
                   f"the pool did not serve every allocation: {c}")
            expect(c["allocations"]["current"] == 0 and c["untracked_frees"]["total"] == 0,
                   f"allocations left live or frees lost: {c}")
            device = stats["pool"]["device0"]
            expect(device["used_bytes"] <= device["mapped_bytes"] <= device["reserved_bytes"],
                   f"pool figures inconsistent: {device}")
            if kind == "planned" and not caching:
                planned = device["planned"]
                expect(planned["learned"] and planned["served"] > 0 and
                       planned["deviations"] == 0,
                       f"planned mode did not serve from its plan: {planned}")
                expect(planned["region_bytes"] <= planned["lower_bound_bytes"] * 1.03 + 256,
                       f"planned region above 1.03 x the lower bound: {planned}")
            print(f"OVERSUB_POOL={kind}: bits identical, pool {device}")


def case_pool_oom(args: argparse.Namespace) -> None:
    for extra in ([], ["--caching"]):
        cmd = [str(args.simtrain), *SIMTRAIN_OOM_ARGS, *extra]
        base = run(cmd, None)
        expect(base.returncode == 0, "simtrain fails without the library", base)
        peak = int(PEAK_RE.search(base.stdout).group(1))
        device = max(4 * MiB, peak // 2)
        proc = run(cmd, args.lib, {"OVERSUB_MODE": "pool", "SIMGPU_MEMORY": str(device)})
        expect(proc.returncode == 1, f"want exit 1 on a {device}-byte device < {peak}", proc)
        expect(OOM_RE.search(proc.stderr + proc.stdout) is not None,
               "no cudaErrorMemoryAllocation message from simtrain", proc)
        expect("The pool could not map more device memory" in proc.stderr,
               "oversub did not say why", proc)
        expect("Tried to allocate" in proc.stderr and "OVERSUB_MODE=swap" in proc.stderr,
               "the refusal does not say what was asked and which option to change", proc)
        print(f"simtrain {' '.join(extra)}: peak {peak} bytes, device {device}: clean OOM")


def case_swap_below_page(args: argparse.Namespace) -> None:
    cmd = [str(args.simtrain), *SIMTRAIN_ARGS]
    for limit in ("1MiB", str(2 * MiB - 1)):
        proc = run(cmd, args.lib, {"OVERSUB_MODE": "swap", "OVERSUB_DEVICE_LIMIT": limit})
        expect(proc.returncode == 0, f"simtrain fails under swap with a limit of {limit}", proc)
        expect(f"swap mode needs at least 1 page ({2 * MiB} bytes)" in proc.stderr and
               f"Set OVERSUB_DEVICE_LIMIT to at least {2 * MiB} bytes" in proc.stderr,
               "oversub did not say that swap mode needs a page", proc)
        expect("lower the job's footprint" not in proc.stderr,
               "the advice to lower the footprint is wrong for a limit below a page", proc)
        print(f"OVERSUB_DEVICE_LIMIT={limit} in swap mode: the page it needs is named")
    for limit in (str(2 * MiB), str(64 * MiB)):
        proc = run(cmd, args.lib, {"OVERSUB_MODE": "swap", "OVERSUB_DEVICE_LIMIT": limit})
        expect(proc.returncode == 0, f"simtrain fails in swap mode with a limit of {limit}", proc)
        expect("needs at least 1 page" not in proc.stderr,
               f"a limit of {limit} holds a page, yet oversub says it does not", proc)


CASES = {
    "losses": case_losses, "oom": case_oom, "memgetinfo": case_memgetinfo,
    "bad-value": case_bad_value, "real-runtime": case_real_runtime,
    "real-runtime-stub": case_real_runtime_stub, "fork": case_fork,
    "stress": case_stress, "cli": case_cli,
    "pool-losses": case_pool_losses, "pool-oom": case_pool_oom,
    "swap-below-page": case_swap_below_page,
    "pool-memgetinfo": lambda a: case_memgetinfo(a, {"OVERSUB_MODE": "pool"}),
    "pool-stress": lambda a: case_stress(a, {"OVERSUB_MODE": "pool"}),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=sorted(CASES), required=True)
    parser.add_argument("--cuda-root", default="/usr/local/cuda", help="the CUDA toolkit")
    parser.add_argument("--lib", type=Path, required=True, help="liboversub.so")
    parser.add_argument("--simtrain", type=Path, help="simtrain executable")
    parser.add_argument("--probe", type=Path, help="the case's probe program")
    parser.add_argument("--mode-args", default="", help="simtrain mode flags (losses)")
    parser.add_argument("--oversub", type=Path, help="scripts/oversub (cli)")
    args = parser.parse_args()
    args.lib = args.lib.resolve()
    try:
        CASES[args.case](args)
    except Failure as failure:
        print(f"FAIL: {failure}", file=sys.stderr)
        return 1
    except subprocess.TimeoutExpired as timeout:
        print(f"FAIL: timed out: {timeout}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
