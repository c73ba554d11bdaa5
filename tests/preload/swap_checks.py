"""What every swap- and um-mode test asserts about a run, shared by swap_test.py
(simtrain) and swap_random_test.py (randprog): running a program with or without
liboversub, stopping with the evidence, and checking oversub's exit statistics and
simgpu's exit report."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

MiB = 1 << 20
OOM_RE = re.compile(r"cudaErrorMemoryAllocation")
HOST_MAPPED_RE = re.compile(r"kernel bytes in host-located mappings (\d+)")
IN_USE_RE = re.compile(r"moved while in use (\d+) bytes")
RUN_TIMEOUT_S = 300


def run(cmd: list[str], env_extra: dict[str, str], lib: Path | None) -> subprocess.CompletedProcess[str]:
    """cmd with no OVERSUB_*/SIMGPU_* settings but env_extra's, preloading lib if given."""
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


LOSS_BITS_RE = re.compile(r"^iter \d+ loss \S+ \(bits (0x[0-9a-f]+)\)$", re.M)
PEAK_BYTES_RE = re.compile(r"^peak device bytes: (\d+)$", re.M)


def reference(cmd: list[str], ratio: float) -> tuple[list[str], int]:
    """simtrain's loss bits with plenty of memory, and its peak over ratio (the device
    size that oversubscribes it ratio times)."""
    base = run(cmd, {}, None)
    if base.returncode != 0:
        fail("simtrain fails with plenty of memory", base)
    return LOSS_BITS_RE.findall(base.stdout), int(int(PEAK_BYTES_RE.search(base.stdout).group(1)) / ratio)


def fail(message: str, proc: subprocess.CompletedProcess[str] | None = None) -> NoReturn:
    if proc is not None:
        message += f"\n--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}---"
    print(f"FAIL: {message}")
    sys.exit(1)


def read_stats(stats_file: Path, proc: subprocess.CompletedProcess[str]) -> dict:
    lines = [l for l in stats_file.read_text().splitlines() if l.startswith('{"oversub_stats"')]
    if not lines:
        fail("no oversub statistics (OVERSUB_STATS=json)", proc)
    return json.loads(lines[-1])


def check_swap(stats: dict, proc: subprocess.CompletedProcess[str], device: int,
               all_buffers_found: bool, expect_scheduled: bool,
               expect_fetches: bool = True) -> str:
    """Swap mode: resident bytes never above the capacity (nor the capacity above the
    device), pages really moved, nothing refused, failed or leaked; with
    all_buffers_found (the program passes plain pointers to buffers the scan finds
    whole), no kernel reached a swapped-out page (simgpu's count, SIMGPU_REPORT=1);
    with expect_scheduled, the learned schedule was followed without deviation."""
    counters = stats["counters"]
    swap = stats["pool"]["device0"]["swap"]
    if not swap["peak_resident_bytes"] <= swap["capacity_bytes"] <= device:
        fail(f"resident bytes above the capacity or the device: {swap}, device {device}")
    if swap["evictions"] == 0 or (expect_fetches and swap["fetches"] == 0):
        fail(f"nothing moved: {swap}")
    if swap["failures"] != 0 or counters["swap_refusals"]["total"] != 0:
        fail(f"refusals or failures: {swap} {counters['swap_refusals']}")
    if counters["allocations"]["current"] != 0 or counters["untracked_frees"]["total"] != 0:
        fail(f"allocations left live or frees lost: {counters}")
    host_mapped = HOST_MAPPED_RE.search(proc.stderr)
    if host_mapped is None:
        fail("no simgpu exit report (SIMGPU_REPORT=1)", proc)
    if all_buffers_found and int(host_mapped.group(1)) != 0:
        fail(f"kernels reached {host_mapped.group(1)} bytes of swapped-out pages", proc)
    scheduled = counters["swap_scheduled"]["total"]
    deviations = counters["swap_deviations"]["total"]
    if expect_scheduled and (scheduled == 0 or deviations != 0):
        fail(f"the learned schedule was not followed: scheduled {scheduled}, "
             f"deviations {deviations}", proc)
    return (f"{swap['evictions']} evictions, {swap['fetches']} fetches, "
            f"{swap['bytes_to_host'] // MiB} MiB to host, {swap['bytes_to_device'] // MiB} MiB "
            f"back; {scheduled} launches followed the learned schedule, {deviations} deviations")


def device_figure(key: str, default: float | None = None) -> float:
    """A figure of the simgpu device model the run uses (SIMGPU_DEVICE, else simgpu's
    default)."""
    device = os.environ.get("SIMGPU_DEVICE", "h100-pcie")
    text = (Path(os.environ["SIMGPU_DEVICE_DIR"]) / f"{device}.model").read_text()
    m = re.search(rf"^{key}\s*=\s*([0-9.e+]+)", text, re.M)
    if m is None:
        if default is not None:
            return default
        fail(f"{key} missing from the {device} model")
    return float(m.group(1))


def check_pinned_rates(sched: dict, source: str, within: float) -> None:
    """The stats' "schedule" section has its link from source, each way's rate the
    device model's pinned bandwidth within that fraction."""
    if sched["link_source"] != source:
        fail(f"the link should come from {source}: {sched}")
    for way in ("h2d", "d2h"):
        want_gbps = device_figure(f"{way}_pinned_bandwidth") / 1e9
        if abs(sched[f"{way}_gbps"] - want_gbps) > within * want_gbps:
            fail(f"{way}_gbps {sched[f'{way}_gbps']}, the device model's pinned rate is "
                 f"{want_gbps} GB/s")


def check_link(sched: dict, rates: bool = True) -> None:
    """The link figures the learner fitted from CUPTI's copy records (the stats'
    "schedule" section) are the device model's, within 1% (the fit is exact up to
    CUPTI's whole ns): the copy setup its copy latency, and with rates each way's rate
    its pinned bandwidth (Note [Link figures from the engine's copies] in
    profiler/launch_timing.h: the engine copies out page by page and in by runs, so a
    rate out that kept the setup in it would be 10% low on 2 MiB pages)."""
    if rates:
        check_pinned_rates(sched, "cupti", 0.01)
    want_setup = device_figure("copy_latency_ns")
    if abs(sched["copy_setup_ns"] - want_setup) > 0.01 * want_setup:
        fail(f"copy setup {sched['copy_setup_ns']} ns, the model's latency is {want_setup} ns")


def check_um(stats: dict, device: int, prefetching: bool = True,
             proc: subprocess.CompletedProcess[str] | None = None) -> str:
    """um mode: what oversub prefetched stayed under the capacity; it prefetched where
    prefetching, and nothing otherwise (the naive policy, or every buffer left to demand
    paging); nothing refused or leaked; with proc (a run with
    SIMGPU_REPORT=1), no prefetch to the host moved pages a kernel was still using
    (Note [Migrations of pages in use] in tests/simgpu/driver/managed.h)."""
    counters = stats["counters"]
    um = stats["pool"]["device0"]["um"]
    if not um["peak_resident_bytes"] <= um["capacity_bytes"] <= device:
        fail(f"prefetched bytes above the capacity or the device: {um}, device {device}")
    if prefetching != (um["prefetches_in"] > 0) or not um["concurrent_access"]:
        fail(f"prefetches where {'some' if prefetching else 'none'} were expected: {um}")
    if counters["swap_refusals"]["total"] != 0 or counters["allocations"]["current"] != 0:
        fail(f"refusals or allocations left live: {counters}")
    if proc is not None:
        in_use = IN_USE_RE.search(proc.stderr)
        if in_use is None:
            fail("no simgpu exit report (SIMGPU_REPORT=1)", proc)
        if int(in_use.group(1)) != 0:
            fail(f"prefetches to the host moved {in_use.group(1)} bytes that kernels were still "
                 "using", proc)
    return (f"{um['prefetches_in']} prefetches in ({um['bytes_in'] // MiB} MiB), "
            f"{um['prefetches_out']} out")
