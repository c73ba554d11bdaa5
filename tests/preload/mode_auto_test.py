#!/usr/bin/env python3
"""OVERSUB_MODE=auto: swap or um, chosen at start (Note [Choosing the mode] in
core/mode_choice.h).

simtrain's weight-heavy shape at 3x past the device's memory, with simgpu's race
detector aborting at the first unordered access:
1. no profile (a first run, or a job that never repeats): um runs (simgpu's device has
   concurrent managed access), and the verbose line says why and how to let the next
   run choose;
2. with a profile of the same shape (OVERSUB_PROFILE_IN, profiled in pool mode with
   plenty of memory), for that shape and a smaller one: the line gives both predicted
   iterations, the managed migration rates measured at start and a discard's cost
   (positive, never more than a page's migration to the host), the mode taken is the
   one predicted faster, and the exit statistics report it;
3. OVERSUB_PROFILE twice: the first run says it writes the profile, the second chooses
   from it;
4. the weight-heavy profile with VMM calls that wait for the device
   (SIMGPU_VMM_WAIT=1) and without: the probe at start finds which, the line says so
   when they wait, swap is predicted slower with them, and the faster is taken;
in each, the loss bits are those of the run with unlimited memory. Last, a malformed
mode is refused with exit status 2 and a message listing the accepted forms, auto
among them.

With --case no-link (and --holder, cupti_holder): a profile taken while another tool
held CUPTI has no link rates; auto then predicts at the rates of pinned copies timed
at start, which its line gives (the device model's pinned bandwidth within 2%).

  mode_auto_test.py --lib liboversub.so --simtrain simtrain [--case no-link --holder H]
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

from swap_checks import (LOSS_BITS_RE, check_swap, check_um, device_figure, fail, read_stats,
                         reference, run)

NO_PROFILE_RE = re.compile(r"^oversub: mode auto -> um \(no profile: um: the device migrates "
                           r"pages on demand .*set OVERSUB_PROFILE=path so that "
                           r"the next run can choose\)$", re.M)
WRITES_RE = re.compile(r"^oversub: mode auto -> um \(no profile yet: .* this run writes "
                       r"its profile to (\S+) \(OVERSUB_PROFILE\)", re.M)
CHOSEN_RE = re.compile(r"^oversub: mode auto -> (swap|um) \(predicted ([0-9.]+) ms per "
                       r"iteration against (swap|um) ([0-9.]+) ms, ([0-9.]+) ms with enough "
                       r"memory; at .*, from the profile (\S+?)(; this device's VMM calls "
                       r"wait for its queued work, so swap's remaps cannot overlap it "
                       r"\(measured at start\))?; managed memory migrates at ([0-9.]+) GB/s "
                       r"to the device and ([0-9.]+) GB/s to the host \(measured at start\)"
                       r"(?:, a discard ([0-9.]+) us per 64 KiB|, the driver discards nothing)"
                       r"(?:; the profile has no link rates: pinned copies ran at ([0-9.]+) GB/s "
                       r"to the device and ([0-9.]+) GB/s to the host \(measured at start\))?\)$",
                       re.M)
ACCEPTED = "Accepted: off | track | pool | swap | um | auto"
SHAPE = ["--depth", "32", "--width", "512", "--batch", "16"]
SMALL = ["--depth", "8", "--width", "512", "--batch", "128"]


def auto_run(args: argparse.Namespace, cmd: list[str], device: int, want: list[str],
             stats_file: Path, extra: dict[str, str], what: str):
    proc = run(cmd, {"SIMGPU_MEMORY": str(device), "SIMGPU_RACE": "abort", "SIMGPU_REPORT": "1",
                     "OVERSUB_MODE": "auto", "OVERSUB_TUNE": "0", "OVERSUB_VERBOSE": "1",
                     "OVERSUB_STATS": "json", "OVERSUB_STATS_FILE": str(stats_file), **extra},
               args.lib)
    if proc.returncode != 0:
        fail(f"simtrain fails under OVERSUB_MODE=auto at 3x ({what})", proc)
    got = LOSS_BITS_RE.findall(proc.stdout)
    if got != want:
        fail(f"loss bits differ ({what}): {got} != {want}", proc)
    stats = read_stats(stats_file, proc)
    stats_file.unlink()
    return proc, stats


def mode_of(stats: dict, proc) -> str:
    mode = stats.get("mode")
    if mode is None:
        fail(f"no mode in the exit statistics: {sorted(stats)}", proc)
    return mode


def no_link(args: argparse.Namespace, cmd: list[str], want: list[str], device: int) -> int:
    """A profile without link rates: auto predicts at the pinned rates timed at start."""
    with tempfile.TemporaryDirectory() as tmp:
        stats_file = Path(tmp) / "stats.json"
        prof = Path(tmp) / "held.oprof"
        p = run([str(args.simtrain), *SHAPE, "--iters", "3"],
                {"OVERSUB_MODE": "pool", "OVERSUB_PROFILE_OUT": str(prof),
                 "LD_PRELOAD": f"{args.holder} {args.lib}"}, args.lib)
        if p.returncode != 0 or not prof.exists():
            fail("profiling simtrain with CUPTI held failed", p)
        proc, stats = auto_run(args, cmd, device, want, stats_file,
                               {"OVERSUB_PROFILE_IN": str(prof)}, "a profile without link rates")
        m = CHOSEN_RE.search(proc.stderr)
        if m is None or m.group(11) is None:
            fail("no line saying the profile has no link rates and giving the pinned rates "
                 "timed at start", proc)
        for got, way in ((m.group(11), "h2d"), (m.group(12), "d2h")):
            want_gbps = device_figure(f"{way}_pinned_bandwidth") / 1e9
            if abs(float(got) - want_gbps) > 0.02 * want_gbps:
                fail(f"{way}: pinned copies timed at {got} GB/s, the device model's pinned "
                     f"rate is {want_gbps} GB/s", proc)
        if mode_of(stats, proc) != m.group(1):
            fail(f"the line says {m.group(1)}, the statistics {mode_of(stats, proc)}", proc)
        print(f"PASS: a profile without link rates: {m.group(1)} predicted {m.group(2)} ms "
              f"against {m.group(3)} {m.group(4)} ms at the pinned rates timed at start "
              f"({m.group(11)}/{m.group(12)} GB/s), losses identical")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", type=Path, required=True)
    ap.add_argument("--simtrain", type=Path, required=True)
    ap.add_argument("--case", choices=["all", "no-link"], default="all")
    ap.add_argument("--holder", type=Path, help="cupti_holder (no-link)")
    args = ap.parse_args()

    cmd = [str(args.simtrain), *SHAPE, "--iters", "6"]
    want, device = reference(cmd, 3)
    if args.case == "no-link":
        if args.holder is None:
            ap.error("--holder is needed for the no-link case")
        return no_link(args, cmd, want, device)

    with tempfile.TemporaryDirectory() as tmp:
        stats_file = Path(tmp) / "stats.json"
        # 1. No profile: um (simgpu's device has concurrent managed access), said so.
        proc, stats = auto_run(args, cmd, device, want, stats_file, {}, "no profile")
        if NO_PROFILE_RE.search(proc.stderr) is None:
            fail("no line saying auto runs um without a profile", proc)
        if mode_of(stats, proc) != "um":
            fail(f"auto without a profile ran {mode_of(stats, proc)}, not um", proc)
        moved = check_um(stats, device, proc=proc)
        summary = [f"no profile: um, losses identical; {moved}"]

        # 2. With a profile: the mode predicted faster, for two shapes. With a remap at
        # the H200's cost while a kernel runs (199 us a page, policy::mode_costs), um is
        # predicted faster for both: simtrain's iterations are too short for swap's
        # remaps to hide. What is checked is that the faster prediction is taken.
        for shape in (SHAPE, SMALL):
            shape_cmd = [str(args.simtrain), *shape, "--iters", "6"]
            shape_want, shape_device = (want, device) if shape is SHAPE else reference(shape_cmd, 3)
            prof = Path(tmp) / f"{shape[1]}.oprof"
            p = run([str(args.simtrain), *shape, "--iters", "3"],
                    {"OVERSUB_MODE": "pool", "OVERSUB_PROFILE_OUT": str(prof)}, args.lib)
            if p.returncode != 0 or not prof.exists():
                fail("profiling simtrain failed", p)
            proc, stats = auto_run(args, shape_cmd, shape_device, shape_want, stats_file,
                                   {"OVERSUB_PROFILE_IN": str(prof)}, "with a profile")
            m = CHOSEN_RE.search(proc.stderr)
            if m is None:
                fail("no line giving the predicted iterations of swap and um", proc)
            chosen, chosen_ms, other, other_ms, unlimited_ms, path = m.groups()[:6]
            if not (float(m.group(8)) > 0 and float(m.group(9)) > 0):
                fail("the managed migration rates measured at start are not positive", proc)
            # See Note [Managed migration rates, measured] in core/device_pool.cc: simgpu
            # discards, at no more than a 64 KiB page's migration to the host costs.
            if m.group(10) is None or not \
                    0 < float(m.group(10)) <= 65536 / (float(m.group(9)) * 1e3) * 1.01:
                fail(f"a discard timed at {m.group(10)} us per 64 KiB, where a page migrates "
                     f"to the host at {m.group(9)} GB/s", proc)
            if chosen == other or path != str(prof):
                fail(f"the line names {chosen} against {other}, profile {path}", proc)
            swap_ms, um_ms = ((chosen_ms, other_ms) if chosen == "swap" else (other_ms, chosen_ms))
            faster = "um" if float(um_ms) < float(swap_ms) else "swap"
            if chosen != faster or not 0 < float(unlimited_ms) <= min(float(swap_ms), float(um_ms)):
                fail(f"took {chosen} at {chosen_ms} ms against {other} at {other_ms} ms "
                     f"({unlimited_ms} ms with enough memory): not the faster one", proc)
            if mode_of(stats, proc) != chosen:
                fail(f"the line says {chosen}, the statistics {mode_of(stats, proc)}", proc)
            moved = (check_swap(stats, proc, shape_device, True, True) if chosen == "swap"
                     else check_um(stats, shape_device, proc=proc))
            summary.append(f"{' '.join(shape)} with its profile: {chosen} ({chosen_ms} ms "
                           f"predicted against {other} {other_ms} ms), losses identical; {moved}")

        # 4. VMM calls that wait for the device (SIMGPU_VMM_WAIT=1), measured at start:
        # the line says so, swap is predicted slower than without them (its remaps
        # cannot overlap the device's work), and the faster prediction is taken.
        prof = Path(tmp) / f"{SHAPE[1]}.oprof"
        swap_ms = {}
        for wait in ("0", "1"):
            proc, stats = auto_run(args, cmd, device, want, stats_file,
                                   {"OVERSUB_PROFILE_IN": str(prof), "SIMGPU_VMM_WAIT": wait},
                                   f"SIMGPU_VMM_WAIT={wait}")
            m = CHOSEN_RE.search(proc.stderr)
            if m is None or (m.group(7) is not None) != (wait == "1"):
                fail(f"SIMGPU_VMM_WAIT={wait}: the line does not say whether VMM calls wait "
                     f"as measured", proc)
            chosen, chosen_ms, other, other_ms = m.group(1), m.group(2), m.group(3), m.group(4)
            swap_ms[wait] = float(chosen_ms if chosen == "swap" else other_ms)
            um = float(other_ms if chosen == "swap" else chosen_ms)
            if chosen != ("um" if um < swap_ms[wait] else "swap") or mode_of(stats, proc) != chosen:
                fail(f"SIMGPU_VMM_WAIT={wait}: took {chosen} (statistics: "
                     f"{mode_of(stats, proc)}), not the faster prediction", proc)
        if not swap_ms["1"] > swap_ms["0"]:
            fail(f"swap predicted {swap_ms['1']} ms with VMM calls waiting, not slower than "
                 f"{swap_ms['0']} ms without", proc)
        summary.append(f"VMM calls waiting (measured): swap predicted {swap_ms['1']} ms against "
                       f"{swap_ms['0']} ms without, {chosen} taken, losses identical")

        # 3. OVERSUB_PROFILE: written by the first run, chosen from by the second.
        one = Path(tmp) / "one.oprof"
        for k in range(2):
            proc, stats = auto_run(args, cmd, device, want, stats_file,
                                   {"OVERSUB_PROFILE": str(one)}, f"OVERSUB_PROFILE run {k}")
            if k == 0:
                w = WRITES_RE.search(proc.stderr)
                if w is None or w.group(1) != str(one) or not one.exists():
                    fail("the first OVERSUB_PROFILE run did not say it writes the profile, "
                         "or did not write it", proc)
            else:
                c = CHOSEN_RE.search(proc.stderr)
                if c is None or c.group(6) != str(one) or mode_of(stats, proc) != c.group(1):
                    fail("the second OVERSUB_PROFILE run did not choose from the profile", proc)
                summary.append(f"OVERSUB_PROFILE: the second run took {c.group(1)}")

    # A malformed mode: refused, listing the accepted forms.
    proc = run(cmd, {"OVERSUB_MODE": "automatic"}, args.lib)
    if proc.returncode != 2 or ("OVERSUB_MODE='automatic' is not valid" not in proc.stderr
                                or ACCEPTED not in proc.stderr):
        fail(f"OVERSUB_MODE=automatic: exit {proc.returncode}, expected 2 and the message "
             f"ending '{ACCEPTED}'", proc)
    summary.append("OVERSUB_MODE=automatic refused (exit 2) listing auto")
    print("OVERSUB_MODE=auto at 3x: " + "; ".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
