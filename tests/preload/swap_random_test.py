#!/usr/bin/env python3
"""Randomized swap and um test on simgpu: random layered programs past the device's memory.

For each seed, randprog (tests/workloads/randprog.cu) draws a layered program of
random buffer sizes, skips, kept and dropped activations, temporaries and (with
--streams 2) random stream placement ordered by events. The test runs it once with
plenty of memory (the reference checksums), checks that --streams 1 and 2 of the
same seed agree (randprog's own ordering is right), then runs it with SIMGPU_MEMORY
= its peak / --ratio: without oversub it must fail with CUDA's out-of-memory error
(the device really is too small), and under LD_PRELOAD=liboversub.so with
OVERSUB_MODE=swap and OVERSUB_MODE=um, with simgpu's race detector aborting at the
first unordered access, it must exit 0 with every iteration's checksum bits equal
to the reference. Swap mode must also keep resident bytes under its capacity, move
pages, refuse and lose nothing, never let a kernel reach a swapped-out page, and
(one stream) follow the schedule it learned from the first iterations; um mode
must keep what it prefetched under its capacity and prefetch.

  swap_random_test.py --lib liboversub.so --randprog randprog --seed 3 --streams 2
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ITER_RE = re.compile(r"^iter \d+ checksum .*$", re.M)
PEAK_RE = re.compile(r"^peak device bytes: (\d+)$", re.M)
LARGEST_RE = re.compile(r"^largest operation bytes: (\d+)$", re.M)
OOM_RE = re.compile(r"cudaErrorMemoryAllocation")
HOST_MAPPED_RE = re.compile(r"kernel bytes in host-located mappings (\d+)")
MiB = 1 << 20
PAGE = 2 * MiB  # swap mode's page
RUN_TIMEOUT_S = 300


def run(cmd: list[str], env_extra: dict[str, str], lib: Path | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OVERSUB_", "SIMGPU_"))}
    env.pop("LD_PRELOAD", None)
    if lib is not None:
        env["LD_PRELOAD"] = str(lib)
    env.update(env_extra)
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                          timeout=RUN_TIMEOUT_S, check=False)
    settings = " ".join(f"{k}={v}" for k, v in sorted(env_extra.items()))
    print(f"$ {'LD_PRELOAD=liboversub.so ' if lib else ''}{settings} {shlex.join(cmd)}"
          f" -> exit {proc.returncode} ({time.monotonic() - start:.1f} s)")
    return proc


def fail(message: str, proc: subprocess.CompletedProcess[str] | None = None) -> None:
    if proc is not None:
        message += f"\n--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}---"
    print(f"FAIL: {message}")
    sys.exit(1)


def reference(cmd: list[str]) -> tuple[list[str], int, int]:
    """The checksums, peak and largest operation with plenty of memory."""
    proc = run(cmd, {"SIMGPU_RACE": "abort"}, None)
    if proc.returncode != 0:
        fail("randprog fails with plenty of memory", proc)
    want = ITER_RE.findall(proc.stdout)
    peak, largest = PEAK_RE.search(proc.stdout), LARGEST_RE.search(proc.stdout)
    if not want or peak is None or largest is None:
        fail("randprog printed no checksums, peak or largest operation", proc)
    return want, int(peak.group(1)), int(largest.group(1))


def check_swap(stats: dict, proc: subprocess.CompletedProcess[str], device: int,
               expect_scheduled: bool) -> str:
    counters = stats["counters"]
    swap = stats["pool"]["device0"]["swap"]
    if not swap["peak_resident_bytes"] <= swap["capacity_bytes"] <= device:
        fail(f"resident bytes above the capacity or the device: {swap}, device {device}")
    if swap["evictions"] == 0 or swap["fetches"] == 0:
        fail(f"nothing moved: {swap}")
    if swap["failures"] != 0 or counters["swap_refusals"]["total"] != 0:
        fail(f"refusals or failures: {swap} {counters['swap_refusals']}")
    if counters["allocations"]["current"] != 0 or counters["untracked_frees"]["total"] != 0:
        fail(f"allocations left live or frees lost: {counters}")
    # randprog passes plain pointers to buffers under a quarter of the capacity, so
    # the argument scan finds every one and makes it resident whole. With one stream
    # every iteration allocates at the same addresses (the planned pool) and makes
    # the same launches, so by the last iterations the learned schedule is followed
    # (with two, the other stream's work may fence planned bytes: docs/swap.md).
    host_mapped = HOST_MAPPED_RE.search(proc.stderr)
    if host_mapped is None:
        fail("no simgpu exit report (SIMGPU_REPORT=1)", proc)
    if int(host_mapped.group(1)) != 0:
        fail(f"kernels reached {host_mapped.group(1)} bytes of swapped-out pages", proc)
    scheduled = counters["swap_scheduled"]["total"]
    deviations = counters["swap_deviations"]["total"]
    if expect_scheduled and (scheduled == 0 or deviations != 0):
        fail(f"the learned schedule was not followed: scheduled {scheduled}, "
             f"deviations {deviations}", proc)
    return (f"{swap['evictions']} evictions, {swap['fetches']} fetches, "
            f"{swap['bytes_to_host'] // MiB} MiB to host, {swap['bytes_to_device'] // MiB} MiB "
            f"back; {scheduled} launches followed the learned schedule, {deviations} deviations")


def check_um(stats: dict, device: int) -> str:
    counters = stats["counters"]
    um = stats["pool"]["device0"]["um"]
    if not um["peak_resident_bytes"] <= um["capacity_bytes"] <= device:
        fail(f"prefetched bytes above the capacity or the device: {um}, device {device}")
    if um["prefetches_in"] == 0 or not um["concurrent_access"]:
        fail(f"no prefetches: {um}")
    if counters["swap_refusals"]["total"] != 0 or counters["allocations"]["current"] != 0:
        fail(f"refusals or allocations left live: {counters}")
    return (f"{um['prefetches_in']} prefetches in ({um['bytes_in'] // MiB} MiB), "
            f"{um['prefetches_out']} out")


def run_mode(args: argparse.Namespace, mode: str, cmd: list[str], device: int,
             want: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        stats_file = Path(tmp) / "stats.json"
        proc = run(cmd, {"SIMGPU_MEMORY": str(device), "SIMGPU_RACE": "abort",
                         "SIMGPU_REPORT": "1", "OVERSUB_MODE": mode, "OVERSUB_STATS": "json",
                         "OVERSUB_STATS_FILE": str(stats_file)}, args.lib)
        if proc.returncode != 0:
            fail(f"randprog fails under OVERSUB_MODE={mode} at {args.ratio}x", proc)
        got = ITER_RE.findall(proc.stdout)
        if got != want:
            diff = [f"  want {w}\n  got  {g}" for w, g in zip(want, got) if w != g]
            fail(f"checksums differ under OVERSUB_MODE={mode} at {args.ratio}x "
                 f"({len(got)} of {len(want)} iterations printed):\n" + "\n".join(diff), proc)
        lines = [l for l in stats_file.read_text().splitlines()
                 if l.startswith('{"oversub_stats"')]
        if not lines:
            fail(f"no oversub stats under OVERSUB_MODE={mode}", proc)
        stats = json.loads(lines[-1])
    moved = check_swap(stats, proc, device, args.streams == "1") if mode == "swap" else check_um(stats, device)
    print(f"{mode}: checksum bits identical over {len(want)} iterations; {moved}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", type=Path, required=True)
    ap.add_argument("--randprog", type=Path, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--streams", choices=["1", "2"], default="1")
    ap.add_argument("--layers", type=int, default=180)
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--max-kib", type=int, default=1024)
    ap.add_argument("--ratio", type=float, default=3.0, help="peak / device memory")
    ap.add_argument("--modes", default="swap,um", help="OVERSUB_MODE values to check")
    args = ap.parse_args()

    base = [str(args.randprog), "--seed", str(args.seed), "--layers", str(args.layers),
            "--iters", str(args.iters), "--max-kib", str(args.max_kib)]
    cmd = base + ["--streams", args.streams]
    want, peak, largest = reference(cmd)
    other = "2" if args.streams == "1" else "1"
    if reference(base + ["--streams", other])[0] != want:
        fail(f"randprog's checksums differ between --streams 1 and 2 for seed {args.seed}")
    device = int(peak / args.ratio)
    # An operation touches at most four buffers of at most --max-kib each, and each
    # may straddle one more page than its size needs; the swap capacity is the device
    # less 1/16, in whole pages (docs/swap.md). The drawn program must leave its
    # largest operation that room, or a refusal would be the test's fault.
    worst = 4 * (-(-args.max_kib * 1024 // PAGE) + 1) * PAGE
    if (device - device // 16) // PAGE * PAGE < worst:
        fail(f"the program is too small for the test: at {args.ratio}x the device is "
             f"{device} bytes, short of room for an operation on {worst} bytes of pages; "
             f"add layers or lower --max-kib")

    alone = run(cmd, {"SIMGPU_MEMORY": str(device)}, None)
    if alone.returncode == 0 or not OOM_RE.search(alone.stdout + alone.stderr):
        fail(f"without oversub randprog should run out of memory on {device} bytes", alone)

    for mode in args.modes.split(","):
        run_mode(args, mode, cmd, device, want)
    print(f"seed {args.seed} streams {args.streams}: peak {peak} bytes on a {device}-byte "
          f"device ({args.ratio}x), largest operation {largest} bytes: swap and um agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
