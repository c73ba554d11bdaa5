#!/usr/bin/env python3
"""The swap learner takes the training iteration, not a run of layers inside it (Note [A
stretch that did not last] in core/schedule.cc).

simtrain with buffers so small that they all lie in one or two 2 MiB pages gives every
layer of a run the same launch tokens: the run of layers repeats on its own. Under
OVERSUB_MODE=swap (no limit: nothing moves, the learner runs all the same), the period
learned last must be the one learned where every buffer has pages of its own (the
same program, wider layers), followed to the end of the run with no deviation, and
the loss bits those of the run without the library; with OVERSUB_TUNE=0 too. Before
the rules, the tiny run learned a run of layers in every iteration (40 times in 40
iterations at depth 8), or untuned followed a run of layers for good, three launches in
four off it.

  learn_test.py --lib liboversub.so --simtrain simtrain
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from swap_checks import LOSS_BITS_RE, fail, read_stats, run

ITERS = 20
SETTINGS = {"OVERSUB_MODE": "swap", "OVERSUB_STATS": "json", "SIMGPU_RACE": "abort"}


def learned(args: argparse.Namespace, depth: int, width: int, batch: int, iters: int,
            tmp: Path, env: dict[str, str] | None = None) -> tuple[dict, list[str], list[str]]:
    """The stats' schedule section under swap, with the loss bits with and without the
    library."""
    cmd = [str(args.simtrain), "--depth", str(depth), "--width", str(width),
           "--batch", str(batch), "--iters", str(iters)]
    base = run(cmd, {"SIMGPU_RACE": "abort"}, None)
    if base.returncode != 0:
        fail("simtrain fails without the library", base)
    stats_file = tmp / f"stats-{depth}-{width}-{len(env or {})}.json"
    proc = run(cmd, {**SETTINGS, **(env or {}), "OVERSUB_STATS_FILE": str(stats_file)},
               args.lib)
    if proc.returncode != 0:
        fail("simtrain fails under swap", proc)
    sched = read_stats(stats_file, proc).get("schedule", {})
    return sched, LOSS_BITS_RE.findall(base.stdout), LOSS_BITS_RE.findall(proc.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", type=Path, required=True)
    ap.add_argument("--simtrain", type=Path, required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        periods: dict[int, int] = {}  # depth -> the period learned with wide layers
        # Untuned, a schedule of a run of layers is not dropped at a timed launch, only
        # by the launches off it (Note [Launches the iteration did not have] in
        # core/schedule.cc).
        for depth, env in ((8, {}), (32, {}), (8, {"OVERSUB_TUNE": "0"})):
            if depth not in periods:
                # Long enough for the iteration to be learned (chain6 in swap_test.py).
                wide, _, _ = learned(args, depth, 512, 128, 6, tmp)
                periods[depth] = wide.get("period", 0)
                if wide.get("learned") != 1 or wide.get("deviations") != 0 or periods[depth] < 8:
                    fail(f"depth {depth}, wide layers: want one iteration learned and kept, "
                         f"got learned {wide.get('learned')}, period {periods[depth]}, "
                         f"deviations {wide.get('deviations')}")
            period = periods[depth]
            tiny, want, got = learned(args, depth, 64, 16, ITERS, tmp, env)
            if got != want:
                fail(f"depth {depth}, tiny layers: loss bits differ under swap: {got} vs {want}")
            # Learned for good by the eighth iteration: followed for the rest but for
            # the iteration the schedule starts in.
            least = (ITERS - 9) * period
            if tiny.get("period") != period or tiny.get("followed", 0) < least:
                fail(f"depth {depth}, tiny layers: want the {period}-launch iteration learned "
                     f"last and followed for at least {least} launches; got period "
                     f"{tiny.get('period')}, learned {tiny.get('learned')}, deviations "
                     f"{tiny.get('deviations')}, followed {tiny.get('followed')}, search "
                     f"{tiny.get('search')}")
            print(f"depth {depth}{' untuned' if env else ''}: the {period}-launch iteration "
                  f"learned (schedules "
                  f"learned: {tiny['learned']}, deviations {tiny['deviations']}), followed "
                  f"for {tiny['followed']} launches from launch "
                  f"{tiny.get('period_first_launch')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
