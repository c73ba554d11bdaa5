"""Step 4 of gpu-validate: PyTorch training under liboversub (torch_train.py).

For each model (cnn, gpt): a run without the library (the reference losses,
samples/s and peak), then under LD_PRELOAD with PYTORCH_NO_CUDA_MEMORY_CACHING=1
(oversub sees every tensor) and with PyTorch's default caching allocator (oversub
sees its segments), unlimited; then, for both allocators, OVERSUB_DEVICE_LIMIT at
1/2 and 1/3 of the peak oversub saw in the unlimited run with that allocator
(torch's max_memory_allocated when the stats are missing). Limited runs use the
first of swap, um that the library accepts, else track, whose answer today is
PyTorch's own out-of-memory error (reported as expected, not as a pass of
oversubscription). A run that ends must give the reference loss bits. CUPTI
coverage is skipped until the profiler exists.

With --sim there is no GPU for PyTorch: the step is skipped, after running
torch_train.py on the CPU (--device cpu --iters 2) when `import torch` works.
"""
from __future__ import annotations

import json
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
    limit_mode = "track"
    for mode in ("swap", "um"):
        if mode_built(k, mode)[0]:
            limit_mode = mode
            break
    iters = "8" if k.quick else "20"
    for model in ("cnn", "gpt"):
        cmd = [sys.executable, str(SCRIPT), "--model", model, "--iters", iters]
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
        again = parse(k.run(cmd, BASE_ENV, timeout_s=300, label=f"torch {model} without the library, again").stdout)
        repeatable = again is not None and again["bits"] == ref["bits"]
        res.rows.append([model, "no library, again", "-", "ran" if again else "FAIL",
                         "bit-identical" if repeatable else f"DIFFER ({max_rel_diff(again, ref)})",
                         f"{again['samples_per_s']:.1f}" if again else "", "", "", ""])
        if again is None:
            res.fail(f"{model}: the second run without the library failed")
        elif not repeatable:
            res.notes.append(f"{model}: two runs without the library differ; differences under the "
                             "library are reported, not failed")
        for allocator, alloc_env in (("no caching", {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}),
                                     ("caching", {})):
            peak = 0
            plan = [("track", None, "none"), (limit_mode, 2, "1/2"), (limit_mode, 3, "1/3")]
            for mode, fraction, shown in plan:
                if k.quick and allocator == "caching" and fraction is not None:
                    continue
                limit = None if fraction is None else max(1 << 20, peak // fraction)
                if k.out_of_time():
                    res.rows.append([model, f"{mode}, {allocator}", shown, "skipped: time budget spent",
                                     "", "", "", "", ""])
                    res.notes.append(f"{model} {mode} {allocator} {shown}: skipped: time budget spent")
                    continue
                if fraction is not None and peak == 0:
                    res.rows.append([model, f"{mode}, {allocator}", shown, "skipped: no peak measured",
                                     "", "", "", "", ""])
                    continue
                with tempfile.TemporaryDirectory() as tmp:
                    stats_file = Path(tmp) / "stats.json"
                    env = {**BASE_ENV, **alloc_env, "OVERSUB_MODE": mode, "OVERSUB_STATS": "json",
                           "OVERSUB_STATS_FILE": str(stats_file)}
                    if limit is not None:
                        env["OVERSUB_DEVICE_LIMIT"] = str(limit)
                    proc = k.run(cmd, env, preload=True, timeout_s=300,
                                 label=f"torch {model} {mode} {allocator} limit {shown}")
                    stats = read_stats(stats_file)
                got = parse(proc.stdout)
                seen = (stats or {}).get("counters", {}).get("device_bytes", {}).get("peak")
                if fraction is None:
                    peak = seen or (got or {}).get("max_memory_allocated", 0)
                limit_cell = shown if limit is None else f"{limit} ({shown} of {fmt_bytes(peak)})"
                name = f"{mode}, {allocator}"
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
                    res.rows.append([model, name, limit_cell, f"FAIL exit {proc.returncode}",
                                     last_line(proc.stderr, 120),
                                     "", "", "", ""])
                    res.fail(f"{model} {name} limit {shown}: exit {proc.returncode}")
    res.notes.append(f"limited runs use OVERSUB_MODE={limit_mode}"
                     + (" (swap and um not built yet)" if limit_mode == "track" else ""))
    res.notes.append("CUPTI coverage (launches seen vs launched, buffers found per launch): "
                     "skipped: profiler not built yet")
    return res
