"""Step 7 of gpu-validate: hazard probes, the accesses no launch argument shows.

tests/gpu/hazard_probe.cc, one program with three cases:
- pointer-chase: a kernel that follows a table of device pointers stored in device
  memory, queued behind a ~20 ms spin kernel while another stream's kernels write
  enough other buffers to evict the buffers it points to;
- graph-capture: a captured graph (with a cudaMallocAsync during the capture) over
  more buffers than fit under the limit, replayed 5 times, against the same work
  launched directly;
- cukernel: a kernel launched through its cudaKernel_t / CUkernel handle on a buffer
  evicted just before.
Each case runs without the library first (the reference checksum), then under
LD_PRELOAD with OVERSUB_MODE=swap and OVERSUB_DEVICE_LIMIT at a third of the bytes
the case allocates (`--print-total`); the checksums must be equal, the probe must
say `ok <case>` (it checks every buffer against a host mirror and that no error is
sticky), and swap must have evicted something (else the hazard was not exercised).
On a GPU, pointer-chase also runs under `compute-sanitizer --tool memcheck` with the
library preloaded, which must report no error; skipped, with a note, where
compute-sanitizer is not found and always with --sim. On simgpu every run has
SIMGPU_RACE=abort: an eviction not ordered after a kernel that reaches the page
ends the run.
"""
from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path

from .build import find_nvcc, programs
from .common import first_line, fmt_bytes, kit, last_line, mode_built, step_result

CASES = ("pointer-chase", "graph-capture", "cukernel")
MEMCHECK_CASE = "pointer-chase"
CHECKSUM_RE = re.compile(r"^checksum (\S+) (0x[0-9a-f]{16})$", re.MULTILINE)
TOTAL_RE = re.compile(r"^total bytes: (\d+)$", re.MULTILINE)
FAIL_RE = re.compile(r"^FAIL \S+: (.*)$", re.MULTILINE)
MEMCHECK_RE = re.compile(r"ERROR SUMMARY: (\d+) error")


def probe_verdict(proc, case: str) -> tuple[str | None, str]:
    """(checksum, "") for a run that said `ok <case>`, else (checksum or None, why)."""
    found = [c for name, c in CHECKSUM_RE.findall(proc.stdout) if name == case]
    checksum = found[-1] if found else None
    if proc.timed_out:
        return checksum, "timed out"
    failed = FAIL_RE.search(proc.stdout)
    if failed:
        return checksum, failed.group(1)[:200]
    if proc.returncode != 0 or f"ok {case}" not in proc.stdout.splitlines():
        why = last_line(proc.stderr) or first_line(proc.stdout)
        return checksum, f"exit {proc.returncode}" + (f": {why}" if why else "")
    if checksum is None:
        return None, "no checksum line"
    return checksum, ""


def swap_moves(stats_file: Path) -> tuple[int, int] | None:
    """Swap's evictions and fetches over every device, from the stats file's last
    record of a process that launched something; None when there is none."""
    if not stats_file.is_file():
        return None
    moves = None
    for line in stats_file.read_text().splitlines():
        if not line.startswith('{"oversub_stats"'):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not record.get("counters", {}).get("launches", {}).get("total"):
            continue
        swaps = [d.get("swap", {}) for d in record.get("pool", {}).values() if isinstance(d, dict)]
        moves = (sum(int(s.get("evictions", 0)) for s in swaps), sum(int(s.get("fetches", 0)) for s in swaps))
    return moves


def find_sanitizer() -> Path | None:
    """compute-sanitizer on PATH, else beside the nvcc the kit builds with."""
    found = shutil.which("compute-sanitizer")
    if found:
        return Path(found)
    nvcc = find_nvcc()
    if nvcc is not None and (nvcc.parent / "compute-sanitizer").is_file():
        return nvcc.parent / "compute-sanitizer"
    return None


def hazards(k: kit, progs: programs) -> step_result:
    res = step_result(7, "hazards", columns=["case", "run", "OVERSUB_DEVICE_LIMIT", "outcome",
                                             "checksum", "swap evictions / fetches", "seconds"])
    exe = progs.probes.get("hazard_probe")
    if exe is None:
        res.fail(f"hazard_probe: {progs.missing.get('hazard_probe', 'not built')}")
        return res
    built, why = mode_built(k, "swap")
    if not built:
        res.skip(why)
        return res
    # The probe's own default size: 24 MiB in all on simgpu, 256 MiB on a GPU (64 MiB
    # there with --quick).
    size = ["--mib", "64"] if k.quick and not k.sim else []
    env = dict(progs.env)
    if k.sim:
        env["SIMGPU_RACE"] = "abort"
    limits: dict[str, int] = {}
    references: dict[str, str] = {}
    for case in CASES:
        if k.out_of_time():
            res.notes.append(f"{case}: skipped: time budget spent")
            continue
        total_run = k.run([str(exe), case, *size, "--print-total"], env, timeout_s=60,
                          label=f"hazard {case}: total bytes")
        total = TOTAL_RE.search(total_run.stdout)
        if total_run.returncode != 0 or total is None:
            res.rows.append([case, "--print-total", "-", f"FAILED exit {total_run.returncode}", "", "", ""])
            res.fail(f"{case}: --print-total: exit {total_run.returncode}")
            continue
        limit = max(1, int(total.group(1)) // 3)
        limits[case] = limit
        base = k.run([str(exe), case, *size], env, timeout_s=600, label=f"hazard {case} without the library")
        want, why = probe_verdict(base, case)
        if why:
            res.rows.append([case, "no library", "-", f"FAIL: {why}", want or "", "", f"{base.seconds:.2f}"])
            res.fail(f"{case} fails without the library: {why}")
            continue
        references[case] = want
        res.rows.append([case, "no library", "-", f"ok ({fmt_bytes(int(total.group(1)))} allocated)",
                         f"{want} (reference)", "", f"{base.seconds:.2f}"])
        with tempfile.TemporaryDirectory() as tmp:
            stats_file = Path(tmp) / "stats.json"
            proc = k.run([str(exe), case, *size],
                         {**env, "OVERSUB_MODE": "swap", "OVERSUB_DEVICE_LIMIT": str(limit),
                          "OVERSUB_STATS": "json", "OVERSUB_STATS_FILE": str(stats_file)},
                         preload=True, timeout_s=600, label=f"hazard {case} under swap at a third")
            moves = swap_moves(stats_file)
        got, why = probe_verdict(proc, case)
        shown_moves = f"{moves[0]} / {moves[1]}" if moves else "no stats"
        if not why and got != want:
            why = f"checksum {got} differs from the reference {want}"
        if not why and (moves is None or moves[0] == 0):
            why = "swap evicted nothing: the hazard was not exercised"
        res.rows.append([case, "OVERSUB_MODE=swap", f"{limit} (total/3)", f"FAIL: {why}" if why else "ok",
                         "same" if got == want else (got or "none"), shown_moves, f"{proc.seconds:.2f}"])
        if why:
            res.fail(f"{case} under swap: {why}")
    memcheck(k, res, exe, size, limits, references)
    return res


def memcheck(k: kit, res: step_result, exe: Path, size: list[str], limits: dict[str, int],
             references: dict[str, str]) -> None:
    """pointer-chase under compute-sanitizer's memcheck with the library preloaded (GPU
    only): no error reported, the reference checksum. LD_PRELOAD is set for
    compute-sanitizer itself, which keeps it when it adds its own library for the
    probe (wrapping the probe in `env LD_PRELOAD=...` would drop the sanitizer's)."""
    case = MEMCHECK_CASE
    name = f"{case} under compute-sanitizer --tool memcheck"
    if k.sim:
        res.notes.append(f"{name}: skipped on simgpu (no compute-sanitizer; simgpu's race detector "
                         "and page protection check these runs instead)")
        return
    sanitizer = find_sanitizer()
    if sanitizer is None:
        res.notes.append(f"{name}: skipped: compute-sanitizer not on PATH nor beside nvcc")
        return
    if case not in limits or case not in references:
        res.notes.append(f"{name}: skipped: the case has no reference run")
        return
    if k.out_of_time():
        res.notes.append(f"{name}: skipped: time budget spent")
        return
    proc = k.run([str(sanitizer), "--tool", "memcheck", "--error-exitcode", "86",
                  "--target-processes", "all", str(exe), case, *size],
                 {"OVERSUB_MODE": "swap", "OVERSUB_DEVICE_LIMIT": str(limits[case])},
                 preload=True, timeout_s=900, label=f"hazard {case} under memcheck")
    errors = MEMCHECK_RE.search(proc.stdout + proc.stderr)
    got, why = probe_verdict(proc, case)
    if errors is not None and int(errors.group(1)) > 0:
        why = f"memcheck reported {errors.group(1)} error(s)" + (f"; {why}" if why else "")
    elif errors is None and not why:
        why = "no ERROR SUMMARY from compute-sanitizer"
    if not why and got != references[case]:
        why = f"checksum {got} differs from the reference {references[case]}"
    res.rows.append([case, "swap under memcheck", f"{limits[case]} (total/3)", f"FAIL: {why}" if why else
                     f"ok, {errors.group(1) if errors else '?'} errors", "same" if got == references[case]
                     else (got or "none"), "", f"{proc.seconds:.2f}"])
    if why:
        res.fail(f"{name}: {why}")
