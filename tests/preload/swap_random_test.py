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
import re
import sys
import tempfile
from pathlib import Path

from swap_checks import MiB, OOM_RE, check_swap, check_um, fail, read_stats, run

ITER_RE = re.compile(r"^iter \d+ checksum .*$", re.M)
PEAK_RE = re.compile(r"^peak device bytes: (\d+)$", re.M)
LARGEST_RE = re.compile(r"^largest operation bytes: (\d+)$", re.M)
PAGE = 2 * MiB  # swap mode's page


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
        stats = read_stats(stats_file, proc)
    # randprog passes plain pointers to buffers under a quarter of the capacity, so
    # the argument scan finds every one and makes it resident whole. With one stream
    # every iteration allocates at the same addresses (the planned pool) and makes
    # the same launches, so by the last iterations the learned schedule is followed
    # (with two, the other stream's work may fence planned bytes: docs/design/swap.md).
    moved = (check_swap(stats, proc, device, True, args.streams == "1") if mode == "swap"
             else check_um(stats, device, proc=proc))
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
    # less 1/16, in whole pages (docs/design/swap.md). The drawn program must leave its
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
