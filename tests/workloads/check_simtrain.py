#!/usr/bin/env python3
"""Checks simtrain on simgpu: determinism, modes, launch paths, OOM and races.

Each --case runs simtrain a few times (under the environment meson gives the
test: LD_LIBRARY_PATH at simgpu) and compares what it prints:

  cli     --help lists every option; bad command lines exit 2 before any CUDA call
  repeat  two identical runs give bit-identical losses, another seed other ones;
          the uncached peak equals the footprint estimate simtrain prints (even and
          odd depth)
  modes   --caching, --streams 2, both, and --caching async --streams 2 give the same
          loss bits as the default
  launch  --launch runtime and --launch ex give the same loss bits as nvcc, and so
          do --api driver and --api dlsym (device memory, copies, memsets and
          launches through libcuda's functions)
  oom     with SIMGPU_MEMORY at half the footprint, simtrain exits 1 with CUDA's
          cudaErrorMemoryAllocation message (uncached and cached), no crash
  race    under SIMGPU_RACE=abort the --streams 2 runs finish, race-free
  trace   --trace-allocs writes a well-formed trace (docs/trace-format.md) whose
          most bytes live at once equal the peak simtrain prints, in every mode,
          with an iteration marker per iteration; the losses do not change
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

# simtrain's defaults (depth 8, width 128, batch 64) take a fraction of a second.
BASE_ARGS = ["--iters", "4"]
# An odd depth ends on a layer outside any residual block: its own peak.
ODD_DEPTH_ARGS = ["--depth", "5", "--width", "64", "--batch", "32"]
RUN_TIMEOUT_S = 60
SEGMENT_BYTES = 2 << 20

ITER_RE = re.compile(r"^iter (\d+) loss (\S+) \(bits 0x([0-9a-f]{8})\)$")
PEAK_RE = re.compile(r"^peak device bytes: (\d+)$")
ESTIMATE_RE = re.compile(r"^footprint estimate: (\d+) bytes")
FINAL_RE = re.compile(r"^final loss: (\S+) \(bits 0x([0-9a-f]{8})\)$")
OOM_RE = re.compile(
    r"^simtrain: CUDA error cudaErrorMemoryAllocation \(out of memory\) "
    r"at \S+:\d+ in cudaMalloc\(.*\)$",
    re.MULTILINE,
)


@dataclass
class run_result:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    loss_bits: list[str] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    peak: int | None = None
    estimate: int | None = None
    final_bits: str | None = None

    def describe(self) -> str:
        return (
            f"simtrain {' '.join(self.args)} -> exit {self.returncode}\n"
            f"--- stdout\n{self.stdout}--- stderr\n{self.stderr}---"
        )


class checker:
    def __init__(self, simtrain: Path) -> None:
        self.simtrain = simtrain
        self.failures: list[str] = []

    def run(self, extra: list[str], env: dict[str, str] | None = None) -> run_result:
        args = BASE_ARGS + extra
        full_env = dict(os.environ)
        full_env.update(env or {})
        proc = subprocess.run(
            [str(self.simtrain), *args],
            capture_output=True,
            text=True,
            env=full_env,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
        result = run_result(args, proc.returncode, proc.stdout, proc.stderr)
        for line in proc.stdout.splitlines():
            if m := ITER_RE.match(line):
                result.losses.append(float(m.group(2)))
                result.loss_bits.append(m.group(3))
            elif m := PEAK_RE.match(line):
                result.peak = int(m.group(1))
            elif m := ESTIMATE_RE.match(line):
                result.estimate = int(m.group(1))
            elif m := FINAL_RE.match(line):
                result.final_bits = m.group(2)
        return result

    def expect(self, ok: bool, message: str, result: run_result | None = None) -> bool:
        if not ok:
            text = f"FAIL: {message}"
            if result is not None:
                text += "\n" + result.describe()
            self.failures.append(text)
        return ok

    def completed(self, result: run_result) -> bool:
        iters = int(BASE_ARGS[BASE_ARGS.index("--iters") + 1])
        return (
            self.expect(result.returncode == 0, "simtrain did not exit 0", result)
            and self.expect(len(result.loss_bits) == iters, f"expected {iters} loss lines", result)
            and self.expect(all(math.isfinite(x) for x in result.losses), "loss not finite", result)
            and self.expect(result.peak is not None and result.peak > 0, "no peak line", result)
            and self.expect(result.final_bits == result.loss_bits[-1],
                            "final loss is not the last iteration's", result)
        )

    def same_losses(self, base: run_result, other: run_result, what: str) -> None:
        if self.completed(other):
            self.expect(other.loss_bits == base.loss_bits,
                        f"{what}: loss bits {other.loss_bits} differ from {base.loss_bits}",
                        other)


def case_cli(c: checker) -> None:
    help_run = c.run(["--help"])
    c.expect(help_run.returncode == 0, "--help did not exit 0", help_run)
    for flag in ["--depth", "--width", "--batch", "--iters", "--seed", "--lr", "--caching",
                 "--streams", "--launch", "--trace-allocs"]:
        c.expect(flag in help_run.stdout, f"--help does not mention {flag}", help_run)
    for bad in (["--streams", "3"], ["--launch", "bogus"], ["--depth", "0"], ["--nope"],
                ["--caching=1"], ["--iters"], ["--trace-allocs="]):
        r = c.run(bad)
        c.expect(r.returncode == 2 and "try" in r.stderr, f"{bad} should be a usage error", r)


def case_repeat(c: checker) -> None:
    first = c.run([])
    second = c.run([])
    if c.completed(first):
        c.same_losses(first, second, "a repeated run")
        c.expect(first.peak == first.estimate,
                 f"uncached peak {first.peak} != footprint estimate {first.estimate}", first)
        c.expect(len(set(first.loss_bits)) > 1, "the loss never changes", first)
        reseeded = c.run(["--seed", "2"])
        if c.completed(reseeded):
            c.expect(reseeded.loss_bits != first.loss_bits, "--seed 2 changes nothing",
                     reseeded)
    odd = c.run(ODD_DEPTH_ARGS)
    if c.completed(odd):
        c.expect(odd.peak == odd.estimate,
                 f"uncached peak {odd.peak} != footprint estimate {odd.estimate}", odd)


def case_modes(c: checker) -> None:
    base = c.run([])
    if not c.completed(base):
        return
    for extra in (["--caching"], ["--streams", "2"], ["--caching", "--streams", "2"],
                  ["--caching", "async", "--streams", "2"]):
        r = c.run(extra)
        c.same_losses(base, r, " ".join(extra))
        if extra[0] == "--caching" and extra[1:2] != ["async"] and r.peak is not None:
            c.expect(r.peak % SEGMENT_BYTES == 0,
                     f"cached peak {r.peak} is not whole 2 MiB segments", r)


def case_launch(c: checker) -> None:
    base = c.run(["--launch", "nvcc"])
    if not c.completed(base):
        return
    for path in ("runtime", "ex"):
        c.same_losses(base, c.run(["--launch", path]), f"--launch {path}")
    for api in ("driver", "dlsym"):
        c.same_losses(base, c.run(["--api", api]), f"--api {api}")
        c.same_losses(base, c.run(["--api", api, "--caching", "--streams", "2"]),
                      f"--api {api} --caching --streams 2")


def case_oom(c: checker) -> None:
    probe = c.run(["--iters", "1"])
    if not c.expect(probe.estimate is not None, "no footprint estimate line", probe):
        return
    assert probe.estimate is not None
    capacity = str(probe.estimate // 2)
    for extra in ([], ["--caching"], ["--streams", "2"]):
        r = c.run(extra, {"SIMGPU_MEMORY": capacity})
        c.expect(r.returncode == 1,
                 f"{extra} at SIMGPU_MEMORY={capacity}: expected exit 1 (a clean CUDA error)", r)
        c.expect(OOM_RE.search(r.stderr) is not None,
                 f"{extra}: no cudaErrorMemoryAllocation message from cudaMalloc", r)


def case_race(c: checker) -> None:
    base = c.run([])
    if not c.completed(base):
        return
    for extra in (["--streams", "2"], ["--caching", "--streams", "2"]):
        r = c.run(extra, {"SIMGPU_RACE": "abort"})
        c.same_losses(base, r, f"{extra} under SIMGPU_RACE=abort")
        c.expect("race" not in r.stderr.lower(), f"{extra}: race reported", r)


def trace_peak(path: Path) -> tuple[int, int, str | None]:
    """(most bytes live at once, iteration markers, first format error) of a trace."""
    live: dict[str, int] = {}
    current = peak = iterations = 0
    lines = path.read_text().splitlines()
    if not lines or lines[0] != "# oversub allocation trace v1":
        return 0, 0, "no header line"
    for line in lines:
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if fields[0] == "a" and len(fields) == 3 and fields[1] not in live:
            live[fields[1]] = int(fields[2])
            current += int(fields[2])
            peak = max(peak, current)
        elif fields[0] == "f" and len(fields) == 2 and fields[1] in live:
            current -= live.pop(fields[1])
        elif fields[0] == "i" and len(fields) == 2:
            iterations += 1
        else:
            return peak, iterations, f"bad record {line!r}"
    return peak, iterations, None


def case_trace(c: checker) -> None:
    base = c.run([])
    if not c.completed(base):
        return
    iters = int(BASE_ARGS[BASE_ARGS.index("--iters") + 1])
    with tempfile.TemporaryDirectory() as tmp:
        for extra in ([], ["--caching"], ["--streams", "2"]):
            path = Path(tmp) / "run.trace"
            r = c.run(extra + ["--trace-allocs", str(path)])
            c.same_losses(base, r, f"{extra} with --trace-allocs")
            if not c.expect(path.exists(), f"{extra}: no trace written", r):
                continue
            peak, markers, error = trace_peak(path)
            c.expect(error is None, f"{extra}: malformed trace: {error}", r)
            c.expect(peak == r.peak, f"{extra}: trace peak {peak} != peak device bytes {r.peak}", r)
            c.expect(markers == iters, f"{extra}: {markers} iteration markers, not {iters}", r)
    bad = c.run(["--trace-allocs", "/nonexistent-folder/x.trace"])
    c.expect(bad.returncode == 2 and "allocation trace" in bad.stderr,
             "an unwritable trace path should exit 2 with a message", bad)


def case_timeline(c: checker) -> None:
    """SIMGPU_TIMELINE (Note [The timeline] in tests/simgpu/driver/timeline.h): the run's
    kernels, copies, host waits and VMM calls as a Chrome trace whose kernel and VMM call
    counts are simgpu's own, whose spans lie inside the run's virtual time, and which
    does not change results."""
    base = c.run([])
    if not c.completed(base):
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "timeline.json"
        r = c.run(["--streams", "2"], {"SIMGPU_TIMELINE": str(path), "SIMGPU_REPORT": "1"})
        two = c.run(["--streams", "2"])
        c.same_losses(two, r, "--streams 2 with SIMGPU_TIMELINE")
        if not c.expect(path.exists(), "no timeline written", r):
            return
        try:
            events = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            c.expect(False, f"timeline is not JSON: {e}", r)
            return
        spans = [e for e in events if e.get("ph") == "X"]
        kernels = sum(1 for e in spans if e["cat"].startswith("kernel"))
        m = re.search(r"kernels (\d+), copies (\d+)", r.stderr)
        if c.expect(m is not None, "no simgpu report", r):
            c.expect(kernels == int(m.group(1)),
                     f"{kernels} kernels in the timeline, the report says {m.group(1)}", r)
            copies = sum(1 for e in spans if e["cat"] == "copy")
            c.expect(copies == int(m.group(2)),
                     f"{copies} copies in the timeline, the report says {m.group(2)}", r)
        v = re.search(r"virtual time ([0-9.]+) ms", r.stderr)
        end_us = max((e["ts"] + e["dur"] for e in spans), default=0.0)
        if v is not None:
            c.expect(end_us <= float(v.group(1)) * 1e3 + 1,
                     f"a span ends at {end_us} us, after the run's {v.group(1)} ms", r)
        c.expect(all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans), "a negative span", r)
        streams = {e["tid"] for e in spans if e["cat"].startswith("kernel")}
        c.expect(len(streams) >= 2, f"kernels on {len(streams)} streams with --streams 2", r)
        c.expect(any(e["cat"] == "host wait" for e in spans), "no host wait recorded", r)
        # Each host thread's VMM calls on its own track, as many per family as the
        # report counts (expandable segments map with cuMemCreate/Map/SetAccess).
        x = c.run(["--caching", "expandable"], {"SIMGPU_TIMELINE": str(path), "SIMGPU_REPORT": "1"})
        if not c.completed(x):
            return
        events = json.loads(path.read_text())
        calls = [e for e in events if e.get("cat") == "host call"]
        named = {e["tid"] for e in events if e.get("ph") == "M" and e["args"]["name"].startswith("host thread")}
        c.expect(bool(calls) and all(e["tid"] in named for e in calls),
                 f"{len(calls)} VMM calls in the timeline, not all on a named host-thread track", x)
        reported: dict[str, int] = {}
        for family, count in re.findall(r"(vmm_[a-z_]+) (\d+) ", x.stderr):
            reported[family] = reported.get(family, 0) + int(count)  # summed over threads
        c.expect(bool(reported), "no VMM calls in the report", x)
        for family, count in reported.items():
            seen = sum(1 for e in calls if e["name"] == family)
            c.expect(seen == count, f"{seen} {family} calls in the timeline, the report says {count}", x)


CASES = {
    "timeline": case_timeline,
    "cli": case_cli,
    "repeat": case_repeat,
    "modes": case_modes,
    "launch": case_launch,
    "oom": case_oom,
    "race": case_race,
    "trace": case_trace,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--simtrain", type=Path, required=True, help="the simtrain binary")
    parser.add_argument("--case", choices=sorted(CASES), action="append", required=True,
                        help="what to check (repeatable)")
    args = parser.parse_args()

    c = checker(args.simtrain.resolve())
    for name in args.case:
        try:
            CASES[name](c)
        except subprocess.TimeoutExpired as exc:
            c.failures.append(f"FAIL: {name}: simtrain timed out after {exc.timeout} s")
    for failure in c.failures:
        print(failure, file=sys.stderr)
    if c.failures:
        print(f"{len(c.failures)} check(s) failed", file=sys.stderr)
        return 1
    print(f"ok: {', '.join(args.case)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
