"""Step 4 of gpu-validate: PyTorch training under liboversub (torch_train.py).

For each model (cnn, gpt): a run without the library (the reference losses,
samples/s and peak; run twice, unless --quick, to tell the model's own
nondeterminism from oversub's), then under LD_PRELOAD with PyTorch's default
caching allocator first (what users run; oversub sees its segments), then with
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (a cudaMallocAsync and cudaFreeAsync
per tensor: oversub sees every tensor and its free; its own reference run without the
library, since the backend may change cuDNN's workspace and so its algorithms; swap
only with --quick), then with PYTORCH_NO_CUDA_MEMORY_CACHING=1 (skipped with --quick).
For each allocator: OVERSUB_MODE=track unlimited (the peak oversub saw, and the
library's cost when nothing moves), then swap, um and auto with
OVERSUB_DEVICE_LIMIT at 1/2 of that peak, then at 1/3 (skipped with --quick), each
with --ballast beside a process that leaves the device no more free memory than the
limit and a margin (Note [A limit the device enforces]). A run that ends must give the
reference loss bits.

Then, while time remains, what users train with (USER_CONFIGS): transformers'
Llama with bf16 autocast and foreach AdamW, and (unless --quick) gpt with SDPA and
bf16, and gpt under torch.compile's default and reduce-overhead modes; each without
the library, under track unlimited, then swap (long enough for its schedule's tuning),
um and auto at 1/2 of that peak, with the caching allocator. These references are not
deterministic (bf16, compiled kernels): losses are compared bit for bit only when
torch_train.py says "deterministic": true, and otherwise by their largest relative
difference, which is reported, not failed. Last, one run with torch.profiler under the
library says whether the profiler still records CUDA events there (a note).

Every run under the library writes its exit statistics; the step keeps a digest of
each (where the hooks' time went, by entry point; pages moved each way and the
host's waits; the learned schedule's state) in results.json and as a note, so that a
slow run says why without another window.

With --sim there is no GPU for PyTorch: the step is skipped, after running
torch_train.py on the CPU (--device cpu --iters 2) when `import torch` works.
"""
from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

from .common import REPO, fmt_bytes, kit, last_line, mode_built, step_result

SCRIPT = REPO / "scripts" / "gpu" / "torch_train.py"
BASE_ENV = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "PYTHONUNBUFFERED": "1"}


def parse(stdout: str) -> dict | None:
    lines = [l for l in stdout.splitlines() if l.startswith('{"torch_train"')]
    return json.loads(lines[-1]) if lines else None


def cpu_check(k: kit, res: step_result) -> None:
    probe = k.run([sys.executable, "-c", "import torch; print(torch.__version__)"], timeout_s=120,
                  label="is torch importable?")
    if probe.returncode != 0:
        res.notes.append(f"torch_train.py CPU check skipped: {last_line(probe.stderr) or 'import torch failed'}")
        return
    for model in ("cnn", "gpt"):
        runs = [k.run([sys.executable, str(SCRIPT), "--model", model, "--device", "cpu", "--iters", "2"],
                      BASE_ENV, timeout_s=300, label=f"torch_train {model} on cpu") for _ in range(2)]
        got = [parse(r.stdout) for r in runs]
        if any(r.returncode != 0 or g is None for r, g in zip(runs, got)):
            res.fail(f"torch_train.py --model {model} --device cpu fails: {last_line(runs[0].stderr)}")
        elif got[0]["bits"] != got[1]["bits"]:
            res.fail(f"torch_train.py --model {model} on cpu: two runs gave different loss bits")
        else:
            res.notes.append(f"torch_train.py --model {model} --device cpu --iters 2: losses "
                             f"{', '.join(got[0]['bits'])}, same bits twice (torch {probe.stdout.strip()})")


def max_rel_diff(got: dict | None, ref: dict) -> str:
    if got is None:
        return "no losses"
    pairs = list(zip(got["losses"], ref["losses"]))
    worst = max((abs(a - b) / abs(b) if b else abs(a - b) for a, b in pairs), default=0.0)
    return f"max relative {worst:.1e}"


def read_stats(path: Path) -> dict | None:
    if not path.exists():
        return None
    lines = [l for l in path.read_text().splitlines() if l.startswith('{"oversub_stats"')]
    return json.loads(lines[-1]) if lines else None


# Note [A limit the device enforces]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# OVERSUB_DEVICE_LIMIT is oversub's own bound: swap maps no more of its arena than
# that, but um's managed memory can stay on a device that has room for it. On an
# H200 with 140 GB free, um "at half the peak" moved 1.6 GiB in and 6 MiB out in six
# iterations: nothing was under pressure, and its speed said nothing. So each
# limited run shares the GPU with a ballast process (torch, no library) that holds
# all of the device's free memory but the limit and a margin for the CUDA context
# and libraries, and the driver has to evict what um's managed memory does not fit.
# That asks the driver for more managed memory than the device has free, which some
# machines forbid (it can hang the GPU there), so the ballast is taken only with
# gpu-validate --ballast; without it um's figures are marked as not under pressure.
BALLAST = """
import sys, torch
keep = int(sys.argv[1])
free, total = torch.cuda.mem_get_info()
take = max(0, free - keep)
x = torch.empty(take, dtype=torch.uint8, device="cuda") if take else None
print(f"ballast {take} of {free} free bytes", flush=True)
sys.stdin.read()
"""
BALLAST_MARGIN = 3 << 29  # 1.5 GiB: the CUDA context, cuDNN and cuBLAS, CUPTI


class ballast:
    """The ballast process of Note [A limit the device enforces], for a with block."""

    def __init__(self, k: kit, keep_bytes: int) -> None:
        self.k, self.keep, self.proc = k, keep_bytes, None
        self.line = ""

    def __enter__(self) -> "ballast":
        self.proc = subprocess.Popen([sys.executable, "-c", BALLAST, str(self.keep)],
                                     env=self.k.env(), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.line = (self.proc.stdout.readline() if self.proc.stdout else "").strip()
        self.k.log(f"  ballast: {self.line or 'did not start'} (keeps {fmt_bytes(self.keep)} free)")
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            try:
                self.proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def run_under(k: kit, cmd: list[str], extra: dict[str, str], mode: str, limit: int | None,
              timeout_s: float, label: str):
    """One run under LD_PRELOAD in OVERSUB_MODE=mode (at OVERSUB_DEVICE_LIMIT=limit, with
    --ballast beside it): the output and its exit statistics."""
    with tempfile.TemporaryDirectory() as tmp:
        stats_file = Path(tmp) / "stats.json"
        env = {**BASE_ENV, **extra, "OVERSUB_MODE": mode, "OVERSUB_STATS": "json",
               "OVERSUB_STATS_FILE": str(stats_file)}
        if limit is not None:
            env["OVERSUB_DEVICE_LIMIT"] = str(limit)
        use_ballast = k.ballast and limit is not None
        with ballast(k, limit + BALLAST_MARGIN) if use_ballast else contextlib.nullcontext():
            proc = k.run(cmd, env, preload=True, timeout_s=timeout_s, label=label)
        return proc, read_stats(stats_file)


def skipped(k: kit, res: step_result, model: str, name: str, shown: str, no_peak: bool) -> bool:
    """Whether a run is skipped, with its row: the time budget is spent, or it needs the
    peak of a track run that measured none."""
    why = ("time budget spent" if k.out_of_time()
           else "no peak measured" if no_peak else "")
    if not why:
        return False
    res.rows.append([model, name, shown, f"skipped: {why}", "", "", "", "", ""])
    if k.out_of_time():
        res.notes.append(f"{model} {name} {shown}: skipped: {why}")
    return True


def failed_row(res: step_result, model: str, name: str, limit_cell: str, shown: str, mode: str,
               limit: int | None, proc, seen) -> None:
    """The row of a run that did not end with losses: PyTorch's out-of-memory error
    (expected only of track under a limit), or a crash or timeout (a failure)."""
    if proc.returncode == 3 and "out of memory" in proc.stderr:
        expected = mode == "track" and limit is not None
        res.rows.append([model, name, limit_cell,
                         "PyTorch OOM" + (" (expected: track does not move memory)" if expected else ""),
                         "", "", "", "", fmt_bytes(seen) if seen else ""])
        if not expected:
            res.fail(f"{model} {name} limit {shown}: out of memory")
        return
    res.rows.append([model, name, limit_cell,
                     "timed out" if proc.timed_out else f"FAIL exit {proc.returncode}",
                     last_line(proc.stderr, 120), "", "", "", ""])
    res.fail(f"{model} {name} limit {shown}: "
             + ("timed out" if proc.timed_out else f"exit {proc.returncode}"))


def limited_run(k: kit, res: step_result, model: str, name: str, shown: str, cmd: list[str],
                extra: dict[str, str], mode: str, fraction: int | None, peak: int,
                timeout_s: float, label: str):
    """One run of a plan under the library, at 1/fraction of the track run's peak (None:
    no limit), its statistics' digest kept in res. Returns (proc, got, seen, limit,
    limit_cell, peak), peak the track run's once it ran."""
    limit = None if fraction is None else max(1 << 20, peak // fraction)
    proc, stats = run_under(k, cmd, extra, mode, limit, timeout_s, label)
    got = parse(proc.stdout)
    seen = (stats or {}).get("counters", {}).get("device_bytes", {}).get("peak")
    if fraction is None:
        peak = seen or (got or {}).get("max_memory_allocated", 0)
    limit_cell = shown if limit is None else f"{limit} ({shown} of {fmt_bytes(peak)})"
    summary_line = digest(stats)
    res.data.setdefault("stats", {})[f"{model} {name} {shown}"] = {"digest": summary_line,
                                                                   "stats": stats}
    res.notes.append(f"{model} {name} {shown}: {summary_line}")
    return proc, got, seen, limit, limit_cell, peak


def digest(stats: dict | None) -> str:
    """One line from a run's exit statistics: where the hooks' time went (call_ns),
    what moved, the host's waits and the learned schedule's state."""
    if not stats:
        return "no statistics"
    parts = [f"mode {stats.get('mode', '?')}"]
    ns, calls = stats.get("call_ns", {}), stats.get("calls", {})
    top = sorted(ns.items(), key=lambda kv: -kv[1])[:4]
    if top:
        parts.append("time in hooks: " + ", ".join(
            f"{name} {v / 1e6:.0f} ms/{calls.get(name, 0)}" for name, v in top))
    counters = stats.get("counters", {})
    parts.append(f"launches {counters.get('launches', {}).get('total', 0)} "
                 f"(unreadable {counters.get('launches_unreadable', {}).get('total', 0)})")
    for device, pool in (stats.get("pool") or {}).items():
        sw, um = pool.get("swap"), pool.get("um")
        if sw:
            parts.append(f"{device} swap: in {fmt_bytes(sw.get('bytes_to_device', 0))}, out "
                         f"{fmt_bytes(sw.get('bytes_to_host', 0))}, evictions {sw.get('evictions', 0)} "
                         f"in {sw.get('mover_batches', 0)} batches, host waits {sw.get('waits', 0)}, "
                         f"mapping calls {sw.get('mapping_calls', 0)}")
        if um:
            parts.append(f"{device} um: in {fmt_bytes(um.get('bytes_in', 0))}, out "
                         f"{fmt_bytes(um.get('bytes_out', 0))}, prefetches {um.get('prefetches_in', 0)}"
                         f"/{um.get('prefetches_out', 0)}")
    sc = stats.get("schedule") or {}
    if sc.get("learned") is not None:
        parts.append(f"schedule learned {sc.get('learned')}, period {sc.get('period')}, pages "
                     f"{sc.get('pages')}, followed {sc.get('followed')}, deviations "
                     f"{sc.get('deviations')}, tune {sc.get('tune_status')}")
        # Why a schedule was dropped, or never learned: see Note [Why no iteration was
        # learned] in core/schedule.cc, and Note [Launches the iteration did not have] in
        # core/schedule.cc.
        if sc.get("unplanned_launches") or sc.get("skipped_launches"):
            parts.append(f"off the schedule: {sc.get('unplanned_launches', 0)} launches on "
                         f"demand, {sc.get('skipped_launches', 0)} skipped")
        if sc.get("deviations"):
            parts.append(f"last deviation at launch {sc.get('deviation_position')} of the "
                         f"period: {sc.get('deviation_pages')} pages for "
                         f"{sc.get('deviation_expected_pages')} expected, "
                         f"{sc.get('deviation_common_pages')} in common")
        if "search" in sc:
            parts.append(f"last period search: {sc.get('search')} (period "
                         f"{sc.get('search_period')} x {sc.get('search_repetitions')}; trace "
                         f"{sc.get('trace_launches')} launches, {sc.get('distinct_launches')} "
                         f"distinct)")
        # The plan's iteration against the device's, where the schedule timed one.
        predicted, measured = sc.get("predicted_ns") or 0, (sc.get("chosen_measured_ns")
                                                             or sc.get("first_measured_ns") or 0)
        if predicted:
            parts.append(f"iteration predicted {predicted / 1e6:.3f} ms"
                         + (f", measured {measured / 1e6:.3f} ms" if measured else ", not measured"))
    return "; ".join(parts)


# What users train with, after the plain-torch models: transformers' Llama with bf16
# autocast and foreach AdamW, gpt with SDPA, gpt under torch.compile (Inductor's
# kernels, and CUDA graphs with reduce-overhead). (label, torch_train.py arguments,
# run with --quick too.) None of these is deterministic (bf16 rounding, compiled
# kernels): their losses under the library are compared by the largest relative
# difference, which is reported and not failed, unless the reference run says
# "deterministic": true.
USER_CONFIGS = [
    ("llama bf16", ["--model", "llama", "--optimizer", "adamw", "--amp", "bf16"], True),
    ("gpt sdpa bf16", ["--model", "gpt", "--sdpa", "--optimizer", "adamw", "--amp", "bf16"], False),
    ("gpt compile", ["--model", "gpt", "--compile", "default"], False),
    ("gpt compile reduce-overhead", ["--model", "gpt", "--compile", "reduce-overhead"], False),
]
USER_ITERS = 20
USER_SWAP_ITERS = 80  # swap's schedule learns, then tunes its variants (step 3 takes 64)
USER_QUICK_ITERS = 12


def compare_losses(got: dict, ref: dict) -> tuple[str, str | None]:
    """The losses cell for a run against its reference, and why it fails (None when it
    does not). Runs longer than the reference are compared over the reference's
    iterations."""
    n = min(len(got["bits"]), len(ref["bits"]))
    span = f" (first {n} of {len(got['bits'])})" if len(got["bits"]) != n else ""
    if ref.get("deterministic"):
        if got["bits"][:n] == ref["bits"][:n]:
            return "bit-identical" + span, None
        return f"DIFFER ({max_rel_diff(got, ref)}){span}", "losses differ from the run without the library"
    cell = f"{max_rel_diff(got, ref)}{span}, reference not deterministic"
    # Rounding may differ from run to run; a NaN or an infinity the reference did not
    # have is memory gone wrong, not rounding.
    if (not all(math.isfinite(v) for v in got["losses"][:n])
            and all(math.isfinite(v) for v in ref["losses"][:n])):
        return cell + ", NON-FINITE losses", "non-finite losses where the reference's are finite"
    return cell, None


def users(k: kit, res: step_result, limit_modes: list[str]) -> None:
    """USER_CONFIGS: each without the library, then under track unlimited (the peak),
    then under each limited mode at 1/2 of that peak, with PyTorch's caching
    allocator; then one run with --profiler under the library."""
    configs = [c for c in USER_CONFIGS if c[2] or not k.quick]
    base_iters = USER_QUICK_ITERS if k.quick else USER_ITERS
    swap_iters = USER_QUICK_ITERS if k.quick else USER_SWAP_ITERS
    store = res.data.setdefault("users", {})
    profiled = None  # (label, arguments, mode, limit, shown limit, iterations, reference)
    for label, args, _ in configs:
        if k.out_of_time():
            res.notes.append(f"{label}: skipped: time budget spent")
            continue
        compiled = "--compile" in args
        timeout = 600 if compiled else (180 if k.quick else 300)

        def cmd(iters: int, extra: tuple[str, ...] = ()) -> list[str]:
            return [sys.executable, str(SCRIPT), *args, *extra, "--iters", str(iters)]

        ref_proc = k.run(cmd(base_iters), BASE_ENV, timeout_s=timeout, label=f"torch {label} without the library")
        ref = parse(ref_proc.stdout)
        if ref_proc.returncode == 4:
            why = last_line(ref_proc.stderr)
            res.rows.append([label, "no library", "-", "skipped: transformers missing", "", "", "", "", ""])
            res.notes.append(f"{label}: skipped: {why}")
            continue
        if ref_proc.returncode != 0 or ref is None:
            res.rows.append([label, "no library", "-",
                             "timed out" if ref_proc.timed_out else f"FAIL exit {ref_proc.returncode}",
                             last_line(ref_proc.stderr, 120), "", "", "", ""])
            res.fail(f"{label} fails without the library: {last_line(ref_proc.stderr)}")
            continue
        deterministic = bool(ref.get("deterministic"))
        res.rows.append([label, "no library", "-", "ran",
                         f"{len(ref['bits'])} iterations (reference, "
                         f"{'deterministic' if deterministic else 'not deterministic'})",
                         f"{ref['samples_per_s']:.1f}", "1.00", fmt_bytes(ref["max_memory_allocated"]), ""])
        store[label] = {"reference": ref, "runs": {}}
        peak = 0
        for mode, fraction, shown in [("track", None, "none")] + [(m, 2, "1/2") for m in limit_modes]:
            iters = swap_iters if mode == "swap" else base_iters
            name = f"{mode}, caching" + (f", {iters} iterations" if iters != base_iters else "")
            if skipped(k, res, label, name, shown, fraction is not None and peak == 0):
                continue
            proc, got, seen, limit, limit_cell, peak = limited_run(
                k, res, label, name, shown, cmd(iters), {}, mode, fraction, peak, timeout,
                f"torch {label} {mode} limit {shown}")
            store[label]["runs"][f"{name} {shown}"] = got
            if proc.returncode == 0 and got is not None:
                cell, why = compare_losses(got, ref)
                res.rows.append([label, name, limit_cell, "ran", cell, f"{got['samples_per_s']:.1f}",
                                 f"{got['samples_per_s'] / ref['samples_per_s']:.2f}" if ref["samples_per_s"] else "",
                                 fmt_bytes(got["max_memory_allocated"]), fmt_bytes(seen) if seen else ""])
                if why:
                    res.fail(f"{label} {name} limit {shown}: {why}")
                # The profiler run takes swap's (its schedule holds CUPTI), else the first
                # limited mode that ran, else track unlimited.
                wanted = limit is not None and (mode == "swap" or "swap" not in limit_modes)
                if profiled is None or (profiled[3] is None and wanted):
                    profiled = (label, args, mode, limit, limit_cell, iters, ref)
            else:
                failed_row(res, label, name, limit_cell, shown, mode, limit, proc, seen)
    if profiled is not None:
        profiler_run(k, res, *profiled)
    elif configs:
        res.notes.append("torch.profiler under the library: not run (no run of a users' "
                         "configuration under the library ended)")


def profiler_run(k: kit, res: step_result, label: str, args: list[str], mode: str, limit: int | None,
                 limit_cell: str, iters: int, ref: dict) -> None:
    """One run with --profiler (its last two iterations under torch.profiler with CPU and
    CUDA activities) under the library: does the profiler still get CUDA events while
    oversub's schedule holds CUPTI? When it gets none, the same run without the library
    tells whether it gets any here at all."""
    if k.out_of_time():
        res.notes.append("torch.profiler under the library: skipped: time budget spent")
        return
    cmd = [sys.executable, str(SCRIPT), *args, "--profiler", "--iters", str(iters)]
    timeout = 600 if "--compile" in args else (180 if k.quick else 300)
    name = f"{mode}, caching, --profiler"
    proc, stats = run_under(k, cmd, {}, mode, limit, timeout, f"torch {label} {mode} with torch.profiler")
    got = parse(proc.stdout)
    res.data.setdefault("stats", {})[f"{label} {name}"] = {"digest": digest(stats), "stats": stats}
    res.notes.append(f"{label} {name}: {digest(stats)}")
    if proc.returncode != 0 or got is None:
        res.rows.append([label, name, limit_cell, "timed out" if proc.timed_out else f"FAIL exit {proc.returncode}",
                         last_line(proc.stderr, 120), "", "", "", ""])
        res.fail(f"{label} {mode} with --profiler: " + ("timed out" if proc.timed_out else f"exit {proc.returncode}"))
        return
    events = got.get("profiler_cuda_events", 0)
    span = got.get("profiler_iterations", ["?", "?"])
    res.data.setdefault("users", {})["profiler"] = got
    cell, why = compare_losses(got, ref)
    res.rows.append([label, name, limit_cell, "ran", f"{events} CUDA events; {cell}",
                     f"{got['samples_per_s']:.1f}", "", fmt_bytes(got["max_memory_allocated"]), ""])
    if why:
        res.fail(f"{label} {mode} with --profiler: {why}")
    if got.get("profiler_error"):
        res.notes.append(f"torch.profiler under {mode}: failed to profile: {got['profiler_error']}")
    elif events:
        res.notes.append(f"torch.profiler under {mode} ({label}, iterations {span[0]}..{span[1]}): still "
                         f"records CUDA events: {events} (e.g. {', '.join(got.get('profiler_cuda_names', []))})")
    else:
        base = parse(k.run(cmd, BASE_ENV, timeout_s=timeout,
                           label=f"torch {label} with torch.profiler, without the library").stdout)
        alone = (base or {}).get("profiler_cuda_events")
        res.data["users"]["profiler_without_library"] = base
        res.notes.append(f"torch.profiler under {mode} ({label}, iterations {span[0]}..{span[1]}): recorded "
                         f"NO CUDA events; without the library: "
                         + ("the run failed" if base is None else f"{alone} CUDA events"))


def pytorch(k: kit) -> step_result:
    res = step_result(4, "PyTorch", columns=[
        "model", "run", "OVERSUB_DEVICE_LIMIT", "outcome", "losses vs no library", "samples/s",
        "ratio", "max_memory_allocated", "oversub peak"])
    if k.sim:
        cpu_check(k, res)
        res.skip("--sim has no GPU for PyTorch")
        return res
    probe = k.run([sys.executable, "-c", "import torch; print(torch.__version__, torch.cuda.is_available())"],
                  timeout_s=120, label="torch and CUDA")
    if probe.returncode != 0 or not probe.stdout.strip().endswith("True"):
        res.fail(f"torch with CUDA is not usable here: {last_line(probe.stderr or probe.stdout)}")
        return res
    res.data["torch"] = probe.stdout.strip()
    limit_modes = [m for m in ("swap", "um", "auto") if mode_built(k, m)[0]] or ["track"]
    iters = "12" if k.quick else "20"
    # (name, environment, the modes it runs under a limit, whether it needs a reference
    # run of its own without the library)
    async_env = {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}
    allocators = [("caching", {}, limit_modes, False),
                  ("cudaMallocAsync", async_env,
                   [m for m in limit_modes if m == "swap" or not k.quick] or limit_modes, True)]
    if not k.quick:
        allocators.append(("no caching", {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}, limit_modes,
                           False))
    fractions = [(2, "1/2")] if k.quick else [(2, "1/2"), (3, "1/3")]
    for model in ("cnn", "gpt"):
        cmd = [sys.executable, str(SCRIPT), "--model", model, "--iters", iters]
        if k.out_of_time():
            res.notes.append(f"{model}: skipped: time budget spent")
            continue
        ref_proc = k.run(cmd, BASE_ENV, timeout_s=300, label=f"torch {model} without the library")
        ref = parse(ref_proc.stdout)
        if ref_proc.returncode != 0 or ref is None:
            res.rows.append([model, "no library", "-", f"FAIL exit {ref_proc.returncode}", "", "", "", "", ""])
            res.fail(f"{model} fails without the library: {last_line(ref_proc.stderr)}")
            continue
        res.rows.append([model, "no library", "-", "ran", f"{len(ref['bits'])} iterations (reference)",
                         f"{ref['samples_per_s']:.1f}", "1.00", fmt_bytes(ref["max_memory_allocated"]), ""])
        res.data.setdefault("reference", {})[model] = ref
        # A second run without the library tells oversub's effect from the model's own
        # nondeterminism: when the reference does not repeat, a difference is no failure.
        repeatable = True
        if not k.quick:
            again = parse(k.run(cmd, BASE_ENV, timeout_s=300,
                                label=f"torch {model} without the library, again").stdout)
            repeatable = again is not None and again["bits"] == ref["bits"]
            res.rows.append([model, "no library, again", "-", "ran" if again else "FAIL",
                             "bit-identical" if repeatable else f"DIFFER ({max_rel_diff(again, ref)})",
                             f"{again['samples_per_s']:.1f}" if again else "", "", "", ""])
            if again is None:
                res.fail(f"{model}: the second run without the library failed")
            elif not repeatable:
                res.notes.append(f"{model}: two runs without the library differ; differences under the "
                                 "library are reported, not failed")
        for allocator, alloc_env, modes, own_reference in allocators:
            peak = 0
            alloc_ref = ref
            if own_reference:
                if k.out_of_time():
                    res.notes.append(f"{model} {allocator}: skipped: time budget spent")
                    continue
                own = parse(k.run(cmd, {**BASE_ENV, **alloc_env}, timeout_s=300,
                                  label=f"torch {model} {allocator} without the library").stdout)
                if own is None:
                    res.rows.append([model, f"no library, {allocator}", "-", "FAIL", "", "", "",
                                     "", ""])
                    res.fail(f"{model}: {allocator} fails without the library")
                    continue
                res.rows.append([model, f"no library, {allocator}", "-", "ran",
                                 "bit-identical" if own["bits"] == ref["bits"]
                                 else f"differ ({max_rel_diff(own, ref)}): its own reference",
                                 f"{own['samples_per_s']:.1f}",
                                 f"{own['samples_per_s'] / ref['samples_per_s']:.2f}"
                                 if ref["samples_per_s"] else "",
                                 fmt_bytes(own["max_memory_allocated"]), ""])
                alloc_ref = own
            plan = [("track", None, "none")] + [(mode, f, shown) for f, shown in fractions
                                                for mode in modes]
            for mode, fraction, shown in plan:
                name = f"{mode}, {allocator}"
                if skipped(k, res, model, name, shown, fraction is not None and peak == 0):
                    continue
                proc, got, seen, limit, limit_cell, peak = limited_run(
                    k, res, model, name, shown, cmd, alloc_env, mode, fraction, peak,
                    120 if k.quick else 300, f"torch {model} {mode} {allocator} limit {shown}")
                if proc.returncode == 0 and got is not None:
                    same = got["bits"] == alloc_ref["bits"]
                    res.rows.append([model, name, limit_cell, "ran",
                                     "bit-identical" if same
                                     else f"DIFFER ({max_rel_diff(got, alloc_ref)})",
                                     f"{got['samples_per_s']:.1f}",
                                     f"{got['samples_per_s'] / ref['samples_per_s']:.2f}" if ref["samples_per_s"] else "",
                                     fmt_bytes(got["max_memory_allocated"]), fmt_bytes(seen) if seen else ""])
                    if not same and repeatable:
                        res.fail(f"{model} {name} limit {shown}: losses differ from the run without the library")
                else:
                    failed_row(res, model, name, limit_cell, shown, mode, limit, proc, seen)
    if k.out_of_time():
        res.notes.append("users' configurations: skipped: time budget spent")
    else:
        users(k, res, limit_modes)
    res.notes.append(f"limited runs use OVERSUB_MODE={', '.join(limit_modes)}")
    if not k.ballast:
        res.notes.append("no ballast (--ballast not given): the GPU had room for more than the "
                         "limit, so um's managed memory was not under the device's pressure; "
                         "swap's limit is its own arena's and holds either way")
    return res
