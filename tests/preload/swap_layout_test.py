#!/usr/bin/env python3
"""Swap mode lays out the long-lived buffers by a saved profile (OVERSUB_PROFILE_IN).

Note [Long-lived layout from a profile] (policy/placement.h). simtrain's weight-heavy
shape is profiled (OVERSUB_PROFILE_OUT, pool mode, plenty of memory), then run at 3x
past the device's memory under OVERSUB_MODE=swap with that profile: the log must say
that the page model predicts the layout by first use fastest there (it does at 3x) and
that every long-lived buffer of the profile was placed by it, and the loss bits must be
those of the run with unlimited memory, with simgpu's race detector aborting at the first
unordered access and no kernel reaching a swapped-out page. Then the same run with the
profile of another width (other sizes, laid out too): nothing is claimed, every block
laid out goes back to the arena, and the losses are still identical. Last, OVERSUB_PROFILE
twice: the first swap run writes its profile there, the second starts from it.

  swap_layout_test.py --lib liboversub.so --simtrain simtrain
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

from swap_checks import LOSS_BITS_RE, check_swap, fail, read_stats, reference, run

CHOSEN_RE = re.compile(r"pool: the profile's \d+ long-lived buffers \(.*\) laid out in first use; "
                       r"predicted iteration in .*: ([0-9.]+) ms in allocation order, "
                       r"([0-9.]+) by first use")
PLACED_RE = re.compile(r"pool: the profile's layout placed (\d+) of its (\d+) long-lived "
                       r"buffers \((\d+) laid out for none given back\)")
SHAPE = ["--depth", "32", "--width", "512", "--batch", "16"]
OTHER = ["--depth", "32", "--width", "384", "--batch", "16"]


def profile(args: argparse.Namespace, shape: list[str], out: Path) -> None:
    proc = run([str(args.simtrain), *shape, "--iters", "3"],
               {"OVERSUB_MODE": "pool", "OVERSUB_PROFILE_OUT": str(out)}, args.lib)
    if proc.returncode != 0 or not out.exists():
        fail(f"profiling simtrain {' '.join(shape)} failed", proc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", type=Path, required=True)
    ap.add_argument("--simtrain", type=Path, required=True)
    args = ap.parse_args()

    cmd = [str(args.simtrain), *SHAPE, "--iters", "6"]
    want, device = reference(cmd, 3)

    with tempfile.TemporaryDirectory() as tmp:
        own, other = Path(tmp) / "own.oprof", Path(tmp) / "other.oprof"
        profile(args, SHAPE, own)
        profile(args, OTHER, other)
        results = []
        for prof in (own, other):
            stats_file = Path(tmp) / "stats.json"
            proc = run(cmd, {"SIMGPU_MEMORY": str(device), "SIMGPU_RACE": "abort",
                             "SIMGPU_REPORT": "1", "OVERSUB_MODE": "swap", "OVERSUB_TUNE": "0",
                             "OVERSUB_VERBOSE": "1", "OVERSUB_PROFILE_IN": str(prof),
                             "OVERSUB_STATS": "json", "OVERSUB_STATS_FILE": str(stats_file)},
                       args.lib)
            if proc.returncode != 0:
                fail(f"simtrain fails under swap at 3x with {prof.name}", proc)
            got = LOSS_BITS_RE.findall(proc.stdout)
            if got != want:
                fail(f"loss bits differ with {prof.name}: {got} != {want}", proc)
            chosen = CHOSEN_RE.search(proc.stderr)
            if chosen is None or not float(chosen.group(2)) < float(chosen.group(1)):
                fail(f"the layout by first use was not chosen with {prof.name}", proc)
            m = PLACED_RE.search(proc.stderr)
            if m is None:
                fail(f"no word of the profile's layout with {prof.name}", proc)
            placed, expected, returned = (int(g) for g in m.groups())
            moved = check_swap(read_stats(stats_file, proc), proc, device, True, True)
            results.append((placed, expected, returned, moved, proc))
        placed, expected, returned, moved, proc = results[0]
        # simtrain: 33 layers of weight, gradient and two moments, all used every iteration
        # (and a buffer or so allocated before the profiled iteration).
        if not (expected >= 132 and placed == expected and returned == 0):
            fail(f"its own profile placed {placed} of {expected} ({returned} given back); "
                 "expected all of at least 132", proc)
        o_placed, o_expected, o_returned, _, o_proc = results[1]
        if not (o_expected > 0 and o_placed == 0 and o_returned == o_expected):
            fail(f"another shape's profile placed {o_placed} of {o_expected} ({o_returned} "
                 "given back); expected none placed and all given back", o_proc)
        # See Note [One profile path] in common/options.h: OVERSUB_PROFILE writes the
        # profile where there is none (this swap run profiles itself), and the next run
        # with it starts from it.
        one = Path(tmp) / "one.oprof"
        for k in range(2):
            proc = run(cmd, {"SIMGPU_MEMORY": str(device), "SIMGPU_RACE": "abort",
                             "OVERSUB_MODE": "swap", "OVERSUB_TUNE": "0", "OVERSUB_VERBOSE": "1",
                             "OVERSUB_PROFILE": str(one)}, args.lib)
            if proc.returncode != 0 or LOSS_BITS_RE.findall(proc.stdout) != want:
                fail(f"OVERSUB_PROFILE run {k}: failed or other loss bits", proc)
            if k == 0 and (not one.exists() or PLACED_RE.search(proc.stderr)):
                fail("the first OVERSUB_PROFILE run did not write its profile (or laid out)", proc)
            m = PLACED_RE.search(proc.stderr)
            if k == 1 and (m is None or int(m.group(1)) != placed):
                fail(f"the second OVERSUB_PROFILE run did not lay out its {placed} buffers", proc)
    print(f"swap at 3x with its own profile: {placed} of {expected} long-lived buffers laid "
          f"out by first use, loss bits identical over {len(want)} iterations; {moved}. "
          f"With another shape's: 0 of {o_expected}, all given back, losses identical. "
          "OVERSUB_PROFILE: written by the first run, laid out by the second")
    return 0


if __name__ == "__main__":
    sys.exit(main())
