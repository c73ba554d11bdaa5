#!/usr/bin/env python3
"""Driver-level interception on simgpu: runs one case of driver_probe under
LD_PRELOAD=liboversub.so with the settings the case needs, and checks the library's
own statistics where the probe cannot see the result (driver_probe.cc lists the
cases).

  driver_test.py --lib liboversub.so --probe driver_probe --case versions
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from swap_checks import fail, read_stats, run

MIB = 1 << 20


def counter(stats: dict, name: str, field: str = "total") -> int:
    return int(stats["counters"][name][field])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", type=Path, required=True)
    ap.add_argument("--probe", type=Path, required=True)
    ap.add_argument("--case", required=True)
    args = ap.parse_args()
    cmd = [str(args.probe), args.case]

    settings = {"OVERSUB_MODE": "pool", "SIMGPU_RACE": "abort"}
    device = 64 * MIB
    if args.case == "vmm-limit":
        settings = {"OVERSUB_MODE": "track", "OVERSUB_DEVICE_LIMIT": "64MiB",
                    "PROBE_LIMIT_BYTES": str(64 * MIB)}
    elif args.case == "vmm-swap":
        # The swap capacity is the whole device: only counting the foreign buffer
        # against it keeps the pages and that buffer inside the device together.
        settings = {"OVERSUB_MODE": "swap", "OVERSUB_DEVICE_LIMIT": str(device),
                    "SIMGPU_MEMORY": str(device), "SIMGPU_RACE": "abort",
                    "PROBE_DEVICE_BYTES": str(device)}
        alone = run(cmd, {"SIMGPU_MEMORY": str(device), "PROBE_DEVICE_BYTES": str(device)}, None)
        if alone.returncode == 0:
            fail("without oversub the vmm-swap probe should run out of device memory", alone)
    elif args.case == "graph-driver":
        settings = {"OVERSUB_MODE": "swap", "SIMGPU_MEMORY": str(device),
                    "SIMGPU_RACE": "abort", "PROBE_DEVICE_BYTES": str(device)}
    elif args.case == "rtld-next":
        alone = run(cmd, {}, None)
        if alone.returncode != 0:
            fail("the rtld-next probe fails without the library", alone)

    with tempfile.TemporaryDirectory() as tmp:
        stats_file = Path(tmp) / "stats.json"
        settings.update({"OVERSUB_STATS": "json", "OVERSUB_STATS_FILE": str(stats_file)})
        proc = run(cmd, settings, args.lib)
        if proc.returncode != 0 or f"ok {args.case}" not in proc.stdout:
            fail(f"driver_probe {args.case} under the library", proc)
        stats = read_stats(stats_file, proc)

    calls = stats.get("calls", {})
    if args.case in ("versions", "dlsym"):
        if counter(stats, "driver_answers_wrapped") == 0:
            fail("no cuGetProcAddress/dlsym answer was replaced by a hook", proc)
    if args.case == "dlsym" and calls.get("cuMemAlloc_v2", 0) == 0:
        fail(f"the dlsym'd cuMemAlloc_v2 was not our hook (calls: {calls})", proc)
    if args.case == "cross":
        # Two allocations, each freed through the other API, both tracked; the bogus
        # pointer is the only untracked free.
        if calls.get("cuMemFree_v2", 0) < 2 or calls.get("cudaFree", 0) < 1:
            fail(f"the frees did not reach the hooks (calls: {calls})", proc)
        if counter(stats, "frees") < 2 or counter(stats, "untracked_frees") != 1:
            fail(f"want 2 tracked frees and 1 untracked: {stats['counters']}", proc)
        if counter(stats, "pool_allocations") < 2:
            fail("the pool did not serve the driver allocation", proc)
    if args.case == "graph-driver":
        if calls.get("cuGraphInstantiateWithFlags", 0) != 4 or calls.get("cuGraphLaunch", 0) != 12:
            fail(f"the graph entry points did not reach the hooks (calls: {calls})", proc)
        # Each graph fits: its replays fetch their footprint until the timed trial
        # ends, after more cycles than this (see Note [Fetch or reach, by
        # measurement] in core/graph_footprint.h).
        if counter(stats, "graph_replays_prefetched") != 12:
            fail(f"want all 12 replays to fetch their footprint: {stats['counters']}", proc)
        if stats["pool"]["device0"]["swap"]["fetches"] == 0:
            fail(f"nothing was fetched: {stats['pool']['device0']['swap']}", proc)
    if args.case in ("vmm-limit", "vmm-swap"):
        foreign = stats["counters"]["foreign_vmm_bytes"]
        if int(foreign["peak"]) == 0 or int(foreign["current"]) != 0:
            fail(f"foreign VMM bytes not counted and given back: {foreign}", proc)
    print(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "")
    print(f"driver {args.case}: ok (calls {dict(sorted(calls.items()))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
