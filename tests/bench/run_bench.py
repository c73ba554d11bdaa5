#!/usr/bin/env python3
"""Runs interpose_bench without liboversub, under OVERSUB_MODE=off and under
OVERSUB_MODE=track, and prints the time each configuration takes per iteration and
what the library adds (meson benchmark 'interpose_overhead').

The configurations run interleaved (none, off, track, none, off, track, ...) for
--rounds rounds of --repetitions repetitions each, and the table shows each one's
fastest repetition: on a shared machine the minimum is the least disturbed
measurement, and interleaving spreads slow phases of the machine over all three.
Times are CPU time per iteration (the benchmarks are single-threaded), which
leaves out the time the process spent preempted.
--json writes the numbers for scripts.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

CONFIGS: list[tuple[str, dict[str, str] | None]] = [
    ("none", None),
    ("off", {"OVERSUB_MODE": "off"}),
    ("track", {"OVERSUB_MODE": "track"}),
]


def run_config(bench: Path, lib: Path, options: dict[str, str] | None,
               extra: list[str]) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OVERSUB_")}
    env.pop("LD_PRELOAD", None)
    if options is not None:
        env["LD_PRELOAD"] = str(lib)
        env.update(options)
    out = subprocess.run([str(bench), "--benchmark_format=json", *extra], env=env,
                         check=True, capture_output=True, text=True).stdout
    best: dict[str, float] = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("run_type") == "aggregate":
            continue
        name = b.get("run_name", b["name"])
        ns = b["cpu_time"] * {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}[b["time_unit"]]
        best[name] = min(best.get(name, ns), ns)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bench", type=Path, required=True)
    parser.add_argument("--lib", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--min-time", default="0.1", help="seconds per repetition")
    parser.add_argument("--json", type=Path, help="write the numbers here")
    args = parser.parse_args()
    extra = [f"--benchmark_repetitions={args.repetitions}",
             f"--benchmark_min_time={args.min_time}"]
    results: dict[str, dict[str, float]] = {name: {} for name, _ in CONFIGS}
    for _ in range(args.rounds):
        for name, options in CONFIGS:
            for bench_name, ns in run_config(args.bench, args.lib.resolve(), options,
                                             extra).items():
                results[name][bench_name] = min(results[name].get(bench_name, ns), ns)
    print(f"{'benchmark':<24} {'none ns':>10} {'off ns':>10} {'+off':>8} "
          f"{'track ns':>10} {'+track':>8}")
    for bench_name, none_ns in results["none"].items():
        off_ns = results["off"][bench_name]
        track_ns = results["track"][bench_name]
        print(f"{bench_name:<24} {none_ns:>10.1f} {off_ns:>10.1f} {off_ns - none_ns:>+8.1f} "
              f"{track_ns:>10.1f} {track_ns - none_ns:>+8.1f}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
