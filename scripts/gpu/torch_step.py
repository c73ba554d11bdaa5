"""Step 4 of gpu-validate: PyTorch training under liboversub (torch_train.py).

For each model (cnn, gpt): a run without the library (the reference losses,
samples/s and peak; run twice, unless --quick, to tell the model's own
nondeterminism from oversub's), then under LD_PRELOAD with PyTorch's default
caching allocator first (what users run; oversub sees its segments), then with
PYTORCH_NO_CUDA_MEMORY_CACHING=1 (oversub sees every tensor; skipped with --quick).
For each allocator: OVERSUB_MODE=track unlimited (the peak oversub saw, and the
library's cost when nothing moves), then swap, um and auto with
OVERSUB_DEVICE_LIMIT at 1/2 of that peak, then at 1/3 (skipped with --quick), each
with --ballast beside a process that leaves the device no more free memory than the
limit and a margin (Note [A limit the device enforces]). A run that ends must give the
reference loss bits.

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
    return "; ".join(parts)


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
    allocators = [("caching", {})]
    if not k.quick:
        allocators.append(("no caching", {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}))
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
        for allocator, alloc_env in allocators:
            peak = 0
            plan = [("track", None, "none")] + [(mode, f, shown) for f, shown in fractions
                                                for mode in limit_modes]
            for mode, fraction, shown in plan:
                limit = None if fraction is None else max(1 << 20, peak // fraction)
                name = f"{mode}, {allocator}"
                if k.out_of_time():
                    res.rows.append([model, name, shown, "skipped: time budget spent", "", "", "", "", ""])
                    res.notes.append(f"{model} {mode} {allocator} {shown}: skipped: time budget spent")
                    continue
                if fraction is not None and peak == 0:
                    res.rows.append([model, name, shown, "skipped: no peak measured", "", "", "", "", ""])
                    continue
                with tempfile.TemporaryDirectory() as tmp:
                    stats_file = Path(tmp) / "stats.json"
                    env = {**BASE_ENV, **alloc_env, "OVERSUB_MODE": mode, "OVERSUB_STATS": "json",
                           "OVERSUB_STATS_FILE": str(stats_file)}
                    if limit is not None:
                        env["OVERSUB_DEVICE_LIMIT"] = str(limit)
                    use_ballast = k.ballast and limit is not None
                    with ballast(k, limit + BALLAST_MARGIN) if use_ballast else contextlib.nullcontext():
                        proc = k.run(cmd, env, preload=True, timeout_s=120 if k.quick else 300,
                                     label=f"torch {model} {mode} {allocator} limit {shown}")
                    stats = read_stats(stats_file)
                got = parse(proc.stdout)
                seen = (stats or {}).get("counters", {}).get("device_bytes", {}).get("peak")
                if fraction is None:
                    peak = seen or (got or {}).get("max_memory_allocated", 0)
                limit_cell = shown if limit is None else f"{limit} ({shown} of {fmt_bytes(peak)})"
                summary_line = digest(stats)
                res.data.setdefault("stats", {})[f"{model} {name} {shown}"] = {
                    "digest": summary_line, "stats": stats}
                res.notes.append(f"{model} {name} {shown}: {summary_line}")
                if proc.returncode == 0 and got is not None:
                    same = got["bits"] == ref["bits"]
                    res.rows.append([model, name, limit_cell, "ran",
                                     "bit-identical" if same else f"DIFFER ({max_rel_diff(got, ref)})",
                                     f"{got['samples_per_s']:.1f}",
                                     f"{got['samples_per_s'] / ref['samples_per_s']:.2f}" if ref["samples_per_s"] else "",
                                     fmt_bytes(got["max_memory_allocated"]), fmt_bytes(seen) if seen else ""])
                    if not same and repeatable:
                        res.fail(f"{model} {name} limit {shown}: losses differ from the run without the library")
                elif proc.returncode == 3 and "out of memory" in proc.stderr:
                    expected = mode == "track" and limit is not None
                    res.rows.append([model, name, limit_cell,
                                     "PyTorch OOM" + (" (expected: track does not move memory)" if expected else ""),
                                     "", "", "", "", fmt_bytes(seen) if seen else ""])
                    if not expected:
                        res.fail(f"{model} {name} limit {shown}: out of memory")
                else:
                    res.rows.append([model, name, limit_cell,
                                     "timed out" if proc.timed_out else f"FAIL exit {proc.returncode}",
                                     last_line(proc.stderr, 120), "", "", "", ""])
                    res.fail(f"{model} {name} limit {shown}: "
                             + ("timed out" if proc.timed_out else f"exit {proc.returncode}"))
    res.notes.append(f"limited runs use OVERSUB_MODE={', '.join(limit_modes)}")
    if not k.ballast:
        res.notes.append("no ballast (--ballast not given): the GPU had room for more than the "
                         "limit, so um's managed memory was not under the device's pressure; "
                         "swap's limit is its own arena's and holds either way")
    return res
