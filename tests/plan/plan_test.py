#!/usr/bin/env python3
"""`scripts/oversub plan` end to end, on shipped traces (traces/) scaled down with
oprof.scale_profile into a temporary folder, so that each case takes seconds.

Cases (--case):
  swaps    a trace in a device smaller than its peak: the JSON's fields are
           consistent (fits iff peak <= memory, slowdown >= 1, 1.1x memory >= 1.5x
           >= 2x >= 4 pages, host needed <= its upper bound), and agree with
           `oversub simulate --granularity page` at the swap capacity and at the
           capacities plan reports; the table says the same; the PNG is written
  fits     the same trace in a device larger than its peak: fits, nothing moves, no
           host memory needed, slowdown 1
  cannot   a device smaller than the largest launch: the trace runs with launches
           reading host memory, and says so (their count and bytes); a host memory too
           small: the trace cannot run and says why, exit 1
  batch    one model at two batch sizes: a best batch, the one with the most samples
           per second, as `oversub tune-batch` at the same capacity picks
  errors   a missing file, a corrupt profile, an unknown device, a bad size: exit
           non-zero with one line naming what and the accepted forms
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts" / "lib"))

import oprof  # noqa: E402

MiB, GiB = 1 << 20, 1 << 30
SCALE = 0.125


class Failure(Exception):
    pass


def check(cond: bool, what: str) -> None:
    if not cond:
        raise Failure(what)


def scaled(trace: Path, out: Path) -> Path:
    p = oprof.read_profile(trace)
    oprof.scale_profile(p, SCALE)
    dest = out / trace.name
    oprof.write_profile(dest, p)
    return dest


class Env:
    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args, self.tmp = args, tmp

    def run(self, verb: str, *argv: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, str(self.args.oversub), verb, *argv,
               "--simulator", str(self.args.simulator)]
        return subprocess.run(cmd, capture_output=True, text=True, cwd=self.tmp, timeout=120)

    def plan(self, *argv: str, rc: int | None = 0) -> dict:
        r = self.run("plan", *argv, "--json", "--png", str(self.tmp / "plan.png"))
        if rc is not None:
            check(r.returncode == rc, f"plan {argv}: exit {r.returncode}, wanted {rc}: {r.stderr}")
        return json.loads(r.stdout)

    def simulate(self, trace: Path, capacity: int) -> dict:
        r = self.run("simulate", str(trace), "--granularity", "page", "--capacity",
                     str(capacity), "--json")
        check(r.returncode in (0, 1), f"simulate: {r.stderr}")
        return json.loads(r.stdout)["points"][0]


def consistent(t: dict) -> None:
    """What holds of every trace's row."""
    name = t["profile"]
    check(t["fits_without_oversub"] == (t["peak_live_bytes"] <= t["device_memory_bytes"]),
          f"{name}: fits {t['fits_without_oversub']} but peak {t['peak_live_bytes']} and "
          f"memory {t['device_memory_bytes']}")
    check(t["swap_capacity_bytes"] < t["device_memory_bytes"], f"{name}: swap capacity")
    sm = t["smallest_memory_within"]
    check(list(sm) == ["1.1x", "1.5x", "2x"], f"{name}: targets {list(sm)}")
    check(all(v is not None for v in sm.values()), f"{name}: a target not found: {sm}")
    check(sm["1.1x"] >= sm["1.5x"] >= sm["2x"] >= 4 * 2 * MiB,
          f"{name}: 1.1x {sm['1.1x']} >= 1.5x {sm['1.5x']} >= 2x {sm['2x']} >= 4 pages "
          "does not hold")
    caps = t["smallest_capacity_within"]
    for k in sm:
        check(caps[k] <= sm[k], f"{name}: capacity {caps[k]} above its memory {sm[k]}")
        s = next(p["slowdown"] for p in t["points"] if p["capacity_bytes"] == caps[k])
        check(s is not None and s <= float(k[:-1]) + 1e-9, f"{name}: {k} at {caps[k]}: {s}")
    if t["iteration_ns"] is not None:
        check(t["slowdown"] >= 1.0, f"{name}: slowdown {t['slowdown']} below 1")
        check(t["iteration_ns"] >= t["unlimited_iteration_ns"], f"{name}: faster than unlimited")
        check(t["moved_bytes"] == t["h2d_bytes"] + t["d2h_bytes"], f"{name}: moved")
        check(0 <= t["host_bytes_needed"] <= t["host_bytes_up_to"] <= t["paged_bytes"],
              f"{name}: host needed {t['host_bytes_needed']} up to {t['host_bytes_up_to']}")
        check(t["paged_bytes"] >= t["peak_live_bytes"], f"{name}: pages below the peak")


def case_swaps(env: Env, traces: dict[str, Path]) -> None:
    trace = traces["resnet50-b32"]
    memory = 256 * MiB
    plan = env.plan(str(trace), "--memory", str(memory), "--host-memory", "64GiB")
    t = plan["traces"][0]
    consistent(t)
    check(plan["device_memory_bytes"] == memory and plan["memory_given"], "memory not taken")
    check(plan["host_memory_bytes"] == 64 * GiB and plan["host_memory_source"] == "--host-memory",
          f"host memory {plan['host_memory_bytes']} from {plan['host_memory_source']}")
    check(not t["fits_without_oversub"] and t["runs"], f"fits/runs: {t}")
    # Its copies hide behind the compute (slowdown 1.0 once iterations follow one
    # another: Note [The next iteration] in policy/simulate.h), but they are there.
    check(t["slowdown"] >= 1.0 and t["moved_bytes"] > 0 and t["host_bytes_needed"] > 0,
          f"a trace twice the memory moves nothing: {t}")
    # The simulator, asked directly, gives the same figures.
    p = env.simulate(trace, t["swap_capacity_bytes"])
    check(p["ok"] and p["iteration_ns"] == t["iteration_ns"] and
          p["h2d_bytes"] + p["d2h_bytes"] == t["moved_bytes"],
          f"simulate at {t['swap_capacity_bytes']}: {p} against plan {t}")
    for k, cap in t["smallest_capacity_within"].items():
        p = env.simulate(trace, cap)
        s = p["iteration_ns"] / p["unlimited_iteration_ns"]
        check(p["ok"] and s <= float(k[:-1]) + 1e-9, f"simulate at {cap} ({k}): {s}")
    png = (env.tmp / "plan.png").read_bytes()
    check(png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000, "no PNG written")
    # The table says the same.
    r = env.run("plan", str(trace), "--memory", str(memory), "--host-memory", "64GiB",
                "--png", str(env.tmp / "table.png"))
    check(r.returncode == 0, f"table: exit {r.returncode}: {r.stderr}")
    row = next((line for line in r.stdout.splitlines() if line.startswith(f"| {trace}")), None)
    check(row is not None, f"no row for {trace} in:\n{r.stdout}")
    cells = [c.strip() for c in row.strip("|").split("|")]
    check(cells[2] == "no", f"fits cell {cells[2]!r}")
    check(cells[3].startswith(f"{t['iteration_ns'] / 1e6:.1f} ms ({t['slowdown']:.2f}x)"),
          f"swap cell {cells[3]!r}")
    check("256.00 MiB" in r.stdout and "(--host-memory)" in r.stdout, r.stdout)
    check(f"wrote {env.tmp / 'table.png'}" in r.stdout, "no 'wrote' line")


def case_fits(env: Env, traces: dict[str, Path]) -> None:
    plan = env.plan(str(traces["resnet50-b32"]))  # h100-pcie: 80 GiB
    t = plan["traces"][0]
    consistent(t)
    check(plan["host_memory_source"].endswith("/proc/meminfo"), plan["host_memory_source"])
    check(t["fits_without_oversub"] and t["runs"] and t["moved_bytes"] == 0 and
          t["host_bytes_needed"] == 0 and abs(t["slowdown"] - 1.0) < 1e-9, f"fits: {t}")


def case_cannot(env: Env, traces: dict[str, Path]) -> None:
    small = traces["resnet50-b32"]
    big = traces["vgg16-b256"]
    memory = 512 * MiB
    # A launch over what swap holds runs with part of its memory read in host memory
    # (Note [Launches over the room] in policy/iteration_model.h): slow, and said so.
    plan = env.plan(str(big), "--memory", str(memory), "--host-memory", "64GiB", rc=0)
    t = plan["traces"][0]
    check(t["largest_launch_bytes"] > t["swap_capacity_bytes"], "vgg16's largest launch fits")
    check(t["runs"] and t["over_room_launches"] > 0 and
          t["host_access_bytes"] >= t["largest_launch_bytes"] - t["swap_capacity_bytes"] and
          t["slowdown"] > 1, f"over-the-room row: {t}")
    consistent(t)
    check(t["smallest_memory_within"]["2x"] <= memory, f"2x above {memory}, {t['slowdown']}x")
    r = env.run("plan", str(big), "--memory", str(memory), "--host-memory", "64GiB",
                "--png", str(env.tmp / "c.png"))
    check(r.returncode == 0 and "launches need more than swap holds" in r.stdout and
          "in host memory over the link" in r.stdout,
          f"text: exit {r.returncode}\n{r.stdout}{r.stderr}")
    plan = env.plan(str(small), "--memory", str(128 * MiB), "--host-memory", "32MiB", rc=1)
    t = plan["traces"][0]
    check(not t["runs"] and "host memory" in t["why_not"] and
          t["host_bytes_needed"] > 32 * MiB, f"host too small: {t}")


def case_batch(env: Env, traces: dict[str, Path]) -> None:
    a, b = traces["resnet50-b32"], traces["resnet50-b128"]
    memory = 512 * MiB
    plan = env.plan(str(a), str(b), "--memory", str(memory))
    for t in plan["traces"]:
        consistent(t)
    rows = plan["batch"]["rows"]
    check([r["batch"] for r in rows] == [32, 128], f"batches {rows}")
    rate = {t["batch"]: t["batch"] * 1e9 / t["iteration_ns"] for t in plan["traces"] if t["runs"]}
    check(plan["batch"]["choice"] == max(rate, key=rate.get),
          f"choice {plan['batch']['choice']} against samples/s {rate}")
    r = env.run("tune-batch", str(a), str(b), "--budget", str(plan["swap_capacity_bytes"]),
                "--granularity", "page", "--json")
    check(r.returncode == 0, r.stderr)
    check(json.loads(r.stdout)["choice"] == plan["batch"]["choice"], "tune-batch chose otherwise")
    plan = env.plan(str(a), str(traces["vgg16-b256"]), "--memory", "64GiB")
    check(plan["batch"] is None and "not one model" in plan["batch_note"], "batch for 2 models")


def case_errors(env: Env, traces: dict[str, Path]) -> None:
    cut = env.tmp / "cut.oprof"
    cut.write_bytes(traces["resnet50-b32"].read_bytes()[:2000])
    cases = [
        (["missing.oprof"], ["missing.oprof", "no such profile", ".oprof.gz"]),
        ([str(cut)], ["cut.oprof refused", "truncated"]),
        ([str(traces["resnet50-b32"]), "--device", "h200"], ["unknown device 'h200'",
                                                             "h100-pcie", ".model file"]),
        ([str(traces["resnet50-b32"]), "--host-memory", "12GiBs"], ["--host-memory",
                                                                     "'12GiBs'", "512GiB"]),
        ([str(traces["resnet50-b32"]), "--memory", "0"], ["--memory", "above 0"]),
    ]
    for argv, words in cases:
        r = env.run("plan", *argv)
        lines = r.stderr.strip().splitlines()
        check(r.returncode != 0 and len(lines) == 1 and lines[0].startswith("oversub plan: "),
              f"plan {argv}: exit {r.returncode}, stderr {r.stderr!r}")
        for w in words:
            check(w in lines[0], f"plan {argv}: {w!r} not in {lines[0]!r}")
        check(r.stdout == "", f"plan {argv} printed {r.stdout!r}")
    r = env.run("plan", "--help")
    check(r.returncode == 0 and "1.1x" in r.stdout and "--host-memory" in r.stdout, "--help")


CASES = {"swaps": case_swaps, "fits": case_fits, "cannot": case_cannot, "batch": case_batch,
         "errors": case_errors}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--oversub", type=Path, required=True)
    ap.add_argument("--simulator", type=Path, required=True)
    ap.add_argument("--traces", type=Path, default=REPO / "traces")
    ap.add_argument("--case", choices=sorted(CASES), required=True)
    args = ap.parse_args()
    args.oversub, args.simulator = args.oversub.resolve(), args.simulator.resolve()
    with tempfile.TemporaryDirectory(prefix="oversub-plan-test-") as tmp:
        tmpdir = Path(tmp)
        traces = {name: scaled(args.traces / f"{name}.oprof", tmpdir)
                  for name in ("resnet50-b32", "resnet50-b128", "vgg16-b256")}
        try:
            CASES[args.case](Env(args, tmpdir), traces)
        except Failure as e:
            print(f"FAIL plan_{args.case}: {e}", file=sys.stderr)
            return 1
    print(f"ok plan_{args.case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
