#!/usr/bin/env python3
"""The swap and um learners plan from measured figures (Note [Launch durations] in
core/schedule_costs.cc): simtrain at 3x oversubscription under OVERSUB_POLICY=cost.

  measured  (--mode swap|um) CUPTI is there: the stats' "schedule" section says the
            durations and the link come from CUPTI, every launch of the learned
            iteration has a measured duration, and each one is simgpu's own time for
            that kernel: the launch log (SIMGPU_LAUNCH_LOG, one line per kernel with
            ns=<duration>) at the same launch number, within 1 ns, and exactly one of
            the values that launch position took in the iterations seen (the learner
            takes their median). 1 ns: both sides are CUPTI's record of the same
            kernel, end - start with each end truncated to whole ns, so the same
            kernel in another iteration may differ by one. The link: simgpu's pinned
            rate and copy latency of the device model, within 1% (the fit is exact up
            to that truncation); um's rates are the driver's migrations, timed at
            start (check_managed_link). Swap: the remaps' costs the engine timed, which the
            prediction counts, match the device model's for one page within 5%; the
            last whole iteration followed is measured part by part (Note [Which part
            differs] in core/schedule_costs.cc): its remaps' host time, split between the
            mover and the launching thread, is what the engine's timed costs give for
            its runs and pages (within 2%), and no part exceeds the engine's totals;
            its copies out are the plan's within a page (Note [Dead gaps] in
            core/dead_gaps.cc).
            Loss bits identical to a run with enough memory.
  fallback  (--mode swap|um, --holder) another tool holds CUPTI (cupti_holder
            preloaded first): the durations are the constant 20 us, the link what was
            timed at start without CUPTI (swap: pinned copies, um: its migrations), the
            stats say "constant" and "held", OVERSUB_VERBOSE=1 says so once,
            and the run is still correct and follows its schedule; swap's remaps are
            timed on CUPTI's clock all the same and predicted as when measured; with no kernel
            records no variants of it are timed (Note [Timing on the device] in core/tuning.cc): the
            stats' tune_status is "no_kernel_times", and OVERSUB_VERBOSE=1 says so once.
  waits     (--mode swap) the same run with VMM calls that return at once and with calls
            that wait for the device's queued work (SIMGPU_VMM_WAIT=0 and 1): the engine's
            probe at start finds which (the stats' mapping_calls "return" and "wait";
            OVERSUB_VERBOSE=1 says so once where they wait), and
            the plan with the waits predicts a longer iteration (Note [Mapping calls that
            wait] in policy/simulate.h: a fetch waits for the launches queued before its
            user). Loss bits identical in both.

  schedule_timing_test.py --lib liboversub.so --simtrain simtrain --case measured --mode swap
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from swap_checks import (LOSS_BITS_RE, check_link, check_pinned_rates, device_figure, fail,
                         read_stats, reference, run)

# Seven iterations, so that the last whole iteration followed, which check_parts
# measures, comes after the first two the schedule follows: those may still move a page
# or two that the on-demand iterations left where the plan does not expect it.
SIMTRAIN = ["--depth", "8", "--width", "512", "--batch", "128", "--iters", "7"]
CONSTANT_NS = 20_000
FALLBACK_LINE = "no kernel durations from CUPTI (CUPTI is held by"
NO_TUNE_LINE = "swap: not timing variants of the schedule: no kernel times from CUPTI (held)"
WAITS_LINE = ("oversub: swap: device 0's mapping calls wait for its queued work (measured at "
              "start)")


def read_log(path: Path) -> list[int]:
    """Each kernel's duration (ns), in launch order."""
    out = []
    for line in path.read_text().splitlines():
        ns = [f for f in line.split() if f.startswith("ns=")]
        if len(ns) != 1:
            fail(f"a launch log line without its duration: {line!r}")
        out.append(int(ns[0][3:]))
    return out


def check_measured(sched: dict, durations: list[int], mode: str, swap: dict | None) -> str:
    period, first, learned = sched["period"], sched["period_first_launch"], sched["durations_ns"]
    if sched["cupti"] != "cupti" or sched["durations_source"] != "cupti":
        fail(f"durations not from CUPTI: {sched}")
    if sched["measured_launches"] != period or len(learned) != period:
        fail(f"{sched['measured_launches']} of {period} launches measured: {sched}")
    if first + period > len(durations):
        fail(f"the learned period ends at launch {first + period}, the log has {len(durations)}")
    for p in range(period):
        at = first + p
        seen = {durations[i] for i in range(at, -1, -period)}
        if abs(learned[p] - durations[at]) > 1 or learned[p] not in seen:
            fail(f"launch {p} of the period (launch {at}): learned {learned[p]} ns, simgpu "
                 f"ran it in {durations[at]} ns (earlier iterations: {sorted(seen)})")
    if len(set(learned)) < 3:
        fail(f"the durations hardly differ; the test proves little: {learned}")
    if mode == "um":
        check_managed_link(sched)
    check_link(sched, rates=mode != "um")
    check_prediction(sched)
    remaps = check_remaps(sched, mode) + check_parts(sched, mode, swap)
    return (f"{period} launch durations equal simgpu's ({min(learned)}..{max(learned)} ns), "
            f"link {sched['h2d_gbps']:.1f}/{sched['d2h_gbps']:.1f} GB/s, setup "
            f"{sched['copy_setup_ns']} ns{remaps}")


def check_remaps(sched: dict, mode: str) -> str:
    """Swap: the prediction counts the engine's remaps at the costs it timed (Note
    [Predicting the remaps] in core/schedule_costs.cc): a page remapped alone costs what the
    device model charges for its unmap, map and access grant, within 5%. um remaps
    nothing."""
    if mode != "swap":
        if sched["remap_source"] != "none" or sched["predicted_remap_ns"] != 0:
            fail(f"um mode counts remaps: {sched}")
        return ""
    if sched["remap_source"] != "measured":
        fail(f"the engine's remaps were not measured before the plan: {sched}")
    if sched["mapping_calls"] != "return":
        fail(f"the device model's VMM calls return at once; the stats say {sched}")
    want = sum(device_figure(f"vmm_{k}_ns") + device_figure(f"vmm_{k}_per_2mib_ns")
               for k in ("unmap", "map", "set_access"))
    got = sched["remap_run_ns"] + sched["remap_page_ns"]
    if abs(got - want) > 0.05 * want:
        fail(f"a page's remap measured at {got} ns (run {sched['remap_run_ns']}, page "
             f"{sched['remap_page_ns']}), the device model charges {want:.0f} ns")
    if sched["predicted_remap_ns"] <= 0:
        fail(f"the plan at 3x moves pages, and its prediction counts no remap: {sched}")
    return (f", a page's remap {got / 1e3:.1f} us as measured (model {want / 1e3:.1f}), "
            f"{sched['predicted_remap_ns'] / 1e6:.2f} ms of remaps predicted")


def check_parts(sched: dict, mode: str, swap: dict | None) -> str:
    """Swap: the last whole iteration followed, measured part by part (Note [Which part
    differs] in core/schedule_costs.cc). Its remaps' host time (the mover's and the launching
    thread's) is what the engine's timed costs give for the runs and pages it counted,
    within 2% (simgpu's costs are exact; the fit is over every run timed), and each
    part is at most the engine's total over the run."""
    keys = ("measured_ns", "measured_mover_remap_ns", "measured_launch_thread_remap_ns",
            "measured_remaps", "measured_runs", "measured_h2d_bytes", "measured_d2h_bytes")
    if mode != "swap":
        if any(sched[k] != 0 for k in keys[1:5]):
            fail(f"um mode measures remaps: {sched}")
        return ""
    if swap is None:
        fail("no swap section in the stats")
    if sched["measured_ns"] <= 0 or sched["measured_remaps"] <= 0:
        fail(f"no followed iteration measured, or none that remapped, at 3x: {sched}")
    runs, pages = sched["measured_runs"], sched["measured_remaps"]
    if not 0 < runs <= pages:
        fail(f"{runs} runs for {pages} pages remapped")
    took = sched["measured_mover_remap_ns"] + sched["measured_launch_thread_remap_ns"]
    want = runs * sched["remap_run_ns"] + pages * sched["remap_page_ns"]
    if abs(took - want) > 0.02 * want:
        fail(f"the iteration's remaps took {took} ns; {runs} runs and {pages} pages at the "
             f"engine's costs are {want} ns")
    for part, total in (("measured_mover_remap_ns", "mover_remap_ns"),
                        ("measured_launch_thread_remap_ns", "launch_remap_ns"),
                        ("measured_remaps", "remap_pages"), ("measured_runs", "remap_runs"),
                        ("measured_h2d_bytes", "bytes_to_device"),
                        ("measured_d2h_bytes", "bytes_to_host")):
        if sched[part] > swap[total]:
            fail(f"{part} {sched[part]} is more than the engine's {total} {swap[total]}")
    # See Note [Dead gaps] in core/dead_gaps.cc: the plan knows which evictions copy
    # nothing, so its copies out are the engine's, within a page.
    if abs(sched["measured_d2h_bytes"] - sched["predicted_d2h_bytes"]) > 2 << 20:
        fail(f"the last iteration copied {sched['measured_d2h_bytes']} bytes out, the plan "
             f"{sched['predicted_d2h_bytes']}")
    return (f"; the last iteration {sched['measured_ns'] / 1e6:.2f} ms, remaps "
            f"{sched['measured_mover_remap_ns'] / 1e6:.2f} ms on the mover and "
            f"{sched['measured_launch_thread_remap_ns'] / 1e6:.2f} ms on the launching "
            f"thread ({pages} pages in {runs} runs), predicted {sched['predicted_remaps']} "
            f"in {sched['predicted_runs']}")


def check_prediction(sched: dict) -> None:
    """The schedule's predicted iteration (policy::simulate on the learned pages) starts
    from the learned durations: with enough memory it is their sum, and the schedule
    cannot be faster than that."""
    want = sum(max(d, 1) for d in sched["durations_ns"])
    if len(sched["durations_ns"]) == sched["period"] and sched["predicted_unlimited_ns"] != want:
        fail(f"predicted unlimited iteration {sched['predicted_unlimited_ns']} ns, the learned "
             f"durations sum to {want} ns")
    if sched["predicted_ns"] < sched["predicted_unlimited_ns"]:
        fail(f"predicted iteration {sched['predicted_ns']} ns under the unlimited "
             f"{sched['predicted_unlimited_ns']} ns")
    # At 3x the plan moves data both ways.
    for key in ("predicted_h2d_bytes", "predicted_d2h_bytes"):
        if sched[key] <= 0:
            fail(f"{key} {sched[key]}: the plan at 3x should move data both ways")


def check_managed_link(sched: dict) -> None:
    """um plans at the driver's migration rates, timed at start without CUPTI (Note [um
    plans at the driver's rates] in core/device_pool.cc): the device model's managed
    rates (its pinned ones where it has none), within 15% (32 MiB timed, simgpu's
    charges per managed page and per prefetch included: 44.7 GB/s each way on the
    H100-PCIe model's 50)."""
    if sched["link_source"] != "managed":
        fail(f"um's link should be the driver's migrations, measured at start: {sched}")
    for key, rate, pinned in (("h2d_gbps", "managed_h2d_bandwidth", "h2d_pinned_bandwidth"),
                              ("d2h_gbps", "managed_d2h_bandwidth", "d2h_pinned_bandwidth")):
        want = device_figure(rate, device_figure(pinned)) / 1e9
        if abs(sched[key] - want) > 0.15 * want:
            fail(f"{key} {sched[key]}, the device model migrates managed memory at {want} GB/s")


def check_probed_link(sched: dict) -> str:
    """Swap without CUPTI's records plans at the rates of the pinned copies timed at
    start (Note [Pinned rates at start] in core/device_pool.cc): the device model's
    pinned rates within 2% (one copy of 32 MiB each way, its latency in the time)."""
    check_pinned_rates(sched, "probe", 0.02)
    return f"; link {sched['h2d_gbps']:.2f}/{sched['d2h_gbps']:.2f} GB/s timed at start"


def check_fallback(sched: dict, stderr: str, mode: str, swap: dict | None) -> str:
    if sched["cupti"] != "held" or sched["durations_source"] != "constant":
        fail(f"with CUPTI held the durations should be the constants: {sched}")
    if sched["measured_launches"] != 0 or set(sched["durations_ns"]) != {CONSTANT_NS}:
        fail(f"with CUPTI held every launch should count {CONSTANT_NS} ns: {sched}")
    link = ""
    if mode == "um":
        check_managed_link(sched)  # timed with events, CUPTI or not
    else:
        link = check_probed_link(sched)
    if stderr.count(FALLBACK_LINE) != 1:
        fail(f"OVERSUB_VERBOSE=1 should say once that the constants are used:\n{stderr}")
    # See Note [Timing on the device] in core/tuning.cc: no kernel records, no choice
    # among variants.
    if sched["tune_status"] != "no_kernel_times" or sched["tune_trials"] != 0 \
            or sched["rotation"] != 0 or sched["free_pages"] != 0:
        fail(f"with CUPTI held the plan as learned should be kept, untimed: {sched}")
    if stderr.count(NO_TUNE_LINE) != 1:
        fail(f"OVERSUB_VERBOSE=1 should say once that no variants are timed:\n{stderr}")
    check_prediction(sched)
    # See Note [A clock without CUPTI] in core/schedule_costs.cc: CUPTI's clock though another
    # tool holds CUPTI, so the remaps are timed and predicted as in the measured case.
    remaps = check_remaps(sched, mode) + check_parts(sched, mode, swap)
    return (f"constants used ({sched['period']} launches of {CONSTANT_NS} ns), said once; "
            f"no variants timed, said once{link}{remaps}")


def check_waits(args: argparse.Namespace, cmd: list[str], want: list[str], device: int) -> str:
    predicted = {}
    with tempfile.TemporaryDirectory() as tmp:
        stats_file = Path(tmp) / "stats.json"
        for wait, calls in (("0", "return"), ("1", "wait")):
            # A device with room for the probe's 34 MiB (Note [Do VMM calls wait?] in
            # core/device_pool.cc); the pages held to the same 3x.
            settings = {"SIMGPU_MEMORY": str(256 << 20), "OVERSUB_DEVICE_LIMIT": str(device),
                        "SIMGPU_RACE": "abort", "SIMGPU_VMM_WAIT": wait, "OVERSUB_MODE": "swap",
                        "OVERSUB_POLICY": "cost", "OVERSUB_STATS": "json",
                        "OVERSUB_STATS_FILE": str(stats_file), "OVERSUB_VERBOSE": "1"}
            proc = run(cmd, settings, args.lib)
            if proc.returncode != 0 or LOSS_BITS_RE.findall(proc.stdout) != want:
                fail(f"simtrain fails or its loss bits differ with SIMGPU_VMM_WAIT={wait}", proc)
            said = proc.stderr.count(WAITS_LINE)
            if said != (1 if wait == "1" else 0):
                fail(f"SIMGPU_VMM_WAIT={wait}: OVERSUB_VERBOSE=1 says {said} times that the "
                     f"mapping calls wait", proc)
            sched = read_stats(stats_file, proc).get("schedule")
            if sched is None or sched["learned"] == 0 or sched["remap_source"] != "measured":
                fail(f"SIMGPU_VMM_WAIT={wait}: no schedule learned with measured remaps: {sched}",
                     proc)
            if sched["mapping_calls"] != calls:
                fail(f"SIMGPU_VMM_WAIT={wait}: the stats say the mapping calls "
                     f"{sched['mapping_calls']!r}, not {calls!r}", proc)
            predicted[calls] = sched["predicted_ns"]
    if not predicted["wait"] > predicted["return"]:
        fail(f"predicted {predicted['wait']} ns with the calls waiting, not more than "
             f"{predicted['return']} ns without")
    return (f"mapping calls found to return and to wait; predicted "
            f"{predicted['return'] / 1e6:.3f} -> {predicted['wait'] / 1e6:.3f} ms an iteration; "
            f"loss bits identical")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", type=Path, required=True)
    ap.add_argument("--simtrain", type=Path, required=True)
    ap.add_argument("--case", choices=["measured", "fallback", "waits"], required=True)
    ap.add_argument("--mode", choices=["swap", "um"], default="swap")
    ap.add_argument("--holder", type=Path, help="cupti_holder (fallback)")
    args = ap.parse_args()

    cmd = [str(args.simtrain), *SIMTRAIN]
    want, device = reference(cmd, 3)
    if args.case == "waits":
        print(f"swap waits: {check_waits(args, cmd, want, device)}")
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        stats_file, log = Path(tmp) / "stats.json", Path(tmp) / "launches"
        settings = {"SIMGPU_MEMORY": str(device), "SIMGPU_RACE": "abort",
                    "SIMGPU_LAUNCH_LOG": str(log), "OVERSUB_MODE": args.mode,
                    "OVERSUB_POLICY": "cost", "OVERSUB_VERBOSE": "1", "OVERSUB_STATS": "json",
                    "OVERSUB_STATS_FILE": str(stats_file)}
        if args.case == "fallback":
            if args.holder is None:
                fail("--holder is needed for the fallback case")
            settings["LD_PRELOAD"] = f"{args.holder} {args.lib}"
        proc = run(cmd, settings, args.lib)
        if proc.returncode != 0:
            fail(f"simtrain fails under OVERSUB_MODE={args.mode}", proc)
        if LOSS_BITS_RE.findall(proc.stdout) != want:
            fail(f"loss bits differ under {args.mode}", proc)
        stats = read_stats(stats_file, proc)
        sched = stats.get("schedule")
        if sched is None or sched["learned"] == 0 or sched["followed"] == 0:
            fail(f"no schedule learned and followed: {sched}", proc)
        swap = stats.get("pool", {}).get("device0", {}).get("swap")
        if args.case == "measured":
            what = check_measured(sched, read_log(log), args.mode, swap)
        else:
            what = check_fallback(sched, proc.stderr, args.mode, swap)
    print(f"{args.mode} {args.case}: loss bits identical over {len(want)} iterations; {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
