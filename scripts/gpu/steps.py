"""Steps 1, 2, 3 and 5 of gpu-validate: facts, preload tests, simtrain, profiler.

Each step returns a step_result and never claims more than it ran:
- facts: gpu_facts' JSON (device, versions, pinned bandwidth each way and both at
  once, VMM latency, VMM calls' p50/p99 for a page, 16 calls and one 16-page call on
  an idle GPU and beside a 50 ms kernel (and whether they returned before it ended),
  event costs, empty-kernel launch rate, host-located VMM, managed prefetch and fault
  throughput, whether a ready copy runs beside one that waits); a section the program
  could not measure fails the step;
- preload: tests/preload/preload_test.py, case by case, against the programs of
  this run (real CUDA runtime on a GPU, simgpu with --sim);
- simtrain: unlimited, then OVERSUB_MODE=off|track at the job's own peak, then
  off|track|pool|swap|um at a third of it (3x oversubscription). A run that ends
  must give the unlimited run's loss bits; a clean out-of-memory error is the
  expected answer of modes that do not move memory (track, pool), a failure of
  those that should (swap, um); modes the library rejects are skipped;
- profiler: `oversub profile` on the PyTorch CNN (simtrain with --sim) and `oversub
  report`; the summary, and the trace and PNG kept in the output folder.
"""
from __future__ import annotations

import json
import re
import sys
import tarfile
import tempfile
from pathlib import Path

from .build import programs
from .common import MiB, REPO, first_line, fmt_bytes, kit, mode_built, step_result

ITER_RE = re.compile(r"^iter (\d+) loss \S+ \(bits 0x([0-9a-f]{8})\)$", re.MULTILINE)
PEAK_RE = re.compile(r"^peak device bytes: (\d+)$", re.MULTILINE)
OOM_RE = re.compile(r"^simtrain: CUDA error cudaErrorMemoryAllocation", re.MULTILINE)
VIRTUAL_RE = re.compile(r"^simgpu: device \S+, virtual time ([0-9.]+) ms", re.MULTILINE)
MOVING_MODES = ("swap", "um")   # the modes whose purpose is to run past the limit


def facts(k: kit, progs: programs) -> step_result:
    res = step_result(1, "facts", columns=["fact", "value"])
    if progs.facts is None:
        res.fail(f"gpu_facts: {progs.missing.get('gpu_facts', 'missing')}")
        return res
    args = ["--mib", "64", "--reps", "3", "--vmm-iters", "5"] if k.sim and k.quick else []
    proc = k.run([str(progs.facts), *args], progs.env, timeout_s=300)
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        res.fail(f"gpu_facts exit {proc.returncode}, no JSON: {first_line(proc.stderr or proc.stdout)}")
        return res
    if not k.sim:
        smi = k.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                     "--format=csv,noheader"], timeout_s=60)
        if smi.returncode == 0:
            data["nvidia_smi"] = smi.stdout.strip()
    (k.outdir / "facts.json").write_text(json.dumps(data, indent=2) + "\n")
    res.data = data
    if "error" in data:
        res.fail(str(data["error"]))
        return res
    dev = data["device"]
    clock = "simgpu virtual time" if k.sim else "CUDA events"
    res.rows += [["GPU", f"{dev['name']} ({fmt_bytes(dev['total_bytes'])}, {dev['sm_count']} SMs, "
                         f"CC {dev['compute_capability']})"],
                 ["driver / runtime", f"{data['driver_version']} / {data['runtime_version']}"]]
    if "nvidia_smi" in data:
        res.rows.append(["nvidia-smi", data["nvidia_smi"]])
    pinned = data["pinned_bandwidth"]
    if "error" in pinned:
        res.fail(f"pinned bandwidth: {pinned['error']}")
    else:
        res.rows.append([f"pinned H2D / D2H, {fmt_bytes(pinned['bytes'])}, median of {pinned['reps']} ({clock})",
                         f"{pinned['h2d_gbps']:.1f} / {pinned['d2h_gbps']:.1f} GB/s"])
    vmm = data["vmm_latency"]
    for key in ("granule", "large"):
        part = vmm.get(key, vmm)
        if "error" in part:
            res.fail(f"VMM {key}: {part['error']}")
            break
        res.rows.append([f"VMM {fmt_bytes(part['bytes'])}: create / map / set access / unmap / release "
                         f"(median of {part['iters']}, host wall clock)",
                         " / ".join(f"{part[f]:.1f}" for f in
                                    ("create_us", "map_us", "set_access_us", "unmap_us", "release_us")) + " us"])
    managed = data["managed_prefetch"]
    if "error" in managed:
        res.fail(f"managed prefetch: {managed['error']}")
    elif "skipped" in managed:
        res.rows.append(["managed prefetch", f"skipped: {managed['skipped']}"])
    else:
        res.rows.append([f"managed prefetch to device / to host, {fmt_bytes(managed['bytes'])} ({clock})",
                         f"{managed['to_device_gbps']:.1f} / {managed['to_host_gbps']:.1f} GB/s"])
    # The per-call VMM, event, launch, both-ways, host VMM and managed-fault sections:
    # an error in one fails the step, except host_vmm's copy and double-map checks
    # (what the platform allows is the figure there).
    call_fields = ("create_us", "map_us", "set_access_us", "unmap_us", "release_us")
    call_kinds = ("create", "map", "set_access", "unmap", "release")

    def section(key: str, what: str) -> dict | None:
        part = data.get(key)
        if part is None:
            res.fail(f"{what}: missing from gpu_facts' output")
            return None
        if "error" in part:
            res.rows.append([what, f"error: {part['error']}"])
            res.fail(f"{what}: {part['error']}")
            return None
        return part

    def p50_p99(d: dict) -> str:
        return f"{d['p50']:.3g} ({d['p99']:.3g})"

    vmm = section("vmm_calls", "VMM calls")
    if vmm is not None:
        page = fmt_bytes(vmm["page_bytes"])
        busy_what = f"while a {vmm['spin_target_ms']:.0f} ms spin kernel runs on another stream"
        names = "create / map / set access / unmap / release"
        for case, label in (("page", f"one {page} page"), ("run16_separate", "16 pages as 16 calls"),
                            ("run16_one_call", "16 pages as one call")):
            part = vmm[case]
            for state in ("idle", "busy"):
                if "error" in part[state]:
                    res.rows.append([f"VMM {label}, {state}", f"error: {part[state]['error']}"])
                    res.fail(f"VMM calls {case} {state}: {part[state]['error']}")
                    continue
                if case != "page":
                    continue  # the 16-page cases are compared in one row below
                res.rows.append([f"VMM {label}, {state if state == 'idle' else busy_what}: {names}, "
                                 f"p50 (p99) of {vmm['iters']}, host wall clock",
                                 " / ".join(p50_p99(part[state][f]) for f in call_fields) + " us"])
        sep, one = vmm["run16_separate"], vmm["run16_one_call"]
        for state in ("idle", "busy"):
            if "error" in sep[state] or "error" in one[state]:
                continue
            res.rows.append([f"VMM 16 pages, 16 calls vs one call, {state}: {names}, p50 (all 16 calls together)",
                             " / ".join(f"{sep[state][f]['p50']:.0f} vs {one[state][f]['p50']:.0f}"
                                        for f in call_fields) + " us"])
        # A finding either way, never a failure: whether one set access and one unmap may
        # span 16 separately mapped one-page handles (a run of pages swap moved).
        ranged = vmm.get("run16_handles_ranged")
        for state in ("idle", "busy") if ranged else ():
            what = (f"VMM 16 one-page handles mapped one by one, then one set access and one unmap "
                    f"over their 32 MiB, {state}")
            if "error" in ranged[state]:
                res.rows.append([what, f"refused: {ranged[state]['error']}"])
            else:
                res.rows.append([what + ": map (16 calls) / set access / unmap, p50 (p99)",
                                 " / ".join(p50_p99(ranged[state][f])
                                            for f in ("map_us", "set_access_us", "unmap_us")) + " us"])
        flags = []
        for case in ("page", "run16_separate", "run16_one_call"):
            busy = vmm[case]["busy"]
            if "returned_before_kernel_end" in busy:
                flags.append(case + " " + "".join("y" if busy["returned_before_kernel_end"][k] else "n"
                                                  for k in call_kinds))
        res.rows.append([f"VMM call returned before the spin kernel ended, every time "
                         f"(create, map, set access, unmap, release; spin kernel {vmm['spin_kernel_ms']:.1f} ms)",
                         ", ".join(flags)])
    events = section("events", "event calls")
    if events is not None:
        res.rows.append([f"cudaEventRecord / cudaEventQuery / cudaEventSynchronize (completed) / "
                         f"cudaStreamWaitEvent, p50 (p99) of {events['reps']}, host wall clock",
                         " / ".join(p50_p99(events[f]) for f in
                                    ("record_us", "query_completed_us", "synchronize_completed_us",
                                     "stream_wait_us")) + " us"])
    launch = section("launch_rate", "launch rate")
    if launch is not None:
        res.rows.append([f"empty kernel launches, {launch['launches']} on one stream then one synchronize",
                         f"{launch['empty_kernel_launches_per_s']:.0f}/s ({launch['us_per_launch']:.2f} us "
                         f"per launch; {launch['device_us_per_launch']:.2f} us by events)"])
    both = section("pinned_both_ways", "pinned both ways")
    if both is not None:
        res.rows.append([f"pinned H2D and D2H at once on two streams, {fmt_bytes(both['bytes_each_way'])} "
                         f"each, median of {both['reps']} ({clock})",
                         f"{both['aggregate_gbps']:.1f} GB/s together (H2D {both['h2d_gbps']:.1f}, "
                         f"D2H {both['d2h_gbps']:.1f})"])
    host = section("host_vmm", "host VMM")
    if host is not None:
        if not host.get("supported"):
            res.rows.append(["host VMM (host-located cuMemCreate)",
                             f"unsupported (attribute {host.get('attribute')})"])
        else:
            shown = [f"supported, {host['location_type']} granularity {fmt_bytes(host['granularity_bytes'])}",
                     "double map ok" if host.get("double_map_ok") else
                     f"double map failed: {host.get('double_map_error', '?')}"]
            if "copy_error" in host:
                shown.append(f"copies failed: {host['copy_error']}")
            else:
                shown.append(f"device -> host VMM {host['device_to_host_vmm_gbps']:.1f} GB/s, back "
                             f"{host['host_vmm_to_device_gbps']:.1f} GB/s ({fmt_bytes(host['copy_bytes'])}, "
                             f"{clock})")
            res.rows.append(["host VMM (host-located cuMemCreate)", "; ".join(shown)])
    def managed_row(key: str, what: str, label: str, row) -> None:
        """One row for a managed-memory section: `label` and why where gpu_facts skipped
        it (the device lacks concurrent managed access, say), else row(part)."""
        part = section(key, what)
        if part is not None:
            res.rows.append([label, f"skipped: {part['skipped']}"] if "skipped" in part
                            else row(part))

    managed_row("managed_faults", "managed faults", "managed fault throughput", lambda f: [
        f"managed fault throughput: a kernel writing one word per "
        f"{fmt_bytes(f['touch_stride_bytes'])} of {fmt_bytes(f['bytes'])} {f['from']}, "
        f"median of {f['reps']} ({clock})",
        f"{f['migrated_gbps']:.1f} GB/s"])
    managed_row("managed_footprint", "managed footprint",
                "device memory per small managed allocation", lambda f: [
        f"device memory per managed allocation, {f['count']} of each size prefetched "
        f"(cudaMemGetInfo)",
        "; ".join(f"{fmt_bytes(f[k]['bytes'])}: {fmt_bytes(f[k]['device_bytes_each'])}"
                  for k in ("small", "medium"))])
    managed_row("managed_discard", "managed discard", "managed discard (cuMemDiscardBatchAsync)",
                lambda d: [
        f"managed discard of {fmt_bytes(d['bytes'])} resident, median of {d['reps']} "
        f"({clock}): time; device memory given back; the prefetch back",
        f"{d['discard_us']:.0f} us; {fmt_bytes(int(d['device_bytes_freed']))}; "
        f"{d['prefetch_back_gbps']:.1f} GB/s"])
    beside = section("copy_beside_blocked", "copy beside a blocked copy")
    if beside is not None:
        res.rows.append([f"H2D copy of {fmt_bytes(beside['bytes'])} issued after one whose stream "
                         f"waits for a {beside['spin_ms']:.0f} ms kernel, median of "
                         f"{beside['reps']} ({clock})",
                         f"{'ran first' if beside['ready_copy_ran_first'] else 'waited'}: "
                         f"{beside['ready_copy_ms']:.2f} ms, ended "
                         f"{beside['ended_before_spin_ms']:.1f} ms before the kernel"])
    launch_rate_under_modes(k, progs, res)
    return res


def launch_rate_under_modes(k: kit, progs: programs, res: step_result) -> None:
    """The empty-kernel launch rate without the library and under each mode with nothing
    to move (no limit): what oversub adds to a launch. A mode that fails here is a
    finding in the table, not a failure of the step."""
    rates: dict[str, str] = {}
    for mode in ("none", "off", "track", "pool", "swap", "um"):
        extra = {} if mode == "none" else {"OVERSUB_MODE": mode}
        proc = k.run([str(progs.facts), "--only-launch-rate", "1"], {**progs.env, **extra},
                     preload=mode != "none", timeout_s=120, label=f"launch rate, {mode}")
        try:
            rate = json.loads(proc.stdout)["launch_rate"]
            rates[mode] = f"{rate['us_per_launch']:.2f}"
        except (json.JSONDecodeError, KeyError, TypeError):
            rates[mode] = f"exit {proc.returncode}"
    res.data["launch_rate_by_mode_us"] = rates
    res.rows.append(["empty-kernel launches, host us per launch: no library / off / track / pool / "
                     "swap / um (no limit: nothing moves)",
                     " / ".join(rates[m] for m in ("none", "off", "track", "pool", "swap", "um"))])


def preload(k: kit, progs: programs) -> step_result:
    res = step_result(2, "preload tests", columns=["case", "result", "what it showed"])
    driver = REPO / "tests" / "preload" / "preload_test.py"
    base = [sys.executable, str(driver), "--lib", str(k.lib)]
    loss_modes = ["", "--caching", "--api driver"] if k.quick else [
        "", "--caching", "--streams 2", "--launch runtime", "--launch ex", "--api driver",
        "--api dlsym"]
    cases: list[tuple[str, list[str], str | None]] = [
        ("bad-value", [], None),
        ("cli", ["--oversub", str(REPO / "scripts" / "oversub")], None),
        ("real-runtime", [], "real_runtime_probe"),
        ("memgetinfo", [], "memgetinfo_probe"),
        ("fork", [], "fork_probe"),
        ("stress", [], "stress_probe"),
    ]
    cases += [(f"losses {m or '(default)'}", ["--simtrain", str(progs.simtrain or ""), f"--mode-args={m}"],
               "simtrain") for m in loss_modes]
    cases.append(("oom", ["--simtrain", str(progs.simtrain or "")], "simtrain"))
    passed = 0
    for label, extra, needs in cases:
        case = label.split()[0]
        if needs == "simtrain" and progs.simtrain is None:
            res.rows.append([label, "FAIL", f"simtrain: {progs.missing.get('simtrain')}"])
            res.fail(f"{label}: simtrain missing")
            continue
        if needs not in (None, "simtrain"):
            if needs not in progs.probes:
                why = progs.missing.get(needs, "missing")
                if k.sim and needs == "real_runtime_probe":
                    res.rows.append([label, "skipped", f"no CUDA toolkit runtime in this build: {why}"])
                    continue
                res.rows.append([label, "FAIL", f"{needs}: {why}"])
                res.fail(f"{label}: {needs} missing")
                continue
            extra = ["--probe", str(progs.probes[needs])]
        # real-runtime drops LD_LIBRARY_PATH itself, so its probe sees the real runtime.
        proc = k.run([*base, "--case", case, *extra], progs.env, timeout_s=300, label=f"preload {label}")
        if proc.returncode == 0:
            passed += 1
            shown = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
            res.rows.append([label, "pass", shown])
        else:
            why = next((l for l in proc.stderr.splitlines() if l.startswith("FAIL")), first_line(proc.stderr))
            res.rows.append([label, "FAIL", why[:200]])
            res.fail(f"preload {label}")
    # Driver-level interception (tests/preload/driver_test.py): the version table's
    # answers, dlsym, RTLD_NEXT through a wrapper library, frees across the two APIs,
    # other libraries' VMM memory under a limit (vmm-swap needs simgpu's small device).
    driver_cases = ["versions", "dlsym", "rtld-next", "cross", "vmm-limit"] + (["vmm-swap"] if k.sim else [])
    for case in driver_cases:
        label = f"driver {case}"
        if "driver_probe" not in progs.probes:
            res.rows.append([label, "FAIL", f"driver_probe: {progs.missing.get('driver_probe', 'missing')}"])
            res.fail(f"{label}: driver_probe missing")
            continue
        proc = k.run([sys.executable, str(REPO / "tests" / "preload" / "driver_test.py"), "--lib",
                      str(k.lib), "--probe", str(progs.probes["driver_probe"]), "--case", case],
                     progs.env, timeout_s=300, label=f"preload {label}")
        if proc.returncode == 0:
            passed += 1
            res.rows.append([label, "pass", proc.stdout.strip().splitlines()[-1][:200]])
        else:
            why = next((l for l in proc.stdout.splitlines() if l.startswith("FAIL")), first_line(proc.stderr))
            res.rows.append([label, "FAIL", why[:200]])
            res.fail(f"preload {label}")
    res.data["passed"] = passed
    listed = k.run([sys.executable, str(driver), "--help"], timeout_s=60, label="preload cases")
    known = re.search(r"--case \{([^}]*)\}", listed.stdout)
    not_run = sorted(set(known.group(1).split(",")) - {c[0].split()[0] for c in cases}) if known else []
    if not_run:
        res.notes.append(f"preload_test.py cases this kit does not run yet: {', '.join(not_run)} "
                         "(add them to the case list in scripts/gpu/steps.py)")
    return res


def simtrain_args(k: kit) -> list[str]:
    # On simgpu the footprint must leave a third of it several 2 MiB pages (the swap
    # granularity) per launch: 37 MiB peak, 12 MiB at peak/3.
    if k.sim:
        size = ["8", "512", "128", "3"] if k.quick else ["16", "512", "128", "4"]
    else:
        size = ["8", "1024", "256", "4"] if k.quick else ["16", "1536", "768", "5"]
    return [f for pair in zip(["--depth", "--width", "--batch", "--iters"], size) for f in pair]


def simtrain(k: kit, progs: programs) -> step_result:
    res = step_result(3, "simtrain", columns=[
        "run", "OVERSUB_DEVICE_LIMIT", "outcome", "losses vs unlimited", "wall s", "wall ratio",
        *(["virtual ms", "virtual ratio"] if k.sim else []), "oversub peak"])
    if progs.simtrain is None:
        res.fail(f"simtrain: {progs.missing.get('simtrain')}")
        return res
    cmd = [str(progs.simtrain), *simtrain_args(k)]
    res.data["command"] = cmd
    sim_env = {**progs.env, **({"SIMGPU_REPORT": "1"} if k.sim else {})}
    base = k.run(cmd, sim_env, timeout_s=600, label="simtrain unlimited")
    want = ITER_RE.findall(base.stdout)
    peak_match = PEAK_RE.search(base.stdout)
    if base.returncode != 0 or not want or peak_match is None:
        res.fail(f"simtrain fails without the library: exit {base.returncode}: {first_line(base.stderr)}")
        return res
    peak = int(peak_match.group(1))
    res.data["peak_bytes"] = peak
    base_virtual = VIRTUAL_RE.search(base.stderr)

    def row(name: str, limit: str, outcome: str, losses: str, proc=None, stats=None) -> None:
        cells = [name, limit, outcome, losses]
        if proc is None:
            cells += ["", ""] + (["", ""] if k.sim else []) + [""]
        else:
            cells += [f"{proc.seconds:.2f}", f"{proc.seconds / base.seconds:.2f}" if base.seconds else ""]
            if k.sim:
                v = VIRTUAL_RE.search(proc.stderr)
                cells += [v.group(1) if v else "", f"{float(v.group(1)) / float(base_virtual.group(1)):.2f}"
                          if v and base_virtual and float(base_virtual.group(1)) > 0 else ""]
            peak_seen = (stats or {}).get("counters", {}).get("device_bytes", {}).get("peak")
            cells.append(fmt_bytes(peak_seen) if peak_seen is not None else "")
        res.rows.append(cells)

    row("unlimited, no library", "-", "ran", f"{len(want)} iterations (reference)", base)
    third = max(MiB, peak // 3)
    plan = [("off", peak, "peak"), ("track", peak, "peak")]
    plan += [(m, third, "peak/3") for m in ("off", "track", "pool", "swap", "um")]
    # The same training through the driver API (cuGetProcAddress), as JAX and cuBLAS
    # reach the GPU: intercepted by the driver hooks.
    plan += [(m, third, "peak/3", "driver") for m in ("swap", "um")]
    built: dict[str, tuple[bool, str]] = {}
    for mode, limit, label, *api in plan:
        if mode not in built:
            built[mode] = mode_built(k, mode)
        ok, why = built[mode]
        name = f"OVERSUB_MODE={mode}" + (f" --api {api[0]}" if api else "")
        run_cmd = cmd + (["--api", api[0]] if api else [])
        if k.out_of_time():
            row(name, f"{limit} ({label})", "skipped: time budget spent", "")
            res.notes.append(f"{name} at {label}: skipped: time budget spent")
            continue
        if not ok:
            row(name, f"{limit} ({label})", f"skipped: {why}", "")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            stats_file = Path(tmp) / "stats.json"
            proc = k.run(run_cmd, {**sim_env, "OVERSUB_MODE": mode, "OVERSUB_DEVICE_LIMIT": str(limit),
                               "OVERSUB_STATS": "json", "OVERSUB_STATS_FILE": str(stats_file)},
                         preload=True, timeout_s=600, label=f"simtrain {name} at {label}")
            stats = None
            if stats_file.exists():
                lines = [l for l in stats_file.read_text().splitlines() if l.startswith('{"oversub_stats"')]
                stats = json.loads(lines[-1]) if lines else None
        got = ITER_RE.findall(proc.stdout)
        if proc.returncode == 0:
            same = got == want
            row(name, f"{limit} ({label})", "ran", "bit-identical" if same else "DIFFER", proc, stats)
            if not same:
                res.fail(f"{name} at {label}: losses differ from the unlimited run")
            elif mode == "off" and label == "peak/3":
                res.notes.append("OVERSUB_MODE=off is pure pass-through: it does not enforce the limit")
        elif proc.returncode == 1 and OOM_RE.search(proc.stderr):
            expected = label == "peak/3" and mode in ("track", "pool")
            outcome = "clean OOM" + (" (expected: this mode does not move memory)" if expected else "")
            row(name, f"{limit} ({label})", outcome, f"{len(got)} iterations before it", proc, stats)
            if not expected:
                res.fail(f"{name} at {label}: out of memory")
        else:
            row(name, f"{limit} ({label})", f"CRASH exit {proc.returncode}", first_line(proc.stderr, 100), proc, stats)
            res.fail(f"{name} at {label}: exit {proc.returncode}")
    if built.get("swap", (False, ""))[0]:
        tuning(k, res, progs, sim_env)
        layout(k, res, progs, sim_env)
    return res


LAYOUT_RE = re.compile(r"pool: the profile's (\d+) long-lived buffers \(.*\) laid out in ([a-z ]+);")
PLACED_RE = re.compile(r"pool: the profile's layout placed (\d+) of its (\d+) long-lived buffers")


def layout(k: kit, res: step_result, progs: programs, sim_env: dict[str, str]) -> None:
    """swap at peak/3 twice with OVERSUB_PROFILE=path (Note [One profile path] in common/options.h): the
    first run writes its profile, the second lays out its long-lived buffers by it (Note
    [Long-lived layout from a profile] in policy/placement.h): on real VMM, every block
    laid out must be claimed and the losses stay those of the run without the library.
    Weight-heavy (many layers, small batch), where the layout by first use is taken at
    peak/3 on simgpu."""
    name = "OVERSUB_MODE=swap, OVERSUB_PROFILE (long-lived layout)"
    if k.out_of_time():
        res.notes.append(f"{name}: skipped: time budget spent")
        return
    size = ["32", "512", "16", "6"] if k.sim else ["32", "2048", "64", "6"]
    cmd = [str(progs.simtrain), *[f for pair in zip(["--depth", "--width", "--batch", "--iters"], size)
                                  for f in pair]]
    ref = unlimited_reference(k, res, name, cmd, sim_env, "simtrain weight-heavy unlimited")
    if ref is None:
        return
    base, want, limit = ref
    with tempfile.TemporaryDirectory() as tmp:
        env = {**sim_env, "OVERSUB_MODE": "swap", "OVERSUB_DEVICE_LIMIT": str(limit),
               "OVERSUB_VERBOSE": "1", "OVERSUB_PROFILE": str(Path(tmp) / "simtrain.oprof")}
        runs = [k.run(cmd, env, preload=True, timeout_s=900, label=f"simtrain {name}, run {i + 1}")
                for i in range(2)]
    second = runs[1]
    same = all(r.returncode == 0 and ITER_RE.findall(r.stdout) == want for r in runs)
    chosen = LAYOUT_RE.search(second.stderr)
    placed = PLACED_RE.search(second.stderr)
    peak3_row(k, res, name, limit, base, second, same)
    if not same:
        res.fail(f"{name}: losses differ from the unlimited run (exit {second.returncode}: "
                 f"{first_line(second.stderr)})")
        return
    if chosen is None:
        res.fail(f"{name}: the second run did not start from the first run's profile")
        return
    res.data["layout"] = {"buffers": int(chosen.group(1)), "layout": chosen.group(2),
                          "placed": int(placed.group(1)) if placed else None}
    res.notes.append(f"long-lived layout: {chosen.group(1)} buffers laid out in {chosen.group(2)}"
                     + (f"; {placed.group(1)} of {placed.group(2)} placed" if placed else ""))
    if chosen.group(2) != "allocation order" and (placed is None or placed.group(1) != placed.group(2)):
        res.fail(f"{name}: laid out in {chosen.group(2)} but not every block was claimed"
                 + (f" ({placed.group(1)} of {placed.group(2)})" if placed else ""))


TUNE_ITERS = 64  # the schedule's tuning is done by then (about 53 iterations after learning)


def virtual_cells(base, proc) -> list[str]:
    """simgpu's virtual ms of proc and its ratio to base's."""
    v, b = VIRTUAL_RE.search(proc.stderr), VIRTUAL_RE.search(base.stderr)
    if v is None:
        return ["", ""]
    ratio = f"{float(v.group(1)) / float(b.group(1)):.2f}" if b and float(b.group(1)) > 0 else ""
    return [v.group(1), ratio]


def unlimited_reference(k: kit, res: step_result, name: str, cmd: list[str],
                        env: dict[str, str], label: str):
    """cmd without the library: (its run, its loss bits, a third of its peak), or None
    after recording the failure."""
    base = k.run(cmd, env, timeout_s=900, label=label)
    peak_match = PEAK_RE.search(base.stdout)
    if base.returncode != 0 or peak_match is None:
        res.fail(f"{name}: simtrain fails without the library: exit {base.returncode}")
        return None
    return base, ITER_RE.findall(base.stdout), max(MiB, int(peak_match.group(1)) // 3)


def peak3_row(k: kit, res: step_result, name: str, limit: int, base, proc, same: bool) -> None:
    """The simtrain table's row for a run at peak/3 against the unlimited run base."""
    res.rows.append([name, f"{limit} (peak/3)", "ran" if proc.returncode == 0 else
                     f"exit {proc.returncode}", "bit-identical" if same else "DIFFER",
                     f"{proc.seconds:.2f}", f"{proc.seconds / base.seconds:.2f}" if base.seconds else "",
                     *(virtual_cells(base, proc) if k.sim else []), ""])


def tuning(k: kit, res: step_result, progs: programs, sim_env: dict[str, str]) -> None:
    """swap at peak/3 long enough for the schedule's variants to be timed on the device
    from CUPTI's kernel records and the fastest kept (Note [Timing on the device] in
    core/tuning.cc): the losses of a run as long without the library, and
    what the stats' "schedule" section says of the choice. On simgpu a smaller batch
    (64 iterations of the step's shape take a minute of wall time there), and CUPTI's
    records only once their kernels are done, as on a GPU (SIMGPU_CUPTI_RECORDS)."""
    name = f"OVERSUB_MODE=swap, {TUNE_ITERS} iterations (schedule tuning)"
    if k.out_of_time():
        res.notes.append(f"{name}: skipped: time budget spent")
        return
    size = ["8", "512", "16"] if k.sim else simtrain_args(k)[1:6:2]
    long_cmd = [str(progs.simtrain), *[f for pair in zip(["--depth", "--width", "--batch"], size)
                                       for f in pair], "--iters", str(TUNE_ITERS)]
    if k.sim:
        sim_env = {**sim_env, "SIMGPU_CUPTI_RECORDS": "when-done"}
    ref = unlimited_reference(k, res, name, long_cmd, sim_env,
                              f"simtrain unlimited, {TUNE_ITERS} iterations")
    if ref is None:
        return
    base, want, limit = ref
    with tempfile.TemporaryDirectory() as tmp:
        stats_file = Path(tmp) / "stats.json"
        proc = k.run(long_cmd, {**sim_env, "OVERSUB_MODE": "swap", "OVERSUB_DEVICE_LIMIT": str(limit),
                                "OVERSUB_STATS": "json", "OVERSUB_STATS_FILE": str(stats_file)},
                     preload=True, timeout_s=900, label=f"simtrain {name} at peak/3")
        lines = stats_file.read_text().splitlines() if stats_file.exists() else []
        lines = [l for l in lines if l.startswith('{"oversub_stats"')]
        sched = json.loads(lines[-1]).get("schedule") if lines else None
    got = ITER_RE.findall(proc.stdout)
    same = proc.returncode == 0 and base.returncode == 0 and got == want and len(want) == TUNE_ITERS
    peak3_row(k, res, name, limit, base, proc, same)
    if not same:
        res.fail(f"{name}: losses differ from the unlimited run of {TUNE_ITERS} iterations "
                 f"(exit {proc.returncode}: {first_line(proc.stderr)})")
        return
    if sched is None:
        res.fail(f"{name}: no schedule section in the stats")
        return
    res.data["tuning"] = {key: sched.get(key) for key in (
        "tune_status", "tune_trials", "rotation", "free_pages", "first_measured_ns",
        "chosen_measured_ns", "tune_record_waits", "durations_source", "link_source", "period")}
    res.notes.append(
        f"schedule tuning: {sched.get('tune_status')}; {sched.get('tune_trials')} variants timed "
        f"by their kernels' starts after {sched.get('tune_record_waits')} loop start(s) waiting "
        f"for CUPTI's records; kept the loop body from launch {sched.get('rotation')} of "
        f"{sched.get('period')} with {sched.get('free_pages')} page(s) free: "
        f"{sched.get('chosen_measured_ns', 0) / 1e6:.3f} ms per iteration against "
        f"{sched.get('first_measured_ns', 0) / 1e6:.3f} ms for the plan as learned; durations "
        f"{sched.get('durations_source')}, link {sched.get('link_source')}")
    if sched.get("tune_status") != "chosen":
        res.fail(f"{name}: the schedule's variants were not chosen among by kernel times "
                 f"(tune_status {sched.get('tune_status')})")


def profiler(k: kit, progs: programs) -> step_result:
    """oversub profile on the PyTorch CNN (on a GPU; simtrain with --sim), then oversub
    report: the summary's first lines; on a GPU, while time remains, the GPT model's
    profile too. Kept in the output folder as one file, profile.tar.gz: each profile
    (cnn.oprof, gpt.oprof; simtrain.oprof with --sim), to be replayed on simgpu with
    oversub-replay, and the CNN's Chrome trace and PNG (profile.trace.json,
    profile.png)."""
    res = step_result(5, "profiler", columns=["what", "value"])
    oversub = REPO / "scripts" / "oversub"
    targets: list[tuple[str, list[str], dict[str, str]]] = []
    if k.sim:
        if progs.simtrain is None:
            res.fail(f"simtrain: {progs.missing.get('simtrain')}")
            return res
        targets.append(("simtrain", [str(progs.simtrain), *simtrain_args(k)], dict(progs.env)))
    else:
        probe = k.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                      timeout_s=120, label="torch probe")
        if probe.returncode != 0 or not probe.stdout.strip().endswith("True"):
            res.skip("torch with CUDA is not usable here: the profiler step profiles the PyTorch CNN")
            return res
        train = [sys.executable, str(REPO / "scripts" / "gpu" / "torch_train.py"), "--iters", "6"]
        targets += [("cnn", [*train, "--model", "cnn"], {}),
                    ("gpt", [*train, "--model", "gpt"], {})]
    with tempfile.TemporaryDirectory() as tmp:
        kept: list[tuple[Path, str]] = []
        for n, (label, target, env) in enumerate(targets):
            if n > 0 and k.out_of_time():
                res.notes.append(f"{label}: not profiled (time budget spent)")
                break
            prof = Path(tmp) / f"{label}.oprof"
            run = k.run([sys.executable, str(oversub), "profile", "-o", str(prof), "--iterations",
                         "3", "--lib", str(k.lib), "--", *target], env, timeout_s=900,
                        label=f"oversub profile {label}")
            if run.returncode != 0 or not prof.exists():
                res.fail(f"oversub profile {label}: exit {run.returncode}: "
                         f"{first_line(run.stderr)}")
                break
            res.rows.append([f"profile {label}", f"{prof.stat().st_size} bytes, {run.seconds:.1f} s"])
            kept.append((prof, prof.name))
            if n > 0:
                continue
            report = k.run([sys.executable, str(oversub), "report", str(prof)], env, timeout_s=300,
                           label="oversub report")
            if report.returncode != 0:
                res.fail(f"oversub report: exit {report.returncode}: {first_line(report.stderr)}")
                break
            for line in report.stdout.splitlines()[:4]:
                key, _, value = line.partition(":")
                res.rows.append([key.strip(), value.strip()])
            trace, png = prof.with_suffix(".trace.json"), prof.with_suffix(".png")
            try:
                events = json.loads(trace.read_text())
                events = events.get("traceEvents", events) if isinstance(events, dict) else events
            except (OSError, ValueError) as error:
                res.fail(f"the Chrome trace is not readable JSON: {error}")
                break
            if not png.exists() or png.read_bytes()[:8] != b"\x89PNG\r\n\x1a\n":
                res.fail("oversub report wrote no PNG")
                break
            res.rows.append(["trace", f"{len(events)} events (profile.trace.json)"])
            kept += [(trace, "profile.trace.json"), (png, "profile.png")]
        if kept:
            # One file: the output folder brings back at most 8 (docs/gpu-results.md).
            bundle = k.outdir / "profile.tar.gz"
            with tarfile.open(bundle, "w:gz") as tar:
                for path, name in kept:
                    tar.add(path, arcname=name)
            res.rows.append(["kept", f"{bundle.name}, {bundle.stat().st_size} bytes: "
                                     + ", ".join(name for _, name in kept)])
    return res


REPLAY_ITER_RE = re.compile(r"^iter (\d+) time ([0-9.]+) ms checksum (0x[0-9a-f]+)", re.MULTILINE)
REPLAY_VERIFIED_RE = re.compile(r"^data verified: .*\((\d+) words checked, (\d+) mismatches\)$",
                                re.MULTILINE)


def replay(k: kit, progs: programs) -> step_result:
    """oversub-replay on a shipped real-model trace (ResNet-50, batch 32; at 1/32 of
    its bytes on simgpu): unlimited, then under swap and um at a third of its peak.
    Every buffer's data is checked by the replay's kernels; the checksums must equal
    the unlimited run's, and the iteration time is reported against it."""
    res = step_result(6, "replay", columns=["run", "OVERSUB_DEVICE_LIMIT", "outcome",
                                            "checksums vs unlimited", "iteration ms", "ratio"])
    exe = progs.probes.get("oversub-replay")
    if exe is None:
        res.fail(f"oversub-replay: {progs.missing.get('oversub-replay', 'not built')}")
        return res
    trace = REPO / "traces" / "resnet50-b32.oprof"
    iters = "3" if k.quick else "6"
    cmd = [str(exe), str(trace), "--iters", iters, "--footprint", "readwrite"]
    if k.sim:
        cmd += ["--scale", "0.03125"]
    base = k.run(cmd, progs.env, timeout_s=900, label="replay unlimited")
    want = REPLAY_ITER_RE.findall(base.stdout)
    peak = PEAK_RE.search(base.stdout)
    if base.returncode != 0 or not want or peak is None:
        res.fail(f"oversub-replay fails without the library: exit {base.returncode}: "
                 f"{first_line(base.stderr)}")
        return res
    # The first iteration pays first touches; later ones are the steady state.
    steady = [float(t) for _, t, _ in want[1:]] or [float(want[0][1])]
    base_ms = sorted(steady)[len(steady) // 2]
    res.rows.append(["unlimited, no library", "-", "ran", f"{len(want)} iterations (reference)",
                     f"{base_ms:.3f}", "1.00"])
    res.data["peak_bytes"] = int(peak.group(1))
    third = max(MiB, int(peak.group(1)) // 3)
    for mode in ("swap", "um"):
        ok, why = mode_built(k, mode)
        name = f"OVERSUB_MODE={mode}"
        if not ok:
            res.rows.append([name, f"{third} (peak/3)", f"skipped: {why}", "", "", ""])
            continue
        env = {**progs.env, "OVERSUB_MODE": mode, "OVERSUB_DEVICE_LIMIT": str(third)}
        if k.sim:
            env["SIMGPU_MEMORY"] = str(third)
        proc = k.run(cmd, env, preload=True, timeout_s=900, label=f"replay {mode} at peak/3")
        got = REPLAY_ITER_RE.findall(proc.stdout)
        verified = REPLAY_VERIFIED_RE.search(proc.stdout)
        same = [c for _, _, c in got] == [c for _, _, c in want]
        if proc.returncode != 0 or verified is None:
            res.rows.append([name, f"{third} (peak/3)", f"FAILED exit {proc.returncode}",
                             first_line(proc.stderr, 100), "", ""])
            res.fail(f"replay under {name} at peak/3: exit {proc.returncode}")
            continue
        times = [float(t) for _, t, _ in got[1:]] or [float(got[0][1])]
        ms = sorted(times)[len(times) // 2]
        res.rows.append([name, f"{third} (peak/3)", "ran, data verified",
                         "identical" if same else "DIFFER", f"{ms:.3f}", f"{ms / base_ms:.2f}"])
        if not same:
            res.fail(f"replay under {name}: checksums differ from the unlimited run")
    res.notes.append("iteration ms: the median of the iterations after the first "
                     + ("(simgpu virtual time, buffers at 1/32)" if k.sim else "(cudaEvent time)"))
    return res
