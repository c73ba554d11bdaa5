#!/usr/bin/env python3
"""Swap mode moves what its schedule planned (Note [Deferred fetches fall due] in
core/schedule.cc): simtrain with 4 MiB weights at 3x oversubscription under
OVERSUB_POLICY=cost. The bytes the engine copies each way in a steady iteration (a run
of 8 iterations less one of 6, halved) are at most the learned plan's own prediction
(the stats' "schedule" section, predicted_h2d_bytes and predicted_d2h_bytes) plus one
page; and the loss bits are those of a run with enough memory. Before deferred fetches
fell due, a fetch retried after its launch brought back pages the schedule had just
evicted: 100 MiB out per iteration against the plan's 84.

  swap_plan_bytes_test.py --lib liboversub.so --simtrain simtrain
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

from swap_checks import fail, read_stats, run

ITER_RE = re.compile(r"^iter \d+ loss \S+ \(bits (0x[0-9a-f]+)\)$", re.M)
PEAK_RE = re.compile(r"^peak device bytes: (\d+)$", re.M)
SHAPE = ["--depth", "4", "--width", "1024", "--batch", "16"]
PAGE = 2 << 20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", type=Path, required=True)
    ap.add_argument("--simtrain", type=Path, required=True)
    args = ap.parse_args()

    base = run([str(args.simtrain), *SHAPE, "--iters", "8"], {}, None)
    if base.returncode != 0:
        fail("simtrain fails with plenty of memory", base)
    want = ITER_RE.findall(base.stdout)
    device = int(PEAK_RE.search(base.stdout).group(1)) // 3
    moved = {}
    with tempfile.TemporaryDirectory() as tmp:
        for iters in (6, 8):
            stats_file = Path(tmp) / f"stats-{iters}.json"
            proc = run([str(args.simtrain), *SHAPE, "--iters", str(iters)],
                       {"SIMGPU_MEMORY": str(device), "SIMGPU_RACE": "abort",
                        "OVERSUB_MODE": "swap", "OVERSUB_POLICY": "cost",
                        # The plan as learned: timing variants would switch plans between
                        # iterations 6 and 8 (swap_tune_test.py covers that).
                        "OVERSUB_TUNE": "0",
                        "OVERSUB_STATS": "json", "OVERSUB_STATS_FILE": str(stats_file)},
                       args.lib)
            if proc.returncode != 0:
                fail(f"simtrain fails under swap with {iters} iterations", proc)
            if ITER_RE.findall(proc.stdout) != want[:iters]:
                fail("loss bits differ under swap", proc)
            stats = read_stats(stats_file, proc)
            moved[iters] = (stats["pool"]["device0"]["swap"], stats.get("schedule"))
    sched = moved[8][1]
    if sched is None or sched["learned"] == 0 or sched["followed"] == 0:
        fail(f"no schedule learned and followed: {sched}")
    figures = []
    for key, plan_key in (("bytes_to_device", "predicted_h2d_bytes"),
                          ("bytes_to_host", "predicted_d2h_bytes")):
        steady = (moved[8][0][key] - moved[6][0][key]) / 2
        plan = sched[plan_key]
        if plan == 0:
            fail(f"the plan moves nothing ({plan_key} 0): the shape does not swap")
        if steady > plan + PAGE:
            fail(f"{key}: {steady / 2**20:.1f} MiB per steady iteration, the plan "
                 f"{plan / 2**20:.1f} MiB")
        figures.append(f"{key} {steady / 2**20:.1f} MiB (plan {plan / 2**20:.1f})")
    print(f"swap at 3x: loss bits identical over {len(want)} iterations; per steady "
          f"iteration {', '.join(figures)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
