#!/usr/bin/env python3
"""Swap mode's mover thread at exit and across fork() (Note [The mover] in
residency/swap_mover.cc), on simgpu.

mover_fork_probe fills more 2 MiB buffers than a small device (SIMGPU_MEMORY) holds
under LD_PRELOAD=liboversub.so OVERSUB_MODE=swap OVERSUB_MOVER=thread, forks while
pages are evicting, and its child calls cudaMalloc/cudaFree and exits. The test
asserts that the child passed through (its return codes are CUDA's, as without the
library) and exited 0 through its exit handlers, that the parent read every buffer
back intact, that the mover really ran (its batches in the parent's stats, and no
stats from the child), and that once the exit handlers registered after the probe's
first one have run, the process has no more threads than without the library: the
mover never outlives them.

  mover_fork_test.py --lib liboversub.so --probe mover_fork_probe
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

from swap_checks import MiB, fail, read_stats, run

BUFFERS = 32          # 64 MiB of buffers
DEVICE = 16 * MiB     # a quarter of them fits
CHILD_RE = re.compile(r"^child (?:malloc|free) -?\d+$", re.M)
THREADS_RE = re.compile(r"^(parent|child) threads at exit (\d+)$", re.M)


def threads_at_exit(proc) -> dict[str, int]:
    return {who: int(n) for who, n in THREADS_RE.findall(proc.stdout)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", type=Path, required=True)
    ap.add_argument("--probe", type=Path, required=True)
    args = ap.parse_args()
    cmd = [str(args.probe), str(BUFFERS)]

    base = run(cmd, {}, None)
    if base.returncode != 0 or "parent ok" not in base.stdout:
        fail("mover_fork_probe fails without the library", base)
    child_codes = CHILD_RE.findall(base.stdout)
    base_threads = threads_at_exit(base)
    if len(child_codes) != 2 or set(base_threads) != {"parent", "child"}:
        fail("the probe printed no child return codes or thread counts", base)

    alone = run(cmd, {"SIMGPU_MEMORY": str(DEVICE)}, None)
    if alone.returncode == 0:
        fail(f"without oversub the probe should not fit a {DEVICE}-byte device", alone)

    with tempfile.TemporaryDirectory() as tmp:
        stats_file = Path(tmp) / "stats.json"
        proc = run(cmd, {"SIMGPU_MEMORY": str(DEVICE), "SIMGPU_RACE": "abort",
                         "OVERSUB_MODE": "swap", "OVERSUB_MOVER": "thread",
                         "OVERSUB_STATS": "json", "OVERSUB_STATS_FILE": str(stats_file)},
                   args.lib)
        if proc.returncode != 0 or "parent ok" not in proc.stdout:
            fail("the probe fails under swap mode with the mover thread", proc)
        got = CHILD_RE.findall(proc.stdout)
        if got != child_codes:
            fail(f"the child did not pass through: {got} != {child_codes} (without the "
                 "library)", proc)
        if "child exit 0" not in proc.stdout:
            fail("the child did not exit cleanly", proc)
        got_threads = threads_at_exit(proc)
        if got_threads != base_threads:
            fail(f"threads left after the library's exit handlers: {got_threads}, without "
                 f"the library {base_threads}: the mover outlived them", proc)
        reports = [l for l in stats_file.read_text().splitlines()
                   if l.startswith('{"oversub_stats"')]
        if len(reports) != 1:
            fail(f"want the parent's stats only, got {len(reports)} reports", proc)
        swap = read_stats(stats_file, proc)["pool"]["device0"]["swap"]
    if swap.get("mover_batches", 0) == 0 or swap.get("evictions", 0) == 0:
        fail(f"the mover finished no eviction: {swap}", proc)
    print(f"child passed through ({', '.join(child_codes)} as without the library) while "
          f"the mover worked ({swap['evictions']} evictions, {swap['mover_batches']} mover "
          f"batches); threads at exit {got_threads}, as without the library; every buffer "
          "read back intact")
    return 0


if __name__ == "__main__":
    sys.exit(main())
