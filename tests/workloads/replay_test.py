#!/usr/bin/env python3
"""oversub-replay on simgpu: replays a profile taken at test time and checks its data.

The trace is simtrain profiled by the real profiler (LD_PRELOAD=liboversub.so,
OVERSUB_MODE=track, OVERSUB_PROFILE_OUT), read back with scripts/lib/oprof.py.

  unlimited  replay with plenty of memory, simgpu's race detector aborting: every
             buffer whose contents a launch reads after an earlier launch or copy
             wrote them (counted here from the profile) is verified, no mismatch,
             every trace launch replayed, each iteration no faster than the trace's
             kernel time, and the same checksums on a second run
  swap, um   SIMGPU_MEMORY = the replay's peak / --ratio: alone the replay runs out
             of memory; under OVERSUB_MODE=swap or um it verifies the same buffers
             and prints the same checksums as with plenty of memory, and oversub's
             statistics pass the swap-mode (um-mode) checks of swap_checks.py
  corrupt    --corrupt-after N overwrites a word the checker must then catch: exit 1
             with "data check failed" naming the overwritten buffer, with plenty of
             memory and under OVERSUB_MODE=swap

  replay_test.py --case swap --replay oversub-replay --simtrain simtrain --lib liboversub.so
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "preload"))
sys.path.insert(0, str(HERE.parents[1] / "scripts" / "lib"))

from oprof import read_profile  # noqa: E402
from swap_checks import OOM_RE, check_swap, check_um, fail, read_stats, run  # noqa: E402

TRACE_ARGS = ["--depth", "8", "--width", "512", "--batch", "128", "--iters", "5"]
ITER_RE = re.compile(r"^iter (\d+) time ([0-9.]+) ms checksum (0x[0-9a-f]+) .*$", re.M)
VERIFIED_RE = re.compile(r"^data verified: (\d+) buffers x (\d+) launches "
                         r"\((\d+) words checked, (\d+) mismatches\)$", re.M)
PEAK_RE = re.compile(r"^peak device bytes: (\d+)$", re.M)
MARKED_RE = re.compile(r"^iterations marked for oversub: (yes|no)$", re.M)
PLAN_RE = re.compile(r"^plan: .* (\d+) lifetimes widened", re.M)
CORRUPT_RE = re.compile(r"^corrupt: after launch \d+ overwrote word \d+ of buffer (\d+) ", re.M)
FAILED_RE = re.compile(r"oversub-replay: data check failed: iteration \d+, trace launch \d+ "
                       r"\(.*\): buffer (\d+) ")
WRITING_COPIES = ("h2d", "memset")


def make_trace(args: argparse.Namespace, tmp: Path) -> Path:
    out = tmp / "simtrain.oprof"
    proc = run([str(args.simtrain), *TRACE_ARGS],
               {"OVERSUB_MODE": "track", "OVERSUB_PROFILE_OUT": str(out)}, args.lib)
    if proc.returncode != 0 or not out.is_file():
        fail("profiling simtrain wrote no profile", proc)
    return out


def verifiable(profile, iters: int) -> int:
    """Buffers whose contents a launch reads after an earlier launch or a writing
    copy (H2D, memset) wrote them in the same lifetime: the replay must verify each."""
    n = len(profile.launches)
    events: dict[int, list[tuple[int, str]]] = {}  # buffer -> (time, what); launch k at 2k+1
    for k, launch in enumerate(profile.launches):
        for b in launch.buffers:
            events.setdefault(b, []).append((2 * k + 1, "launch"))
    for c in profile.copies:
        if c.buffer is not None and c.bytes >= 4 and c.kind in WRITING_COPIES:
            events.setdefault(c.buffer, []).append((2 * min(c.before_launch, n), "write"))
    count = 0
    for b, evs in events.items():
        launches = [t for t, what in evs if what == "launch"]
        if not launches:
            continue
        first_write = min(t for t, _ in evs)
        if profile.allocations[b].long_lived and iters >= 2:
            count += 1
        elif any(t > first_write for t in launches):
            count += 1
    return count


def parse(proc, what: str) -> dict:
    out = proc.stdout
    iters = ITER_RE.findall(out)
    verified, peak, marked = VERIFIED_RE.search(out), PEAK_RE.search(out), MARKED_RE.search(out)
    if proc.returncode != 0 or not iters or verified is None or peak is None or marked is None:
        fail(f"the replay {what} failed or printed no summary", proc)
    return {"iters": iters, "checksums": [c for _, _, c in iters],
            "times_ms": [float(t) for _, t, _ in iters],
            "buffers": int(verified.group(1)), "launches": int(verified.group(2)),
            "words": int(verified.group(3)), "mismatches": int(verified.group(4)),
            "peak": int(peak.group(1)), "marked": marked.group(1) == "yes"}


def reference(args: argparse.Namespace, trace: Path) -> dict:
    profile = read_profile(trace)
    cmd = [str(args.replay), str(trace), "--iters", str(args.iters)]
    proc = run(cmd, {"SIMGPU_RACE": "abort"}, None)
    got = parse(proc, "with plenty of memory")
    widened = PLAN_RE.search(proc.stdout)
    want_buffers = verifiable(profile, args.iters)
    if widened is None or int(widened.group(1)) != 0:
        fail("the simtrain trace needed lifetimes widened; verifiable() does not model that",
             proc)
    if got["mismatches"] != 0 or got["words"] == 0:
        fail(f"mismatches or nothing checked: {got}", proc)
    if got["buffers"] != want_buffers or want_buffers == 0:
        fail(f"verified {got['buffers']} buffers, the profile has {want_buffers} whose data a "
             "launch reads after it was written", proc)
    if got["launches"] != args.iters * len(profile.launches):
        fail(f"replayed {got['launches']} launches, want {args.iters} x {len(profile.launches)}",
             proc)
    kernel_ms = profile.iteration_kernel_ns / 1e6
    if kernel_ms <= 0 or any(t < kernel_ms for t in got["times_ms"]):
        fail(f"an iteration took less than the trace's kernel time {kernel_ms} ms: "
             f"{got['times_ms']}", proc)
    got["profile"] = profile
    got["cmd"] = cmd
    return got


def case_unlimited(args: argparse.Namespace, trace: Path) -> None:
    ref = reference(args, trace)
    again = parse(run(ref["cmd"], {"SIMGPU_RACE": "abort"}, None), "a second time")
    if again["checksums"] != ref["checksums"] or again["times_ms"] != ref["times_ms"]:
        fail(f"two runs differ: {ref['iters']} vs {again['iters']}")
    print(f"unlimited: {ref['buffers']} buffers verified over {ref['launches']} launches, "
          f"{ref['words']} words, checksums {ref['checksums']}, "
          f"iteration {ref['times_ms'][0]} ms (kernels "
          f"{ref['profile'].iteration_kernel_ns / 1e6} ms), peak {ref['peak']} bytes")


def case_oversubscribed(args: argparse.Namespace, trace: Path, mode: str) -> None:
    ref = reference(args, trace)
    device = int(ref["peak"] / args.ratio)
    alone = run(ref["cmd"], {"SIMGPU_MEMORY": str(device)}, None)
    if alone.returncode == 0 or not OOM_RE.search(alone.stdout + alone.stderr):
        fail(f"without oversub the replay should run out of memory on {device} bytes", alone)
    with tempfile.TemporaryDirectory() as tmp:
        stats_file = Path(tmp) / "stats.json"
        proc = run(ref["cmd"], {"SIMGPU_MEMORY": str(device), "SIMGPU_RACE": "abort",
                                "SIMGPU_REPORT": "1", "OVERSUB_MODE": mode,
                                "OVERSUB_STATS": "json", "OVERSUB_STATS_FILE": str(stats_file)},
                   args.lib)
        got = parse(proc, f"under OVERSUB_MODE={mode} at {args.ratio}x")
        stats = read_stats(stats_file, proc)
    if not got["marked"]:
        fail("the replay did not find oversub_iteration_begin under LD_PRELOAD", proc)
    for key in ("checksums", "buffers", "launches", "words", "mismatches"):
        if got[key] != ref[key]:
            fail(f"{key} differ under OVERSUB_MODE={mode}: {got[key]} vs {ref[key]} with "
                 "plenty of memory", proc)
    moved = (check_swap(stats, proc, device, True, args.expect_scheduled) if mode == "swap"
             else check_um(stats, device))
    print(f"{mode} at {args.ratio}x ({device} of {ref['peak']} bytes): {got['buffers']} buffers "
          f"verified over {got['launches']} launches, checksums equal to the unlimited run; "
          f"iteration times {got['times_ms']} ms; {moved}")


def case_corrupt(args: argparse.Namespace, trace: Path) -> None:
    ref = reference(args, trace)
    n = len(ref["profile"].launches)
    for env, lib, label in (({}, None, "plenty of memory"),
                            ({"SIMGPU_MEMORY": str(int(ref["peak"] / args.ratio)),
                              "OVERSUB_MODE": "swap"}, args.lib, "OVERSUB_MODE=swap")):
        for after in (n // 2, n + n // 3):
            proc = run([*ref["cmd"], "--corrupt-after", str(after)], env, lib)
            hit, caught = CORRUPT_RE.search(proc.stdout), FAILED_RE.search(proc.stderr)
            if proc.returncode != 1 or hit is None or caught is None:
                fail(f"--corrupt-after {after} ({label}) was not caught", proc)
            if hit.group(1) != caught.group(1):
                fail(f"overwrote buffer {hit.group(1)}, the check named {caught.group(1)}", proc)
            print(f"corrupt after {after} ({label}): caught in buffer {caught.group(1)}: "
                  f"{caught.group(0)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=["unlimited", "swap", "um", "corrupt"], required=True)
    ap.add_argument("--replay", type=Path, required=True)
    ap.add_argument("--simtrain", type=Path, required=True)
    ap.add_argument("--lib", type=Path, required=True)
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--ratio", type=float, default=3.0, help="peak / device memory")
    ap.add_argument("--expect-scheduled", action="store_true",
                    help="swap: the learned schedule must be followed")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = make_trace(args, Path(tmp))
        if args.case == "unlimited":
            case_unlimited(args, trace)
        elif args.case == "corrupt":
            case_corrupt(args, trace)
        else:
            case_oversubscribed(args, trace, args.case)
    return 0


if __name__ == "__main__":
    sys.exit(main())
