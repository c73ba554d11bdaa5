#!/usr/bin/env python3
"""Swap-mode correctness on simgpu: simtrain past the device's memory under liboversub.

Each case runs simtrain once with a device large enough (the reference losses), then
with SIMGPU_MEMORY set to its peak divided by an oversubscription ratio, under
LD_PRELOAD=liboversub.so OVERSUB_MODE=swap, with simgpu's race detector aborting at
the first unordered access. It asserts that every iteration's loss bits are identical,
that the device never held more than the swap capacity, that pages really moved, and
that nothing was refused or lost. Without the library the same run must fail with
CUDA's out-of-memory error (so the test proves the device really was too small).

With --no-host-vmm MODEL the device is MODEL with host_vmm_supported = 0: swap mode
must say once that CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0
and run as um, to the same loss bits (Note [Swap needs host-located VMM] in
core/device_pool.cc).

  swap_test.py --lib liboversub.so --simtrain simtrain --ratio 3 [--mode-args '--caching']
"""
from __future__ import annotations

import argparse
import re
import shlex
import sys
import tempfile
from pathlib import Path

from swap_checks import OOM_RE, check_swap, check_um, fail, read_stats, run

ITER_RE = re.compile(r"^iter \d+ loss \S+ \(bits (0x[0-9a-f]+)\)$", re.M)
PEAK_RE = re.compile(r"^peak device bytes: (\d+)$", re.M)
LOG_RE = re.compile(r"^log after iter \d+: weights sum (\S+)$", re.M)  # simtrain --log-every

# Footprints chosen so each ratio leaves the largest single launch room on the device
# (at 10x, many narrow layers: the Adam step of one layer touches four 1 MiB tensors).
CONFIGS = {
    "chain": ["--depth", "8", "--width", "512", "--batch", "128", "--iters", "3"],
    "deep": ["--depth", "32", "--width", "512", "--batch", "16", "--iters", "3"],
    # Long enough for the schedule to be learned (4 iterations) and then followed.
    "chain6": ["--depth", "8", "--width", "512", "--batch", "128", "--iters", "6"],
    # Long enough for the schedule's tuning to choose (see Note [Lending as a variant] in
    # core/tuning.cc: at 3x on the H100-PCIe model it keeps lending, from about iteration
    # 57).
    "chain64": ["--depth", "8", "--width", "512", "--batch", "128", "--iters", "64"],
    # A logging step every third iteration (simtrain --log-every 3): launches the learned
    # iteration does not have, after it is learned (Note [Launches the iteration did not
    # have] in core/schedule.cc).
    "chain12-log": ["--depth", "8", "--width", "512", "--batch", "128", "--iters", "12",
                    "--log-every", "3"],
}


def expect_clean_failure(args: argparse.Namespace, cmd: list[str], device: int,
                         want: list[str]) -> int:
    """The copy engine or a mapping fails midway: the program must see a CUDA error
    code (simtrain exits 1 naming it), and no iteration may report a wrong loss. The
    --env settings apply, as to the run without failures."""
    settings = {"SIMGPU_MEMORY": str(device), "SIMGPU_RACE": "abort", "OVERSUB_MODE": "swap"}
    settings.update(e.split("=", 1) for e in args.env)
    settings["SIMGPU_FAIL"] = args.fail
    proc = run(cmd, settings, args.lib)
    if proc.returncode != 1 or "simtrain: CUDA error" not in proc.stderr + proc.stdout:
        fail(f"SIMGPU_FAIL={args.fail}: want simtrain to stop with a CUDA error (exit 1)", proc)
    got = ITER_RE.findall(proc.stdout)
    if got != want[:len(got)]:
        fail(f"SIMGPU_FAIL={args.fail}: a loss before the failure is wrong: {got} vs {want}", proc)
    if len(got) == len(want):
        fail(f"SIMGPU_FAIL={args.fail}: the failure never reached the program", proc)
    error = next(l for l in (proc.stderr + proc.stdout).splitlines() if "simtrain: CUDA error" in l)
    extra = " ".join(args.env)
    print(f"SIMGPU_FAIL={args.fail} at {args.ratio}x{' with ' + extra if extra else ''}: "
          f"{len(got)} correct iterations, then: {error}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", type=Path, required=True)
    ap.add_argument("--simtrain", type=Path, required=True)
    ap.add_argument("--ratio", type=float, required=True, help="footprint / device memory")
    ap.add_argument("--config", choices=sorted(CONFIGS), default="chain")
    ap.add_argument("--mode-args", default="", help="simtrain mode flags")
    ap.add_argument("--mode", choices=["swap", "um"], default="swap", help="OVERSUB_MODE")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="another OVERSUB_* setting for the swap run (repeatable)")
    ap.add_argument("--expect-scheduled", action="store_true",
                    help="the learned schedule must be followed, with no deviation")
    ap.add_argument("--expect-off-schedule", action="store_true",
                    help="the schedule is learned once and followed to the end, the "
                         "launches it does not have run on demand (no deviation)")
    ap.add_argument("--expect-cupti-rest", action="store_true",
                    help="once the schedule is followed untuned, CUPTI's callbacks rest "
                         "(Note [CUPTI at rest] in profiler/cupti_source.h): put at rest at "
                         "least once and resting at exit")
    ap.add_argument("--expect-calls", default="", metavar="NAME,...",
                    help="entry points the library must have seen called (its stats)")
    ap.add_argument("--expect-no-calls", default="", metavar="NAME,...",
                    help="entry points the library must not have seen called")
    ap.add_argument("--expect-unreadable", action="store_true",
                    help="every launch's parameter layout is unreadable (SIMGPU_FAIL="
                         "param_info:1+ in --env): counted, and taken to touch any page")
    ap.add_argument("--no-host-vmm", type=Path, metavar="MODEL",
                    help="run on MODEL with host_vmm_supported = 0: swap must run as um")
    ap.add_argument("--expect-log", default="", metavar="TEXT",
                    help="a line the swap run must write to stderr (with OVERSUB_LOG=info "
                         "in --env)")
    ap.add_argument("--fail", metavar="SIMGPU_FAIL",
                    help="inject this failure (e.g. copy:60) and expect a CUDA error "
                         "with every loss printed before it still correct")
    args = ap.parse_args()

    cmd = [str(args.simtrain), *CONFIGS[args.config], *shlex.split(args.mode_args)]
    base = run(cmd, {}, None)
    if base.returncode != 0:
        fail("simtrain fails with plenty of memory", base)
    want = ITER_RE.findall(base.stdout)
    peak = int(PEAK_RE.search(base.stdout).group(1))
    if len(want) < 3:
        fail("simtrain printed no per-iteration losses", base)
    device = int(peak / args.ratio)

    alone = run(cmd, {"SIMGPU_MEMORY": str(device)}, None)
    if alone.returncode == 0 or not OOM_RE.search(alone.stdout + alone.stderr):
        fail(f"without oversub simtrain should run out of memory on {device} bytes", alone)

    if args.fail:
        return expect_clean_failure(args, cmd, device, want)

    with tempfile.TemporaryDirectory() as tmp:
        stats_file = Path(tmp) / "stats.json"
        settings = {"SIMGPU_MEMORY": str(device), "SIMGPU_RACE": "abort", "SIMGPU_REPORT": "1",
                    "OVERSUB_MODE": args.mode, "OVERSUB_STATS": "json",
                    "OVERSUB_STATS_FILE": str(stats_file)}
        settings.update(e.split("=", 1) for e in args.env)
        mode = args.mode
        if args.no_host_vmm:
            model = Path(tmp) / "no-host-vmm.model"
            text = args.no_host_vmm.read_text()
            if not re.search(r"^host_vmm_supported = 1", text, re.M):
                fail(f"{args.no_host_vmm} has no 'host_vmm_supported = 1' line")
            model.write_text(re.sub(r"^host_vmm_supported = 1", "host_vmm_supported = 0", text,
                                    flags=re.M))
            settings["SIMGPU_DEVICE"] = str(model)
        proc = run(cmd, settings, args.lib)
        if proc.returncode != 0:
            fail(f"simtrain fails under OVERSUB_MODE={args.mode} at {args.ratio}x", proc)
        if args.no_host_vmm:
            said = proc.stderr.count("CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_"
                                     "SUPPORTED is 0): running as OVERSUB_MODE=um")
            if said != 1:
                fail(f"swap mode without host-located VMM said so {said} times, want once",
                     proc)
            mode = "um"
        if args.expect_log and args.expect_log not in proc.stderr:
            fail(f"the run never said '{args.expect_log}'", proc)
        got = ITER_RE.findall(proc.stdout)
        if got != want:
            fail(f"loss bits differ under {args.mode} at {args.ratio}x: {got} != {want}", proc)
        if LOG_RE.findall(proc.stdout) != LOG_RE.findall(base.stdout):
            fail(f"the logging steps' sums differ under {args.mode} at {args.ratio}x", proc)
        stats = read_stats(stats_file, proc)
    if args.expect_off_schedule:
        sched = stats.get("schedule", {})
        logs = len(LOG_RE.findall(proc.stdout))
        if (sched.get("learned") != 1 or sched.get("deviations") != 0
                or sched.get("unplanned_launches", 0) == 0 or sched.get("followed", 0) == 0):
            fail(f"the schedule was not kept through the logging steps ({logs} of them): "
                 f"learned {sched.get('learned')}, deviations {sched.get('deviations')}, "
                 f"unplanned launches {sched.get('unplanned_launches')}, followed "
                 f"{sched.get('followed')}", proc)
        print(f"learned once, {sched['followed']} launches followed, the "
              f"{sched['unplanned_launches']} launches of {logs} logging steps on demand")
    if args.expect_cupti_rest:
        sched = stats.get("schedule", {})
        if sched.get("cupti_rests", 0) < 1 or sched.get("cupti_resting") is not True:
            fail(f"CUPTI was not put at rest while the schedule was followed: cupti_rests "
                 f"{sched.get('cupti_rests')}, cupti_resting {sched.get('cupti_resting')}, "
                 f"tune_status {sched.get('tune_status')}, followed {sched.get('followed')}",
                 proc)
        print(f"CUPTI put at rest {sched['cupti_rests']} time(s) while the schedule was "
              f"followed ({sched['followed']} launches)")
    calls = stats.get("calls", {})
    for name in filter(None, args.expect_calls.split(",")):
        if calls.get(name, 0) == 0:
            fail(f"{name} was never seen by the library (calls: {calls})", proc)
    for name in filter(None, args.expect_no_calls.split(",")):
        if calls.get(name, 0) != 0:
            fail(f"{name} was called {calls[name]} times; the workload should not use it", proc)
    if mode == "um":
        moved = check_um(stats, device, "OVERSUB_POLICY=naive" not in args.env, proc)
        if args.expect_scheduled:
            counters = stats["counters"]
            followed = counters["swap_scheduled"]["total"]
            if followed == 0 or counters["swap_deviations"]["total"] != 0:
                fail(f"um did not follow the learned schedule: {followed} launches followed, "
                     f"{counters['swap_deviations']['total']} deviations", proc)
            moved += f"; {followed} launches followed the learned schedule"
    else:
        # simtrain passes plain pointers, so without --caching the scan finds every
        # buffer and no kernel may reach a swapped-out page.
        moved = "" if args.expect_unreadable else check_swap(
            stats, proc, device, "--caching" not in args.mode_args, args.expect_scheduled)
    if args.expect_unreadable:
        # No buffer is found: nothing is fetched, pages leave as new ones come, and the
        # kernels reach the evicted ones on the host.
        res = stats["pool"]["device0"]["swap"]
        if res.get("evictions", 0) == 0 or res.get("peak_resident_bytes", 0) > res.get(
                "capacity_bytes", 0):
            fail(f"pages did not leave, or the capacity was exceeded: {res}", proc)
        unreadable = stats["counters"].get("launches_unreadable", {}).get("total", 0)
        launches = calls.get("__cudaLaunchKernel", 0) + calls.get("cuLaunchKernel", 0)
        if unreadable == 0 or unreadable < launches:
            fail(f"{unreadable} launches counted unreadable of {launches}", proc)
        moved += f"; {unreadable} launches with unreadable layouts, taken to touch any page"
    print(f"{mode} {args.config} {args.mode_args or '(default)'} at {args.ratio}x: peak "
          f"{peak} bytes on a {device}-byte device, loss bits identical over {len(want)} "
          f"iterations; {moved}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
