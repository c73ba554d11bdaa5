#!/usr/bin/env python3
"""Swap mode chooses among variants of its schedule by measured time (Note [Choosing
among schedules by measured time] in core/tuning.cc): simtrain at 1.5x
oversubscription on simgpu's H100-PCIe model, long enough for the tuning to finish.

- The loss bits of every iteration are those of a run with enough memory, with the
  race detector aborting at the first race (strict residency included), while the
  engine switches plans.
- The stats' "schedule" section lists the 25 variants timed: the 24 of the grid, then
  the fastest of them lending evicting pages' memory; the one kept is the fastest of
  all, and its figures are the section's.
- It is the default: the tuned runs set no OVERSUB_TUNE; OVERSUB_TUNE=0 times none.
- With CUPTI's records handed back only once their kernels are done, as on a GPU
  (SIMGPU_CUPTI_RECORDS=when-done), the choice waits for the last ones (at least one
  loop start) and is the same, from the same times (to within 0.1%).
- The measurements (the starts of kernels on the device, from CUPTI's records: Note
  [Timing on the device] in core/tuning.cc) are the iterations' real (virtual) times:
  the first variant's is the steady iteration of a run with OVERSUB_TUNE=0, the kept
  one's the steady iteration after the tuning, each within 2%.
- The steady iteration after the tuning is no slower than with OVERSUB_TUNE=0.

  swap_tune_test.py --lib liboversub.so --simtrain simtrain
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

from swap_checks import check_swap, fail, read_stats, run

ITER_RE = re.compile(r"^iter \d+ loss \S+ \(bits (0x[0-9a-f]+)\)$", re.M)
PEAK_RE = re.compile(r"^peak device bytes: (\d+)$", re.M)
VIRTUAL_RE = re.compile(r"virtual time ([0-9.]+) ms")
SHAPE = ["--depth", "8", "--width", "512", "--batch", "16"]
TUNED_ITERS = 60  # the tuning is done by then (about 2 iterations per variant)
GRID = 24  # 8 loop starts x 0, 1 and 2 steps of pages free
VARIANTS = GRID + 1  # and the fastest of them, lending evicting pages' memory


def steady_ms(short: float, long: float, extra: int) -> float:
    return (long - short) / extra


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", type=Path, required=True)
    ap.add_argument("--simtrain", type=Path, required=True)
    args = ap.parse_args()

    device_env = {"SIMGPU_DEVICE": "h100-pcie"}
    base = run([str(args.simtrain), *SHAPE, "--iters", str(TUNED_ITERS + 4)], device_env, None)
    if base.returncode != 0:
        fail("simtrain fails with plenty of memory", base)
    want = ITER_RE.findall(base.stdout)
    device = int(int(PEAK_RE.search(base.stdout).group(1)) / 1.5)

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        # "late": CUPTI's records come only once their kernels are done, as on a GPU.
        for tune, iters in (("1", TUNED_ITERS), ("1", TUNED_ITERS + 4), ("0", 6), ("0", 10),
                            ("late", TUNED_ITERS + 4)):
            stats_file = Path(tmp) / f"stats-{tune}-{iters}.json"
            proc = run([str(args.simtrain), *SHAPE, "--iters", str(iters)],
                       {**device_env, "SIMGPU_MEMORY": str(device), "SIMGPU_RACE": "abort",
                        "SIMGPU_REPORT": "1", "OVERSUB_MODE": "swap",
                        # The runs' choices are compared: every remap on the launching
                        # thread, since the mover thread's timings vary with how the
                        # two threads interleave (Note [The mover] in
                        # residency/swap_mover.cc).
                        "OVERSUB_MOVER": "inline",
                        # tuned: the default
                        **({"OVERSUB_TUNE": tune} if tune == "0" else {}),
                        **({"SIMGPU_CUPTI_RECORDS": "when-done"} if tune == "late" else {}),
                        "OVERSUB_STATS": "json", "OVERSUB_STATS_FILE": str(stats_file)},
                       args.lib)
            if proc.returncode != 0:
                fail(f"simtrain fails under swap (OVERSUB_TUNE={tune}, {iters} iterations)", proc)
            if ITER_RE.findall(proc.stdout) != want[:iters]:
                fail(f"loss bits differ under swap (OVERSUB_TUNE={tune})", proc)
            stats = read_stats(stats_file, proc)
            summary = check_swap(stats, proc, device, True, True)
            results[(tune, iters)] = (float(VIRTUAL_RE.search(proc.stderr).group(1)),
                                      stats.get("schedule"), summary)

    untuned = results[("0", 10)][1]
    if untuned is None or untuned["tune"] or untuned["tune_trials"] != 0 or untuned["trials"] \
            or untuned["tune_status"] != "off":
        fail(f"OVERSUB_TUNE=0 timed variants: {untuned}")
    sched = results[("1", TUNED_ITERS + 4)][1]
    if sched is None or not sched["tune"] or sched["tuned"] != 1 \
            or sched["tune_status"] != "chosen":
        fail(f"the tuning did not finish in {TUNED_ITERS} iterations: {sched}")
    trials = sched["trials"]
    if sched["tune_trials"] != VARIANTS or len(trials) != VARIANTS:
        fail(f"{len(trials)} variants timed ({sched['tune_trials']} counted), not {VARIANTS}")
    grid = [t for t in trials if not t["lend"]]
    if len(grid) != GRID or len({(t["rotation"], t["free_pages"]) for t in grid}) != GRID:
        fail(f"a variant was timed twice: {trials}")
    # See Note [Lending as a variant] in core/tuning.cc: the fastest of the grid, timed
    # last, lending.
    grid_best = min((t for t in grid if t["measured_ns"] > 0), key=lambda t: t["measured_ns"])
    if trials[-1]["lend"] is not True or (trials[-1]["rotation"], trials[-1]["free_pages"]) != \
            (grid_best["rotation"], grid_best["free_pages"]):
        fail(f"the last variant timed should be the grid's fastest, lending: {trials[-1]}, "
             f"fastest {grid_best}")
    timed = [t for t in trials if t["measured_ns"] > 0]
    best = min(timed, key=lambda t: t["measured_ns"])  # the first on a tie, as the engine
    if sched["tune_record_waits"] != 0:
        fail(f"records written at enqueue, yet the choice waited for them: {sched}")
    late = results[("late", TUNED_ITERS + 4)][1]
    # The same times, to within 0.1%: waiting for the records moves the host's clock,
    # and with it when the engine asks about its copies (a nanosecond or so).
    def same_times(a: list, b: list) -> bool:
        return len(a) == len(b) and all(
            {k: v for k, v in x.items() if k != "measured_ns"} ==
            {k: v for k, v in y.items() if k != "measured_ns"} and
            abs(x["measured_ns"] - y["measured_ns"]) <= 0.001 * max(x["measured_ns"], 1)
            for x, y in zip(a, b))
    if late is None or late["tune_status"] != "chosen" or late["tune_record_waits"] < 1 or \
            not same_times(late["trials"], trials) or late["rotation"] != sched["rotation"] or \
            late["free_pages"] != sched["free_pages"] or late["lend"] != sched["lend"]:
        fail(f"with records only for finished kernels the choice should wait for them and be "
             f"the same: {late}")
    if (sched["rotation"], sched["free_pages"], sched["lend"]) != \
            (best["rotation"], best["free_pages"], best["lend"]) or \
            sched["chosen_measured_ns"] != best["measured_ns"]:
        fail(f"kept {sched['rotation']}/{sched['free_pages']} at {sched['chosen_measured_ns']} ns, "
             f"the fastest timed is {best}")
    if sched["first_measured_ns"] != trials[0]["measured_ns"] or \
            (trials[0]["rotation"], trials[0]["free_pages"]) != (0, 0):
        fail(f"the first variant is not the plan as learned: {trials[0]}, {sched}")

    tuned_ms = steady_ms(results[("1", TUNED_ITERS)][0], results[("1", TUNED_ITERS + 4)][0], 4)
    untuned_ms = steady_ms(results[("0", 6)][0], results[("0", 10)][0], 4)
    first_ms = sched["first_measured_ns"] / 1e6
    chosen_ms = sched["chosen_measured_ns"] / 1e6
    for what, measured, steady in (("first", first_ms, untuned_ms), ("kept", chosen_ms, tuned_ms)):
        if abs(measured - steady) > 0.02 * steady:
            fail(f"the {what} variant was timed at {measured:.4f} ms, its steady iteration "
                 f"is {steady:.4f} ms")
    if tuned_ms > untuned_ms * 1.005:
        fail(f"tuned {tuned_ms:.4f} ms per iteration, slower than untuned {untuned_ms:.4f}")
    print(f"swap at 1.5x: loss bits identical over {len(want)} iterations, no race; "
          f"{VARIANTS} variants timed, kept the loop body from launch {sched['rotation']} with "
          f"{sched['free_pages']} page{'' if sched['free_pages'] == 1 else 's'} free"
          f"{', lending' if sched['lend'] else ''}: {tuned_ms:.4f} ms per steady iteration against "
          f"{untuned_ms:.4f} untuned ({results[('1', TUNED_ITERS + 4)][2]}); with records "
          f"only for finished kernels the same choice after {late['tune_record_waits']} "
          f"loop start(s) waiting")
    return 0


if __name__ == "__main__":
    sys.exit(main())
